package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/rollout"
)

// windowNever is how long a plan waits before looking again when no window of its policy will
// ever open (or none can be read): a change of the policy wakes it sooner, as a watch event.
const windowNever = time.Hour

// windowState is what the policy's maintenance windows allow now.
type windowState struct {
	// open is true when an evicting step may start now: no windows, or one of them open.
	open bool
	// next is when the next window opens (zero when none ever does), and which one.
	next  time.Time
	which pool.Window
	// err is set when the windows cannot be read: no evicting step starts (the policy asked to
	// restrict disruption, and the controller cannot tell when), and SpecValid says what to fix.
	err error
}

// maintenanceWindow reads the policy's windows at now.
func maintenanceWindow(policy *v1alpha1.GPUPoolPolicy, now time.Time) windowState {
	windows, err := pool.ParseWindows(policy.Spec.Disruption.Windows)
	if err != nil {
		return windowState{err: err}
	}
	if windows.Open(now) {
		return windowState{open: true}
	}
	next, which, _ := windows.NextOpen(now)
	return windowState{next: next, which: which}
}

// gate lets no evicting step start while no window is open, through the same count the hourly
// cap uses (rollout.Budgets.HourlyLeft: how many more evicting steps may start). Steps that
// only re-carve idle GPUs evict nothing, and steps already started finish: neither is held.
func (w windowState) gate(b rollout.Budgets) rollout.Budgets {
	if !w.open {
		b.HourlyCapped, b.HourlyLeft = true, 0
	}
	return b
}

// held lists the evicting steps that would start now if a window were open: ungated are the
// budgets before gate.
func (w windowState) held(plan *v1alpha1.RepartitionPlan, status *v1alpha1.RepartitionPlanStatus, ungated rollout.Budgets) []string {
	if w.open {
		return nil
	}
	start, _, _, _ := rollout.Progress(plan.Spec.Steps, status.Nodes, ungated)
	var held []string
	for _, s := range plan.Spec.Steps {
		if s.Disruptive && slices.Contains(start, s.Node) {
			held = append(held, s.Node)
		}
	}
	return held
}

// message says why the steps wait and until when.
func (w windowState) message(held []string) string {
	steps := fmt.Sprintf("the next step that evicts pods (node %s)", strings.Join(held, ", "))
	if len(held) > 1 {
		steps = fmt.Sprintf("the next steps that evict pods (nodes %s)", strings.Join(held, ", "))
	}
	tail := "; steps already started run to completion, and steps that only re-carve idle GPUs do not wait"
	switch {
	case w.err != nil:
		return fmt.Sprintf("waiting: %s cannot start, because the policy's maintenance windows cannot be read (%v): fix spec.disruption.windows%s",
			steps, w.err, tail)
	case w.next.IsZero():
		return fmt.Sprintf("waiting: %s cannot start, because no maintenance window of the policy opens again: fix spec.disruption.windows%s",
			steps, tail)
	}
	return fmt.Sprintf("waiting for a maintenance window: %s may start at %s, when window %s opens%s",
		steps, w.next.UTC().Format(time.RFC3339), w.which.Describe(), tail)
}

// reportWindow records on the plan whether the maintenance windows hold its next evicting
// steps back (condition WithinMaintenanceWindow, and an Event when they start to), and returns
// the plan's phase and requeue in their light. A plan held only by a closed window waits for
// it rather than stop; one that has not started any node stays Approved, so that the plan is
// revalidated (is anyone still pending?) when its first node starts, not when it was approved.
func (r *PlanReconciler) reportWindow(ctx context.Context, plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy,
	status *v1alpha1.RepartitionPlanStatus, w windowState, ungated rollout.Budgets, phase v1alpha1.PlanPhase,
	requeue time.Duration, now time.Time) (v1alpha1.PlanPhase, time.Duration) {
	held := w.held(plan, status, ungated)
	if len(held) == 0 {
		clearWaiting(plan, status, conditionWindow, "WindowOpen", "the policy's maintenance windows allow the plan's next steps")
		return phase, requeue
	}
	if phase == v1alpha1.PlanFailed || phase == v1alpha1.PlanExecuting {
		phase = v1alpha1.PlanExecuting
		if len(status.Nodes) == 0 {
			phase = v1alpha1.PlanApproved
		}
	}
	r.markWaiting(ctx, plan, policy, status, conditionWindow, reasonOutsideWindow, w.message(held))
	wait := windowNever
	if w.err == nil && !w.next.IsZero() {
		wait = max(time.Second, w.next.Sub(now))
	}
	if requeue == 0 || wait < requeue {
		requeue = wait
	}
	return phase, requeue
}
