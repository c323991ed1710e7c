// Package rollout holds the pure decisions of executing a RepartitionPlan: whether a plan may
// start (approval, rejection, expiry) and, later, each node step's next state. It reads
// objects and a time and returns decisions; the plan controller performs them and persists
// the result in the plan's status, so that any replica can resume after a crash.
package rollout

import (
	"fmt"
	"time"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// DefaultPlanTTL is how long an unapproved plan waits when its policy does not say.
const DefaultPlanTTL = time.Hour

// Step timeouts when the policy does not say (the CRD documents the same defaults).
const (
	DefaultDrainTimeout     = 15 * time.Minute
	DefaultConfigureTimeout = 10 * time.Minute
)

// Gate reasons, used as condition reasons and Event reasons.
const (
	ReasonAwaitingApproval = "AwaitingApproval"
	ReasonApprovedByUser   = "ApprovedByAnnotation"
	ReasonApprovedByPolicy = "ApprovedByPolicy"
	ReasonRejected         = "Rejected"
	ReasonExpired          = "Expired"
	ReasonPolicyGone       = "PolicyGone"
	ReasonHashMismatch     = "ApprovalHashMismatch"
	ReasonSuperseded       = "PlanSuperseded"
)

// Decision is what the gate decides for a plan that has not started.
type Decision struct {
	// Phase is the plan's phase after the decision.
	Phase v1alpha1.PlanPhase
	// Reason and Message explain it, for the plan's condition and Event.
	Reason, Message string
	// IgnoredApproval is set when an approval names another hash: the controller reports it
	// with a Warning Event instead of acting on it.
	IgnoredApproval string
	// By is who made the decision, for status.approvedBy / rejectedBy: the user the API server
	// stamped on the annotation (AnnotationApprovedBy, AnnotationRejectedBy), or the policy
	// whose mode approved. "" when the annotation carries no author (the admission policy that
	// stamps it is not installed).
	By string
}

// unrecordedAuthor is said of a decision whose author the API server did not stamp.
const unrecordedAuthor = "who set it is not recorded: install the MutatingAdmissionPolicy gpupool-plan-decision-author (config/approval)"

// Changed reports whether the decision moves the plan out of its current phase.
func (d Decision) Changed(plan *v1alpha1.RepartitionPlan) bool { return d.Phase != phaseOf(plan) }

func phaseOf(plan *v1alpha1.RepartitionPlan) v1alpha1.PlanPhase {
	if plan.Status.Phase == "" {
		return v1alpha1.PlanAwaitingApproval
	}
	return plan.Status.Phase
}

// Gate decides whether a plan may start. A plan past the gate (approved, executing or
// finished) keeps its phase. Before it, in order: a rejection wins over everything; an
// supersession the policy controller asked for (AnnotationSupersede) comes next; an
// approval must carry the plan's own hash, so that it can never carry over to another plan;
// the policy approves plans its mode allows unless planning is paused; an unapproved plan
// expires after the policy's planTTL; a plan whose policy is gone expires at once.
func Gate(plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy, now time.Time) Decision {
	if phase := phaseOf(plan); phase != v1alpha1.PlanAwaitingApproval {
		return Decision{Phase: phase}
	}
	annotations := plan.GetAnnotations()
	if reason, ok := annotations[v1alpha1.AnnotationReject]; ok {
		msg := "rejected"
		if reason != "" {
			msg = "rejected: " + reason
		}
		by := annotations[v1alpha1.AnnotationRejectedBy]
		if by != "" {
			msg += " (by " + by + ")"
		} else {
			msg += " (" + unrecordedAuthor + ")"
		}
		return Decision{Phase: v1alpha1.PlanRejected, Reason: ReasonRejected, Message: msg, By: by}
	}
	if why := annotations[v1alpha1.AnnotationSupersede]; why != "" {
		return Decision{Phase: v1alpha1.PlanSuperseded, Reason: ReasonSuperseded, Message: why}
	}
	if policy == nil {
		return Decision{Phase: v1alpha1.PlanExpired, Reason: ReasonPolicyGone,
			Message: fmt.Sprintf("policy %s no longer exists", plan.Spec.Policy)}
	}
	var ignored string
	if approval, ok := annotations[v1alpha1.AnnotationApprove]; ok {
		if approval == plan.Spec.Hash {
			by := annotations[v1alpha1.AnnotationApprovedBy]
			msg := "approved by annotation " + v1alpha1.AnnotationApprove
			if by != "" {
				msg = "approved by " + by + " (annotation " + v1alpha1.AnnotationApprove + ")"
			} else {
				msg += " (" + unrecordedAuthor + ")"
			}
			return Decision{Phase: v1alpha1.PlanApproved, Reason: ReasonApprovedByUser, Message: msg, By: by}
		}
		ignored = approval
	}
	if mode, ok := autoApproves(plan, policy); ok {
		return Decision{Phase: v1alpha1.PlanApproved, Reason: ReasonApprovedByPolicy,
			Message: fmt.Sprintf("approval %s allows this plan", mode), IgnoredApproval: ignored,
			By: fmt.Sprintf("policy %s (approval %s)", policy.Name, mode)}
	}
	ttl := DefaultPlanTTL
	if d := policy.Spec.Disruption.PlanTTL; d != nil && d.Duration > 0 {
		ttl = d.Duration
	}
	if age := now.Sub(plan.CreationTimestamp.Time); age >= ttl {
		return Decision{Phase: v1alpha1.PlanExpired, Reason: ReasonExpired,
			Message: fmt.Sprintf("not approved within planTTL %s", ttl), IgnoredApproval: ignored}
	}
	msg := fmt.Sprintf("waiting for approval: kubectl annotate repartitionplan %s %s=%s",
		plan.Name, v1alpha1.AnnotationApprove, plan.Spec.Hash)
	if ignored != "" {
		msg = fmt.Sprintf("%s=%q names another plan's hash; this plan's is %s. %s",
			v1alpha1.AnnotationApprove, ignored, plan.Spec.Hash, msg)
	}
	return Decision{Phase: v1alpha1.PlanAwaitingApproval, Reason: ReasonAwaitingApproval, Message: msg,
		IgnoredApproval: ignored}
}

// autoApproves reports whether the policy's approval mode approves the plan by itself: Auto
// approves every plan within the budget (the planner never exceeds it), AutoIdle only plans
// that evict no running pod. A paused policy approves nothing by itself.
func autoApproves(plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy) (v1alpha1.ApprovalMode, bool) {
	if policy.Spec.Planning.Paused {
		return "", false
	}
	return ModeApproves(plan, policy)
}

// ModeApproves reports whether approval modes approve the plan without a human, and under
// which mode: the more cautious of the mode the plan was made under (spec.approval) and the
// policy's mode now. Auto approves every plan, AutoIdle only a plan that evicts no pod. Both
// modes count so that neither can be loosened after the fact: a plan made to wait for a human
// is not approved by a later edit of the policy (an admission policy asks the approve verb of
// whoever loosens it, but the manager does not rely on it being installed), and a policy set
// back to Manual stops plans made under Auto. A plan without spec.approval, made before the
// field existed, is never approved by a mode.
func ModeApproves(plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy) (v1alpha1.ApprovalMode, bool) {
	mode := Stricter(RecordedApproval(plan), EffectiveApproval(policy))
	switch mode {
	case v1alpha1.ApprovalAuto:
		return mode, true
	case v1alpha1.ApprovalAutoIdle:
		return mode, !plan.Spec.Disruptive
	}
	return "", false
}

// RecordedApproval is the approval mode a plan was made under; Manual for a plan that does
// not say, which no mode approves.
func RecordedApproval(plan *v1alpha1.RepartitionPlan) v1alpha1.ApprovalMode {
	return orManual(plan.Spec.Approval)
}

// EffectiveApproval is the policy's approval mode now, Manual when unset (the CRD's default).
func EffectiveApproval(policy *v1alpha1.GPUPoolPolicy) v1alpha1.ApprovalMode {
	return orManual(policy.Spec.Disruption.Approval)
}

// orManual reads an unset or unknown mode as Manual, so that nothing unexpected approves.
func orManual(mode v1alpha1.ApprovalMode) v1alpha1.ApprovalMode {
	switch mode {
	case v1alpha1.ApprovalAuto, v1alpha1.ApprovalAutoIdle:
		return mode
	}
	return v1alpha1.ApprovalManual
}

// Stricter is the more cautious of two approval modes: Manual before AutoIdle before Auto.
func Stricter(a, b v1alpha1.ApprovalMode) v1alpha1.ApprovalMode {
	rank := func(m v1alpha1.ApprovalMode) int {
		switch orManual(m) {
		case v1alpha1.ApprovalAuto:
			return 2
		case v1alpha1.ApprovalAutoIdle:
			return 1
		}
		return 0
	}
	if rank(a) <= rank(b) {
		return orManual(a)
	}
	return orManual(b)
}
