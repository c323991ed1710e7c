package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// Action is one thing the plan controller does for a node step; a decision lists them in the
// order they must happen.
type Action string

// Actions on a node.
const (
	// ActionCordon sets spec.unschedulable and gpupool.io/cordoned-by=<plan>.
	ActionCordon Action = "Cordon"
	// ActionEvict runs one non-blocking eviction pass over the step's evictions.
	ActionEvict Action = "Evict"
	// ActionWriteConfig puts the step's immutable mig-parted entry into gpupool's ConfigMap,
	// and its device-plugin sharing key, if it has one, into the device plugin's.
	ActionWriteConfig Action = "WriteConfig"
	// ActionExpectLayout sets GPUNode.spec.expectedLayout to the step's target.
	ActionExpectLayout Action = "ExpectLayout"
	// ActionRelabel sets nvidia.com/mig.config to the step's config name.
	ActionRelabel Action = "Relabel"
	// ActionRelabelSharing sets nvidia.com/device-plugin.config to the step's sharing key.
	ActionRelabelSharing Action = "RelabelSharing"
	// ActionUncordon clears spec.unschedulable and gpupool's annotation.
	ActionUncordon Action = "Uncordon"
	// ActionReleaseCordon drops gpupool's annotation but leaves the node cordoned, because
	// someone else had cordoned it before the plan.
	ActionReleaseCordon Action = "ReleaseCordon"
	// ActionRestoreLabel sets nvidia.com/mig.config back to the step's PreviousMIGConfig, the
	// entry that names the layout the GPUs still have.
	ActionRestoreLabel Action = "RestoreLabel"
)

// Observation is what the controller saw of one node's world in this reconcile.
type Observation struct {
	// NodeExists is false once the Node object is gone.
	NodeExists bool
	// ReportMissing is true when the node's GPUNode (the agent's report) is gone: nothing about
	// its GPUs can be verified.
	ReportMissing bool
	// Unschedulable is the node's spec.unschedulable.
	Unschedulable bool
	// CordonedBy is the node's gpupool.io/cordoned-by annotation.
	CordonedBy string
	// PodsLeft counts the step's evictions still on the node.
	PodsLeft int
	// Unsafe, when set, names a pod the step would evict that may not be evicted now under the
	// policy's eviction rules (it became unsafe since planning, or the plan never should have
	// named it), and why. The step is cancelled before it evicts anything more.
	Unsafe string
	// Claimed, when set, says which ResourceClaim of NVIDIA's DRA driver now holds a device on
	// a GPU the step changes (ClaimOnStep): allocated after planning, it would lose its device
	// to the carve. Before the relabel the step is cancelled and the node reopened.
	Claimed string
	// TargetDrifted is true when the entry name the step carries is not the name of the target
	// gpupool would write now (nvidia.StepEntryName): a GPU the step leaves alone changed,
	// appeared or vanished since planning. The step is cancelled before its entry is written.
	TargetDrifted bool
	// DrainMessage names the pods a PodDisruptionBudget still protects, from the last pass.
	DrainMessage string
	// LandingGone, while draining, says why the pods still to be evicted no longer have the
	// landing on another node the plan counted on (LandingGone); "" when they do.
	LandingGone string
	// ConfigWritten is true when gpupool's ConfigMaps hold the step's mig-parted entry and,
	// when it changes sharing, its device-plugin key.
	ConfigWritten bool
	// SharingConfig is the node's nvidia.com/device-plugin.config label.
	SharingConfig string
	// SharingAdvertised is true when the node's allocatable shows the step's sharing setting
	// (replicas x MIG-disabled GPUs of nvidia.com/gpu.shared, or none of it).
	SharingAdvertised bool
	// SharedResource names what the device plugin must advertise, for messages.
	SharedResource string
	// ExclusiveAdvertised is true when the node's allocatable shows the step's layout as the
	// device plugin advertises it (one nvidia.com/mig-<profile> per instance, one nvidia.com/gpu
	// per MIG-disabled GPU); always true for time-sliced steps, which SharingAdvertised covers.
	ExclusiveAdvertised bool
	// ExclusiveResources names them, for messages.
	ExclusiveResources string
	// DRADriver is true when NVIDIA's DRA driver, not the device plugin, serves the node's
	// GPUs (it publishes ResourceSlices for the node): the new instances are usable once its
	// slices list them, and ExclusiveAdvertised does not apply.
	DRADriver bool
	// DRAStale says how the driver's slices differ from the instances NVML reports; "" when
	// they agree.
	DRAStale string
	// LayoutExpected is true when GPUNode.spec.expectedLayout equals the step's target.
	LayoutExpected bool
	// MIGConfig and MIGState are the node's nvidia.com/mig.config and .state labels.
	MIGConfig string
	MIGState  nvidia.State
	// Verified is the GPUNode's LayoutVerified status for the current spec generation.
	Verified metav1.ConditionStatus
	// VerifyMessage is that condition's message (it lists the differences).
	VerifyMessage string
	// ReportTime is when the agent last read NVML (GPUNode status.observedTime).
	ReportTime time.Time
	// GPUsWhole is true when the agent reports every GPU the step changes with a whole layout,
	// either the old one or the new one: nothing is half-configured, so a failed node may
	// take work again.
	GPUsWhole bool
	// GPUsAtFrom and GPUsAtTarget are true when every GPU the step changes has its old layout,
	// or its new one: nvidia.com/mig.config names what the GPUs have only in one of these.
	GPUsAtFrom, GPUsAtTarget bool
}

// Timeouts bound each wait of a step.
type Timeouts struct {
	// Drain is the policy's drainTimeout.
	Drain time.Duration
	// Configure is the policy's configureTimeout: how long mig-manager, then the agent's
	// verification, may take.
	Configure time.Duration
	// Propagation is how long to wait after writing the ConfigMap before flipping the label,
	// so that mig-manager's mounted copy has the new entry (the kubelet syncs it lazily).
	Propagation time.Duration
	// KeepFailedCordoned leaves every node whose step failed after its GPUs were touched
	// cordoned, even when the agent shows whole layouts (the policy's keepFailedNodesCordoned).
	KeepFailedCordoned bool
}

// StepResult is the decision for one node step.
type StepResult struct {
	// Status is the step's status after the decision.
	Status v1alpha1.NodeStepStatus
	// Actions to perform, in order.
	Actions []Action
	// RequeueAfter is when to look again; zero when the step is finished.
	RequeueAfter time.Duration
	// Transition is true when the state changed: the controller records an Event with
	// Status.Message on the plan and on the node.
	Transition bool
}

// Requeue intervals of a step that waits on the cluster.
const (
	quickLook    = time.Second
	drainLook    = 5 * time.Second
	maxDrainLook = time.Minute
	slowLook     = 10 * time.Second
)

// Step decides the next state of one node's step. Failures before the GPUs are touched reopen
// the node; failures after leave it cordoned with a message saying why, because a GPU may be
// half-configured and must not take new work. A node cordoned by someone else before the plan
// is never uncordoned.
func Step(plan string, step v1alpha1.NodeStep, cur v1alpha1.NodeStepStatus, obs Observation, t Timeouts, now time.Time) StepResult {
	cur.Node = step.Node
	if cur.State == "" {
		cur.State = v1alpha1.NodePending
	}
	if cur.State == v1alpha1.NodeDone || cur.State == v1alpha1.NodeFailed {
		return StepResult{Status: cur}
	}
	since := now
	if cur.LastTransitionTime != nil {
		since = cur.LastTransitionTime.Time
	}
	if !obs.NodeExists {
		return fail(cur, now, "node "+step.Node+" no longer exists", nil)
	}
	// Only this plan's cordon moves a step past Cordoned, and the cordon annotation stays on the
	// node until the step ends; a verifying node also carries the step's own mig.config entry,
	// which stays after the step ends (so a Done whose status write was lost, or not yet seen
	// here, still reads as this plan's). A step status claiming otherwise was not written by this
	// plan's execution (a status writer forging progress where the admission policies are not
	// installed). Acting on it would drain or relabel a node nobody cordoned: touch nothing, and
	// leave the node as it is.
	past := cur.State == v1alpha1.NodeDraining || cur.State == v1alpha1.NodeConfiguring || cur.State == v1alpha1.NodeVerifying ||
		cur.State == v1alpha1.NodeRestoring
	ours := obs.CordonedBy == plan || (cur.State == v1alpha1.NodeVerifying && obs.MIGConfig == step.MIGConfigName)
	if past && !ours {
		return fail(cur, now, fmt.Sprintf("refused: the step's status says %s but %s does not carry this plan's cordon (%s=%q); "+
			"the status was not written by this plan's execution, so nothing is done to the node", cur.State, step.Node,
			v1alpha1.AnnotationCordonedBy, obs.CordonedBy), nil)
	}
	if obs.ReportMissing {
		msg := "the node's GPUNode is gone, so its GPUs cannot be verified: check the gpupool agent on " + step.Node
		switch cur.State {
		case v1alpha1.NodePending:
			return fail(cur, now, msg, nil)
		case v1alpha1.NodeCordoned, v1alpha1.NodeDraining:
			return fail(cur, now, msg, reopen(cur))
		}
		// Past the drain the GPUs may be half-configured: the node stays cordoned.
		return failTouched(cur, now, msg, Observation{}, t)
	}
	if obs.Unsafe != "" && (cur.State == v1alpha1.NodePending || cur.State == v1alpha1.NodeCordoned || cur.State == v1alpha1.NodeDraining) {
		// Nothing on the GPUs changed yet: cancel the step and give the node back.
		var undo []Action
		if cur.State != v1alpha1.NodePending {
			undo = reopen(cur)
		}
		return fail(cur, now, "cancelled: "+obs.Unsafe, undo)
	}
	if obs.Claimed != "" {
		switch {
		case cur.State == v1alpha1.NodePending:
			return fail(cur, now, "cancelled: "+obs.Claimed, nil)
		case cur.State == v1alpha1.NodeCordoned || cur.State == v1alpha1.NodeDraining:
			return fail(cur, now, "cancelled: "+obs.Claimed, reopen(cur))
		case cur.State == v1alpha1.NodeConfiguring && obs.MIGConfig != step.MIGConfigName:
			// The entry may be written, but until the label names it mig-manager was never
			// asked to touch the GPUs: the node can be given back as it was.
			return fail(cur, now, "cancelled before the relabel: "+obs.Claimed, reopen(cur))
		}
	}
	if obs.TargetDrifted && !obs.ConfigWritten {
		// The entry is not written, so mig-manager has nothing to apply: the GPUs are as they
		// were, and the node can be given back.
		msg := "cancelled: the agent's report of " + step.Node + "'s GPUs no longer matches the plan " +
			"(a GPU the step leaves alone changed, appeared or vanished since planning); the next pass replans"
		var undo []Action
		if cur.State != v1alpha1.NodePending {
			undo = reopen(cur)
		}
		return fail(cur, now, msg, undo)
	}
	switch cur.State {
	case v1alpha1.NodePending:
		cur.WasUnschedulable = obs.Unschedulable && obs.CordonedBy != plan
		cur.StartedTime = &metav1.Time{Time: now}
		return move(cur, v1alpha1.NodeCordoned, now, "cordoning "+step.Node, quickLook, ActionCordon)

	case v1alpha1.NodeCordoned:
		if !obs.Unschedulable || obs.CordonedBy != plan {
			return stay(cur, "cordon not observed yet", quickLook, ActionCordon)
		}
		return move(cur, v1alpha1.NodeDraining, now, fmt.Sprintf("draining %d pod(s)", len(step.Evictions)), drainLook, ActionEvict)

	case v1alpha1.NodeDraining:
		if obs.PodsLeft > 0 && obs.LandingGone != "" {
			// Evicting the rest now would leave them pending: stop, reopen the node (nothing on
			// its GPUs changed yet) and let the next plan start from what is free now.
			return fail(cur, now, fmt.Sprintf("stopped draining with %d pod(s) left: %s", obs.PodsLeft, obs.LandingGone), reopen(cur))
		}
		if obs.PodsLeft == 0 {
			return move(cur, v1alpha1.NodeConfiguring, now, "configuring "+step.MIGConfigName, quickLook,
				ActionWriteConfig, ActionExpectLayout)
		}
		if now.Sub(since) >= t.Drain {
			// Nothing on the GPUs changed yet: reopen the node.
			return fail(cur, now, fmt.Sprintf("drain timed out after %s with %d pod(s) left: %s",
				t.Drain, obs.PodsLeft, obs.DrainMessage), reopen(cur))
		}
		msg := fmt.Sprintf("%d pod(s) left", obs.PodsLeft)
		if obs.DrainMessage != "" {
			msg += ": " + obs.DrainMessage
		}
		return stay(cur, msg, drainBackoff(now.Sub(since)), ActionEvict)

	case v1alpha1.NodeConfiguring:
		if !obs.ConfigWritten || !obs.LayoutExpected {
			if now.Sub(since) >= t.Configure {
				// The writes keep failing (an unreadable ConfigMap, a GPUNode nobody may update):
				// give the node back rather than hold it drained. Before the relabel mig-manager
				// was never asked to touch the GPUs.
				msg := fmt.Sprintf("could not write %s to the mig-parted ConfigMap and the GPUNode's expected layout within configureTimeout %s: "+
					"see the plan's Events for the write errors", step.MIGConfigName, t.Configure)
				if obs.MIGConfig == step.MIGConfigName {
					return failTouched(cur, now, msg, obs, t)
				}
				return fail(cur, now, msg, reopen(cur))
			}
			return stay(cur, "writing config "+step.MIGConfigName, quickLook, ActionWriteConfig, ActionExpectLayout)
		}
		if obs.MIGConfig != step.MIGConfigName {
			if wait := since.Add(t.Propagation).Sub(now); wait > 0 {
				return stay(cur, "waiting for the config to reach mig-manager", wait)
			}
			// Remembered before the relabel, so that a failed step can set it back.
			cur.PreviousMIGConfig = obs.MIGConfig
			return stay(cur, "relabelled "+v1alpha1.LabelMIGConfig+"="+step.MIGConfigName, slowLook, ActionRelabel)
		}
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
		switch obs.MIGState {
		case nvidia.StateSuccess:
			return move(cur, v1alpha1.NodeVerifying, now, "mig-manager applied "+step.MIGConfigName+"; verifying", quickLook)
		case nvidia.StateRebooting:
			if now.Sub(since) < t.Propagation+t.Configure {
				return stay(cur, "mig-manager is rebooting "+step.Node+" to apply "+step.MIGConfigName, slowLook)
			}
		case nvidia.StateFailed:
			return failTouched(cur, now, "mig-manager reported failed for "+step.MIGConfigName+
				": check the nvidia-mig-manager pod's log on "+step.Node, obs, t)
		}
		if now.Sub(since) >= t.Propagation+t.Configure {
			state := obs.MIGState
			if state == "" {
				state = "no state"
			}
			return failTouched(cur, now, fmt.Sprintf("mig-manager stayed at %q past configureTimeout %s",
				state, t.Configure), obs, t)
		}
		return stay(cur, "mig-manager is applying "+step.MIGConfigName, slowLook)

	case v1alpha1.NodeRestoring:
		return restoring(cur, obs, t, since, now)

	case v1alpha1.NodeVerifying:
		if obs.Verified == metav1.ConditionTrue && step.SharingConfigName != "" && !obs.SharingAdvertised {
			// The layout is right; now the device plugin's sharing. Its key was written with the
			// mig-parted entry, at least the propagation wait before the MIG relabel.
			if now.Sub(since) >= t.Configure {
				return failTouched(cur, now, "the device plugin did not advertise "+obs.SharedResource+" for "+
					step.SharingConfigName+" within configureTimeout "+t.Configure.String(), obs, t)
			}
			if obs.SharingConfig != step.SharingConfigName {
				return stay(cur, "layout verified; relabelled "+v1alpha1.LabelDevicePluginConfig+"="+step.SharingConfigName,
					quickLook, ActionRelabelSharing)
			}
			return stay(cur, "waiting for the device plugin to advertise "+obs.SharedResource, quickLook)
		}
		if obs.Verified == metav1.ConditionTrue && obs.DRADriver && obs.DRAStale != "" {
			// NVIDIA's DRA driver discovers MIG devices only when its kubelet plugin starts
			// (dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/nvlib.go); mig-manager restarts it
			// with each change when its DaemonSet selects nvidia.com/gpu.deploy.client=true
			// (mig-parted pkg/mig/reconfigure/reconfigure.go, v0.15.0). Until then claims cannot
			// be allocated the new instances, so the step is not done.
			if now.Sub(since) >= t.Configure {
				return failTouched(cur, now, "NVIDIA's DRA driver did not publish the new MIG devices within configureTimeout "+
					t.Configure.String()+" ("+obs.DRAStale+"): its kubelet plugin rescans only when it starts; restart it on "+step.Node+
					", and let mig-manager do so with every change by giving its DaemonSet the nodeSelector nvidia.com/gpu.deploy.client=true", obs, t)
			}
			return stay(cur, "layout verified; waiting for NVIDIA's DRA driver to publish the new MIG devices ("+obs.DRAStale+")", quickLook)
		}
		if obs.Verified == metav1.ConditionTrue && !obs.DRADriver && !obs.ExclusiveAdvertised {
			// mig-manager restarts the device plugin after a change; until it advertises the new
			// devices the scheduler cannot use them, so the step is not done.
			if now.Sub(since) >= t.Configure {
				return failTouched(cur, now, "the device plugin did not advertise "+obs.ExclusiveResources+
					" within configureTimeout "+t.Configure.String()+": check the nvidia-device-plugin pod on "+step.Node, obs, t)
			}
			return stay(cur, "layout verified; waiting for the device plugin to advertise "+obs.ExclusiveResources, quickLook)
		}
		if obs.Verified == metav1.ConditionTrue {
			msg := "layout verified"
			if step.SharingConfigName != "" {
				msg = "layout and sharing (" + step.SharingConfigName + ") verified"
			}
			return move(cur, v1alpha1.NodeDone, now, msg, 0, reopen(cur)...)
		}
		if now.Sub(since) >= t.Configure {
			return failTouched(cur, now, "the agent did not verify the layout within configureTimeout "+t.Configure.String()+
				": "+obs.VerifyMessage, obs, t)
		}
		return stay(cur, "waiting for the agent to verify the layout", quickLook)
	}
	return fail(cur, now, fmt.Sprintf("unknown step state %q", cur.State), nil)
}

// drainBackoff spaces drain passes blocked by PodDisruptionBudgets: the next pass comes after
// as long again as the drain has already waited, so passes back off exponentially from
// drainLook up to maxDrainLook, without any attempt counter to persist.
func drainBackoff(waited time.Duration) time.Duration {
	return min(max(waited, drainLook), maxDrainLook)
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
		return move(cur, v1alpha1.NodeRestoring, now, msg+"; the GPUs kept their old layout: setting "+v1alpha1.LabelMIGConfig+
			" back to "+cur.PreviousMIGConfig+" before the node takes work again", quickLook, ActionRestoreLabel)
	case !labelRight:
		return fail(cur, now, msg+"; the node stays cordoned: its GPUs are whole but "+v1alpha1.LabelMIGConfig+"="+obs.MIGConfig+
			" does not name their layout, so a restart of mig-manager would re-carve them; set the label to the entry that names "+
			"their layout, then run kubectl uncordon "+cur.Node, nil)
	case t.KeepFailedCordoned:
		return fail(cur, now, msg+"; the node stays cordoned (the policy keeps failed nodes cordoned): fix it, then run kubectl uncordon "+cur.Node, nil)
	}
	return fail(cur, now, msg+"; the node was reopened: the agent shows every GPU with a whole layout, which "+
		v1alpha1.LabelMIGConfig+" names", reopen(cur))
}

// restoring sets back the label of a failed step whose GPUs kept their old layout, then fails
// the step for good, reopening the node once the label names that layout and the agent, in a
// report from after the restore (or mig-manager's success), still shows it whole: whatever
// mig-manager does with the label later, a restart included, it applies the layout the GPUs
// have. cur.Message still says why the step failed.
func restoring(cur v1alpha1.NodeStepStatus, obs Observation, t Timeouts, since, now time.Time) StepResult {
	why, _, _ := strings.Cut(cur.Message, "; the GPUs kept their old layout")
	if !obs.GPUsAtFrom {
		return fail(cur, now, why+"; the node stays cordoned: while "+v1alpha1.LabelMIGConfig+" was set back to "+cur.PreviousMIGConfig+
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
		restored := why + "; " + v1alpha1.LabelMIGConfig + " was set back to " + cur.PreviousMIGConfig + ", the layout the GPUs kept"
		if t.KeepFailedCordoned {
			return fail(cur, now, restored+"; the node stays cordoned (the policy keeps failed nodes cordoned): run kubectl uncordon "+cur.Node, nil)
		}
		return fail(cur, now, restored+"; the node was reopened", reopen(cur))
	case timedOut:
		return fail(cur, now, why+"; the node stays cordoned: "+v1alpha1.LabelMIGConfig+" was not set back to "+cur.PreviousMIGConfig+
			" and seen applied within configureTimeout "+t.Configure.String()+"; check the GPUs and the label, then run kubectl uncordon "+cur.Node, nil)
	}
	return stay(cur, cur.Message, slowLook)
}

// reopen gives the node back: uncordon it, unless someone else had cordoned it first.
func reopen(cur v1alpha1.NodeStepStatus) []Action {
	if cur.WasUnschedulable {
		return []Action{ActionReleaseCordon}
	}
	return []Action{ActionUncordon}
}

func move(cur v1alpha1.NodeStepStatus, to v1alpha1.NodeStepState, now time.Time, msg string,
	requeue time.Duration, actions ...Action) StepResult {
	cur.State, cur.Message = to, msg
	cur.LastTransitionTime = &metav1.Time{Time: now}
	return StepResult{Status: cur, Actions: actions, RequeueAfter: requeue, Transition: true}
}

func stay(cur v1alpha1.NodeStepStatus, msg string, requeue time.Duration, actions ...Action) StepResult {
	cur.Message = msg
	return StepResult{Status: cur, Actions: actions, RequeueAfter: requeue}
}

func fail(cur v1alpha1.NodeStepStatus, now time.Time, msg string, actions []Action) StepResult {
	return move(cur, v1alpha1.NodeFailed, now, msg, 0, actions...)
}

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
