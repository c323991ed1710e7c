package v1alpha1

// The two questions every component asks of a plan's phase, answered once here.

// Running reports whether a plan in this phase was approved and has not finished: the
// executor carries it out, the planner waits for it, and nothing supersedes it.
func (p PlanPhase) Running() bool { return p == PlanApproved || p == PlanExecuting }

// Finished reports whether the phase is an end phase: the plan changes nothing any more.
func (p PlanPhase) Finished() bool {
	switch p {
	case PlanSucceeded, PlanFailed, PlanRejected, PlanExpired, PlanSuperseded:
		return true
	}
	return false
}
