package rollout_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/rollout"
)

// TestGuardChain holds the relabel protocol's guards to their order and reach: the first guard
// that applies decides, before any state's handler, and undoes only what the step had done.
func TestGuardChain(t *testing.T) {
	gone := rollout.Observation{}
	unsafe := func(o rollout.Observation) rollout.Observation {
		o.Unsafe = "pod team/infer may not be evicted now: it carries gpupool.io/do-not-disrupt"
		return o
	}
	claimed := func(o rollout.Observation) rollout.Observation {
		o.Claimed = "ResourceClaim team/train holds MIG-0 on GPU 0"
		return o
	}
	missing := func(o rollout.Observation) rollout.Observation {
		o.ReportMissing = true
		return o
	}
	uncordon := []rollout.Action{rollout.ActionUncordon}
	for _, tc := range []struct {
		name    string
		cur     v1alpha1.NodeStepStatus
		obs     rollout.Observation
		guard   string // "" when every guard lets the step go on
		actions []rollout.Action
		message string
	}{
		{name: "a plain step passes every guard", cur: at(v1alpha1.NodeDraining, false), obs: withPods(cordoned(), 1, "")},
		{name: "a finished step is judged by no guard", cur: at(v1alpha1.NodeDone, false), obs: gone},
		{name: "the node gone comes first", cur: at(v1alpha1.NodeDraining, false), obs: unsafe(missing(gone)),
			guard: rollout.GuardNodeGone, message: "node gpu-1 no longer exists"},
		{name: "a foreign status before a missing report", cur: at(v1alpha1.NodeDraining, false),
			obs:   missing(rollout.Observation{NodeExists: true, CordonedBy: "other-plan"}),
			guard: rollout.GuardForeignStatus, message: `refused: the step's status says Draining but gpu-1 does not carry this plan's cordon`},
		{name: "a pending step is never foreign", cur: v1alpha1.NodeStepStatus{}, obs: rollout.Observation{NodeExists: true}},
		{name: "a verifying node with the step's entry is this plan's", cur: at(v1alpha1.NodeVerifying, false),
			obs: configured(rollout.Observation{NodeExists: true}, nodeStep.MIGConfigName, "success")},
		{name: "a missing report before the drain reopens the node", cur: at(v1alpha1.NodeDraining, false), obs: unsafe(missing(cordoned())),
			guard: rollout.GuardReportMissing, actions: uncordon, message: "GPUNode is gone"},
		{name: "a missing report while pending undoes nothing", cur: v1alpha1.NodeStepStatus{}, obs: missing(rollout.Observation{NodeExists: true}),
			guard: rollout.GuardReportMissing},
		{name: "a missing report past the drain keeps the node cordoned", cur: at(v1alpha1.NodeVerifying, false), obs: missing(cordoned()),
			guard: rollout.GuardReportMissing, message: "the node stays cordoned"},
		{name: "an unsafe pod before a claim", cur: at(v1alpha1.NodeCordoned, false), obs: claimed(unsafe(cordoned())),
			guard: rollout.GuardUnsafe, actions: uncordon, message: "cancelled: pod team/infer"},
		{name: "an unsafe pod while pending undoes nothing", cur: v1alpha1.NodeStepStatus{}, obs: unsafe(rollout.Observation{NodeExists: true}),
			guard: rollout.GuardUnsafe},
		{name: "an unsafe pod once configuring is not the guard's", cur: at(v1alpha1.NodeConfiguring, false),
			obs: unsafe(configured(cordoned(), nodeStep.MIGConfigName, "pending"))},
		{name: "a claim while draining reopens the node", cur: at(v1alpha1.NodeDraining, false), obs: drifted(claimed(withPods(cordoned(), 1, ""))),
			guard: rollout.GuardClaimed, actions: uncordon, message: "cancelled: ResourceClaim team/train"},
		{name: "a claim before the relabel reopens the node", cur: at(v1alpha1.NodeConfiguring, false), obs: claimed(cordoned()),
			guard: rollout.GuardClaimed, actions: uncordon, message: "cancelled before the relabel"},
		{name: "a claim after the relabel is not the guard's", cur: at(v1alpha1.NodeConfiguring, false),
			obs: claimed(configured(cordoned(), nodeStep.MIGConfigName, "pending"))},
		{name: "a drifted target before its entry is written", cur: at(v1alpha1.NodeConfiguring, false), obs: drifted(cordoned()),
			guard: rollout.GuardDrifted, actions: uncordon, message: "no longer matches the plan"},
		{name: "a drifted target on someone else's cordon keeps it", cur: at(v1alpha1.NodeDraining, true), obs: drifted(withPods(cordoned(), 1, "")),
			guard: rollout.GuardDrifted, actions: []rollout.Action{rollout.ActionReleaseCordon}},
		{name: "a drifted target once the entry is written is not the guard's", cur: at(v1alpha1.NodeConfiguring, false),
			obs: drifted(configured(cordoned(), nodeStep.MIGConfigName, "pending"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			guard, res, stopped := rollout.MIGRelabel.Guarded(planName, nodeStep, tc.cur, tc.obs, timeouts, t0.Add(time.Second))
			g.Expect(guard).To(Equal(tc.guard))
			g.Expect(stopped).To(Equal(tc.guard != ""))
			if !stopped {
				return
			}
			g.Expect(res.Status.State).To(Equal(v1alpha1.NodeFailed), "every guard ends the step")
			g.Expect(res.Actions).To(Equal(tc.actions))
			g.Expect(res.Status.Message).To(ContainSubstring(tc.message))
			g.Expect(rollout.Step(planName, nodeStep, tc.cur, tc.obs, timeouts, t0.Add(time.Second))).To(Equal(res),
				"Step decides what its guard chain decides")
		})
	}
}

// TestAnotherActuatorIsAnotherHandlerSet: a protocol is its guards and its handlers, so a way of
// carrying out a step that cordons and relabels nothing is a table of its own.
func TestAnotherActuatorIsAnotherHandlerSet(t *testing.T) {
	g := NewWithT(t)
	taint := rollout.Action("TaintDevices")
	moveClaims := rollout.Protocol{
		Guards: []rollout.Guard{{Name: "NodeGone", Check: func(in rollout.StepInput, cur v1alpha1.NodeStepStatus) (rollout.StepResult, bool) {
			if in.Obs.NodeExists {
				return rollout.StepResult{}, false
			}
			cur.State = v1alpha1.NodeFailed
			return rollout.StepResult{Status: cur, Transition: true}, true
		}}},
		Handlers: map[v1alpha1.NodeStepState]rollout.Handler{
			v1alpha1.NodePending: func(in rollout.StepInput, cur v1alpha1.NodeStepStatus) rollout.StepResult {
				cur.State = v1alpha1.NodeDraining
				return rollout.StepResult{Status: cur, Actions: []rollout.Action{taint}, Transition: true}
			},
		},
	}
	res := moveClaims.Step(planName, nodeStep, v1alpha1.NodeStepStatus{}, rollout.Observation{NodeExists: true}, timeouts, t0)
	g.Expect(res.Actions).To(Equal([]rollout.Action{taint}), "no cordon: the handler set decides")
	g.Expect(res.Status.State).To(Equal(v1alpha1.NodeDraining))
	res = moveClaims.Step(planName, nodeStep, res.Status, rollout.Observation{NodeExists: true}, timeouts, t0)
	g.Expect(res.Status.State).To(Equal(v1alpha1.NodeFailed), "a state without a handler fails the step")
	g.Expect(res.Status.Message).To(Equal(`unknown step state "Draining"`))
}
