package rollout_test

import (
	"testing"

	. "github.com/onsi/gomega"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/rollout"
)

func TestProgress(t *testing.T) {
	steps := []v1alpha1.NodeStep{{Node: "a", Disruptive: true}, {Node: "b", Disruptive: true}, {Node: "c", Disruptive: true}}
	st := func(states ...v1alpha1.NodeStepState) []v1alpha1.NodeStepStatus {
		var out []v1alpha1.NodeStepStatus
		for i, s := range states {
			out = append(out, v1alpha1.NodeStepStatus{Node: steps[i].Node, State: s})
		}
		return out
	}
	cases := []struct {
		name      string
		status    []v1alpha1.NodeStepStatus
		budget    int
		start     []string
		phase     v1alpha1.PlanPhase
		progress  string
		invariant string
	}{
		{name: "budget 1 with 3 nodes starts one", status: nil, budget: 1, start: []string{"a"},
			phase: v1alpha1.PlanExecuting, progress: "0/3", invariant: "at most maxDisruptedNodes nodes at once"},
		{name: "the next starts when one is done", status: st(v1alpha1.NodeDone, v1alpha1.NodePending, v1alpha1.NodePending),
			budget: 1, start: []string{"b"}, phase: v1alpha1.PlanExecuting, progress: "1/3"},
		{name: "an active node holds the budget", status: st(v1alpha1.NodeDraining), budget: 1,
			phase: v1alpha1.PlanExecuting, progress: "0/3", invariant: "draining counts against the budget"},
		{name: "budget 2", status: st(v1alpha1.NodeVerifying), budget: 2, start: []string{"b"},
			phase: v1alpha1.PlanExecuting, progress: "0/3"},
		{name: "a failure stops new starts", status: st(v1alpha1.NodeFailed, v1alpha1.NodeConfiguring), budget: 3,
			phase: v1alpha1.PlanExecuting, progress: "0/3", invariant: "a fault does not spread across the pool"},
		{name: "failed once nothing is active", status: st(v1alpha1.NodeFailed, v1alpha1.NodeDone), budget: 3,
			phase: v1alpha1.PlanFailed, progress: "1/3"},
		{name: "a failed step setting its label back stops new starts and keeps the plan going", status: st(v1alpha1.NodeRestoring),
			budget: 3, phase: v1alpha1.PlanExecuting, progress: "0/3", invariant: "Restoring is a failure still in flight"},
		{name: "all done", status: st(v1alpha1.NodeDone, v1alpha1.NodeDone, v1alpha1.NodeDone), budget: 1,
			phase: v1alpha1.PlanSucceeded, progress: "3/3"},
		{name: "budget lowered to zero mid-plan: the active node finishes", status: st(v1alpha1.NodeDone, v1alpha1.NodeConfiguring),
			budget: 0, phase: v1alpha1.PlanExecuting, progress: "1/3", invariant: "a node in flight is never abandoned"},
		{name: "budget zero and nothing active: the plan stops", status: st(v1alpha1.NodeDone, v1alpha1.NodeDone),
			budget: 0, phase: v1alpha1.PlanFailed, progress: "2/3", invariant: "never Executing for ever"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			start, _, phase, progress := rollout.Progress(steps, tc.status, rollout.Budgets{Disrupting: tc.budget})
			g.Expect(start).To(Equal(tc.start), tc.invariant)
			g.Expect(phase).To(Equal(tc.phase), tc.invariant)
			g.Expect(progress).To(Equal(tc.progress))
		})
	}
}

// TestProgressOrdersMovesAndSplitsBudgets: a step that moves pods to a node the plan changes
// starts only once that node is done; a step waiting on a failed one never starts; nodes that
// only re-carve idle GPUs count against their own budget.
func TestProgressOrdersMovesAndSplitsBudgets(t *testing.T) {
	steps := []v1alpha1.NodeStep{
		{Node: "carve"},
		{Node: "mover", Disruptive: true, WaitsFor: []string{"carve"}},
		{Node: "idle-1"},
		{Node: "other", Disruptive: true},
	}
	status := func(pairs ...string) []v1alpha1.NodeStepStatus {
		var out []v1alpha1.NodeStepStatus
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, v1alpha1.NodeStepStatus{Node: pairs[i], State: v1alpha1.NodeStepState(pairs[i+1])})
		}
		return out
	}
	cases := []struct {
		name    string
		status  []v1alpha1.NodeStepStatus
		budgets rollout.Budgets
		start   []string
		waiting []v1alpha1.NodeWait
		phase   v1alpha1.PlanPhase
	}{
		{name: "the landing first; the mover waits", budgets: rollout.Budgets{Disrupting: 2, Reconfiguring: 2},
			start: []string{"carve", "idle-1", "other"}, waiting: []v1alpha1.NodeWait{{Node: "mover", For: []string{"carve"}}},
			phase: v1alpha1.PlanExecuting},
		{name: "the mover starts once the landing is done", budgets: rollout.Budgets{Disrupting: 1, Reconfiguring: 1},
			status: status("carve", string(v1alpha1.NodeDone), "idle-1", string(v1alpha1.NodeDone)),
			start:  []string{"mover"}, phase: v1alpha1.PlanExecuting},
		{name: "reconfiguring nodes do not use the disruption budget", budgets: rollout.Budgets{Disrupting: 1, Reconfiguring: 1},
			status: status("carve", string(v1alpha1.NodeConfiguring)),
			start:  []string{"other"}, waiting: []v1alpha1.NodeWait{{Node: "mover", For: []string{"carve"}}}, phase: v1alpha1.PlanExecuting},
		{name: "a failed landing: its mover never starts, the plan fails once idle", budgets: rollout.Budgets{Disrupting: 2, Reconfiguring: 2},
			status:  status("carve", string(v1alpha1.NodeFailed), "idle-1", string(v1alpha1.NodeDone), "other", string(v1alpha1.NodeDone)),
			waiting: []v1alpha1.NodeWait{{Node: "mover", For: []string{"carve"}}}, phase: v1alpha1.PlanFailed},
		{name: "no budget for the kinds left: stopped", budgets: rollout.Budgets{Disrupting: 0, Reconfiguring: 3},
			status: status("carve", string(v1alpha1.NodeDone), "idle-1", string(v1alpha1.NodeDone)), phase: v1alpha1.PlanFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			start, waiting, phase, _ := rollout.Progress(steps, tc.status, tc.budgets)
			g.Expect(start).To(Equal(tc.start))
			g.Expect(waiting).To(Equal(tc.waiting))
			g.Expect(phase).To(Equal(tc.phase))
		})
	}
}

// TestProgressHourlyCap: what is left of maxDisruptiveStepsPerHour bounds how many evicting
// steps start, checked before each, while re-carves of idle GPUs are not counted.
func TestProgressHourlyCap(t *testing.T) {
	steps := []v1alpha1.NodeStep{{Node: "a", Disruptive: true}, {Node: "b", Disruptive: true}, {Node: "idle"}}
	cases := []struct {
		name  string
		left  int
		start []string
		phase v1alpha1.PlanPhase
	}{
		{name: "room for both", left: 2, start: []string{"a", "b", "idle"}, phase: v1alpha1.PlanExecuting},
		{name: "one left starts one evicting step", left: 1, start: []string{"a", "idle"}, phase: v1alpha1.PlanExecuting},
		{name: "none left: only the idle re-carve starts", left: 0, start: []string{"idle"}, phase: v1alpha1.PlanExecuting},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			start, _, phase, _ := rollout.Progress(steps, nil,
				rollout.Budgets{Disrupting: 3, Reconfiguring: 3, HourlyCapped: true, HourlyLeft: tc.left})
			g.Expect(start).To(Equal(tc.start))
			g.Expect(phase).To(Equal(tc.phase))
		})
	}
	g := NewWithT(t)
	done := []v1alpha1.NodeStepStatus{{Node: "idle", State: v1alpha1.NodeDone}}
	start, _, phase, _ := rollout.Progress(steps, done, rollout.Budgets{Disrupting: 3, Reconfiguring: 3, HourlyCapped: true})
	g.Expect(start).To(BeEmpty())
	g.Expect(phase).To(Equal(v1alpha1.PlanFailed), "Progress stops it; the controller turns a cap-only stop into a wait")
}
