package inventory

import (
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// draDriver is NVIDIA's DRA driver's name in ResourceSlices and allocation results
// (kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/main.go; docs/dra.md).
const draDriver = "gpu.nvidia.com"

// DeviceHolder is who holds a device NVIDIA's DRA driver allocated: the pod the claim is
// reserved for, or nobody yet (Pod nil) for a claim allocated before its pod started.
type DeviceHolder struct {
	Pod *types.NamespacedName
}

// DRAHolders finds, by device UUID (a MIG instance's or a whole GPU's), the devices allocated
// to ResourceClaims of NVIDIA's DRA driver. An allocation result names a device by the node's
// pool and the driver's device name, which encodes the slot and not the instance
// (gpu-<minor>-mig-<profile>-<id>-<start>, cmd/gpu-kubelet-plugin/mig.go), so the UUID comes
// from the device's "uuid" attribute in the node's ResourceSlices. The agent's PodResources
// attribution sees only the device plugin's devices; without this, an instance a DRA pod holds
// but does not use yet would look idle and could be re-carved under it.
func DRAHolders(claims []resourcev1.ResourceClaim, slices []resourcev1.ResourceSlice) map[string]DeviceHolder {
	type key struct{ pool, device string }
	uuids := map[key]string{}
	for i := range slices {
		s := &slices[i].Spec
		if s.Driver != draDriver {
			continue
		}
		for _, d := range s.Devices {
			if a, ok := d.Attributes["uuid"]; ok && a.StringValue != nil {
				uuids[key{s.Pool.Name, d.Name}] = *a.StringValue
			}
		}
	}
	var out map[string]DeviceHolder
	for i := range claims {
		c := &claims[i]
		if c.Status.Allocation == nil {
			continue
		}
		var holder DeviceHolder
		for _, r := range c.Status.ReservedFor {
			if r.APIGroup == "" && r.Resource == "pods" {
				holder.Pod = &types.NamespacedName{Namespace: c.Namespace, Name: r.Name}
				break
			}
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != draDriver {
				continue
			}
			if uuid, ok := uuids[key{r.Pool, r.Device}]; ok {
				if out == nil {
					out = map[string]DeviceHolder{}
				}
				out[uuid] = holder
			}
		}
	}
	return out
}

// DynamicMIGNodes lists the nodes where NVIDIA's DRA driver runs its DynamicMIG mode, known by
// what only that mode publishes: partitionable devices that consume shared counters, and the
// counter sets themselves (cmd/gpu-kubelet-plugin/partitions.go). In that mode the driver
// creates MIG instances when claims are allocated and, when its plugin starts, destroys every
// instance no claim holds (driver.go, device_state.go): a layout gpupool carved there would be
// torn down, and the driver's own would be carved over. Such nodes are never gpupool's to carve.
func DynamicMIGNodes(slices []resourcev1.ResourceSlice) map[string]bool {
	var out map[string]bool
	for i := range slices {
		s := &slices[i].Spec
		if s.Driver != draDriver {
			continue
		}
		dynamic := len(s.SharedCounters) > 0
		for _, d := range s.Devices {
			dynamic = dynamic || len(d.ConsumesCounters) > 0
		}
		if !dynamic {
			continue
		}
		// The pool is the node (driver.go); a counters-only slice (Kubernetes 1.35+) may carry
		// no nodeName of its own.
		if out == nil {
			out = map[string]bool{}
		}
		out[s.Pool.Name] = true
		if s.NodeName != nil {
			out[*s.NodeName] = true
		}
	}
	return out
}

// draHolderBlocker is why gpupool does not evict a pod holding a device NVIDIA's DRA driver
// allocated: its replacement would ask through a new claim, which the planner cannot yet
// re-land elsewhere (docs/dra.md).
const draHolderBlocker = "it holds a device NVIDIA's DRA driver allocated to its ResourceClaim, and gpupool does not move claim pods yet"

// dynamicMIGBlocker is the reason a DynamicMIG node is left alone.
const dynamicMIGBlocker = "NVIDIA's DRA driver runs DynamicMIG here: it carves MIG instances itself and destroys any it did not make " +
	"when it restarts, so gpupool leaves the node alone (see docs/dra.md)"

// DRAPublished lists, per node (the driver's pool), the UUIDs of the MIG devices NVIDIA's DRA
// driver publishes there; nodes without its slices are absent.
func DRAPublished(slices []resourcev1.ResourceSlice) map[string]map[string]bool {
	var out map[string]map[string]bool
	for i := range slices {
		s := &slices[i].Spec
		if s.Driver != draDriver {
			continue
		}
		if out == nil {
			out = map[string]map[string]bool{}
		}
		set := out[s.Pool.Name]
		if set == nil {
			set = map[string]bool{}
			out[s.Pool.Name] = set
		}
		for _, d := range s.Devices {
			t, u := d.Attributes["type"], d.Attributes["uuid"]
			if t.StringValue != nil && *t.StringValue == "mig" && u.StringValue != nil {
				set[*u.StringValue] = true
			}
		}
	}
	return out
}

// DRAStale says how the MIG devices NVIDIA's DRA driver publishes for a node differ from the
// instances the agent's report lists there; "" when they agree or the driver publishes nothing
// for it. The driver discovers MIG devices only when its kubelet plugin starts (cmd/gpu-kubelet-
// plugin/nvlib.go), so after a re-carve its slices are stale until the plugin restarts, and
// claims cannot use the new instances.
func DRAStale(report *v1alpha1.GPUNode, published map[string]bool) string {
	if published == nil || report == nil {
		return ""
	}
	unpublished, gone := 0, 0
	seen := map[string]bool{}
	for _, g := range report.Status.GPUs {
		for _, in := range g.Instances {
			if in.UUID == "" {
				continue
			}
			seen[in.UUID] = true
			if !published[in.UUID] {
				unpublished++
			}
		}
	}
	for uuid := range published {
		if !seen[uuid] {
			gone++
		}
	}
	if unpublished == 0 && gone == 0 {
		return ""
	}
	return fmt.Sprintf("its DRA ResourceSlices miss %d of the MIG instances NVML reports and list %d it does not", unpublished, gone)
}
