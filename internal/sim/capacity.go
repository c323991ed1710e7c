package sim

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpupool/gpupool/internal/mig"
)

// ResourceGPU is the device plugin's resource for a whole GPU (MIG disabled).
const ResourceGPU corev1.ResourceName = "nvidia.com/gpu"

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

// advertisedDevices lists what the device plugin advertises under the mixed strategy: each
// MIG device as nvidia.com/mig-<profile> ("+" written "."), each GPU with MIG disabled as
// nvidia.com/gpu. A GPU with MIG enabled but no instances advertises nothing. The order
// (GPU index, then start) is the order devices are handed out in.
func advertisedDevices(gpus []GPUState) []device {
	var out []device
	for _, g := range gpus {
		if !g.MIGEnabled {
			out = append(out, device{resource: ResourceGPU, id: g.UUID, gpu: g.Index})
			continue
		}
		for _, in := range g.Instances {
			out = append(out, device{resource: corev1.ResourceName(mig.ResourceName(in.Profile)), id: in.UUID, gpu: g.Index})
		}
	}
	return out
}

// Capacity is the GPU part of a node's capacity (and allocatable) the device plugin reports for
// the given GPUs. Resources with no device are absent rather than zero.
func Capacity(gpus []GPUState) corev1.ResourceList {
	counts := map[corev1.ResourceName]int64{}
	for _, d := range advertisedDevices(gpus) {
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
