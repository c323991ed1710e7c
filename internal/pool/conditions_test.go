package pool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestConditions guards each condition's verdict, one table per the condition's inputs.
func TestConditions(t *testing.T) {
	plan := &v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "a-1"}, Spec: v1alpha1.RepartitionPlanSpec{Hash: "0123456789abcdef"}}
	for _, tc := range []struct {
		name string
		got  Condition
		want Condition
	}{
		{"ready counts the nodes", Ready(3, false, nil), Condition{True: true, Reason: ReasonObserving, Message: "observing 3 node(s)"}},
		{"no conflict", Conflict(nil), Condition{Reason: "NoConflict", Message: "no other policy selects these nodes"}},
		{"a conflict names node and policy", Conflict(map[string]string{"n1": "other"}),
			Condition{True: true, Reason: ReasonNodesSelectedTwice, Message: "nodes selected by two policies are left alone by both: n1 (also policy other)"}},
		{"no plan awaits", AwaitingApproval(nil, ""), Condition{Reason: "NoPlanWaiting", Message: "no plan waits for approval"}},
		{"a plan awaits, with the command that approves it", AwaitingApproval(plan, v1alpha1.PlanAwaitingApproval),
			Condition{True: true, Reason: ReasonPlanProposed, Message: "approve with: kubectl annotate repartitionplan a-1 gpupool.io/approve=0123456789abcdef"}},
		{"an approved plan no longer awaits", AwaitingApproval(plan, v1alpha1.PlanApproved), Condition{Reason: "NoPlanWaiting", Message: "no plan waits for approval"}},
		{"idle", Reconfiguring(nil, ""), Condition{Reason: "Idle", Message: "no plan is executing"}},
		{"an awaiting plan reconfigures nothing", Reconfiguring(plan, v1alpha1.PlanAwaitingApproval), Condition{Reason: "Idle", Message: "no plan is executing"}},
		{"an executing plan", Reconfiguring(plan, v1alpha1.PlanExecuting), Condition{True: true, Reason: "Executing", Message: "plan a-1 is executing"}},
		{"healthy", Degraded("", ""), Condition{Reason: "AllNodesReporting", Message: "every pool node's agent reports its GPUs"}},
		{"silent nodes first", Degraded("2 nodes silent", "plan x failed"), Condition{True: true, Reason: ReasonNodesNotPlannable, Message: "2 nodes silent"}},
		{"a failed plan", Degraded("", "plan x failed"), Condition{True: true, Reason: ReasonPlanFailed, Message: "plan x failed"}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
}

// TestLastFailedPlan guards that only the newest finished plan of the policy's own degrades it.
func TestLastFailedPlan(t *testing.T) {
	policy := policyFor("a", "a")
	own := func(name string, phase v1alpha1.PlanPhase, age int) v1alpha1.RepartitionPlan {
		p := planOn(name, "a", phase)
		p.CreationTimestamp = metav1.NewTime(t0.Add(-time.Duration(age) * time.Hour))
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "gpupool.io/v1alpha1", Kind: "GPUPoolPolicy", Name: "a",
			UID: policy.UID, Controller: ptr.To(true)}}
		return p
	}
	failed := own("failed", v1alpha1.PlanFailed, 2)
	failed.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Message: "drain timed out"}}
	failed.Status.Nodes = []v1alpha1.NodeStepStatus{{Node: "n1", State: v1alpha1.NodeFailed, Message: "pods left"}}
	for _, tc := range []struct {
		name  string
		plans []v1alpha1.RepartitionPlan
		want  string
	}{
		{"none", nil, ""},
		{"the newest finished failed", []v1alpha1.RepartitionPlan{failed, own("running", v1alpha1.PlanExecuting, 1)},
			"plan failed failed: drain timed out; node n1: pods left"},
		{"a later success clears it", []v1alpha1.RepartitionPlan{failed, own("ok", v1alpha1.PlanSucceeded, 1)}, ""},
	} {
		if got := LastFailedPlan(&policy, tc.plans); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
