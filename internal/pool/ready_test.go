package pool

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestReadyIsFalseWheneverThePoolCannotWork guards issue 35's honest health: each way a pool
// cannot work makes Ready False, named first by its reason and every one in the message.
func TestReadyIsFalseWheneverThePoolCannotWork(t *testing.T) {
	cond := func(kind string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: kind, Status: status, Reason: reason, Message: msg}
	}
	healthy := []metav1.Condition{
		cond(v1alpha1.ConditionSpecValid, metav1.ConditionTrue, "Valid", ""),
		cond(v1alpha1.ConditionConflict, metav1.ConditionFalse, "NoConflict", ""),
		cond(v1alpha1.ConditionGPUOperatorConfigured, metav1.ConditionTrue, "Configured", ""),
	}
	with := func(c metav1.Condition) []metav1.Condition {
		out := []metav1.Condition{}
		for _, h := range healthy {
			if h.Type == c.Type {
				h = c
			}
			out = append(out, h)
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		nodes      int32
		paused     bool
		conditions []metav1.Condition
		reason     string
		contains   []string
	}{
		{"healthy", 3, false, healthy, ReasonObserving, []string{"observing 3 node(s)"}},
		{"paused", 3, true, healthy, ReasonPaused, []string{"spec.planning.paused"}},
		{"selector matches no node", 0, false, healthy, ReasonNoNodes, []string{"spec.nodeSelector matches no node"}},
		{"a part of the spec cannot take effect", 2, false,
			with(cond(v1alpha1.ConditionSpecValid, metav1.ConditionFalse, "IneffectiveSpec", "spec.catalog[0]: no such profile")),
			ReasonSpecInvalid, []string{"spec.catalog[0]: no such profile"}},
		{"another policy selects the nodes", 2, false,
			with(cond(v1alpha1.ConditionConflict, metav1.ConditionTrue, ReasonNodesSelectedTwice, "node n1 is also selected by pool-b")),
			ReasonConflict, []string{"pool-b"}},
		{"ClusterPolicy misconfigured", 2, false,
			with(cond(v1alpha1.ConditionGPUOperatorConfigured, metav1.ConditionFalse, "ClusterPolicyMisconfigured", "set spec.migManager.config.name")),
			"ClusterPolicyMisconfigured", []string{"set spec.migManager.config.name"}},
		{"no GPU Operator", 2, false,
			with(cond(v1alpha1.ConditionGPUOperatorConfigured, metav1.ConditionFalse, "GPUOperatorNotFound", "not installed")),
			"GPUOperatorNotFound", []string{"not installed"}},
		{"several at once: the first names the reason, the message names all", 0, true,
			with(cond(v1alpha1.ConditionConflict, metav1.ConditionTrue, ReasonNodesSelectedTwice, "pool-b")),
			ReasonPaused, []string{"spec.planning.paused", "matches no node", "pool-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Ready(tc.nodes, tc.paused, tc.conditions)
			if got.True != (tc.reason == ReasonObserving) || got.Reason != tc.reason {
				t.Errorf("Ready = %v (%s), want reason %s", got.True, got.Reason, tc.reason)
			}
			for _, s := range tc.contains {
				if !strings.Contains(got.Message, s) {
					t.Errorf("message %q does not say %q", got.Message, s)
				}
			}
		})
	}
}
