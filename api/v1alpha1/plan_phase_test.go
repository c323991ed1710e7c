package v1alpha1

import "testing"

func TestPlanPhaseIsRunningOrFinishedOrNeither(t *testing.T) {
	for _, tc := range []struct {
		phase             PlanPhase
		running, finished bool
	}{
		{"", false, false}, {PlanAwaitingApproval, false, false},
		{PlanApproved, true, false}, {PlanExecuting, true, false},
		{PlanSucceeded, false, true}, {PlanFailed, false, true}, {PlanRejected, false, true},
		{PlanExpired, false, true}, {PlanSuperseded, false, true},
	} {
		if tc.phase.Running() != tc.running || tc.phase.Finished() != tc.finished {
			t.Errorf("%q: Running %v Finished %v, want %v %v", tc.phase, tc.phase.Running(), tc.phase.Finished(), tc.running, tc.finished)
		}
	}
}
