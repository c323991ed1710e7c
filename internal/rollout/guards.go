package rollout

import (
	"fmt"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Names of the relabel protocol's guards, in the order they run.
const (
	GuardNodeGone      = "NodeGone"
	GuardForeignStatus = "ForeignStatus"
	GuardReportMissing = "ReportMissing"
	GuardUnsafe        = "Unsafe"
	GuardClaimed       = "Claimed"
	GuardDrifted       = "TargetDrifted"
)

// relabelGuards stop a step of the relabel protocol before its state's handler runs, in this
// order: the node is gone; the status was not written by this plan's execution; the agent's
// report is gone; a pod to evict became unsafe to evict; a DRA claim took a device on the
// step's GPUs; the step's target drifted from the GPUs it leaves alone.
var relabelGuards = []Guard{
	{Name: GuardNodeGone, Check: nodeGone},
	{Name: GuardForeignStatus, Check: foreignStatus},
	{Name: GuardReportMissing, Check: reportMissing},
	{Name: GuardUnsafe, Check: unsafeEviction},
	{Name: GuardClaimed, Check: claimedDevice},
	{Name: GuardDrifted, Check: targetDrifted},
}

func nodeGone(in StepInput, cur v1alpha1.NodeStepStatus) (StepResult, bool) {
	if in.Obs.NodeExists {
		return StepResult{}, false
	}
	return fail(cur, in.Now, "node "+in.Step.Node+" no longer exists", nil), true
}

// foreignStatus refuses a status this plan's execution did not write. Only this plan's cordon
// moves a step past Cordoned, and the cordon annotation stays on the node until the step ends;
// a verifying node also carries the step's own mig.config entry, which stays after the step
// ends (so a Done whose status write was lost, or not yet seen here, still reads as this
// plan's). A step status claiming otherwise was written by someone else (a status writer
// forging progress where the admission policies are not installed). Acting on it would drain
// or relabel a node nobody cordoned: touch nothing, and leave the node as it is.
func foreignStatus(in StepInput, cur v1alpha1.NodeStepStatus) (StepResult, bool) {
	past := cur.State == v1alpha1.NodeDraining || cur.State == v1alpha1.NodeConfiguring || cur.State == v1alpha1.NodeVerifying ||
		cur.State == v1alpha1.NodeRestoring
	ours := in.Obs.CordonedBy == in.Plan || (cur.State == v1alpha1.NodeVerifying && in.Obs.MIGConfig == in.Step.MIGConfigName)
	if !past || ours {
		return StepResult{}, false
	}
	return fail(cur, in.Now, fmt.Sprintf("refused: the step's status says %s but %s does not carry this plan's cordon (%s=%q); "+
		"the status was not written by this plan's execution, so nothing is done to the node", cur.State, in.Step.Node,
		v1alpha1.AnnotationCordonedBy, in.Obs.CordonedBy), nil), true
}

// reportMissing fails a step whose node lost its GPUNode: nothing about its GPUs can be
// verified. Before the GPUs are touched the node is given back; past the drain they may be
// half-configured, and the node stays cordoned.
func reportMissing(in StepInput, cur v1alpha1.NodeStepStatus) (StepResult, bool) {
	if !in.Obs.ReportMissing {
		return StepResult{}, false
	}
	msg := "the node's GPUNode is gone, so its GPUs cannot be verified: check the gpupool agent on " + in.Step.Node
	switch cur.State {
	case v1alpha1.NodePending:
		return fail(cur, in.Now, msg, nil), true
	case v1alpha1.NodeCordoned, v1alpha1.NodeDraining:
		return fail(cur, in.Now, msg, reopen(cur)), true
	}
	return failTouched(cur, in.Now, msg, Observation{}, in.Limits), true
}

// unsafeEviction cancels a step, before anything on its GPUs changed, once a pod it would
// evict may not be evicted now; the node is given back.
func unsafeEviction(in StepInput, cur v1alpha1.NodeStepStatus) (StepResult, bool) {
	if in.Obs.Unsafe == "" || !untouched(cur.State) {
		return StepResult{}, false
	}
	return fail(cur, in.Now, "cancelled: "+in.Obs.Unsafe, undoStart(cur)), true
}

// claimedDevice cancels a step whose GPUs a ResourceClaim took a device on since planning, up
// to the relabel: until the label names the entry, mig-manager was never asked to touch the
// GPUs, so the node can be given back as it was.
func claimedDevice(in StepInput, cur v1alpha1.NodeStepStatus) (StepResult, bool) {
	if in.Obs.Claimed == "" {
		return StepResult{}, false
	}
	switch {
	case cur.State == v1alpha1.NodePending:
		return fail(cur, in.Now, "cancelled: "+in.Obs.Claimed, nil), true
	case cur.State == v1alpha1.NodeCordoned || cur.State == v1alpha1.NodeDraining:
		return fail(cur, in.Now, "cancelled: "+in.Obs.Claimed, reopen(cur)), true
	case cur.State == v1alpha1.NodeConfiguring && in.Obs.MIGConfig != in.Step.MIGConfigName:
		return fail(cur, in.Now, "cancelled before the relabel: "+in.Obs.Claimed, reopen(cur)), true
	}
	return StepResult{}, false
}

// targetDrifted cancels a step whose target is no longer what gpupool would write, as long as
// its entry is not written: mig-manager then has nothing to apply, the GPUs are as they were,
// and the node can be given back. Once the entry is written mig-manager may be applying it,
// and the drift is not the step's to judge.
func targetDrifted(in StepInput, cur v1alpha1.NodeStepStatus) (StepResult, bool) {
	if !in.Obs.TargetDrifted || in.Obs.ConfigWritten {
		return StepResult{}, false
	}
	msg := "cancelled: the agent's report of " + in.Step.Node + "'s GPUs no longer matches the plan " +
		"(a GPU the step leaves alone changed, appeared or vanished since planning); the next pass replans"
	return fail(cur, in.Now, msg, undoStart(cur)), true
}

// untouched says whether a step in this state has changed nothing on its GPUs yet.
func untouched(s v1alpha1.NodeStepState) bool {
	return s == v1alpha1.NodePending || s == v1alpha1.NodeCordoned || s == v1alpha1.NodeDraining
}

// undoStart gives the node back unless the step has not cordoned it yet.
func undoStart(cur v1alpha1.NodeStepStatus) []Action {
	if cur.State == v1alpha1.NodePending {
		return nil
	}
	return reopen(cur)
}
