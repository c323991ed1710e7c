package pool

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/podrecord"
)

func TestHeartbeats(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	lease := func(node, holder string, labelled bool, renew *time.Time) coordinationv1.Lease {
		l := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: "gpupool-agent"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
		if labelled {
			l.Labels = map[string]string{v1alpha1.LabelAgentLease: "true"}
		}
		if renew != nil {
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(*renew))
		}
		return l
	}
	at := now.Add(-time.Minute)
	// The agent's pod on gpu-9, Ready on a Ready node: alive now.
	node := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-9"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	agentPod := &podrecord.Record{ObjectMeta: metav1.ObjectMeta{Namespace: "gpupool-agent", Name: "agent-x",
		Labels: map[string]string{"app": "agent"}}, NodeName: "gpu-9", Phase: corev1.PodRunning, Ready: true,
		Controller: "DaemonSet", ControllerGroup: "apps", ControllerName: "gpupool-agent", ServiceAccount: "gpupool-agent"}
	agents := inventory.AgentPods{Namespace: "gpupool-agent", Selector: labels.SelectorFromSet(labels.Set{"app": "agent"}),
		DaemonSet: "gpupool-agent", ServiceAccount: "gpupool-agent"}
	for _, tc := range []struct {
		name   string
		leases []coordinationv1.Lease
		agents inventory.AgentPods
		want   map[string]time.Time
	}{
		{name: "nothing read", want: nil},
		{name: "the node's own agent holds its Lease", leases: []coordinationv1.Lease{lease("gpu-1", "gpupool-agent/gpu-1", true, &at)},
			want: map[string]time.Time{"gpu-1": at}},
		{name: "another holder vouches for nothing", leases: []coordinationv1.Lease{lease("gpu-1", "gpupool-agent/gpu-2", true, &at)}},
		{name: "a Lease without the agents' label is not a heartbeat", leases: []coordinationv1.Lease{lease("gpu-1", "gpupool-agent/gpu-1", false, &at)}},
		{name: "never renewed", leases: []coordinationv1.Lease{lease("gpu-1", "gpupool-agent/gpu-1", true, nil)}},
		{name: "a Ready agent pod is alive now", agents: agents, leases: []coordinationv1.Lease{lease("gpu-1", "gpupool-agent/gpu-1", true, &at)},
			want: map[string]time.Time{"gpu-1": at, "gpu-9": now}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Heartbeats(tc.leases, []*podrecord.Record{agentPod}, []corev1.Node{node}, tc.agents, now)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for n, w := range tc.want {
				if !got[n].Equal(w) {
					t.Errorf("node %s: got %v, want %v", n, got[n], w)
				}
			}
		})
	}
}

func TestMIGManagerRebootOf(t *testing.T) {
	policy := func(name string, created time.Time, withReboot bool) unstructured.Unstructured {
		u := unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"migManager": map[string]any{
			"env": []any{map[string]any{"name": "WITH_REBOOT", "value": map[bool]string{true: "true", false: "false"}[withReboot]}}}}}}
		u.SetName(name)
		u.SetCreationTimestamp(metav1.NewTime(created))
		return u
	}
	old, young := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		policies []unstructured.Unstructured
		want     planner.MIGManagerReboot
	}{
		{"no ClusterPolicy", nil, planner.RebootUnknown},
		{"without reboot", []unstructured.Unstructured{policy("cluster-policy", old, false)}, planner.RebootNever},
		{"with reboot", []unstructured.Unstructured{policy("cluster-policy", old, true)}, planner.RebootOnFailure},
		// The GPU Operator acts on the oldest (nvidia.ActiveClusterPolicy); a stray newer one is ignored.
		{"the active one decides", []unstructured.Unstructured{policy("stray", young, true), policy("cluster-policy", old, false)}, planner.RebootNever},
	} {
		if got := MIGManagerRebootOf(tc.policies); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
