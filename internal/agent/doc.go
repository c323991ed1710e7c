// Package agent is gpupool's node agent: it reads a node's GPUs through NVML
// (go-nvml), learns from the kubelet's PodResources API which pod holds which
// GPU or MIG device, and publishes both as the status of the GPUNode named
// after the node, the inventory the controller plans and verifies against
// (Publisher, NewManager; VerifyLayout checks the layout against
// spec.expectedLayout).
//
// The agent never changes a GPU setting. mig-manager owns the layout; an agent
// that could write would be a second, uncoordinated writer. The NVML
// interfaces in this package therefore list only read calls, and because the
// reading code is generic over those interfaces the compiler rejects any call
// outside them (see nvml.go).
//
// Read results are deterministic: GPUs by index, profiles by NVML profile
// constant, placements and instances by start slice, pods by namespace/name.
package agent
