package rollout_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/rollout"
)

const planName = "pool-a-20261129-1f3e9a7c"

var (
	t0       = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	timeouts = rollout.Timeouts{Drain: 15 * time.Minute, Configure: 10 * time.Minute, Propagation: time.Minute}
	nodeStep = v1alpha1.NodeStep{Node: "gpu-1", MIGConfigName: "gpupool-6b2d41a0aa",
		Evictions: []v1alpha1.Eviction{{PodReference: v1alpha1.PodReference{Namespace: "team", Name: "infer"}}}}
)

// at is a step status in a state entered at t0.
func at(state v1alpha1.NodeStepState, wasUnschedulable bool) v1alpha1.NodeStepStatus {
	return v1alpha1.NodeStepStatus{Node: "gpu-1", State: state, WasUnschedulable: wasUnschedulable,
		LastTransitionTime: &metav1.Time{Time: t0}}
}

// cordoned is what the node looks like once gpupool's cordon took.
func cordoned() rollout.Observation {
	return rollout.Observation{NodeExists: true, Unschedulable: true, CordonedBy: planName}
}

func TestStepHappyPathWalksEveryStateInOrder(t *testing.T) {
	g := NewWithT(t)
	cur := v1alpha1.NodeStepStatus{}
	now := t0
	walk := []struct {
		obs     rollout.Observation
		after   time.Duration
		state   v1alpha1.NodeStepState
		actions []rollout.Action
	}{
		{obs: rollout.Observation{NodeExists: true}, state: v1alpha1.NodeCordoned, actions: []rollout.Action{rollout.ActionCordon}},
		{obs: cordoned(), state: v1alpha1.NodeDraining, actions: []rollout.Action{rollout.ActionEvict}},
		{obs: withPods(cordoned(), 1, "team/infer: pdb web"), state: v1alpha1.NodeDraining, actions: []rollout.Action{rollout.ActionEvict}},
		{obs: cordoned(), state: v1alpha1.NodeConfiguring, actions: []rollout.Action{rollout.ActionExpectLayout}},
		{obs: configured(cordoned(), "", ""), state: v1alpha1.NodeConfiguring},
		{obs: configured(cordoned(), "", ""), after: time.Minute, state: v1alpha1.NodeConfiguring, actions: []rollout.Action{rollout.ActionRelabel}},
		{obs: configured(cordoned(), nodeStep.MIGConfigName, "pending"), state: v1alpha1.NodeConfiguring},
		{obs: configured(cordoned(), nodeStep.MIGConfigName, "success"), state: v1alpha1.NodeVerifying},
		{obs: verified(configured(cordoned(), nodeStep.MIGConfigName, "success"), metav1.ConditionFalse), state: v1alpha1.NodeVerifying},
		{obs: verified(configured(cordoned(), nodeStep.MIGConfigName, "success"), metav1.ConditionTrue), state: v1alpha1.NodeDone,
			actions: []rollout.Action{rollout.ActionUncordon}},
	}
	for i, w := range walk {
		now = now.Add(w.after)
		res := rollout.Step(planName, nodeStep, cur, w.obs, timeouts, now)
		g.Expect(res.Status.State).To(Equal(w.state), "step %d", i)
		g.Expect(res.Actions).To(Equal(w.actions), "step %d", i)
		prev := cur.State
		if prev == "" {
			prev = v1alpha1.NodePending
		}
		g.Expect(res.Transition).To(Equal(res.Status.State != prev), "step %d", i)
		cur = res.Status
	}
	g.Expect(cur.StartedTime.Time).To(Equal(t0))
	again := rollout.Step(planName, nodeStep, cur, cordoned(), timeouts, now.Add(time.Hour))
	g.Expect(again.Actions).To(BeEmpty(), "a finished step does nothing more")
}

func withPods(o rollout.Observation, n int, msg string) rollout.Observation {
	o.PodsLeft, o.DrainMessage = n, msg
	return o
}

func withLanding(o rollout.Observation, gone string) rollout.Observation {
	o.LandingGone = gone
	return o
}

func configured(o rollout.Observation, label string, state nvidia.State) rollout.Observation {
	o.ConfigWritten, o.LayoutExpected, o.MIGConfig, o.MIGState = true, true, label, state
	return o
}

func verified(o rollout.Observation, s metav1.ConditionStatus) rollout.Observation {
	o.Verified, o.VerifyMessage = s, "GPU 0: want 3g.71gb:2, have 1g.18gb:7"
	// The device plugin advertises what the agent verified; TestVerifiedLayoutWaitsForTheDevicePlugin
	// takes this away.
	o.ExclusiveAdvertised, o.ExclusiveResources = s == metav1.ConditionTrue, "nvidia.com/mig-3g.71gb=2"
	return o
}

// whole says the agent reports every changed GPU with its old or its new layout.
// whole is an agent report of every changed GPU whole at the step's new layout.
func whole(o rollout.Observation) rollout.Observation {
	o.GPUsWhole, o.GPUsAtTarget = true, true
	return o
}

// wholeOld is an agent report of every changed GPU whole at its old layout: mig-manager never
// got to re-carve them.
func wholeOld(o rollout.Observation) rollout.Observation {
	o.GPUsWhole, o.GPUsAtFrom = true, true
	return o
}

// withPrevious is a step status that remembers the label the node had before the relabel.
func withPrevious(cur v1alpha1.NodeStepStatus, label string) v1alpha1.NodeStepStatus {
	cur.PreviousMIGConfig = label
	return cur
}

// TestDrainPassesBackOffExponentially guards that a drain blocked by PodDisruptionBudgets
// looks again less and less often, from 5s up to a minute, and never stops evicting.
func TestDrainPassesBackOffExponentially(t *testing.T) {
	g := NewWithT(t)
	var got []time.Duration
	waited := time.Duration(0)
	for range 6 {
		res := rollout.Step(planName, nodeStep, at(v1alpha1.NodeDraining, false),
			withPods(cordoned(), 1, "team/infer blocked by pdb web"), timeouts, t0.Add(waited))
		g.Expect(res.Actions).To(Equal([]rollout.Action{rollout.ActionEvict}))
		got = append(got, res.RequeueAfter)
		waited += res.RequeueAfter
	}
	g.Expect(got).To(Equal([]time.Duration{5 * time.Second, 5 * time.Second, 10 * time.Second,
		20 * time.Second, 40 * time.Second, time.Minute}))
}

func TestStepFailures(t *testing.T) {
	relabelled := configured(cordoned(), nodeStep.MIGConfigName, "pending")
	cases := []struct {
		name      string
		cur       v1alpha1.NodeStepStatus
		obs       rollout.Observation
		after     time.Duration
		state     v1alpha1.NodeStepState
		actions   []rollout.Action
		message   string
		invariant string
		// keepCordoned sets the policy's keepFailedNodesCordoned.
		keepCordoned bool
	}{
		{name: "drain timeout reopens the node", cur: at(v1alpha1.NodeDraining, false),
			obs: withPods(cordoned(), 2, "team/a blocked by pdb web"), after: 15 * time.Minute,
			state: v1alpha1.NodeFailed, actions: []rollout.Action{rollout.ActionUncordon},
			message:   "drain timed out after 15m0s with 2 pod(s) left: team/a blocked by pdb web",
			invariant: "no node is left cordoned when its GPUs were never touched"},
		{name: "a config that cannot be written within configureTimeout reopens the unlabelled node",
			cur: at(v1alpha1.NodeConfiguring, false), obs: cordoned(), after: 10 * time.Minute,
			state: v1alpha1.NodeFailed, actions: []rollout.Action{rollout.ActionUncordon},
			message:   "gpupool's ConfigMap writer did not add entry gpupool-6b2d41a0aa within configureTimeout 10m0s",
			invariant: "a node is not held drained forever by a ConfigMap gpupool cannot write"},
		{name: "a config that cannot be written keeps trying within configureTimeout",
			cur: at(v1alpha1.NodeConfiguring, false), obs: cordoned(), after: 9 * time.Minute,
			state: v1alpha1.NodeConfiguring, actions: []rollout.Action{rollout.ActionExpectLayout}},
		{name: "an entry not written yet is waited for, the expected layout already set",
			cur: at(v1alpha1.NodeConfiguring, false), after: time.Minute,
			obs:       func() rollout.Observation { o := cordoned(); o.LayoutExpected = true; return o }(),
			state:     v1alpha1.NodeConfiguring,
			message:   "waiting for gpupool's ConfigMap writer to add entry gpupool-6b2d41a0aa",
			invariant: "the step writes no ConfigMap: gpupool's one writer adds its entry"},
		{name: "an entry that vanished after the relabel keeps the node cordoned",
			cur: at(v1alpha1.NodeConfiguring, false), after: 10 * time.Minute,
			obs:   rollout.Observation{NodeExists: true, Unschedulable: true, CordonedBy: planName, MIGConfig: nodeStep.MIGConfigName},
			state: v1alpha1.NodeFailed, message: "the node stays cordoned (a GPU may be half-configured)",
			invariant: "mig-manager may have started on the GPUs once the label names the entry"},
		{name: "a landing taken mid-drain stops the drain and reopens the node",
			cur: at(v1alpha1.NodeDraining, false), after: time.Minute,
			obs:   withLanding(withPods(cordoned(), 2, "team/a blocked by pdb web"), "node gpu-2 has 0 free 1g.18gb now"),
			state: v1alpha1.NodeFailed, actions: []rollout.Action{rollout.ActionUncordon},
			message:   "stopped draining with 2 pod(s) left: node gpu-2 has 0 free 1g.18gb now",
			invariant: "no pod is evicted once its landing is gone"},
		{name: "a landing gone once every pod left changes nothing",
			cur: at(v1alpha1.NodeDraining, false), after: time.Minute, obs: withLanding(cordoned(), "node gpu-2 has 0 free 1g.18gb now"),
			state: v1alpha1.NodeConfiguring, actions: []rollout.Action{rollout.ActionExpectLayout}},
		{name: "a step said to drain a node this plan never cordoned does nothing",
			cur: at(v1alpha1.NodeDraining, false), obs: withPods(rollout.Observation{NodeExists: true}, 1, ""),
			state: v1alpha1.NodeFailed, message: "refused: the step's status says Draining but gpu-1 does not carry this plan's cordon",
			invariant: "a forged step status never drains or relabels a node"},
		{name: "a step said to verify a node that never got its entry does nothing",
			cur: at(v1alpha1.NodeVerifying, false), obs: verified(configured(rollout.Observation{NodeExists: true}, "all-disabled", "success"), metav1.ConditionTrue),
			state: v1alpha1.NodeFailed, message: "refused: the step's status says Verifying",
			invariant: "a forged step status never reopens a node"},
		{name: "a verified step whose Done was not seen yet finishes again",
			cur:   at(v1alpha1.NodeVerifying, false),
			obs:   verified(configured(rollout.Observation{NodeExists: true}, nodeStep.MIGConfigName, "success"), metav1.ConditionTrue),
			state: v1alpha1.NodeDone, actions: []rollout.Action{rollout.ActionUncordon},
			invariant: "the cordon annotation goes with Done; the step's own entry on the node still says the step is this plan's"},
		{name: "drain timeout on a node cordoned by someone else keeps their cordon",
			cur: at(v1alpha1.NodeDraining, true), obs: withPods(cordoned(), 1, ""), after: 15 * time.Minute,
			state: v1alpha1.NodeFailed, actions: []rollout.Action{rollout.ActionReleaseCordon},
			invariant: "gpupool never uncordons a node it did not cordon"},
		{name: "draining keeps evicting and says who blocks", cur: at(v1alpha1.NodeDraining, false),
			obs: withPods(cordoned(), 1, "team/a blocked by pdb web"), after: time.Minute,
			state: v1alpha1.NodeDraining, actions: []rollout.Action{rollout.ActionEvict},
			message: "1 pod(s) left: team/a blocked by pdb web", invariant: "one non-blocking pass per reconcile"},
		{name: "mig-manager failed keeps the node cordoned", cur: at(v1alpha1.NodeConfiguring, false),
			obs: configured(cordoned(), nodeStep.MIGConfigName, "failed"), after: 2 * time.Minute,
			state: v1alpha1.NodeFailed, message: "mig-manager reported failed",
			invariant: "a possibly half-configured GPU takes no new work"},
		{name: "mig-manager wedged in pending past configureTimeout", cur: at(v1alpha1.NodeConfiguring, false),
			obs: relabelled, after: 11 * time.Minute, state: v1alpha1.NodeFailed,
			message:   `mig-manager stayed at "pending" past configureTimeout 10m0s; the node stays cordoned (a GPU may be half-configured)`,
			invariant: "the known pending wedge becomes a visible failure, never a silent cordon"},
		{name: "pending within configureTimeout waits", cur: at(v1alpha1.NodeConfiguring, false),
			obs: relabelled, after: 9 * time.Minute, state: v1alpha1.NodeConfiguring,
			invariant: "mig-manager gets its time"},
		{name: "verification never arriving fails the step", cur: at(v1alpha1.NodeVerifying, false),
			obs:   verified(configured(cordoned(), nodeStep.MIGConfigName, "success"), metav1.ConditionFalse),
			after: 10 * time.Minute, state: v1alpha1.NodeFailed,
			message:   "did not verify the layout within configureTimeout 10m0s: GPU 0: want 3g.71gb:2, have 1g.18gb:7",
			invariant: "a success label is never trusted alone"},
		{name: "mig-manager failed with whole layouts reopens the node", cur: at(v1alpha1.NodeConfiguring, false),
			obs: whole(configured(cordoned(), nodeStep.MIGConfigName, "failed")), after: 2 * time.Minute,
			state: v1alpha1.NodeFailed, actions: []rollout.Action{rollout.ActionUncordon},
			message:   "the node was reopened: the agent shows every GPU with a whole layout",
			invariant: "a failed node whose GPUs are all whole goes back to work"},
		{name: "whole layouts on a node someone else cordoned keep their cordon", cur: at(v1alpha1.NodeVerifying, true),
			obs:   whole(verified(configured(cordoned(), nodeStep.MIGConfigName, "success"), metav1.ConditionFalse)),
			after: 10 * time.Minute, state: v1alpha1.NodeFailed, actions: []rollout.Action{rollout.ActionReleaseCordon},
			invariant: "gpupool never uncordons a node it did not cordon"},
		{name: "the policy keeps failed nodes cordoned", cur: at(v1alpha1.NodeConfiguring, false),
			obs: whole(configured(cordoned(), nodeStep.MIGConfigName, "failed")), after: 2 * time.Minute,
			state: v1alpha1.NodeFailed, keepCordoned: true,
			message:   "the node stays cordoned (the policy keeps failed nodes cordoned): fix it, then run kubectl uncordon gpu-1",
			invariant: "keepFailedNodesCordoned wins over reopening"},
		{name: "mig-manager failed before touching the GPUs: the label is set back before the node reopens",
			cur: withPrevious(at(v1alpha1.NodeConfiguring, false), "all-1g.18gb"),
			obs: wholeOld(configured(cordoned(), nodeStep.MIGConfigName, "failed")), after: 2 * time.Minute,
			state: v1alpha1.NodeRestoring, actions: []rollout.Action{rollout.ActionRestoreLabel},
			message:   "the GPUs kept their old layout: setting nvidia.com/mig.config back to all-1g.18gb before the node takes work again",
			invariant: "a node never takes work while its label names a layout its GPUs do not have"},
		{name: "mig-manager wedged in pending with the old layout: the label is set back too",
			cur: withPrevious(at(v1alpha1.NodeConfiguring, false), "all-1g.18gb"), obs: wholeOld(relabelled), after: 11 * time.Minute,
			state: v1alpha1.NodeRestoring, actions: []rollout.Action{rollout.ActionRestoreLabel},
			message:   `mig-manager stayed at "pending" past configureTimeout 10m0s; the GPUs kept their old layout`,
			invariant: "a later mig-manager start must not apply the new entry under running pods"},
		{name: "old layout but the label before the step is not known: the node stays cordoned",
			cur: at(v1alpha1.NodeConfiguring, false), obs: wholeOld(configured(cordoned(), nodeStep.MIGConfigName, "failed")),
			after: 2 * time.Minute, state: v1alpha1.NodeFailed,
			message:   "the node stays cordoned: its GPUs are whole but nvidia.com/mig.config=" + nodeStep.MIGConfigName + " does not name their layout",
			invariant: "never reopened under a label that would re-carve it"},
		{name: "node deleted mid-step", cur: at(v1alpha1.NodeDraining, false), obs: rollout.Observation{},
			state: v1alpha1.NodeFailed, message: "node gpu-1 no longer exists", invariant: "no step waits on a node that is gone"},
		{name: "cordon undone by someone is re-asserted", cur: at(v1alpha1.NodeCordoned, false),
			obs: rollout.Observation{NodeExists: true}, state: v1alpha1.NodeCordoned,
			actions: []rollout.Action{rollout.ActionCordon}, invariant: "nothing is drained off an open node"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			limits := timeouts
			limits.KeepFailedCordoned = tc.keepCordoned
			res := rollout.Step(planName, nodeStep, tc.cur, tc.obs, limits, t0.Add(tc.after))
			g.Expect(res.Status.State).To(Equal(tc.state), tc.invariant)
			g.Expect(res.Actions).To(Equal(tc.actions), tc.invariant)
			g.Expect(res.Status.Message).To(ContainSubstring(tc.message))
			if tc.state == v1alpha1.NodeFailed {
				g.Expect(res.RequeueAfter).To(BeZero())
				g.Expect(res.Transition).To(BeTrue())
			}
		})
	}
}

func TestStartRecordsAForeignCordon(t *testing.T) {
	g := NewWithT(t)
	res := rollout.Step(planName, nodeStep, v1alpha1.NodeStepStatus{},
		rollout.Observation{NodeExists: true, Unschedulable: true}, timeouts, t0)
	g.Expect(res.Status.WasUnschedulable).To(BeTrue(), "someone else's cordon is remembered")
	res = rollout.Step(planName, nodeStep, v1alpha1.NodeStepStatus{},
		rollout.Observation{NodeExists: true, Unschedulable: true, CordonedBy: planName}, timeouts, t0)
	g.Expect(res.Status.WasUnschedulable).To(BeFalse(), "our own cordon from a crashed attempt is not foreign")
}

// TestSharingIsAppliedAfterTheLayoutIsVerified guards the order of a step that changes
// sharing: the device-plugin label flips only once the agent verified the MIG layout (the
// key was written with the mig-parted entry), and the node reopens only when the device
// plugin advertises the replicas; a plugin that never does fails the step.
func TestSharingIsAppliedAfterTheLayoutIsVerified(t *testing.T) {
	step := nodeStep
	step.SharingConfigName = "gpupool-ts-4"
	step.SharingConfig = &v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: 4}
	layoutOK := verified(configured(cordoned(), step.MIGConfigName, "success"), metav1.ConditionTrue)
	layoutOK.SharedResource = "nvidia.com/gpu.shared=8"
	cases := []struct {
		name    string
		obs     func(rollout.Observation) rollout.Observation
		after   time.Duration
		state   v1alpha1.NodeStepState
		actions []rollout.Action
		message string
	}{
		{name: "layout not verified yet: no sharing relabel",
			obs: func(o rollout.Observation) rollout.Observation {
				o.Verified = metav1.ConditionFalse
				return o
			}, state: v1alpha1.NodeVerifying},
		{name: "verified: flip the device-plugin label", obs: func(o rollout.Observation) rollout.Observation { return o },
			state: v1alpha1.NodeVerifying, actions: []rollout.Action{rollout.ActionRelabelSharing}},
		{name: "label flipped: wait for the replicas",
			obs: func(o rollout.Observation) rollout.Observation {
				o.SharingConfig = step.SharingConfigName
				return o
			}, state: v1alpha1.NodeVerifying, message: "waiting for the device plugin to advertise nvidia.com/gpu.shared=8"},
		{name: "advertised: done and reopened",
			obs: func(o rollout.Observation) rollout.Observation {
				o.SharingConfig, o.SharingAdvertised = step.SharingConfigName, true
				return o
			}, state: v1alpha1.NodeDone, actions: []rollout.Action{rollout.ActionUncordon},
			message: "layout and sharing (gpupool-ts-4) verified"},
		{name: "never advertised: failed",
			obs: func(o rollout.Observation) rollout.Observation {
				o.SharingConfig = step.SharingConfigName
				return o
			}, after: 11 * time.Minute, state: v1alpha1.NodeFailed,
			message: "the device plugin did not advertise nvidia.com/gpu.shared=8 for gpupool-ts-4"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := rollout.Step(planName, step, at(v1alpha1.NodeVerifying, false), tc.obs(layoutOK), timeouts, t0.Add(tc.after))
			g.Expect(res.Status.State).To(Equal(tc.state))
			g.Expect(res.Actions).To(Equal(tc.actions))
			g.Expect(res.Status.Message).To(ContainSubstring(tc.message))
		})
	}
}

// TestUnsafeEvictionCancelsTheStepBeforeAnyDisruption guards the eviction re-check: a pod the
// step would evict that may not be evicted now fails the step, before the cordon when it is
// still pending and by reopening the node when it is cordoned or draining.
func TestUnsafeEvictionCancelsTheStepBeforeAnyDisruption(t *testing.T) {
	g := NewWithT(t)
	unsafe := "pod team/infer may not be evicted now: annotated gpupool.io/do-not-disrupt"

	res := rollout.Step(planName, nodeStep, v1alpha1.NodeStepStatus{}, rollout.Observation{NodeExists: true, Unsafe: unsafe}, timeouts, t0)
	g.Expect(res.Status.State).To(Equal(v1alpha1.NodeFailed))
	g.Expect(res.Status.Message).To(Equal("cancelled: " + unsafe))
	g.Expect(res.Actions).To(BeEmpty(), "nothing was cordoned, so nothing to undo")

	obs := cordoned()
	obs.Unsafe, obs.PodsLeft = unsafe, 1
	for _, state := range []v1alpha1.NodeStepState{v1alpha1.NodeCordoned, v1alpha1.NodeDraining} {
		res = rollout.Step(planName, nodeStep, at(state, false), obs, timeouts, t0.Add(time.Second))
		g.Expect(res.Status.State).To(Equal(v1alpha1.NodeFailed), "from %s", state)
		g.Expect(res.Actions).To(Equal([]rollout.Action{rollout.ActionUncordon}), "from %s", state)
	}
	res = rollout.Step(planName, nodeStep, at(v1alpha1.NodeDraining, true), obs, timeouts, t0.Add(time.Second))
	g.Expect(res.Actions).To(Equal([]rollout.Action{rollout.ActionReleaseCordon}), "someone else's cordon stays")
}

// TestDriftedTargetCancelsTheStepBeforeItsEntryIsWritten guards the entry-name rule: a name
// always means one content. When the GPUs a step leaves alone no longer match the plan, the step
// is cancelled (the node reopened once touched) as long as the entry is not written; once it
// is, mig-manager may be applying it and the drift is not the step's to judge.
func TestDriftedTargetCancelsTheStepBeforeItsEntryIsWritten(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cur     v1alpha1.NodeStepStatus
		obs     rollout.Observation
		state   v1alpha1.NodeStepState
		actions []rollout.Action
	}{{
		name: "pending: nothing to undo", cur: v1alpha1.NodeStepStatus{},
		obs:   rollout.Observation{NodeExists: true, TargetDrifted: true},
		state: v1alpha1.NodeFailed,
	}, {
		name: "draining: the node is reopened", cur: at(v1alpha1.NodeDraining, false),
		obs:   withPods(drifted(cordoned()), 1, ""),
		state: v1alpha1.NodeFailed, actions: []rollout.Action{rollout.ActionUncordon},
	}, {
		name: "drained, entry not yet written: the node is reopened", cur: at(v1alpha1.NodeConfiguring, false),
		obs:   drifted(cordoned()),
		state: v1alpha1.NodeFailed, actions: []rollout.Action{rollout.ActionUncordon},
	}, {
		name: "entry written: the step goes on", cur: at(v1alpha1.NodeConfiguring, false),
		obs:   drifted(configured(cordoned(), nodeStep.MIGConfigName, "pending")),
		state: v1alpha1.NodeConfiguring,
	}, {
		name: "no drift: the step goes on", cur: at(v1alpha1.NodeConfiguring, false),
		obs:   cordoned(),
		state: v1alpha1.NodeConfiguring, actions: []rollout.Action{rollout.ActionExpectLayout},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := rollout.Step(planName, nodeStep, tc.cur, tc.obs, timeouts, t0.Add(time.Second))
			g.Expect(res.Status.State).To(Equal(tc.state))
			g.Expect(res.Actions).To(Equal(tc.actions))
			if tc.state == v1alpha1.NodeFailed {
				g.Expect(res.Status.Message).To(ContainSubstring("no longer matches the plan"))
			}
		})
	}
}

// drifted marks the observation's target as changed since planning.
func drifted(obs rollout.Observation) rollout.Observation {
	obs.TargetDrifted = true
	return obs
}

// TestRebootWaitsForAReportFromAfterIt guards the rebooting path: mig-manager's "rebooting" is
// waited out (not a failure), and neither its later "success" nor a timeout is judged on an agent
// report older than the reboot: a stale whole layout must not reopen a half-configured node.
func TestRebootWaitsForAReportFromAfterIt(t *testing.T) {
	g := NewWithT(t)
	step := v1alpha1.NodeStep{Node: "gpu-1", MIGConfigName: "gpupool-6b2d41a0aa"}
	obs := cordoned()
	obs.ConfigWritten, obs.LayoutExpected, obs.MIGConfig, obs.MIGState = true, true, step.MIGConfigName, "rebooting"
	obs.GPUsWhole, obs.ReportTime = true, t0.Add(-time.Minute)

	res := rollout.Step(planName, step, at(v1alpha1.NodeConfiguring, false), obs, timeouts, t0.Add(time.Minute))
	g.Expect(res.Status.State).To(Equal(v1alpha1.NodeConfiguring))
	g.Expect(res.Status.Message).To(ContainSubstring("rebooting"))
	g.Expect(res.Status.RebootSeenTime).NotTo(BeNil())
	seen := res.Status

	obs.MIGState = "success"
	res = rollout.Step(planName, step, seen, obs, timeouts, t0.Add(2*time.Minute))
	g.Expect(res.Status.State).To(Equal(v1alpha1.NodeConfiguring), "the only report is from before the reboot")
	g.Expect(res.Status.Message).To(ContainSubstring("waiting for the agent's first report since"))

	obs.MIGState = "rebooting"
	res = rollout.Step(planName, step, seen, obs, timeouts, t0.Add(timeouts.Propagation+timeouts.Configure+time.Second))
	g.Expect(res.Status.State).To(Equal(v1alpha1.NodeFailed))
	g.Expect(res.Actions).To(BeEmpty(), "a stale whole layout does not reopen the node")
	g.Expect(res.Status.Message).To(ContainSubstring("stays cordoned"))

	obs.MIGState, obs.ReportTime = "success", t0.Add(3*time.Minute)
	res = rollout.Step(planName, step, seen, obs, timeouts, t0.Add(4*time.Minute))
	g.Expect(res.Status.State).To(Equal(v1alpha1.NodeVerifying), "a report from after the reboot is believed")
}

// TestMissingReportFailsOnlyThatStep guards a GPUNode deleted mid-plan: before the drain the
// node is given back; after it, it stays cordoned, since its GPUs cannot be verified.
func TestMissingReportFailsOnlyThatStep(t *testing.T) {
	g := NewWithT(t)
	obs := cordoned()
	obs.ReportMissing = true
	res := rollout.Step(planName, nodeStep, at(v1alpha1.NodeDraining, false), obs, timeouts, t0)
	g.Expect(res.Status.State).To(Equal(v1alpha1.NodeFailed))
	g.Expect(res.Actions).To(Equal([]rollout.Action{rollout.ActionUncordon}))
	res = rollout.Step(planName, nodeStep, at(v1alpha1.NodeConfiguring, false), obs, timeouts, t0)
	g.Expect(res.Status.State).To(Equal(v1alpha1.NodeFailed))
	g.Expect(res.Actions).To(BeEmpty())
	g.Expect(res.Status.Message).To(ContainSubstring("GPUNode is gone"))
}

// TestVerifiedLayoutWaitsForTheDevicePlugin guards the end of a MIG step: a layout the agent
// verified is of no use until the device plugin advertises it, so the node reopens only then,
// and a plugin that never does fails the step within configureTimeout.
func TestVerifiedLayoutWaitsForTheDevicePlugin(t *testing.T) {
	g := NewWithT(t)
	obs := verified(configured(cordoned(), nodeStep.MIGConfigName, "success"), metav1.ConditionTrue)
	obs.ExclusiveAdvertised = false
	res := rollout.Step(planName, nodeStep, at(v1alpha1.NodeVerifying, false), obs, timeouts, t0.Add(time.Second))
	g.Expect(res.Status.State).To(Equal(v1alpha1.NodeVerifying))
	g.Expect(res.Status.Message).To(Equal("layout verified; waiting for the device plugin to advertise nvidia.com/mig-3g.71gb=2"))
	g.Expect(res.Actions).To(BeEmpty())

	res = rollout.Step(planName, nodeStep, at(v1alpha1.NodeVerifying, false), whole(obs), timeouts, t0.Add(timeouts.Configure))
	g.Expect(res.Status.State).To(Equal(v1alpha1.NodeFailed))
	g.Expect(res.Status.Message).To(ContainSubstring("the device plugin did not advertise nvidia.com/mig-3g.71gb=2"))
	g.Expect(res.Actions).To(Equal([]rollout.Action{rollout.ActionUncordon}), "the GPUs are whole, so the node reopens")
}

// TestVerifiedLayoutWaitsForTheDRADriver: on a node NVIDIA's DRA driver serves, the device
// plugin advertises nothing and is not waited for; the driver's ResourceSlices are, because
// claims can be allocated only what they list.
func TestVerifiedLayoutWaitsForTheDRADriver(t *testing.T) {
	g := NewWithT(t)
	obs := verified(configured(cordoned(), nodeStep.MIGConfigName, "success"), metav1.ConditionTrue)
	obs.ExclusiveAdvertised = false
	obs.DRADriver, obs.DRAStale = true, "its DRA ResourceSlices miss 2 of the MIG instances NVML reports and list 7 it does not"
	res := rollout.Step(planName, nodeStep, at(v1alpha1.NodeVerifying, false), obs, timeouts, t0.Add(time.Second))
	g.Expect(res.Status.State).To(Equal(v1alpha1.NodeVerifying))
	g.Expect(res.Status.Message).To(HavePrefix("layout verified; waiting for NVIDIA's DRA driver to publish the new MIG devices (its DRA ResourceSlices miss 2"))

	res = rollout.Step(planName, nodeStep, at(v1alpha1.NodeVerifying, false), whole(obs), timeouts, t0.Add(timeouts.Configure))
	g.Expect(res.Status.State).To(Equal(v1alpha1.NodeFailed))
	g.Expect(res.Status.Message).To(ContainSubstring("nodeSelector nvidia.com/gpu.deploy.client=true"))

	obs.DRAStale = ""
	res = rollout.Step(planName, nodeStep, at(v1alpha1.NodeVerifying, false), obs, timeouts, t0.Add(time.Second))
	g.Expect(res.Status.State).To(Equal(v1alpha1.NodeDone), "slices current; the device plugin's allocatable is not the DRA driver's business")
}

// TestRestoringSetsTheLabelBackThenReopens walks a failed step whose GPUs kept their old
// layout: the label goes back to the entry the node had, mig-manager applies it, and only then
// is the node reopened; anything else on the way keeps it cordoned for a human.
func TestRestoringSetsTheLabelBackThenReopens(t *testing.T) {
	const previous = "all-1g.18gb"
	restoring := withPrevious(at(v1alpha1.NodeRestoring, false), previous)
	restoring.Message = "mig-manager reported failed for " + nodeStep.MIGConfigName + "; the GPUs kept their old layout: setting it back"
	cases := []struct {
		name         string
		cur          v1alpha1.NodeStepStatus
		obs          rollout.Observation
		after        time.Duration
		keepCordoned bool
		state        v1alpha1.NodeStepState
		actions      []rollout.Action
		message      string
	}{
		{name: "the label is not set back yet", cur: restoring, obs: wholeOld(configured(cordoned(), nodeStep.MIGConfigName, "failed")),
			state: v1alpha1.NodeRestoring, actions: []rollout.Action{rollout.ActionRestoreLabel}},
		{name: "mig-manager is applying it", cur: restoring, obs: wholeOld(configured(cordoned(), previous, "pending")),
			state: v1alpha1.NodeRestoring},
		{name: "applied: the node is reopened, saying why the step failed", cur: restoring,
			obs: wholeOld(configured(cordoned(), previous, "success")), state: v1alpha1.NodeFailed,
			actions: []rollout.Action{rollout.ActionUncordon},
			message: "mig-manager reported failed for " + nodeStep.MIGConfigName + "; nvidia.com/mig.config was set back to all-1g.18gb, the layout the GPUs kept; the node was reopened"},
		{name: "applied, on a node someone else had cordoned", cur: withPrevious(func() v1alpha1.NodeStepStatus {
			c := restoring
			c.WasUnschedulable = true
			return c
		}(), previous), obs: wholeOld(configured(cordoned(), previous, "success")), state: v1alpha1.NodeFailed,
			actions: []rollout.Action{rollout.ActionReleaseCordon}},
		{name: "applied, but the policy keeps failed nodes cordoned", cur: restoring, keepCordoned: true,
			obs: wholeOld(configured(cordoned(), previous, "success")), state: v1alpha1.NodeFailed, message: "the node stays cordoned"},
		{name: "mig-manager failed the old entry too: wait for a report from after it", cur: restoring,
			obs: wholeOld(configured(cordoned(), previous, "failed")), after: 2 * time.Second, state: v1alpha1.NodeRestoring},
		{name: "mig-manager failed the old entry, and the GPUs are still whole at it", cur: restoring,
			obs: func() rollout.Observation {
				o := wholeOld(configured(cordoned(), previous, "failed"))
				o.ReportTime = t0.Add(time.Second)
				return o
			}(), after: 2 * time.Second, state: v1alpha1.NodeFailed, actions: []rollout.Action{rollout.ActionUncordon}},
		{name: "the GPUs changed meanwhile", cur: restoring, obs: configured(cordoned(), previous, "success"),
			state: v1alpha1.NodeFailed, message: "its GPUs stopped showing their old layout"},
		{name: "mig-manager wedged, but a report from after the restore shows the old layout", cur: restoring,
			obs: func() rollout.Observation {
				o := wholeOld(configured(cordoned(), previous, "pending"))
				o.ReportTime = t0.Add(time.Second)
				return o
			}(), after: 2 * time.Second, state: v1alpha1.NodeFailed, actions: []rollout.Action{rollout.ActionUncordon},
			message: "was set back to all-1g.18gb"},
		{name: "mig-manager rebooting the node: wait", cur: restoring, obs: func() rollout.Observation {
			o := wholeOld(configured(cordoned(), previous, "rebooting"))
			o.ReportTime = t0.Add(time.Second)
			return o
		}(), after: 2 * time.Second, state: v1alpha1.NodeRestoring},
		{name: "never seen applied", cur: restoring, obs: wholeOld(configured(cordoned(), previous, "pending")),
			after: 10 * time.Minute, state: v1alpha1.NodeFailed, message: "seen applied within configureTimeout"},
		{name: "a forged Restoring status on a node this plan never cordoned does nothing", cur: restoring,
			obs: wholeOld(rollout.Observation{NodeExists: true, MIGConfig: "all-balanced"}), state: v1alpha1.NodeFailed,
			message: "refused: the step's status says Restoring"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			limits := timeouts
			limits.KeepFailedCordoned = tc.keepCordoned
			res := rollout.Step(planName, nodeStep, tc.cur, tc.obs, limits, t0.Add(tc.after))
			g.Expect(res.Status.State).To(Equal(tc.state))
			g.Expect(res.Actions).To(Equal(tc.actions))
			g.Expect(res.Status.Message).To(ContainSubstring(tc.message))
		})
	}
}

// TestRelabelRemembersThePreviousLabel: the label the node had is kept in the step's status
// when the step relabels it, so that a failure can set it back.
func TestRelabelRemembersThePreviousLabel(t *testing.T) {
	g := NewWithT(t)
	obs := configured(cordoned(), "all-1g.18gb", "success")
	res := rollout.Step(planName, nodeStep, at(v1alpha1.NodeConfiguring, false), obs, timeouts, t0.Add(time.Hour))
	g.Expect(res.Actions).To(Equal([]rollout.Action{rollout.ActionRelabel}))
	g.Expect(res.Status.PreviousMIGConfig).To(Equal("all-1g.18gb"))
}
