package rollout

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// MIGRelabel is the protocol that re-carves a node's GPUs through NVIDIA's mig-manager:
// cordon, drain through the Eviction API, write the mig-parted entry, relabel
// nvidia.com/mig.config, wait for mig-manager and then for every readiness check
// (MIGReadiness), uncordon. Failures before the GPUs are touched reopen the node; failures
// after leave it cordoned with a message saying why, because a GPU may be half-configured and
// must not take new work. A node cordoned by someone else before the plan is never uncordoned.
var MIGRelabel = Protocol{
	Guards: relabelGuards,
	Handlers: map[v1alpha1.NodeStepState]Handler{
		v1alpha1.NodePending:     startCordon,
		v1alpha1.NodeCordoned:    awaitCordon,
		v1alpha1.NodeDraining:    draining,
		v1alpha1.NodeConfiguring: configuring,
		v1alpha1.NodeVerifying:   verifyWith(MIGReadiness),
		v1alpha1.NodeRestoring:   restoring,
	},
}

// startCordon starts a step: cordon the node, remembering whether someone else had.
func startCordon(in StepInput, cur v1alpha1.NodeStepStatus) StepResult {
	cur.WasUnschedulable = in.Obs.Unschedulable && in.Obs.CordonedBy != in.Plan
	cur.StartedTime = &metav1.Time{Time: in.Now}
	return move(cur, v1alpha1.NodeCordoned, in.Now, "cordoning "+in.Step.Node, quickLook, ActionCordon)
}

// awaitCordon drains once this plan's cordon is seen, and cordons again until then.
func awaitCordon(in StepInput, cur v1alpha1.NodeStepStatus) StepResult {
	if !in.Obs.Unschedulable || in.Obs.CordonedBy != in.Plan {
		return stay(cur, "cordon not observed yet", quickLook, ActionCordon)
	}
	return move(cur, v1alpha1.NodeDraining, in.Now, fmt.Sprintf("draining %d pod(s)", len(in.Step.Evictions)), drainLook, ActionEvict)
}

// draining evicts the step's pods, one non-blocking pass per decision, until none is left;
// nothing on the GPUs changed yet, so a drain that cannot finish reopens the node.
func draining(in StepInput, cur v1alpha1.NodeStepStatus) StepResult {
	obs := in.Obs
	if obs.PodsLeft > 0 && obs.LandingGone != "" {
		// Evicting the rest now would leave them pending: stop, reopen the node and let the
		// next plan start from what is free now.
		return fail(cur, in.Now, fmt.Sprintf("stopped draining with %d pod(s) left: %s", obs.PodsLeft, obs.LandingGone), reopen(cur))
	}
	if obs.PodsLeft == 0 {
		return move(cur, v1alpha1.NodeConfiguring, in.Now, "configuring "+in.Step.MIGConfigName, quickLook, ActionExpectLayout)
	}
	if in.Waited() >= in.Limits.Drain {
		return fail(cur, in.Now, fmt.Sprintf("drain timed out after %s with %d pod(s) left: %s",
			in.Limits.Drain, obs.PodsLeft, obs.DrainMessage), reopen(cur))
	}
	msg := fmt.Sprintf("%d pod(s) left", obs.PodsLeft)
	if obs.DrainMessage != "" {
		msg += ": " + obs.DrainMessage
	}
	return stay(cur, msg, drainBackoff(in.Waited()), ActionEvict)
}

// configuring takes a drained node through its three waits in order: the entry in gpupool's
// ConfigMaps and the expected layout on the GPUNode, the entry propagated and the label
// flipped, mig-manager done.
func configuring(in StepInput, cur v1alpha1.NodeStepStatus) StepResult {
	if !in.Obs.ConfigWritten || !in.Obs.LayoutExpected {
		return awaitEntry(in, cur)
	}
	if in.Obs.MIGConfig != in.Step.MIGConfigName {
		return relabel(in, cur)
	}
	return awaitMIGManager(in, cur)
}

// awaitEntry waits for gpupool's ConfigMap writer (controllers.OperatorConfigReconciler) to
// add the step's entry (and sharing key), and writes the GPUNode's expected layout until it
// is seen. Before the relabel mig-manager was never asked to touch the GPUs, so a wait past
// configureTimeout gives the node back.
func awaitEntry(in StepInput, cur v1alpha1.NodeStepStatus) StepResult {
	what := "entry " + in.Step.MIGConfigName
	if in.Step.SharingConfigName != "" {
		what += " and device-plugin key " + in.Step.SharingConfigName
	}
	if in.Waited() < in.Limits.Configure {
		var actions []Action
		if !in.Obs.LayoutExpected {
			actions = append(actions, ActionExpectLayout)
		}
		msg := "writing the expected layout to GPUNode " + in.Step.Node
		if !in.Obs.ConfigWritten {
			msg = "waiting for gpupool's ConfigMap writer to add " + what
		}
		return stay(cur, msg, quickLook, actions...)
	}
	msg := fmt.Sprintf("gpupool's ConfigMap writer did not add %s within configureTimeout %s "+
		"(or the GPUNode's expected layout could not be written): the manager's log says why "+
		"(logger operatorconfig, look for the entry's name), most often its ConfigMap Role in the GPU Operator's namespace",
		what, in.Limits.Configure)
	if in.Obs.MIGConfig == in.Step.MIGConfigName {
		return failTouched(cur, in.Now, msg, in.Obs, in.Limits)
	}
	return fail(cur, in.Now, msg, reopen(cur))
}

// relabel flips nvidia.com/mig.config once the entry has had time to reach mig-manager's
// mounted copy. The wait counts from the step's move to Configuring: the ConfigMap writer
// adds the entry a watch round-trip after it, well inside the wait. An entry that lands later
// than Propagation (a writer failing for that long) is relabelled at once, and mig-manager,
// reading a copy the kubelet has not refreshed yet, fails the step the usual way.
func relabel(in StepInput, cur v1alpha1.NodeStepStatus) StepResult {
	if wait := in.Since.Add(in.Limits.Propagation).Sub(in.Now); wait > 0 {
		return stay(cur, "waiting for the config to reach mig-manager", wait)
	}
	// Remembered before the relabel, so that a failed step can set it back.
	cur.PreviousMIGConfig = in.Obs.MIGConfig
	return stay(cur, "relabelled "+nvidia.LabelMIGConfig+"="+in.Step.MIGConfigName, slowLook, ActionRelabel)
}

// awaitMIGManager waits for mig-manager to apply the entry the label names, through a reboot
// if it takes one, within the propagation wait and configureTimeout.
func awaitMIGManager(in StepInput, cur v1alpha1.NodeStepStatus) StepResult {
	step, obs, now := in.Step, in.Obs, in.Now
	if obs.MIGState == nvidia.StateRebooting && cur.RebootSeenTime == nil {
		cur.RebootSeenTime = &metav1.Time{Time: now}
	}
	rebooted := cur.RebootSeenTime != nil
	if rebooted && !obs.ReportTime.After(cur.RebootSeenTime.Time) {
		// A report from before the reboot says nothing about the GPUs now: judge nothing on
		// it, neither success nor a whole layout. The wait is bounded by the timeout below.
		obs.GPUsWhole, obs.Verified = false, ""
		if obs.MIGState == nvidia.StateSuccess {
			return stay(cur, "mig-manager applied "+step.MIGConfigName+" after a reboot; waiting for the agent's first report since",
				slowLook)
		}
	}
	bound := in.Limits.Propagation + in.Limits.Configure
	switch obs.MIGState {
	case nvidia.StateSuccess:
		return move(cur, v1alpha1.NodeVerifying, now, "mig-manager applied "+step.MIGConfigName+"; verifying", quickLook)
	case nvidia.StateRebooting:
		if in.Waited() < bound {
			return stay(cur, "mig-manager is rebooting "+step.Node+" to apply "+step.MIGConfigName, slowLook)
		}
	case nvidia.StateFailed:
		return failTouched(cur, now, "mig-manager reported failed for "+step.MIGConfigName+
			": check the nvidia-mig-manager pod's log on "+step.Node, obs, in.Limits)
	}
	if in.Waited() >= bound {
		state := obs.MIGState
		if state == "" {
			state = "no state"
		}
		return failTouched(cur, now, fmt.Sprintf("mig-manager stayed at %q past configureTimeout %s",
			state, in.Limits.Configure), obs, in.Limits)
	}
	return stay(cur, "mig-manager is applying "+step.MIGConfigName, slowLook)
}

// verifyWith is the Verifying handler over an ordered list of readiness checks: the first
// check that waits or fails decides; once all are Ready the step is done and the node reopened.
func verifyWith(checks []Check) Handler {
	return func(in StepInput, cur v1alpha1.NodeStepStatus) StepResult {
		switch _, r := Judge(checks, in); r.Verdict {
		case Wait:
			return stay(cur, r.Message, quickLook, r.Actions...)
		case Fail:
			return failTouched(cur, in.Now, r.Message, in.Obs, in.Limits)
		}
		msg := "layout verified"
		if in.Step.SharingConfigName != "" {
			msg = "layout and sharing (" + in.Step.SharingConfigName + ") verified"
		}
		return move(cur, v1alpha1.NodeDone, in.Now, msg, 0, reopen(cur)...)
	}
}

// failTouched fails a step after its GPUs may have been touched. The node is reopened only
// when the agent shows every changed GPU with a whole layout, nvidia.com/mig.config names that
// layout (so that no later mig-manager start, an operator upgrade or a reboot, re-carves the
// GPUs under the pods the node takes again) and the policy does not ask to keep failed nodes
// cordoned. GPUs whole at their old layout under a label naming the new one have the label set
// back first (Restoring); a half-configured GPU, or GPUs partly re-carved, keep the node
// cordoned for a human.
func failTouched(cur v1alpha1.NodeStepStatus, now time.Time, msg string, obs Observation, t Timeouts) StepResult {
	labelRight := obs.GPUsAtTarget || (obs.GPUsAtFrom && obs.MIGConfig == cur.PreviousMIGConfig)
	switch {
	case !obs.GPUsWhole:
		return fail(cur, now, msg+"; the node stays cordoned (a GPU may be half-configured): fix it, then run kubectl uncordon "+cur.Node, nil)
	case !labelRight && obs.GPUsAtFrom && cur.PreviousMIGConfig != "":
		cur.Message = msg
		return move(cur, v1alpha1.NodeRestoring, now, msg+"; the GPUs kept their old layout: setting "+nvidia.LabelMIGConfig+
			" back to "+cur.PreviousMIGConfig+" before the node takes work again", quickLook, ActionRestoreLabel)
	case !labelRight:
		return fail(cur, now, msg+"; the node stays cordoned: its GPUs are whole but "+nvidia.LabelMIGConfig+"="+obs.MIGConfig+
			" does not name their layout, so a restart of mig-manager would re-carve them; set the label to the entry that names "+
			"their layout, then run kubectl uncordon "+cur.Node, nil)
	case t.KeepFailedCordoned:
		return fail(cur, now, msg+"; the node stays cordoned (the policy keeps failed nodes cordoned): fix it, then run kubectl uncordon "+cur.Node, nil)
	}
	return fail(cur, now, msg+"; the node was reopened: the agent shows every GPU with a whole layout, which "+
		nvidia.LabelMIGConfig+" names", reopen(cur))
}

// restoring sets back the label of a failed step whose GPUs kept their old layout, then fails
// the step for good, reopening the node once the label names that layout and the agent, in a
// report from after the restore (or mig-manager's success), still shows it whole: whatever
// mig-manager does with the label later, a restart included, it applies the layout the GPUs
// have. cur.Message still says why the step failed.
func restoring(in StepInput, cur v1alpha1.NodeStepStatus) StepResult {
	obs, t, since, now := in.Obs, in.Limits, in.Since, in.Now
	why, _, _ := strings.Cut(cur.Message, "; the GPUs kept their old layout")
	if !obs.GPUsAtFrom {
		return fail(cur, now, why+"; the node stays cordoned: while "+nvidia.LabelMIGConfig+" was set back to "+cur.PreviousMIGConfig+
			", its GPUs stopped showing their old layout; check them (nvidia-smi mig -lgi), then run kubectl uncordon "+cur.Node, nil)
	}
	timedOut := now.Sub(since) >= t.Configure
	if obs.MIGConfig != cur.PreviousMIGConfig && !timedOut {
		return stay(cur, cur.Message, quickLook, ActionRestoreLabel)
	}
	// mig-manager's success, or a report the agent made after the restore, shows the GPUs as
	// they are now; a failed apply of the old entry that left them whole changed nothing.
	fresh := obs.MIGState == nvidia.StateSuccess || (obs.MIGState != nvidia.StateRebooting && obs.ReportTime.After(since))
	switch {
	case obs.MIGConfig == cur.PreviousMIGConfig && fresh:
		restored := why + "; " + nvidia.LabelMIGConfig + " was set back to " + cur.PreviousMIGConfig + ", the layout the GPUs kept"
		if t.KeepFailedCordoned {
			return fail(cur, now, restored+"; the node stays cordoned (the policy keeps failed nodes cordoned): run kubectl uncordon "+cur.Node, nil)
		}
		return fail(cur, now, restored+"; the node was reopened", reopen(cur))
	case timedOut:
		return fail(cur, now, why+"; the node stays cordoned: "+nvidia.LabelMIGConfig+" was not set back to "+cur.PreviousMIGConfig+
			" and seen applied within configureTimeout "+t.Configure.String()+"; check the GPUs and the label, then run kubectl uncordon "+cur.Node, nil)
	}
	return stay(cur, cur.Message, slowLook)
}
