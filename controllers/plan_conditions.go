package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// A RepartitionPlan's conditions. setPlanCondition is the one function that writes them; the
// helpers below say what each decision records, and tell an Event when a wait or a stop starts.
const (
	// ConditionApproved on a RepartitionPlan says whether it passed the approval gate.
	ConditionApproved = "Approved"
	// conditionReady is False once the plan stopped short of its end: superseded, cancelled
	// as stale, refused, or stopped with nothing left that may start.
	conditionReady = v1alpha1.ConditionReady
	// conditionHourlyCap is False while the policy's maxDisruptiveStepsPerHour keeps the
	// plan's next evicting step from starting.
	conditionHourlyCap = "WithinHourlyCap"
	// conditionWindow is False while the policy's maintenance windows
	// (spec.disruption.windows) keep its next evicting step from starting; its message says
	// when the next window opens.
	conditionWindow = "WithinMaintenanceWindow"
)

// Reasons of the plan's wait conditions, and of their Events.
const (
	reasonHourlyCapSpent = "HourlyCapSpent"
	reasonOutsideWindow  = "OutsideMaintenanceWindow"
)

// setPlanCondition writes one of the plan's conditions, for the plan's generation, and says
// whether the condition was False before.
func setPlanCondition(plan *v1alpha1.RepartitionPlan, status *v1alpha1.RepartitionPlanStatus, condType string,
	s metav1.ConditionStatus, reason, message string) (wasFalse bool) {
	wasFalse = meta.IsStatusConditionFalse(status.Conditions, condType)
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: condType, Status: s, Reason: reason, Message: message,
		ObservedGeneration: plan.Generation})
	return wasFalse
}

// markWaiting records that a wait condition (hourly cap, maintenance window) holds the plan's
// next steps back, with a Normal Event when the wait starts, not on every pass that keeps it.
func (r *PlanReconciler) markWaiting(ctx context.Context, plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy,
	status *v1alpha1.RepartitionPlanStatus, condType, reason, message string) {
	if !setPlanCondition(plan, status, condType, metav1.ConditionFalse, reason, message) {
		// Told once the status that records the wait is written, and logged with it (plan_events.go).
		planEvent(ctx, r.Recorder, plan, policyRef(policy), corev1.EventTypeNormal, reason, "Wait", message)
	}
}

// clearWaiting records that a wait is over; a condition that never held the plan back is not
// added.
func clearWaiting(plan *v1alpha1.RepartitionPlan, status *v1alpha1.RepartitionPlanStatus, condType, reason, message string) {
	if meta.IsStatusConditionFalse(status.Conditions, condType) {
		setPlanCondition(plan, status, condType, metav1.ConditionTrue, reason, message)
	}
}

// markStopped records that the plan stopped with nothing left that may start (Ready=False),
// with a Warning Event when it stops.
func (r *PlanReconciler) markStopped(ctx context.Context, plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy,
	status *v1alpha1.RepartitionPlanStatus, reason, message string) {
	if !setPlanCondition(plan, status, conditionReady, metav1.ConditionFalse, reason, message) {
		planEvent(ctx, r.Recorder, plan, policyRef(policy), corev1.EventTypeWarning, reason, "Stop", message)
	}
}

// markEnded records why a plan ended before it ran to its end (Ready=False): superseded,
// cancelled as stale, refused. The gate's own Event, or the caller's, tells it.
func markEnded(plan *v1alpha1.RepartitionPlan, status *v1alpha1.RepartitionPlanStatus, reason, message string) {
	setPlanCondition(plan, status, conditionReady, metav1.ConditionFalse, reason, message)
}

// markApproval records the approval gate's verdict (Approved) and says the reason the plan
// carried before, so that the caller tells a change of it once.
func markApproval(plan *v1alpha1.RepartitionPlan, status *v1alpha1.RepartitionPlanStatus, approved bool, reason, message string) (before string) {
	if c := meta.FindStatusCondition(status.Conditions, ConditionApproved); c != nil {
		before = c.Reason
	}
	s := metav1.ConditionFalse
	if approved {
		s = metav1.ConditionTrue
	}
	setPlanCondition(plan, status, ConditionApproved, s, reason, message)
	return before
}
