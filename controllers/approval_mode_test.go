package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// TestALoosenedPolicyNeverApprovesAWaitingPlan guards the approval model where the admission
// policy gpupool-policy-loosening is not installed (or someone allowed to loosen a policy does
// so): a plan made under Manual, waiting for a human, is not approved by switching its policy
// to Auto afterwards, because the plan records the mode it was made under. The hash-bound
// approval still starts it.
func TestALoosenedPolicyNeverApprovesAWaitingPlan(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, plan := awaitingManualPlan(t, "made-under-manual")
	g.Expect(getPlan(g, env, plan).Spec.Approval).To(Equal(v1.ApprovalManual))

	editPolicy(t, env, "pool-a", func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalAuto })
	g.Consistently(func(g Gomega) {
		g.Expect(getPlan(g, env, plan).Status.Phase).To(Equal(v1.PlanAwaitingApproval))
		g.Expect(getNode(g, env, "gpu-1").Spec.Unschedulable).To(BeFalse(), "never cordoned")
	}).WithTimeout(3 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())

	got := getPlan(g, env, plan)
	patch := client.MergeFrom(got.DeepCopy())
	got.Annotations = map[string]string{v1.AnnotationApprove: got.Spec.Hash}
	g.Expect(env.Client.Patch(ctx, got, patch)).To(Succeed())
	g.Eventually(func(g Gomega) v1.PlanPhase { return getPlan(g, env, plan).Status.Phase }).
		WithTimeout(30*time.Second).ShouldNot(Equal(v1.PlanAwaitingApproval), "a human's approval still starts it")
}

// TestAPlanUnderReviewIsRemadeUnderANewApprovalMode guards the other side of recording the
// mode: once someone allowed to (an approver, under the admission policy) loosens the policy,
// the plan made under Manual is superseded by the same change made under the new mode, which
// that mode then approves, instead of waiting for a human until it expires.
func TestAPlanUnderReviewIsRemadeUnderANewApprovalMode(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, _ := startPolicyController(t)
	gpuNode(t, env, "gpu-1", 2, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	pendingPod(t, env, "trainer", "3g.71gb")
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	first := onlyPlan(t, env)
	g.Expect(first.Spec.Approval).To(Equal(v1.ApprovalManual), "the manager records the mode it made the plan under")
	g.Expect(first.Spec.Disruptive).To(BeFalse(), "idle GPUs serve the pod")

	editPolicy(t, env, policy.Name, func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalAutoIdle })
	g.Eventually(func(g Gomega) {
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(&first), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(v1.PlanSuperseded), "the plan made under Manual is never approved by the new mode")
		var plans v1.RepartitionPlanList
		g.Expect(env.Client.List(ctx, &plans)).To(Succeed())
		g.Expect(plans.Items).To(ContainElement(And(
			HaveField("Spec.Approval", v1.ApprovalAutoIdle),
			HaveField("Status.Phase", Not(BeElementOf(v1.PlanAwaitingApproval, v1.PlanSuperseded, v1.PlanPhase("")))))),
			"the same change, made under AutoIdle, is approved by it")
	}).WithTimeout(30 * time.Second).Should(Succeed())
}
