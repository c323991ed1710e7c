package v1alpha1

// Condition types reported on GPUPoolPolicy status.
const (
	// ConditionReady is True only when the pool can do its work: not paused, its selector
	// matches nodes, every part of its spec takes effect, no other policy selects its nodes, and
	// the GPU Operator applies what gpupool writes. Otherwise the reason names the first
	// failure and the message every one, with its fix.
	ConditionReady = "Ready"
	// ConditionDemandSatisfied is True when no pending pod in the pool waits on GPU capacity.
	ConditionDemandSatisfied = "DemandSatisfied"
	// ConditionAwaitingApproval is True while a plan waits for a human.
	ConditionAwaitingApproval = "AwaitingApproval"
	// ConditionReconfiguring is True while a plan is executing.
	ConditionReconfiguring = "Reconfiguring"
	// ConditionDegraded is True when a plan failed or a node's layout cannot be verified.
	ConditionDegraded = "Degraded"
	// ConditionGPUOperatorConfigured is False when the GPU Operator's ClusterPolicy does not
	// point mig-manager and the device plugin at gpupool's config maps.
	ConditionGPUOperatorConfigured = "GPUOperatorConfigured"
	// ConditionConflict is True when another policy selects some of the same nodes.
	ConditionConflict = "Conflict"
	// ConditionSpecValid is False when a part of the spec cannot take effect (a catalog profile
	// the GPU product does not have, a catalog entry another one shadows) or, with Ready=False,
	// when the controller cannot use the policy at all; the message names the field and the fix.
	ConditionSpecValid = "SpecValid"
	// ConditionMIGTablesMatch is False when a pool node's agent reports a MIG profile table
	// that differs from gpupool's built-in one for its GPU (the message names the node, GPU and
	// profile), or one for a GPU the built-in table lacks. The reported table is what gpupool
	// plans with either way; the condition makes an error in the built-in table visible. It is
	// also reported on GPUNodes, by the agent, per GPU.
	ConditionMIGTablesMatch = "MIGTablesMatch"
	// ConditionDRASlicesCurrent is False when, on some pool node, the MIG devices NVIDIA's DRA
	// driver publishes in its ResourceSlices differ from what NVML reports: the driver discovers
	// MIG devices only when its kubelet plugin starts, so after a re-carve claims cannot use the
	// new instances until that plugin restarts on the node. The policy's names the nodes; the
	// manager also sets it on each such node's GPUNode.
	ConditionDRASlicesCurrent = "DRASlicesCurrent"
	// ConditionPaused is True while spec.planning.paused stops planning (Ready is then False
	// with reason Paused).
	ConditionPaused = "Paused"
)

// Reasons of the MIGTablesMatch condition, on GPUNodes (the agent's) and policies alike.
const (
	// ReasonTablesMatch: every reported MIG profile table matches the built-in one.
	ReasonTablesMatch = "TablesMatch"
	// ReasonDeviceTableDiffers: some GPU's table differs; the message names GPU and profile.
	ReasonDeviceTableDiffers = "DeviceTableDiffers"
	// ReasonNoBuiltinTable: some GPU has no built-in table and is planned from its report alone.
	ReasonNoBuiltinTable = "NoBuiltinTable"
)

// Condition types reported on GPUNode status.
const (
	// ConditionNVMLReady is True when the agent can read the node's GPUs through NVML.
	ConditionNVMLReady = "NVMLReady"
	// ConditionLayoutVerified is True when every GPU's actual MIG layout equals spec.expectedLayout.
	ConditionLayoutVerified = "LayoutVerified"
)
