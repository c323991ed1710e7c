package controllers

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestPlanConditionsTellEachWaitOnce guards the one writer of a plan's conditions: a wait is
// told as an Event when it starts, not on every pass that keeps it; a wait condition that never
// held the plan back is not added when it is over; every condition carries the plan's
// generation.
func TestPlanConditionsTellEachWaitOnce(t *testing.T) {
	plan := &v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 3}}
	status := &v1alpha1.RepartitionPlanStatus{}
	r := &PlanReconciler{}
	ctx, held := holdEvents(context.Background())

	clearWaiting(plan, status, conditionWindow, "WindowOpen", "open")
	if len(status.Conditions) != 0 {
		t.Fatalf("a window that never held the plan back is recorded: %+v", status.Conditions)
	}

	r.markWaiting(ctx, plan, nil, status, conditionWindow, reasonOutsideWindow, "waiting until 02:00")
	r.markWaiting(ctx, plan, nil, status, conditionWindow, reasonOutsideWindow, "waiting until 03:00")
	c := meta.FindStatusCondition(status.Conditions, conditionWindow)
	if c == nil || c.Status != metav1.ConditionFalse || c.Message != "waiting until 03:00" || c.ObservedGeneration != 3 {
		t.Fatalf("window condition = %+v, want False with the latest message at generation 3", c)
	}
	if len(held.tell) != 1 {
		t.Fatalf("%d Events held for one wait, want 1", len(held.tell))
	}

	clearWaiting(plan, status, conditionWindow, "WindowOpen", "open")
	if !meta.IsStatusConditionTrue(status.Conditions, conditionWindow) {
		t.Fatalf("the wait is over but the condition says %+v", status.Conditions)
	}

	r.markStopped(ctx, plan, nil, status, "BudgetExhausted", "stopped")
	r.markStopped(ctx, plan, nil, status, "BudgetExhausted", "stopped")
	if len(held.tell) != 2 {
		t.Fatalf("%d Events held after a stop told twice, want 2 (one wait, one stop)", len(held.tell))
	}

	if before := markApproval(plan, status, false, "HashMismatch", "ignored"); before != "" {
		t.Fatalf("reason before the first approval verdict = %q, want none", before)
	}
	if before := markApproval(plan, status, true, "Approved", "approved"); before != "HashMismatch" {
		t.Fatalf("reason before = %q, want HashMismatch", before)
	}
	if !meta.IsStatusConditionTrue(status.Conditions, ConditionApproved) {
		t.Fatalf("Approved condition = %+v", status.Conditions)
	}
}
