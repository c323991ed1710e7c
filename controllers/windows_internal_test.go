package controllers

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/rollout"
)

// TestWindowHoldsOnlyEvictingSteps guards what a closed, unreadable or absent window holds
// back, and what the plan is told: evicting steps only, never one a failure or the budget
// already stops, with when the window opens or what to fix.
func TestWindowHoldsOnlyEvictingSteps(t *testing.T) {
	now := time.Date(2026, time.March, 4, 13, 37, 0, 0, time.UTC) // a Wednesday
	plan := &v1alpha1.RepartitionPlan{Spec: v1alpha1.RepartitionPlanSpec{Steps: []v1alpha1.NodeStep{
		{Node: "evicts", Disruptive: true}, {Node: "idle"}}}}
	budgets := rollout.Budgets{Disrupting: 1, Reconfiguring: 1, HourlyCapped: true, HourlyLeft: 5}
	saturday := v1alpha1.MaintenanceWindow{Schedule: "0 2 * * 6", Duration: metav1.Duration{Duration: 4 * time.Hour}}
	cases := []struct {
		name    string
		windows []v1alpha1.MaintenanceWindow
		status  []v1alpha1.NodeStepStatus
		budgets rollout.Budgets
		held    []string
		message string
	}{
		{name: "no windows", budgets: budgets},
		{name: "inside the window", windows: []v1alpha1.MaintenanceWindow{{Schedule: "0 13 * * 3", Duration: metav1.Duration{Duration: time.Hour}}},
			budgets: budgets},
		{name: "outside: the evicting step waits, the idle one does not", windows: []v1alpha1.MaintenanceWindow{saturday},
			budgets: budgets, held: []string{"evicts"},
			message: `may start at 2026-03-07T02:00:00Z, when window "0 2 * * 6" for 4h0m0s (UTC) opens`},
		{name: "outside, after a failure: nothing would start anyway", windows: []v1alpha1.MaintenanceWindow{saturday},
			status:  []v1alpha1.NodeStepStatus{{Node: "idle", State: v1alpha1.NodeFailed}},
			budgets: budgets},
		{name: "outside, with maxDisruptedNodes 0: the budget stops it, not the window", windows: []v1alpha1.MaintenanceWindow{saturday},
			budgets: rollout.Budgets{Reconfiguring: 1, HourlyCapped: true, HourlyLeft: 5}},
		{name: "unreadable: held, with what to fix", windows: []v1alpha1.MaintenanceWindow{{Schedule: "0 0 30 2 *", Duration: metav1.Duration{Duration: time.Hour}}},
			budgets: budgets, held: []string{"evicts"}, message: "cannot be read (spec.disruption.windows[0]: schedule \"0 0 30 2 *\" never fires"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			policy := &v1alpha1.GPUPoolPolicy{}
			policy.Spec.Disruption.Windows = c.windows
			w := maintenanceWindow(policy, now)
			gated := w.gate(c.budgets)
			start, _, _, _ := rollout.Progress(plan.Spec.Steps, c.status, gated)
			for _, s := range start {
				if s == "evicts" && len(c.held) > 0 {
					t.Errorf("the gate let the evicting step start")
				}
			}
			held := w.held(plan, &v1alpha1.RepartitionPlanStatus{Nodes: c.status}, c.budgets)
			if strings.Join(held, ",") != strings.Join(c.held, ",") {
				t.Fatalf("held = %v, want %v", held, c.held)
			}
			if msg := w.message(held); len(held) > 0 && !strings.Contains(msg, c.message) {
				t.Errorf("message = %q, want it to contain %q", msg, c.message)
			}
		})
	}
}
