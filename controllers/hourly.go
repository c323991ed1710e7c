package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/rollout"
)

// hourlyState is what is left of the policy's maxDisruptiveStepsPerHour for a plan's next steps.
type hourlyState struct {
	// left is how many more evicting steps may start now.
	left int
	// freed is when the oldest step counted against the cap leaves the hour.
	freed time.Time
}

// hourlyCap counts the evicting steps the policy's plans started in the last hour, this plan's
// as its status is now (not as the cache last saw it).
func (r *PlanReconciler) hourlyCap(ctx context.Context, plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy,
	status *v1alpha1.RepartitionPlanStatus, now time.Time) (hourlyState, error) {
	var list v1alpha1.RepartitionPlanList
	if err := r.Client.List(ctx, &list); err != nil {
		return hourlyState{}, fmt.Errorf("listing plans for policy %s's maxDisruptiveStepsPerHour: %w", policy.Name, err)
	}
	plans := pool.OwnPlans(policy, list.Items)
	self := plan.DeepCopy()
	self.Status = *status
	if i := slices.IndexFunc(plans, func(p v1alpha1.RepartitionPlan) bool { return p.Name == plan.Name }); i >= 0 {
		plans[i] = *self
	} else {
		plans = append(plans, *self)
	}
	left := pool.HourlyBound(policy) - pool.DisruptiveStepsSince(plans, now.Add(-time.Hour))
	return hourlyState{left: max(0, left), freed: pool.HourlyCapFreed(plans, now)}, nil
}

// holds says whether the hour's cap alone stops the plan: nothing failed, its approval holds,
// and an evicting step would start now but for the cap.
func (h hourlyState) holds(plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy,
	status *v1alpha1.RepartitionPlanStatus, budgets rollout.Budgets) bool {
	if h.left > 0 || h.freed.IsZero() || !rollout.Approved(plan, policy) ||
		slices.ContainsFunc(status.Nodes, func(n v1alpha1.NodeStepStatus) bool { return n.State == v1alpha1.NodeFailed }) {
		return false
	}
	budgets.HourlyCapped = false
	start, _, _, _ := rollout.Progress(plan.Spec.Steps, status.Nodes, budgets)
	return len(start) > 0
}
