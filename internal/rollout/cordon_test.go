package rollout_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/rollout"
)

// TestJudgeCordon guards the cordon janitor's rules: a cordon a live plan explains is held,
// one mig-manager is still working under waits, one over GPUs that may be half-configured is
// kept, and the rest are released, reopening the node only when gpupool was the one to close it.
func TestJudgeCordon(t *testing.T) {
	const owner = "pool-1"
	node := func(cordoned bool, labels map[string]string, annotations map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: labels, Annotations: annotations},
			Spec: corev1.NodeSpec{Unschedulable: cordoned}}
	}
	migState := func(config, state string) map[string]string {
		return map[string]string{nvidia.LabelMIGConfig: config, nvidia.LabelMIGConfigState: state}
	}
	plan := func(phase v1alpha1.PlanPhase, st *v1alpha1.NodeStepStatus) *v1alpha1.RepartitionPlan {
		p := &v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: owner},
			Spec: v1alpha1.RepartitionPlanSpec{Steps: []v1alpha1.NodeStep{{Node: "n1"}}}, Status: v1alpha1.RepartitionPlanStatus{Phase: phase}}
		if st != nil {
			p.Status.Nodes = []v1alpha1.NodeStepStatus{*st}
		}
		return p
	}
	verified := &v1alpha1.GPUNode{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: v1alpha1.GPUNodeStatus{Conditions: []metav1.Condition{
		{Type: v1alpha1.ConditionLayoutVerified, Status: metav1.ConditionTrue, ObservedGeneration: 1}}}}
	unverified := &v1alpha1.GPUNode{ObjectMeta: metav1.ObjectMeta{Generation: 1},
		Spec: v1alpha1.GPUNodeSpec{ExpectedLayout: []v1alpha1.GPULayout{{Index: 0}}}}
	for _, tc := range []struct {
		name     string
		node     *corev1.Node
		plan     *v1alpha1.RepartitionPlan
		gpuNode  *v1alpha1.GPUNode
		want     rollout.CordonAction
		uncordon bool
	}{
		{"an executing plan's unfinished step holds it", node(true, nil, nil),
			plan(v1alpha1.PlanExecuting, &v1alpha1.NodeStepStatus{Node: "n1", State: v1alpha1.NodeDraining}), verified, rollout.CordonHeld, false},
		{"a step whose status write was lost still holds it", node(true, nil, nil), plan(v1alpha1.PlanExecuting, nil), verified, rollout.CordonHeld, false},
		{"a failed step left cordoned on purpose holds it", node(true, nil, nil),
			plan(v1alpha1.PlanFailed, &v1alpha1.NodeStepStatus{Node: "n1", State: v1alpha1.NodeFailed}), nil, rollout.CordonHeld, false},
		{"mig-manager still pending: wait", node(true, migState("gpupool-0123456789", "pending"), nil), nil, nil, rollout.CordonWait, false},
		{"mig-manager rebooting: wait", node(true, migState("gpupool-0123456789", "rebooting"), nil), nil, nil, rollout.CordonWait, false},
		{"plan deleted mid-change, layout unverified: keep", node(true, migState("gpupool-0123456789", "success"), nil), nil, unverified, rollout.CordonKeep, false},
		{"plan deleted, mig-manager failed: keep", node(true, migState("gpupool-0123456789", "failed"), nil), nil, verified, rollout.CordonKeep, false},
		{"plan deleted, layout verified: release and uncordon", node(true, migState("gpupool-0123456789", "success"), nil), nil, verified, rollout.CordonRelease, true},
		{"plan succeeded: release and uncordon", node(true, nil, nil),
			plan(v1alpha1.PlanSucceeded, &v1alpha1.NodeStepStatus{Node: "n1", State: v1alpha1.NodeDone}), verified, rollout.CordonRelease, true},
		{"someone else had cordoned it first: release, stay cordoned", node(true, nil, map[string]string{v1alpha1.AnnotationWasUnschedulable: "true"}),
			nil, verified, rollout.CordonRelease, false},
		{"the plan recorded a foreign cordon: stay cordoned", node(true, nil, nil),
			plan(v1alpha1.PlanSucceeded, &v1alpha1.NodeStepStatus{Node: "n1", State: v1alpha1.NodeDone, WasUnschedulable: true}), verified, rollout.CordonRelease, false},
		{"a human uncordoned it: only the annotations go", node(false, migState("gpupool-0123456789", "failed"), nil), nil, nil, rollout.CordonRelease, false},
		{"a failed plan no longer holding it, GPUs unverified: its failure handling judged them, release", node(true, migState("gpupool-0123456789", "success"), nil),
			plan(v1alpha1.PlanFailed, &v1alpha1.NodeStepStatus{Node: "n1", State: v1alpha1.NodeDone}), unverified, rollout.CordonRelease, true},
		// A plan refused while executing (its owner reference removed, a node relabelled out of
		// the pool) ends Failed with steps in flight: nobody judged those GPUs.
		{"a plan refused mid-change, mig-manager failed: keep", node(true, migState("gpupool-0123456789", "failed"), nil),
			plan(v1alpha1.PlanFailed, &v1alpha1.NodeStepStatus{Node: "n1", State: v1alpha1.NodeConfiguring}), verified, rollout.CordonKeep, false},
		{"a plan refused mid-change, layout unverified: keep", node(true, migState("gpupool-0123456789", "success"), nil),
			plan(v1alpha1.PlanFailed, &v1alpha1.NodeStepStatus{Node: "n1", State: v1alpha1.NodeVerifying}), unverified, rollout.CordonKeep, false},
		{"a plan refused mid-drain, GPUs never touched: release and uncordon", node(true, nil, nil),
			plan(v1alpha1.PlanFailed, &v1alpha1.NodeStepStatus{Node: "n1", State: v1alpha1.NodeDraining}), nil, rollout.CordonRelease, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := rollout.JudgeCordon(tc.node, owner, tc.plan, tc.gpuNode)
			if d.Action != tc.want || d.Uncordon != tc.uncordon {
				t.Fatalf("JudgeCordon = %+v, want action %d uncordon %t", d, tc.want, tc.uncordon)
			}
			gone := "plan pool-1 no longer exists"
			if tc.plan != nil {
				gone = "plan pool-1 is " + string(tc.plan.Status.Phase)
			}
			if d.Action == rollout.CordonKeep && (d.Why == "" || d.Gone != gone) {
				t.Errorf("keep without saying why: %+v", d)
			}
		})
	}
}
