package nvidia

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func nodeWith(labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-1", Labels: labels}}
}

func TestMIGConfigState(t *testing.T) {
	cases := []struct {
		name   string
		node   *corev1.Node
		want   State
		wantOK bool
	}{
		{"nil node", nil, "", false},
		{"no label", nodeWith(nil), "", false},
		{"pending", nodeWith(map[string]string{v1alpha1.LabelMIGConfigState: "pending"}), StatePending, true},
		{"rebooting", nodeWith(map[string]string{v1alpha1.LabelMIGConfigState: "rebooting"}), StateRebooting, true},
		{"success", nodeWith(map[string]string{v1alpha1.LabelMIGConfigState: "success"}), StateSuccess, true},
		{"failed", nodeWith(map[string]string{v1alpha1.LabelMIGConfigState: "failed"}), StateFailed, true},
		{"unknown value", nodeWith(map[string]string{v1alpha1.LabelMIGConfigState: "Success"}), "Success", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := MIGConfigState(tc.node)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("MIGConfigState = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestRequestMIGConfig(t *testing.T) {
	n := nodeWith(map[string]string{v1alpha1.LabelMIGConfig: "gpupool-old", v1alpha1.LabelMIGConfigState: "success", "keep": "me"})
	RequestMIGConfig(n, "gpupool-new")
	want := map[string]string{v1alpha1.LabelMIGConfig: "gpupool-new", "keep": "me"}
	if !reflect.DeepEqual(n.Labels, want) {
		t.Errorf("labels %v, want %v", n.Labels, want)
	}
	// The stale success is gone, so the outcome waits for mig-manager's own report.
	if o, _ := ConfigureOutcome(n, "gpupool-new", epoch, epoch, time.Minute); o != ConfigWaiting {
		t.Errorf("outcome right after the request = %s, want Waiting", o)
	}
	bare := nodeWith(nil)
	RequestMIGConfig(bare, "gpupool-new")
	if bare.Labels[v1alpha1.LabelMIGConfig] != "gpupool-new" {
		t.Errorf("labels %v", bare.Labels)
	}
}

var epoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

func TestConfigureOutcome(t *testing.T) {
	const want = "gpupool-new"
	labels := func(config, state string, extra ...string) map[string]string {
		m := map[string]string{}
		if config != "" {
			m[v1alpha1.LabelMIGConfig] = config
		}
		if state != "" {
			m[v1alpha1.LabelMIGConfigState] = state
		}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	cases := []struct {
		name    string
		node    *corev1.Node
		elapsed time.Duration
		timeout time.Duration
		want    Outcome
		msg     string
	}{
		{"applied", nodeWith(labels(want, "success")), time.Minute, 10 * time.Minute, ConfigApplied, "mig-manager applied MIG config gpupool-new on node gpu-node-1"},
		{"applied even when late", nodeWith(labels(want, "success")), time.Hour, 10 * time.Minute, ConfigApplied, "applied"},
		{"failed", nodeWith(labels(want, "failed")), time.Minute, 10 * time.Minute, ConfigFailed, "mig-manager failed to apply MIG config gpupool-new on node gpu-node-1"},
		{"pending", nodeWith(labels(want, "pending")), 2 * time.Minute, 10 * time.Minute, ConfigWaiting,
			`waiting for mig-manager to apply MIG config gpupool-new on node gpu-node-1 for 2m0s, state "pending"`},
		{"pending with paused operands", nodeWith(labels(want, "pending", LabelDeployPrefix+"device-plugin", PausedForMIGChange, LabelDeployPrefix+"dcgm", PausedForMIGChange)),
			time.Minute, 10 * time.Minute, ConfigWaiting, "paused operands: nvidia.com/gpu.deploy.dcgm, nvidia.com/gpu.deploy.device-plugin"},
		{"rebooting", nodeWith(labels(want, "rebooting")), 5 * time.Minute, 10 * time.Minute, ConfigWaiting, `state "rebooting"`},
		{"no state yet", nodeWith(labels(want, "")), 30 * time.Second, 10 * time.Minute, ConfigWaiting, "no state reported yet"},
		{"exactly at the timeout still waits", nodeWith(labels(want, "pending")), 10 * time.Minute, 10 * time.Minute, ConfigWaiting, "waiting"},
		{"pending past the timeout is the known wedge", nodeWith(labels(want, "pending", LabelDeployPrefix+"gpu-feature-discovery", PausedForMIGChange)),
			10*time.Minute + time.Second, 10 * time.Minute, ConfigTimedOut,
			`mig-manager has not applied MIG config gpupool-new on node gpu-node-1 after 10m1s (timeout 10m0s), state "pending"; paused operands: nvidia.com/gpu.deploy.gpu-feature-discovery: mig-manager can stay pending`},
		{"rebooting past the timeout", nodeWith(labels(want, "rebooting")), time.Hour, 10 * time.Minute, ConfigTimedOut, `state "rebooting"`},
		{"no state past the timeout", nodeWith(labels(want, "")), time.Hour, 10 * time.Minute, ConfigTimedOut, "no state reported yet"},
		{"unknown state waits", nodeWith(labels(want, "exploding")), time.Minute, 10 * time.Minute, ConfigWaiting, `state "exploding"`},
		{"other label value: stale success is not ours", nodeWith(labels("gpupool-old", "success")), time.Minute, 10 * time.Minute, ConfigWaiting,
			`node gpu-node-1 has label nvidia.com/mig.config "gpupool-old", not "gpupool-new"`},
		{"other label value: stale failure is not ours", nodeWith(labels("gpupool-old", "failed")), time.Minute, 10 * time.Minute, ConfigWaiting, "not \"gpupool-new\""},
		{"label missing past the timeout", nodeWith(nil), time.Hour, 10 * time.Minute, ConfigTimedOut, "nvidia.com/mig.config unset"},
		{"zero timeout means the default", nodeWith(labels(want, "pending")), 9 * time.Minute, 0, ConfigWaiting, "waiting"},
		{"zero timeout means the default, then times out", nodeWith(labels(want, "pending")), 11 * time.Minute, 0, ConfigTimedOut, "timeout 10m0s"},
		{"node gone", nil, time.Minute, time.Minute, ConfigFailed, "no longer exists"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, msg := ConfigureOutcome(tc.node, want, epoch, epoch.Add(tc.elapsed), tc.timeout)
			if got != tc.want {
				t.Errorf("outcome %s (%q), want %s", got, msg, tc.want)
			}
			if !strings.Contains(msg, tc.msg) {
				t.Errorf("message %q does not contain %q", msg, tc.msg)
			}
		})
	}
}

func TestPausedOperands(t *testing.T) {
	n := nodeWith(map[string]string{
		LabelDeployPrefix + "device-plugin":         PausedForMIGChange,
		LabelDeployPrefix + "dcgm-exporter":         PausedForMIGChange,
		LabelDeployPrefix + "gpu-feature-discovery": "true",
		LabelDeployPrefix + "mig-manager":           "true",
		"example.com/other":                         PausedForMIGChange,
	})
	want := []string{LabelDeployPrefix + "dcgm-exporter", LabelDeployPrefix + "device-plugin"}
	if got := PausedOperands(n); !reflect.DeepEqual(got, want) {
		t.Errorf("PausedOperands = %v, want %v", got, want)
	}
	if got := PausedOperands(nodeWith(nil)); got != nil {
		t.Errorf("no labels: %v", got)
	}
	if got := PausedOperands(nil); got != nil {
		t.Errorf("nil node: %v", got)
	}
}
