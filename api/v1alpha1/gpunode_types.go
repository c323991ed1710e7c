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
