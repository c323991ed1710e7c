package planner_test

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/gpupool/gpupool/internal/planner"
)

// A 5,000-node pool with both budgets at every node plans a change too large for the API
// server to store; PlanWithin cuts it to fit the CRD's bounds and the byte bound, still serving
// demand, and the cut plan keeps every plan property.
func TestPlanWithinBoundsA5000NodePlan(t *testing.T) {
	if testing.Short() {
		t.Skip("plans 5,000 nodes several times")
	}
	c := benchCluster(t, 5000)
	pol := policy()
	pol.Spec.Disruption.MaxDisruptedNodes = ptr.To(intstr.FromString("100%"))
	pol.Spec.Disruption.MaxReconfiguringNodes = ptr.To(intstr.FromString("100%"))
	in := c.input(pol)

	unbounded, err := planner.Plan(in)
	if err != nil {
		t.Fatal(err)
	}
	bigSize, err := planner.StoredSize(unbounded, &in)
	if err != nil {
		t.Fatal(err)
	}
	if bigSize <= planner.MaxPlanBytes && len(unbounded.Steps) <= planner.MaxPlanSteps {
		t.Fatalf("the unbounded plan (%d steps, %d bytes) already fits: the test no longer exercises the bound", len(unbounded.Steps), bigSize)
	}

	res, err := planner.PlanWithin(in)
	if err != nil {
		t.Fatal(err)
	}
	size, err := planner.StoredSize(res, &in)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("unbounded: %d steps, %d KiB, %d served; within: %d steps (bound %d), %d KiB, %d served",
		len(unbounded.Steps), bigSize>>10, len(unbounded.Served), len(res.Steps), res.StepBound, size>>10, len(res.Served))
	switch {
	case size > planner.MaxPlanBytes:
		t.Errorf("the bounded plan takes %d bytes, over %d", size, planner.MaxPlanBytes)
	case len(res.Steps) > planner.MaxPlanSteps || len(res.Served) > planner.MaxPlanExpectedPods:
		t.Errorf("the bounded plan has %d steps and %d expected pods, over %d and %d", len(res.Steps), len(res.Served), planner.MaxPlanSteps, planner.MaxPlanExpectedPods)
	case res.StepBound == 0 || len(res.Steps) > res.StepBound:
		t.Errorf("StepBound %d with %d steps: the result must say the plan was cut", res.StepBound, len(res.Steps))
	case len(res.Served) == 0 || len(res.Served) >= len(unbounded.Served):
		t.Errorf("the bounded plan serves %d pods, the unbounded one %d: it should serve fewer, and some", len(res.Served), len(unbounded.Served))
	}
	// The plan must be at least half of what fits: the search shrinks in proportion, not by
	// halving blindly.
	if len(res.Steps) < len(unbounded.Steps)*planner.MaxPlanBytes/bigSize/2 {
		t.Errorf("%d steps kept of %d: far below what fits in %d bytes", len(res.Steps), len(unbounded.Steps), planner.MaxPlanBytes)
	}
}

// A plan that fits is left alone: PlanWithin returns what Plan returns, with no bound.
func TestPlanWithinKeepsAPlanThatFits(t *testing.T) {
	in := benchCluster(t, 50).input(policy())
	plain, err := planner.Plan(in)
	if err != nil {
		t.Fatal(err)
	}
	within, err := planner.PlanWithin(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.Steps) == 0 {
		t.Fatal("the pool plans nothing: the test checks nothing")
	}
	if within.StepBound != 0 || describeResult(within) != describeResult(plain) {
		t.Errorf("PlanWithin changed a plan that fits (bound %d):\nplan:\n%swithin:\n%s", within.StepBound, describeResult(plain), describeResult(within))
	}
}

// MaxSteps bounds every part of the planner (greedy, carves, exact search, standby, sharing):
// random pools planned under a small bound keep every plan property, checkPlan's bound
// included, and the bound is reached often enough to matter.
func TestMaxStepsKeepsPlanProperties(t *testing.T) {
	n := 1500
	if testing.Short() {
		n = 200
	}
	reached, failures := 0, 0
	for seed := range uint64(n) {
		r := newRand(seed, 7)
		s := genScenario(t, r, fmt.Sprintf("seed %d", seed), propertyConfig)
		in := s.input()
		in.MaxSteps = 1 + r.IntN(2)
		res := planOrFail(t, s, in)
		if len(res.Steps) == in.MaxSteps {
			reached++
		}
		if pc := checkPlan(s, in, res); len(pc.problems) > 0 {
			t.Errorf("%s, MaxSteps %d: %s\nscenario:\n%splan:\n%s", s.origin, in.MaxSteps, strings.Join(pc.problems, "\n"), s.describe(), describeResult(res))
			if failures++; failures == 5 {
				t.Fatal("stopping after 5 failing seeds")
			}
		}
	}
	if reached < n/10 {
		t.Errorf("only %d of %d plans reached their MaxSteps: the bound is rarely exercised", reached, n)
	}
}
