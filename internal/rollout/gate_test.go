package rollout_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/rollout"
)

var created = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func plan(disruptive bool, phase v1alpha1.PlanPhase, annotations map[string]string) *v1alpha1.RepartitionPlan {
	return &v1alpha1.RepartitionPlan{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-a-20261129-1f3e9a7c", CreationTimestamp: metav1.NewTime(created),
			Annotations: annotations},
		Spec:   v1alpha1.RepartitionPlanSpec{Policy: "pool-a", Hash: "1f3e9a7c00000000", Disruptive: disruptive},
		Status: v1alpha1.RepartitionPlanStatus{Phase: phase},
	}
}

func policy(mode v1alpha1.ApprovalMode, paused bool, ttl time.Duration) *v1alpha1.GPUPoolPolicy {
	p := &v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pool-a"}}
	p.Spec.Disruption.Approval = mode
	p.Spec.Planning.Paused = paused
	if ttl > 0 {
		p.Spec.Disruption.PlanTTL = &metav1.Duration{Duration: ttl}
	}
	return p
}

func TestGate(t *testing.T) {
	approve := func(v string) map[string]string { return map[string]string{v1alpha1.AnnotationApprove: v} }
	cases := []struct {
		name      string
		plan      *v1alpha1.RepartitionPlan
		policy    *v1alpha1.GPUPoolPolicy
		age       time.Duration
		phase     v1alpha1.PlanPhase
		reason    string
		message   string
		ignored   string
		invariant string
	}{
		{name: "manual plan waits and says how to approve", plan: plan(true, "", nil),
			policy: policy(v1alpha1.ApprovalManual, false, 0), age: time.Minute,
			phase: v1alpha1.PlanAwaitingApproval, reason: rollout.ReasonAwaitingApproval,
			message:   "kubectl annotate repartitionplan pool-a-20261129-1f3e9a7c gpupool.io/approve=1f3e9a7c00000000",
			invariant: "nothing disruptive starts without a human under Manual"},
		{name: "approval with the plan's hash", plan: plan(true, "", approve("1f3e9a7c00000000")),
			policy: policy(v1alpha1.ApprovalManual, false, 0), phase: v1alpha1.PlanApproved,
			reason: rollout.ReasonApprovedByUser, invariant: "a matching approval starts the plan"},
		{name: "approval with another hash is ignored", plan: plan(true, "", approve("deadbeef")),
			policy: policy(v1alpha1.ApprovalManual, false, 0), phase: v1alpha1.PlanAwaitingApproval,
			reason: rollout.ReasonAwaitingApproval, ignored: "deadbeef",
			message:   `gpupool.io/approve="deadbeef" names another plan's hash`,
			invariant: "an approval never carries over to another plan"},
		{name: "rejection wins over approval", plan: plan(true, "", map[string]string{
			v1alpha1.AnnotationApprove: "1f3e9a7c00000000", v1alpha1.AnnotationReject: "training run"}),
			policy: policy(v1alpha1.ApprovalAuto, false, 0), phase: v1alpha1.PlanRejected,
			reason: rollout.ReasonRejected, message: "rejected: training run",
			invariant: "a human's no is final"},
		{name: "the policy controller's supersession beats an approval that has not been acted on", plan: plan(true, "", map[string]string{
			v1alpha1.AnnotationApprove: "1f3e9a7c00000000", v1alpha1.AnnotationSupersede: "superseded by a new plan"}),
			policy: policy(v1alpha1.ApprovalAuto, false, 0), phase: v1alpha1.PlanSuperseded,
			reason: rollout.ReasonSuperseded, message: "superseded by a new plan",
			invariant: "the policy controller asks, the plan controller alone writes the status"},
		{name: "a rejection beats a supersession", plan: plan(true, "", map[string]string{
			v1alpha1.AnnotationSupersede: "superseded by a new plan", v1alpha1.AnnotationReject: "no"}),
			policy: policy(v1alpha1.ApprovalManual, false, 0), phase: v1alpha1.PlanRejected,
			reason: rollout.ReasonRejected, invariant: "a human's no is recorded as such"},
		{name: "an approved plan ignores a late supersession", plan: plan(true, v1alpha1.PlanApproved, map[string]string{
			v1alpha1.AnnotationSupersede: "superseded by a new plan"}),
			policy: policy(v1alpha1.ApprovalManual, false, 0), phase: v1alpha1.PlanApproved,
			invariant: "a plan is never superseded once approved"},
		{name: "Auto approves a disruptive plan", plan: plan(true, "", nil),
			policy: policy(v1alpha1.ApprovalAuto, false, 0), phase: v1alpha1.PlanApproved,
			reason: rollout.ReasonApprovedByPolicy, invariant: "Auto needs no human"},
		{name: "AutoIdle approves a plan that evicts nothing", plan: plan(false, "", nil),
			policy: policy(v1alpha1.ApprovalAutoIdle, false, 0), phase: v1alpha1.PlanApproved,
			reason: rollout.ReasonApprovedByPolicy, invariant: "AutoIdle applies idle-only plans"},
		{name: "AutoIdle waits for a human on a disruptive plan", plan: plan(true, "", nil),
			policy: policy(v1alpha1.ApprovalAutoIdle, false, 0), phase: v1alpha1.PlanAwaitingApproval,
			reason: rollout.ReasonAwaitingApproval, invariant: "AutoIdle never evicts on its own"},
		{name: "a paused policy approves nothing by itself", plan: plan(false, "", nil),
			policy: policy(v1alpha1.ApprovalAuto, true, 0), phase: v1alpha1.PlanAwaitingApproval,
			reason: rollout.ReasonAwaitingApproval, invariant: "paused means no automatic change"},
		{name: "expires after the policy's planTTL", plan: plan(true, "", nil),
			policy: policy(v1alpha1.ApprovalManual, false, 10*time.Minute), age: 10 * time.Minute,
			phase: v1alpha1.PlanExpired, reason: rollout.ReasonExpired, message: "planTTL 10m0s",
			invariant: "stale plans do not linger to be approved against a changed cluster"},
		{name: "expires after the default hour", plan: plan(true, "", nil),
			policy: policy(v1alpha1.ApprovalManual, false, 0), age: time.Hour,
			phase: v1alpha1.PlanExpired, reason: rollout.ReasonExpired, invariant: "planTTL defaults to 1h"},
		{name: "an approval arriving in time beats expiry", plan: plan(true, "", approve("1f3e9a7c00000000")),
			policy: policy(v1alpha1.ApprovalManual, false, 10*time.Minute), age: 2 * time.Hour,
			phase: v1alpha1.PlanApproved, reason: rollout.ReasonApprovedByUser,
			invariant: "the controller may see an approval late; it counts"},
		{name: "policy deleted", plan: plan(true, "", approve("1f3e9a7c00000000")), policy: nil,
			phase: v1alpha1.PlanExpired, reason: rollout.ReasonPolicyGone, message: "policy pool-a no longer exists",
			invariant: "no plan runs without its policy's budget"},
		{name: "an executing plan keeps its phase", plan: plan(true, v1alpha1.PlanExecuting, map[string]string{
			v1alpha1.AnnotationReject: "too late"}), policy: policy(v1alpha1.ApprovalManual, false, 0),
			phase: v1alpha1.PlanExecuting, invariant: "the gate is behind a started plan"},
		{name: "a superseded plan stays superseded", plan: plan(true, v1alpha1.PlanSuperseded, approve("1f3e9a7c00000000")),
			policy: policy(v1alpha1.ApprovalManual, false, 0), phase: v1alpha1.PlanSuperseded,
			invariant: "terminal phases are terminal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := rollout.Gate(tc.plan, tc.policy, created.Add(tc.age))
			g.Expect(d.Phase).To(Equal(tc.phase), tc.invariant)
			g.Expect(d.Reason).To(Equal(tc.reason))
			g.Expect(d.Message).To(ContainSubstring(tc.message))
			g.Expect(d.IgnoredApproval).To(Equal(tc.ignored))
			g.Expect(d.Changed(tc.plan)).To(Equal(tc.phase != v1alpha1.PlanAwaitingApproval && tc.plan.Status.Phase != tc.phase))
		})
	}
}
