package rollout

import (
	"fmt"
	"time"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// StepInput is what one decision about a node step reads: the plan, the step, what the
// controller saw of the node's world, the policy's timeouts and the time.
type StepInput struct {
	Plan   string
	Step   v1alpha1.NodeStep
	Obs    Observation
	Limits Timeouts
	Now    time.Time
	// Since is when the step entered its current state; Now for a step that never moved.
	Since time.Time
}

// Waited is how long the step has been in its current state.
func (in StepInput) Waited() time.Duration { return in.Now.Sub(in.Since) }

// Guard is one check every active step passes, in order, before its state's handler runs:
// a guard that stops the step returns the decision (a failure, with whatever undoes the
// step's effects so far) and true.
type Guard struct {
	// Name says which guard stopped a step, for tests and logs.
	Name  string
	Check func(in StepInput, cur v1alpha1.NodeStepStatus) (StepResult, bool)
}

// Handler takes a step in one state one decision further.
type Handler func(in StepInput, cur v1alpha1.NodeStepStatus) StepResult

// Protocol is one way of carrying out a node step: the guards that may stop any step, in
// order, and a handler per state. The protocol that relabels nvidia.com/mig.config after a
// cordon and a drain is MIGRelabel; another actuator (one that taints devices and moves the
// pods of their claims, with nothing cordoned or relabelled) is another Protocol with its own
// guards and handlers, not more branches in these.
type Protocol struct {
	Guards   []Guard
	Handlers map[v1alpha1.NodeStepState]Handler
}

// Step decides the next state of one node's step under the protocol: a finished step stays as
// it is; otherwise the first guard that stops it decides, and else its state's handler.
func (p Protocol) Step(plan string, step v1alpha1.NodeStep, cur v1alpha1.NodeStepStatus, obs Observation, t Timeouts, now time.Time) StepResult {
	in, cur, finished := begin(plan, step, cur, obs, t, now)
	if finished {
		return StepResult{Status: cur}
	}
	if _, res, stopped := p.guard(in, cur); stopped {
		return res
	}
	handle, ok := p.Handlers[cur.State]
	if !ok {
		return fail(cur, now, fmt.Sprintf("unknown step state %q", cur.State), nil)
	}
	return handle(in, cur)
}

// Guarded runs the guard chain alone and says which guard stops the step, with its decision;
// stopped is false when every guard lets the step go on to its state's handler (or the step
// is finished, which no guard judges).
func (p Protocol) Guarded(plan string, step v1alpha1.NodeStep, cur v1alpha1.NodeStepStatus, obs Observation, t Timeouts,
	now time.Time) (guard string, res StepResult, stopped bool) {
	in, cur, finished := begin(plan, step, cur, obs, t, now)
	if finished {
		return "", StepResult{Status: cur}, false
	}
	return p.guard(in, cur)
}

func (p Protocol) guard(in StepInput, cur v1alpha1.NodeStepStatus) (string, StepResult, bool) {
	for _, g := range p.Guards {
		if res, stop := g.Check(in, cur); stop {
			return g.Name, res, true
		}
	}
	return "", StepResult{}, false
}

// begin fills in what a status left empty (a step not started yet is Pending) and says
// whether the step is finished: a Done or Failed step is never taken further.
func begin(plan string, step v1alpha1.NodeStep, cur v1alpha1.NodeStepStatus, obs Observation, t Timeouts,
	now time.Time) (StepInput, v1alpha1.NodeStepStatus, bool) {
	cur.Node = step.Node
	if cur.State == "" {
		cur.State = v1alpha1.NodePending
	}
	since := now
	if cur.LastTransitionTime != nil {
		since = cur.LastTransitionTime.Time
	}
	in := StepInput{Plan: plan, Step: step, Obs: obs, Limits: t, Now: now, Since: since}
	return in, cur, cur.State == v1alpha1.NodeDone || cur.State == v1alpha1.NodeFailed
}
