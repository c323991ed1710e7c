package rollout

import (
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
	// Placement is what a placement step (the Placement protocol) reads besides the above.
	Placement PlacementObservation
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

// Step decides the next state of one node's step under the relabel protocol (MIGRelabel):
// its guards, then its state's handler.
func Step(plan string, step v1alpha1.NodeStep, cur v1alpha1.NodeStepStatus, obs Observation, t Timeouts, now time.Time) StepResult {
	return MIGRelabel.Step(plan, step, cur, obs, t, now)
}

// drainBackoff spaces drain passes blocked by PodDisruptionBudgets: the next pass comes after
// as long again as the drain has already waited, so passes back off exponentially from
// drainLook up to maxDrainLook, without any attempt counter to persist.
func drainBackoff(waited time.Duration) time.Duration {
	return min(max(waited, drainLook), maxDrainLook)
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
