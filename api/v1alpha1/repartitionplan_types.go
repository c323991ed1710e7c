package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RepartitionPlanSpec is one proposed change to MIG layouts or sharing configs. It is
// immutable: an approval is bound to spec.hash, and a different change is a different plan.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: create a new RepartitionPlan instead"
// +kubebuilder:validation:XValidation:rule="(has(self.disruptive) && self.disruptive) == self.steps.exists(s, has(s.evictions) && size(s.evictions) > 0)",message="disruptive must be true exactly when some step evicts a pod",fieldPath=".disruptive"
type RepartitionPlanSpec struct {
	// Policy names the GPUPoolPolicy this plan serves.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Policy string `json:"policy"`

	// Hash identifies the steps; approve the plan by setting annotation
	// gpupool.io/approve to this value.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{8,64}$`
	Hash string `json:"hash"`

	// Disruptive is true when any step evicts a running pod.
	// +optional
	Disruptive bool `json:"disruptive,omitempty"`

	// Approval is the policy's approval mode when the manager made the plan. The plan starts
	// without a human only while both this mode and the policy's mode now allow it, so that a
	// plan made to wait for a human is never approved by a later edit of the policy. A plan
	// without it (made before the field existed) always waits for gpupool.io/approve.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="approval is immutable: it records the policy's approval mode when the plan was made"
	// +optional
	Approval ApprovalMode `json:"approval,omitempty"`

	// Steps are the per-node changes, applied within the policy's disruption budget.
	// +listType=map
	// +listMapKey=node
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1000
	Steps []NodeStep `json:"steps"`

	// Expected is the effect the planner predicts.
	// +optional
	Expected PlanExpectation `json:"expected,omitempty"`
}

// NodeStep is the change a plan makes on one node.
// +kubebuilder:validation:XValidation:rule="size(self.gpus) > 0 || has(self.sharingConfig)",message="a step changes at least one GPU layout or the sharing config"
// +kubebuilder:validation:XValidation:rule="(has(self.disruptive) && self.disruptive) == (has(self.evictions) && size(self.evictions) > 0)",message="disruptive must be true exactly when the step evicts a pod",fieldPath=".disruptive"
// +kubebuilder:validation:XValidation:rule="has(self.sharingConfig) == has(self.sharingConfigName)",message="sharingConfig and sharingConfigName go together"
// +kubebuilder:validation:XValidation:rule="!has(self.placement) || (!has(self.migConfigName) && !has(self.sharingConfig) && !has(self.rebootRisk))",message="a placement step moves claims only: it writes no MIG or sharing config and risks no reboot",fieldPath=".placement"
type NodeStep struct {
	// Node is the name of the node.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`

	// GPUs whose MIG layout changes; GPUs not listed keep running untouched.
	// +listType=map
	// +listMapKey=index
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:default={}
	// +optional
	GPUs []GPUChange `json:"gpus"`

	// MIGConfigName is the immutable mig-parted config entry that holds the node's new layout,
	// written into nvidia.com/mig.config. It is always one of gpupool's own entries
	// (gpupool-<10 hex digits>), never an entry someone else maintains.
	// +kubebuilder:validation:Pattern=`^gpupool-[0-9a-f]{10}$`
	// +kubebuilder:validation:MaxLength=63
	// +optional
	MIGConfigName string `json:"migConfigName,omitempty"`

	// SharingConfig is the node's new device-plugin sharing setting, if it changes.
	// +optional
	SharingConfig *SharingConfig `json:"sharingConfig,omitempty"`

	// SharingConfigName is the immutable device-plugin config key written into
	// nvidia.com/device-plugin.config: one of gpupool's own keys.
	// +kubebuilder:validation:Pattern=`^gpupool-(none|ts-[0-9]{1,3}|mps-[0-9]{1,2})$`
	// +kubebuilder:validation:MaxLength=63
	// +optional
	SharingConfigName string `json:"sharingConfigName,omitempty"`

	// Evictions are the pods that must leave the node before the change.
	// +kubebuilder:validation:MaxItems=1000
	// +optional
	Evictions []Eviction `json:"evictions,omitempty"`

	// Disruptive is true when this step evicts a running pod.
	// +optional
	Disruptive bool `json:"disruptive,omitempty"`

	// WaitsFor names the nodes whose steps must be done before this one starts: the nodes its
	// evicted pods are expected to land on (make before break: the landing is carved and
	// advertised before any pod that relies on it is evicted), and the nodes whose evicted pods
	// land here before this node is cordoned. Every name is another step of the same plan.
	// +listType=set
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	WaitsFor []string `json:"waitsFor,omitempty"`

	// RebootRisk says why NVIDIA's mig-manager may reboot the node for this step (it changes a
	// GPU's MIG mode where a failed change reboots the host), killing every pod there. Such a
	// step is planned only while nothing but its evictions and DaemonSet or static pods runs
	// on the node, and is cancelled before the cordon if another pod has started there since.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	RebootRisk string `json:"rebootRisk,omitempty"`

	// Placement is set on a step for a node where NVIDIA's DRA driver runs its DynamicMIG mode
	// (it carves an instance when a claim is allocated and places first-fit): the step opens
	// one placement on one GPU for a pending claim by evicting only the claim pods in its way.
	// The node is neither cordoned nor relabelled, and pods on the other instances keep
	// running. Evictions lists the claim pods moved, each with its landing.
	// +optional
	Placement *PlacementOpening `json:"placement,omitempty"`
}

// PlacementOpening is the MIG placement a DynamicMIG step frees, the claim it is freed for, and
// the devices kept from the scheduler's allocator while it is freed.
// +kubebuilder:validation:XValidation:rule="!self.keepFree.exists(d, d == self.device)",message="the device the pending claim needs is never tainted",fieldPath=".keepFree"
type PlacementOpening struct {
	// Driver is the DRA driver whose ResourceSlices publish the node's devices; its pool is
	// named after the node.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Driver string `json:"driver"`
	// GPU is the GPU's index on the node, as NVML numbers it.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=63
	GPU int32 `json:"gpu"`
	// Profile is the pending claim's MIG profile.
	Profile MIGProfileName `json:"profile"`
	// Start is the first memory slice of the placement opened, Size how many it spans.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=7
	Start int32 `json:"start"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=8
	Size int32 `json:"size"`
	// Device is the driver's partition device for that profile and placement: the device the
	// pending claim is expected to be allocated once the claims in its way have moved.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Device string `json:"device"`
	// Claim is the pending ResourceClaim the placement is opened for.
	Claim PodReference `json:"claim"`
	// KeepFree are the driver's devices on the node that a DeviceTaintRule with effect
	// NoSchedule keeps from new claims while the step runs: every partition that would refill
	// the slices being opened (so an evicted claim cannot come back into them), never Device.
	// The taints are removed when the step ends, however it ends.
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	// +optional
	KeepFree []string `json:"keepFree,omitempty"`
}

// GPUChange is the layout change of one GPU.
type GPUChange struct {
	// Index of the GPU on the node, as NVML numbers it.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=63
	Index int32 `json:"index"`
	// From is the GPU's current multiset of MIG profiles; empty means MIG disabled.
	// +optional
	From ProfileCounts `json:"from,omitempty"`
	// To is the GPU's target multiset of MIG profiles; empty means MIG disabled.
	// +optional
	To ProfileCounts `json:"to,omitempty"`
}

// Eviction is a pod that a plan evicts, with why.
type Eviction struct {
	PodReference `json:",inline"`
	// UID is the pod's UID when the plan was made. Only that very pod is ever evicted: a pod
	// that has since been replaced under the same name is left alone.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	UID string `json:"uid,omitempty"`
	// Reason is why the pod must go, e.g. "holds 1g.18gb on GPU 0".
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Reason string `json:"reason,omitempty"`
	// LandingNode is the node where the pod's replacement is expected to run: the step's own
	// node when it comes back there after the change, another node of the pool when the plan
	// moves it to free slices there. The eviction waits until the landing still has room.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	LandingNode string `json:"landingNode,omitempty"`
}

// PlanExpectation is the effect the planner predicts for a plan.
type PlanExpectation struct {
	// Pods pending now that are expected to fit once the plan is done.
	// +kubebuilder:validation:MaxItems=10000
	// +optional
	Pods []PodReference `json:"pods,omitempty"`
	// SlicesGained per MIG profile.
	// +optional
	SlicesGained map[string]int32 `json:"slicesGained,omitempty"`
	// StrandedBefore counts, per MIG profile, the free instances (one per instance, whatever
	// its size) that no pending pod or standby shape can use, before the plan.
	// +optional
	StrandedBefore map[string]int32 `json:"strandedBefore,omitempty"`
	// StrandedAfter counts them, in instances, once the plan is done; nodes the plan turns
	// into shared GPUs hold none.
	// +optional
	StrandedAfter map[string]int32 `json:"strandedAfter,omitempty"`
}

// PlanPhase is where a plan is in its life.
// +kubebuilder:validation:Enum=AwaitingApproval;Approved;Executing;Succeeded;Failed;Rejected;Expired;Superseded
type PlanPhase string

// Plan phases. A plan moves AwaitingApproval -> Approved -> Executing -> Succeeded | Failed,
// or ends Rejected, Expired or Superseded before it starts. (There is no rollback: a failed
// node is reopened only when its GPUs are whole, or kept cordoned; see keepFailedNodesCordoned.)
const (
	PlanAwaitingApproval PlanPhase = "AwaitingApproval"
	PlanApproved         PlanPhase = "Approved"
	PlanExecuting        PlanPhase = "Executing"
	PlanSucceeded        PlanPhase = "Succeeded"
	PlanFailed           PlanPhase = "Failed"
	PlanRejected         PlanPhase = "Rejected"
	PlanExpired          PlanPhase = "Expired"
	PlanSuperseded       PlanPhase = "Superseded"
)

// NodeStepState is where one node's step is.
// +kubebuilder:validation:Enum=Pending;Cordoned;Draining;Configuring;Verifying;Restoring;Done;Failed
type NodeStepState string

// Node step states, in order of progress; Failed may follow any of them.
const (
	NodePending     NodeStepState = "Pending"
	NodeCordoned    NodeStepState = "Cordoned"
	NodeDraining    NodeStepState = "Draining"
	NodeConfiguring NodeStepState = "Configuring"
	NodeVerifying   NodeStepState = "Verifying"
	// NodeRestoring: the step failed with every GPU whole at its old layout while
	// nvidia.com/mig.config named the new one; the label is set back to the one the node had,
	// and the node stays cordoned until mig-manager has applied it, so that no later
	// mig-manager start (an operator upgrade, a reboot) re-carves GPUs under running pods.
	NodeRestoring NodeStepState = "Restoring"
	NodeDone      NodeStepState = "Done"
	NodeFailed    NodeStepState = "Failed"
)

// NodeStepStatus is the persisted progress of one node's step, so that any manager replica
// can resume it after a crash.
type NodeStepStatus struct {
	// Node is the name of the node.
	Node string `json:"node"`
	// State of the step.
	State NodeStepState `json:"state"`
	// WasUnschedulable records that someone else had cordoned the node before the plan, so
	// gpupool leaves it cordoned afterwards.
	// +optional
	WasUnschedulable bool `json:"wasUnschedulable,omitempty"`
	// Message explains the state, e.g. the pods a PodDisruptionBudget still blocks.
	// +optional
	Message string `json:"message,omitempty"`
	// StartedTime is when the step left Pending.
	// +optional
	StartedTime *metav1.Time `json:"startedTime,omitempty"`
	// LastTransitionTime is when State last changed.
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
	// RebootSeenTime is when mig-manager was first seen rebooting the node for this step: only
	// an agent report observed after it says anything about the GPUs' layout.
	// +optional
	RebootSeenTime *metav1.Time `json:"rebootSeenTime,omitempty"`
	// PreviousMIGConfig is the node's nvidia.com/mig.config before the step relabelled it,
	// so that a failed step can set back the label that names the GPUs' layout.
	// +optional
	PreviousMIGConfig string `json:"previousMIGConfig,omitempty"`
}

// NodeWait is a pending step that waits for other steps.
type NodeWait struct {
	// Node is the waiting step's node.
	Node string `json:"node"`
	// For names the nodes whose steps are not done yet.
	// +kubebuilder:validation:MaxItems=1000
	For []string `json:"for"`
}

// RepartitionPlanStatus is the persisted state machine of a plan.
type RepartitionPlanStatus struct {
	// ObservedGeneration is the generation this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase of the plan.
	// +optional
	Phase PlanPhase `json:"phase,omitempty"`
	// Approved is true once the plan was approved, by annotation or by its policy's approval mode.
	// +optional
	Approved bool `json:"approved,omitempty"`
	// ApprovedTime is when the plan was approved.
	// +optional
	ApprovedTime *metav1.Time `json:"approvedTime,omitempty"`
	// ApprovedBy is who approved the plan: the user the API server stamped on the approval
	// (annotation gpupool.io/approved-by), or the policy whose approval mode approved it.
	// +optional
	ApprovedBy string `json:"approvedBy,omitempty"`
	// RejectedBy is the user the API server stamped on the rejection (gpupool.io/rejected-by).
	// +optional
	RejectedBy string `json:"rejectedBy,omitempty"`
	// Progress is done/total nodes, e.g. 1/3.
	// +optional
	Progress string `json:"progress,omitempty"`
	// Waiting lists the pending steps that wait for other steps to be done first, and for
	// which: the nodes their moved pods land on, or the nodes whose pods land on them.
	// +listType=map
	// +listMapKey=node
	// +kubebuilder:validation:MaxItems=1000
	// +optional
	Waiting []NodeWait `json:"waiting,omitempty"`
	// Nodes is the per-node progress.
	// +listType=map
	// +listMapKey=node
	// +optional
	Nodes []NodeStepStatus `json:"nodes,omitempty"`
	// Conditions of the plan.
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// RepartitionPlan is one proposed change to the MIG layouts or sharing configs of some nodes of
// a pool. Disruptive plans wait for approval: annotate gpupool.io/approve=<spec.hash>.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=rpl,categories=gpupool
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.policy`
// +kubebuilder:printcolumn:name="Nodes",type=string,JSONPath=`.status.progress`,description="done/total nodes"
// +kubebuilder:printcolumn:name="Disruptive",type=boolean,JSONPath=`.spec.disruptive`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Approved",type=boolean,JSONPath=`.status.approved`
// +kubebuilder:printcolumn:name="By",type=string,JSONPath=`.status.approvedBy`,description="who approved the plan",priority=1
// +kubebuilder:printcolumn:name="Hash",type=string,JSONPath=`.spec.hash`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RepartitionPlan struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RepartitionPlanSpec   `json:"spec"`
	Status RepartitionPlanStatus `json:"status,omitempty"`
}

// RepartitionPlanList is a list of RepartitionPlan.
// +kubebuilder:object:root=true
type RepartitionPlanList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RepartitionPlan `json:"items"`
}

// HashSteps identifies what a plan does (its steps, not what it predicts), so that an approval
// binds to the exact changes and evictions. The planner sets spec.hash with it, and the plan
// controller recomputes it before executing, so a plan whose hash was made up never runs.
func HashSteps(steps []NodeStep) string {
	data, err := json.Marshal(steps)
	if err != nil {
		// NodeStep holds only strings, integers, booleans and maps of them.
		panic(fmt.Sprintf("encoding plan steps: %v", err))
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:16]
}
