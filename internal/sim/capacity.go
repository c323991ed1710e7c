package sim

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
)

// ResourceGPU is the device plugin's resource for a whole GPU (MIG disabled).
const ResourceGPU corev1.ResourceName = "nvidia.com/gpu"

// ResourceGPUShared is the resource a whole GPU's replicas are advertised as while the device
// plugin shares whole GPUs (time-slicing or MPS with renameByDefault, as every config gpupool
// writes asks); nvidia.com/gpu is then not advertised at all.
const ResourceGPUShared corev1.ResourceName = ResourceGPU + sharedSuffix

// sharedSuffix is what renameByDefault appends to a shared resource's name:
// nvidia.com/gpu.shared, nvidia.com/mig-<profile>.shared.
const sharedSuffix = ".shared"

// sharedResource is the name a resource's replicas are advertised under while it is shared.
func sharedResource(r corev1.ResourceName) corev1.ResourceName { return r + sharedSuffix }

// replicaSeparator joins a device's UUID and a replica number in a shared device's ID,
// "<GPU-UUID>::<n>" or "<MIG-UUID>::<n>", as the device plugin names replicas.
const replicaSeparator = "::"

// errMPSOnMIG is why the device plugin refuses an MPS config on a node with MIG devices.
var errMPSOnMIG = errors.New("MPS is not supported on MIG devices")

// resourcePrefix starts every resource the NVIDIA device plugin advertises; the simulated
// device plugin owns exactly these keys of a node's capacity and allocatable.
const resourcePrefix = "nvidia.com/"

// GPUState is one GPU as NVML shows it: its MIG mode and its MIG devices.
type GPUState struct {
	// Index is the NVML index.
	Index int
	// UUID is the GPU's UUID (GPU-...), the device ID of a whole GPU.
	UUID string
	// MIGEnabled is the current MIG mode.
	MIGEnabled bool
	// Instances are the MIG devices (one compute instance spanning each GPU instance, as
	// mig-parted creates them), ordered by start.
	Instances []InstanceState
}

// InstanceState is one MIG device.
type InstanceState struct {
	// Profile is the GPU-instance profile name, e.g. "1g.18gb".
	Profile string
	// Start and Size are the memory slices of its GPU instance.
	Start, Size int
	// UUID is the MIG device's UUID (MIG-...), the device ID the device plugin hands to pods.
	UUID string
}

// Layout is the GPU's profile multiset, as mig-parted configs and GPUNode layouts write it.
func (g GPUState) Layout() mig.Layout {
	l := mig.Layout{}
	for _, in := range g.Instances {
		l[in.Profile]++
	}
	return l
}

// device is one allocatable unit the device plugin advertises.
type device struct {
	resource corev1.ResourceName
	id       string
	gpu      int
}

// sharesWholeGPUs reports whether a sharing setting replicates whole GPUs; anything but
// time-slicing or MPS (None, or the zero value) gives devices exclusively.
func sharesWholeGPUs(s v1alpha1.SharingConfig) bool {
	return (s.Mode == v1alpha1.SharingTimeSlicing || s.Mode == v1alpha1.SharingMPS) && s.Replicas > 0
}

// sharesMIGDevices reports whether a sharing setting replicates MIG devices too: only
// time-slicing does. gpupool's time-slicing configs list nvidia.com/gpu and every
// nvidia.com/mig-<profile> resource, so the simulator treats time-slicing as sharing every MIG
// resource rather than reading the config's resource list. MPS shares whole GPUs only (and is
// refused on a node with MIG devices, see checkSharing).
func sharesMIGDevices(s v1alpha1.SharingConfig) bool {
	return s.Mode == v1alpha1.SharingTimeSlicing && s.Replicas > 0
}

// checkSharing is the device plugin's start-up check of a sharing setting against the GPUs it
// finds. The real plugin refuses to start when MPS is asked for and it enumerates any MIG
// device ("sharing using MPS is not supported for MIG devices"), whichever resource the MIG
// device belongs to; it is not a per-GPU refusal. The simulator models that refusal as the
// whole config rejected: the node stays exclusive (every whole GPU as nvidia.com/gpu, every
// MIG device as itself) and the caller reports the error. A GPU with MIG enabled but no
// instances has no MIG device, so it does not stop MPS.
func checkSharing(gpus []GPUState, s v1alpha1.SharingConfig) error {
	if s.Mode != v1alpha1.SharingMPS {
		return nil
	}
	for _, g := range gpus {
		if g.MIGEnabled && len(g.Instances) > 0 {
			return fmt.Errorf("%w: GPU %d has %d MIG device(s)", errMPSOnMIG, g.Index, len(g.Instances))
		}
	}
	return nil
}

// replicaID is the device ID of replica i of a shared GPU or MIG device.
func replicaID(uuid string, i int) string {
	return fmt.Sprintf("%s%s%d", uuid, replicaSeparator, i)
}

// physicalID is the device a device ID stands for: a replica's GPU or MIG device UUID, any
// other ID as it is.
func physicalID(id string) string {
	uuid, _, _ := strings.Cut(id, replicaSeparator)
	return uuid
}

// isReplica reports whether the device is a replica of a shared GPU or MIG device.
func (d device) isReplica() bool { return strings.Contains(d.id, replicaSeparator) }

// advertisedDevices lists what the device plugin advertises under the mixed strategy with the
// given sharing setting (already accepted by checkSharing). Exclusively, each MIG device is
// nvidia.com/mig-<profile> ("+" written ".") and each GPU with MIG disabled nvidia.com/gpu.
// While whole GPUs are shared (time-slicing or MPS), each GPU with MIG disabled is instead
// Replicas devices of nvidia.com/gpu.shared named <GPU-UUID>::<n>; while MIG devices are shared
// (time-slicing only), each MIG device is Replicas devices of nvidia.com/mig-<profile>.shared
// named <MIG-UUID>::<n>, and the unshared name is not advertised at all (renameByDefault). A
// GPU with MIG enabled but no instances advertises nothing. The order (GPU index, then start,
// then replica) is the order exclusive devices are handed out in.
func advertisedDevices(gpus []GPUState, sharing v1alpha1.SharingConfig) []device {
	var out []device
	add := func(r corev1.ResourceName, uuid string, gpu int, shared bool) {
		if !shared {
			out = append(out, device{resource: r, id: uuid, gpu: gpu})
			return
		}
		for i := range int(sharing.Replicas) {
			out = append(out, device{resource: sharedResource(r), id: replicaID(uuid, i), gpu: gpu})
		}
	}
	for _, g := range gpus {
		if !g.MIGEnabled {
			add(ResourceGPU, g.UUID, g.Index, sharesWholeGPUs(sharing))
			continue
		}
		for _, in := range g.Instances {
			add(corev1.ResourceName(mig.ResourceName(in.Profile)), in.UUID, g.Index, sharesMIGDevices(sharing))
		}
	}
	return out
}

// Capacity is the GPU part of a node's capacity (and allocatable) the device plugin reports for
// the given GPUs under a sharing setting. Exclusive: nvidia.com/mig-<profile> per MIG device
// and nvidia.com/gpu per GPU with MIG disabled. Time-slicing with r replicas: r x
// nvidia.com/mig-<profile>.shared per MIG device and r x nvidia.com/gpu.shared per GPU with MIG
// disabled, and none of the unshared names. MPS with r replicas: r x nvidia.com/gpu.shared per
// GPU with MIG disabled, MIG devices exclusive. Resources with no device are absent rather
// than zero. It does not check the setting: callers run checkSharing first, as the device
// plugin does when it starts.
func Capacity(gpus []GPUState, sharing v1alpha1.SharingConfig) corev1.ResourceList {
	counts := map[corev1.ResourceName]int64{}
	for _, d := range advertisedDevices(gpus, sharing) {
		counts[d.resource]++
	}
	out := make(corev1.ResourceList, len(counts))
	for r, n := range counts {
		out[r] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return out
}

// isDevicePluginResource reports whether the device plugin owns the resource.
func isDevicePluginResource(r corev1.ResourceName) bool {
	return strings.HasPrefix(string(r), resourcePrefix)
}

// capacityPatch returns the values to write into status.capacity and status.allocatable so that
// their device-plugin resources equal want, leaving all others alone: a JSON merge patch
// value per key, nil to delete. It is empty when both lists already agree.
func capacityPatch(status corev1.NodeStatus, want corev1.ResourceList) map[string]map[corev1.ResourceName]*string {
	out := map[string]map[corev1.ResourceName]*string{}
	for field, have := range map[string]corev1.ResourceList{"capacity": status.Capacity, "allocatable": status.Allocatable} {
		diff := map[corev1.ResourceName]*string{}
		for r, q := range want {
			if cur, ok := have[r]; !ok || cur.Cmp(q) != 0 {
				s := q.String()
				diff[r] = &s
			}
		}
		for r := range have {
			if _, keep := want[r]; !keep && isDevicePluginResource(r) {
				diff[r] = nil
			}
		}
		if len(diff) > 0 {
			out[field] = diff
		}
	}
	return out
}
