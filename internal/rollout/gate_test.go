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
		by        string
		ignored   string
		invariant string
		// made is the mode the plan records it was made under (spec.approval); unset, the
		// policy's mode, as the manager records it, unless legacy (a plan from before the field).
		made   v1alpha1.ApprovalMode
		legacy bool
	}{
		{name: "manual plan waits and says how to approve", plan: plan(true, "", nil),
			policy: policy(v1alpha1.ApprovalManual, false, 0), age: time.Minute,
			phase: v1alpha1.PlanAwaitingApproval, reason: rollout.ReasonAwaitingApproval,
			message:   "kubectl annotate repartitionplan pool-a-20261129-1f3e9a7c gpupool.io/approve=1f3e9a7c00000000",
			invariant: "nothing disruptive starts without a human under Manual"},
		{name: "approval with the plan's hash", plan: plan(true, "", approve("1f3e9a7c00000000")),
			policy: policy(v1alpha1.ApprovalManual, false, 0), phase: v1alpha1.PlanApproved,
			reason: rollout.ReasonApprovedByUser, invariant: "a matching approval starts the plan"},
		{name: "the approver the API server stamped is named", plan: plan(true, "", map[string]string{
			v1alpha1.AnnotationApprove: "1f3e9a7c00000000", v1alpha1.AnnotationApprovedBy: "alice"}),
			policy: policy(v1alpha1.ApprovalManual, false, 0), phase: v1alpha1.PlanApproved,
			reason: rollout.ReasonApprovedByUser, message: "approved by alice (annotation gpupool.io/approve)", by: "alice",
			invariant: "the approver is on the plan"},
		{name: "an approval without a stamped author says so", plan: plan(true, "", approve("1f3e9a7c00000000")),
			policy: policy(v1alpha1.ApprovalManual, false, 0), phase: v1alpha1.PlanApproved,
			reason: rollout.ReasonApprovedByUser, message: "who set it is not recorded",
			invariant: "an unknown approver is not made up"},
		{name: "the rejecter the API server stamped is named", plan: plan(true, "", map[string]string{
			v1alpha1.AnnotationReject: "busy", v1alpha1.AnnotationRejectedBy: "bob"}),
			policy: policy(v1alpha1.ApprovalManual, false, 0), phase: v1alpha1.PlanRejected,
			reason: rollout.ReasonRejected, message: "rejected: busy (by bob)", by: "bob",
			invariant: "the rejecter is on the plan"},
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
		{name: "a plan made under Manual is not approved by a later switch to Auto", plan: plan(true, "", nil),
			made: v1alpha1.ApprovalManual, policy: policy(v1alpha1.ApprovalAuto, false, 0),
			phase: v1alpha1.PlanAwaitingApproval, reason: rollout.ReasonAwaitingApproval,
			invariant: "a plan waiting for a human is never approved by loosening the policy"},
		{name: "a plan made under Manual is not approved by a later switch to AutoIdle", plan: plan(false, "", nil),
			made: v1alpha1.ApprovalManual, policy: policy(v1alpha1.ApprovalAutoIdle, false, 0),
			phase: v1alpha1.PlanAwaitingApproval, reason: rollout.ReasonAwaitingApproval,
			invariant: "a plan waiting for a human is never approved by loosening the policy"},
		{name: "a disruptive plan made under AutoIdle is not approved by a later switch to Auto", plan: plan(true, "", nil),
			made: v1alpha1.ApprovalAutoIdle, policy: policy(v1alpha1.ApprovalAuto, false, 0),
			phase: v1alpha1.PlanAwaitingApproval, reason: rollout.ReasonAwaitingApproval,
			invariant: "the more cautious of the two modes decides"},
		{name: "an idle plan made under AutoIdle is approved under Auto", plan: plan(false, "", nil),
			made: v1alpha1.ApprovalAutoIdle, policy: policy(v1alpha1.ApprovalAuto, false, 0),
			phase: v1alpha1.PlanApproved, reason: rollout.ReasonApprovedByPolicy, message: "approval AutoIdle allows this plan",
			invariant: "both modes allow an idle plan"},
		{name: "a plan made under Auto waits once the policy is back to Manual", plan: plan(true, "", nil),
			made: v1alpha1.ApprovalAuto, policy: policy(v1alpha1.ApprovalManual, false, 0),
			phase: v1alpha1.PlanAwaitingApproval, reason: rollout.ReasonAwaitingApproval,
			invariant: "a current Manual stops automatic approval"},
		{name: "a disruptive plan made under Auto waits once the policy is AutoIdle", plan: plan(true, "", nil),
			made: v1alpha1.ApprovalAuto, policy: policy(v1alpha1.ApprovalAutoIdle, false, 0),
			phase: v1alpha1.PlanAwaitingApproval, reason: rollout.ReasonAwaitingApproval,
			invariant: "the more cautious of the two modes decides"},
		{name: "a plan from before spec.approval is never approved by a mode", plan: plan(false, "", nil),
			legacy: true, policy: policy(v1alpha1.ApprovalAuto, false, 0),
			phase: v1alpha1.PlanAwaitingApproval, reason: rollout.ReasonAwaitingApproval,
			invariant: "a plan that does not say under which mode it was made waits for a human"},
		{name: "a plan from before spec.approval is approved by a human", plan: plan(true, "", approve("1f3e9a7c00000000")),
			legacy: true, policy: policy(v1alpha1.ApprovalAuto, false, 0),
			phase: v1alpha1.PlanApproved, reason: rollout.ReasonApprovedByUser,
			invariant: "the approve annotation still works on older plans"},
		{name: "a human approves a plan made under Manual whatever the policy says now", plan: plan(true, "", approve("1f3e9a7c00000000")),
			made: v1alpha1.ApprovalManual, policy: policy(v1alpha1.ApprovalAuto, false, 0),
			phase: v1alpha1.PlanApproved, reason: rollout.ReasonApprovedByUser,
			invariant: "the hash-bound approval is independent of the modes"},
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
			switch {
			case tc.made != "":
				tc.plan.Spec.Approval = tc.made
			case !tc.legacy && tc.policy != nil:
				tc.plan.Spec.Approval = tc.policy.Spec.Disruption.Approval
			}
			d := rollout.Gate(tc.plan, tc.policy, created.Add(tc.age))
			g.Expect(d.Phase).To(Equal(tc.phase), tc.invariant)
			g.Expect(d.Reason).To(Equal(tc.reason))
			g.Expect(d.Message).To(ContainSubstring(tc.message))
			if tc.by != "" {
				g.Expect(d.By).To(Equal(tc.by))
			}
			g.Expect(d.IgnoredApproval).To(Equal(tc.ignored))
			g.Expect(d.Changed(tc.plan)).To(Equal(tc.phase != v1alpha1.PlanAwaitingApproval && tc.plan.Status.Phase != tc.phase))
		})
	}
}

func TestStricter(t *testing.T) {
	modes := []v1alpha1.ApprovalMode{"", v1alpha1.ApprovalManual, v1alpha1.ApprovalAutoIdle, v1alpha1.ApprovalAuto, "Bogus"}
	rank := map[v1alpha1.ApprovalMode]int{"": 0, v1alpha1.ApprovalManual: 0, "Bogus": 0, v1alpha1.ApprovalAutoIdle: 1, v1alpha1.ApprovalAuto: 2}
	for _, a := range modes {
		for _, b := range modes {
			got := rollout.Stricter(a, b)
			want := min(rank[a], rank[b])
			if rank[got] != want || got == "" || got == "Bogus" {
				t.Errorf("Stricter(%q, %q) = %q: want the more cautious mode, unset and unknown read as Manual", a, b, got)
			}
		}
	}
}
