package rollout

import (
	"fmt"
	"slices"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Budgets are how many of a plan's nodes may be between cordon and done at once: nodes whose
// steps evict pods (maxDisruptedNodes) and nodes that only re-carve idle GPUs
// (maxReconfiguringNodes).
type Budgets struct {
	Disrupting, Reconfiguring int
	// HourlyCapped, when true, lets at most HourlyLeft more steps that evict pods start: what
	// is left of the policy's maxDisruptiveStepsPerHour, checked before each disruptive step.
	HourlyCapped bool
	HourlyLeft   int
}

// Stopped reports whether no node of either kind may start.
func (b Budgets) Stopped() bool { return b.Disrupting <= 0 && b.Reconfiguring <= 0 }

// Progress decides which pending steps may start now, which wait for others, and the plan's
// phase. A step starts only once every step it waits for is done (make before break: the
// landing of the pods it moves is carved first), and only within the budget for its kind;
// after any failure no new node starts, so a fault does not spread across the pool. When
// nothing is in flight and nothing may start (a budget lowered to zero, an approval
// withdrawn), the plan has Failed (stopped), so it never stays Executing.
func Progress(steps []v1alpha1.NodeStep, status []v1alpha1.NodeStepStatus, budgets Budgets) (start []string, waiting []v1alpha1.NodeWait, phase v1alpha1.PlanPhase, progress string) {
	byNode := map[string]v1alpha1.NodeStepState{}
	for _, s := range status {
		byNode[s.Node] = s.State
	}
	activeDisrupting, activeReconfiguring, done, failed := 0, 0, 0, 0
	var pending []v1alpha1.NodeStep
	for _, s := range steps {
		switch byNode[s.Node] {
		case v1alpha1.NodeDone:
			done++
		case v1alpha1.NodeFailed:
			failed++
		case v1alpha1.NodeRestoring:
			// Failed, with its label being set back: no new node starts, and the plan waits.
			failed++
			activeReconfiguring++
		case "", v1alpha1.NodePending:
			pending = append(pending, s)
		default:
			if s.Disruptive {
				activeDisrupting++
			} else {
				activeReconfiguring++
			}
		}
	}
	active := activeDisrupting + activeReconfiguring
	progress = fmt.Sprintf("%d/%d", done, len(steps))
	for _, s := range pending {
		var open []string
		for _, other := range s.WaitsFor {
			if byNode[other] != v1alpha1.NodeDone {
				open = append(open, other)
			}
		}
		if len(open) > 0 {
			waiting = append(waiting, v1alpha1.NodeWait{Node: s.Node, For: open})
		}
	}
	switch {
	case done == len(steps):
		return nil, nil, v1alpha1.PlanSucceeded, progress
	case failed > 0 && active == 0:
		return nil, waiting, v1alpha1.PlanFailed, progress
	case failed > 0:
		return nil, waiting, v1alpha1.PlanExecuting, progress
	}
	startedDisrupting := 0
	for _, s := range pending {
		if slices.ContainsFunc(waiting, func(w v1alpha1.NodeWait) bool { return w.Node == s.Node }) {
			continue
		}
		if s.Disruptive {
			if activeDisrupting >= budgets.Disrupting || (budgets.HourlyCapped && startedDisrupting >= budgets.HourlyLeft) {
				continue
			}
			activeDisrupting++
			startedDisrupting++
		} else {
			if activeReconfiguring >= budgets.Reconfiguring {
				continue
			}
			activeReconfiguring++
		}
		start = append(start, s.Node)
	}
	if len(start) == 0 && active == 0 {
		// Nothing runs and nothing may start: the plan stops here rather than stay
		// Executing for ever.
		return nil, waiting, v1alpha1.PlanFailed, progress
	}
	return start, waiting, v1alpha1.PlanExecuting, progress
}
