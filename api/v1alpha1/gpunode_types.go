package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GPUNodeSpec is written by the controller: what the node's GPUs should look like.
type GPUNodeSpec struct {
	// ExpectedLayout is, per GPU index, the multiset of MIG profiles the controller expects
	// once the node's current plan step is applied. The agent compares it with NVML.
	// +listType=map
	// +listMapKey=index
	// +kubebuilder:validation:MaxItems=64
	// +optional
	ExpectedLayout []GPULayout `json:"expectedLayout,omitempty"`
}

// GPULayout is the multiset of MIG profiles on one GPU; empty profiles means MIG disabled.
type GPULayout struct {
	// Index of the GPU on the node, as NVML numbers it.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=63
	Index int32 `json:"index"`
	// Profiles is the multiset of MIG profiles.
	// +optional
	Profiles ProfileCounts `json:"profiles,omitempty"`
}

// MIGModeStatus is a GPU's MIG mode now and after the next GPU reset.
type MIGModeStatus struct {
	// Current MIG mode.
	// +kubebuilder:validation:Enum=Enabled;Disabled;Unsupported
	Current string `json:"current"`
	// Pending MIG mode, applied at the next GPU reset.
	// +kubebuilder:validation:Enum=Enabled;Disabled;Unsupported
	// +optional
	Pending string `json:"pending,omitempty"`
}

// SlicePlacement is where a GPU instance sits: memory slices [start, start+size).
type SlicePlacement struct {
	// Start is the first memory slice.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=7
	Start int32 `json:"start"`
	// Size is the number of memory slices.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=8
	Size int32 `json:"size"`
}

// GPUInstanceProfile is a GPU-instance profile the GPU supports, as NVML reports it.
type GPUInstanceProfile struct {
	// ID is the NVML GPU-instance profile constant (NVML_GPU_INSTANCE_PROFILE_*).
	ID int32 `json:"id"`
	// Name as the driver spells it, e.g. 3g.71gb.
	Name string `json:"name"`
	// MemoryMiB of an instance of this profile.
	MemoryMiB int64 `json:"memoryMiB"`
	// Slices is the number of compute slices an instance takes.
	Slices int32 `json:"slices"`
	// MaxCount is how many instances of this profile the GPU can hold.
	// +optional
	MaxCount int32 `json:"maxCount,omitempty"`
	// Placements are where an instance may start, read with GetGpuInstancePossiblePlacements.
	// +optional
	Placements []SlicePlacement `json:"placements,omitempty"`
}

// MIGInstance is an existing GPU instance and the pod that holds it, if any.
type MIGInstance struct {
	// Profile name of the instance.
	Profile string `json:"profile"`
	// Placement of the instance.
	Placement SlicePlacement `json:"placement"`
	// UUID of the MIG device, as the device plugin hands it to pods.
	// +optional
	UUID string `json:"uuid,omitempty"`
	// Busy is true when a pod or a process uses the instance.
	// +optional
	Busy bool `json:"busy,omitempty"`
	// Pod using the instance, from the kubelet PodResources API.
	// +optional
	Pod *PodReference `json:"pod,omitempty"`
}

// GPUStatus is one GPU as NVML reports it.
type GPUStatus struct {
	// Index of the GPU on the node.
	Index int32 `json:"index"`
	// UUID of the GPU.
	// +optional
	UUID string `json:"uuid,omitempty"`
	// Product name, e.g. NVIDIA H100 80GB HBM3.
	// +optional
	Product string `json:"product,omitempty"`
	// PCIDeviceID is the PCI device and vendor ID, e.g. 0x233010DE.
	// +optional
	PCIDeviceID string `json:"pciDeviceID,omitempty"`
	// MemoryMiB is the GPU's total memory.
	// +optional
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// MIGMode now and pending.
	// +optional
	MIGMode *MIGModeStatus `json:"migMode,omitempty"`
	// Profiles the GPU supports.
	// +optional
	Profiles []GPUInstanceProfile `json:"profiles,omitempty"`
	// Instances that exist now.
	// +optional
	Instances []MIGInstance `json:"instances,omitempty"`
	// Sharing is the sharing mode the device plugin applies to this GPU.
	// +optional
	Sharing SharingMode `json:"sharing,omitempty"`
	// Pods holding the whole GPU (MIG disabled).
	// +optional
	Pods []PodReference `json:"pods,omitempty"`
	// Error is set when NVML failed for this GPU; the rest of the node is still reported.
	// +optional
	Error string `json:"error,omitempty"`
}

// ProfileCounts is the GPU's layout as reported: how many instances of each profile exist now,
// by the names the agent reports. It is empty when the GPU has no instance (MIG off, or on
// with none made), and never nil, so a caller may add to it.
func (g GPUStatus) ProfileCounts() ProfileCounts {
	out := ProfileCounts{}
	for _, in := range g.Instances {
		out[in.Profile]++
	}
	return out
}

// PodUsage summarises one pod's GPU memory use on the node: per device it holds (a MIG
// instance or a whole GPU), sampled every refresh period into a decaying histogram whose
// samples lose half their weight a day.
type PodUsage struct {
	// Namespace of the pod.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// Name of the pod.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// P50MiB is the median memory used per device, in MiB.
	// +kubebuilder:validation:Minimum=0
	P50MiB int64 `json:"p50MiB"`
	// P95MiB is the 95th percentile of memory used per device, in MiB.
	// +kubebuilder:validation:Minimum=0
	P95MiB int64 `json:"p95MiB"`
	// PeakMiB is the most memory used on one device, in MiB.
	// +kubebuilder:validation:Minimum=0
	PeakMiB int64 `json:"peakMiB"`
	// CeilingMiB is the memory of the device the pod runs on: its MIG instance or whole GPU.
	// +kubebuilder:validation:Minimum=0
	CeilingMiB int64 `json:"ceilingMiB"`
	// Samples is how many samples the summary is drawn from.
	// +kubebuilder:validation:Minimum=0
	Samples int64 `json:"samples"`
	// WindowSeconds is the time from the first sample to the last.
	// +kubebuilder:validation:Minimum=0
	WindowSeconds int64 `json:"windowSeconds"`
	// FlatAtCeiling is true when usage sits high and flat against the device's memory, the
	// mark of a framework that preallocates (JAX/XLA, TensorFlow, vLLM): the numbers then say
	// what the framework took, not what the model needs.
	// +optional
	FlatAtCeiling bool `json:"flatAtCeiling,omitempty"`
}

// GPUNodeStatus is written by the node agent.
type GPUNodeStatus struct {
	// GPUs on the node.
	// +listType=map
	// +listMapKey=index
	// +optional
	GPUs []GPUStatus `json:"gpus,omitempty"`
	// ObservedTime is when the agent last read NVML.
	// +optional
	ObservedTime *metav1.Time `json:"observedTime,omitempty"`
	// Usage is how much GPU memory each pod on the node has used, summarised from the samples
	// the agent takes every refresh period. It is rewritten only when a pod's summary changes
	// materially (internal/rightsize, PublishRule), so its window and samples are lower bounds.
	// Pods sharing one device (time-slicing, MPS) are left out: NVML cannot split a device's
	// memory between them.
	// +listType=map
	// +listMapKey=namespace
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=512
	// +optional
	Usage []PodUsage `json:"usage,omitempty"`
	// Conditions: NVMLReady, LayoutVerified and MIGTablesMatch (written by the agent), and
	// DRASlicesCurrent where NVIDIA's DRA driver runs (written by the manager).
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// GPUNode is a node's real GPU inventory, published by gpupool's node agent from NVML; it is
// named after the node.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=gpun,categories=gpupool
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="NVML",type=string,JSONPath=`.status.conditions[?(@.type=="NVMLReady")].status`
// +kubebuilder:printcolumn:name="Verified",type=string,JSONPath=`.status.conditions[?(@.type=="LayoutVerified")].status`
// +kubebuilder:printcolumn:name="Observed",type=date,JSONPath=`.status.observedTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GPUNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GPUNodeSpec   `json:"spec,omitempty"`
	Status GPUNodeStatus `json:"status,omitempty"`
}

// GPUNodeList is a list of GPUNode.
// +kubebuilder:object:root=true
type GPUNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUNode `json:"items"`
}
