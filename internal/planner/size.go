package planner

import (
	"encoding/json"
	"fmt"
)

// Bounds on one RepartitionPlan, so that every plan the planner proposes can be stored. The
// step and pod bounds are the CRD's own (api/v1alpha1/repartitionplan_types.go: MaxItems on
// spec.steps and spec.expected.pods); the byte bound leaves room under etcd's default request
// limit (1.5 MiB, etcd's --max-request-bytes) for the status the plan controller writes into
// the same object, one entry per node and its message.
const (
	MaxPlanSteps        = 1000
	MaxPlanExpectedPods = 10000
	MaxPlanBytes        = 1 << 20
	// statusBytesPerStep is what the status is allowed to grow by per node step: its progress
	// entry, its wait entry and a message naming the pods a PodDisruptionBudget blocks.
	statusBytesPerStep = 1024
)

// PlanWithin plans like Plan, and when the plan would not fit the bounds above plans again
// under a smaller Input.MaxSteps until it does. What the smaller plan leaves unserved is
// planned again after it runs, so a large change becomes several plans in a row rather than
// one that the API server refuses to store.
func PlanWithin(in Input) (*Result, error) {
	for {
		res, err := Plan(in)
		if err != nil {
			return nil, err
		}
		size, err := StoredSize(res, &in)
		if err != nil {
			return nil, err
		}
		steps := len(res.Steps)
		if size <= MaxPlanBytes && steps <= MaxPlanSteps && len(res.Served) <= MaxPlanExpectedPods {
			res.StepBound = in.MaxSteps
			return res, nil
		}
		if steps <= 1 {
			return nil, fmt.Errorf("a plan that changes one node is %d bytes with %d expected pods, over the bounds of %d bytes and %d pods",
				size, len(res.Served), MaxPlanBytes, MaxPlanExpectedPods)
		}
		// Shrink the bound in proportion to the largest excess, and by at least one step, so
		// the loop ends: at one step a plan is a few KiB and serves at most one node's pods.
		next := steps
		next = min(next, steps*MaxPlanBytes/size)
		next = min(next, MaxPlanSteps)
		if len(res.Served) > MaxPlanExpectedPods {
			next = min(next, steps*MaxPlanExpectedPods/len(res.Served))
		}
		in.MaxSteps = max(1, min(next, steps-1))
	}
}

// StoredSize is how many bytes the plan for res takes in the API server once its status is
// written too: its JSON, and statusBytesPerStep for each step's progress. 0 when res changes
// nothing.
func StoredSize(res *Result, in *Input) (int, error) {
	plan := res.RepartitionPlan(in.Policy, in.Now)
	if plan == nil {
		return 0, nil
	}
	data, err := json.Marshal(plan)
	if err != nil {
		return 0, fmt.Errorf("encoding the plan to measure it: %w", err)
	}
	return len(data) + statusBytesPerStep*len(plan.Spec.Steps), nil
}
