package nvidia

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		{"pending", nodeWith(map[string]string{LabelMIGConfigState: "pending"}), StatePending, true},
		{"rebooting", nodeWith(map[string]string{LabelMIGConfigState: "rebooting"}), StateRebooting, true},
		{"success", nodeWith(map[string]string{LabelMIGConfigState: "success"}), StateSuccess, true},
		{"failed", nodeWith(map[string]string{LabelMIGConfigState: "failed"}), StateFailed, true},
		{"unknown value", nodeWith(map[string]string{LabelMIGConfigState: "Success"}), "Success", false},
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
	n := nodeWith(map[string]string{LabelMIGConfig: "gpupool-old", LabelMIGConfigState: "success", "keep": "me"})
	RequestMIGConfig(n, "gpupool-new")
	want := map[string]string{LabelMIGConfig: "gpupool-new", "keep": "me"}
	if !reflect.DeepEqual(n.Labels, want) {
		t.Errorf("labels %v, want %v", n.Labels, want)
	}
	// The stale success is gone, so only mig-manager's own report can say how the entry went.
	if s, _ := MIGConfigState(n); s != "" {
		t.Errorf("state right after the request = %q, want none", s)
	}
	bare := nodeWith(nil)
	RequestMIGConfig(bare, "gpupool-new")
	if bare.Labels[LabelMIGConfig] != "gpupool-new" {
		t.Errorf("labels %v", bare.Labels)
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
