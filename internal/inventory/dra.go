package inventory

import (
	"fmt"
	"slices"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// DeviceHolder is who holds a device NVIDIA's DRA driver allocated: the pods the claim is
// reserved for, or nobody yet (no Pods) for a claim allocated before its pod started.
type DeviceHolder struct {
	// Pods are every pod the claim is reserved for (status.reservedFor), sorted: a claim may be
	// shared, and each of its pods uses the device; freeing it means evicting them all.
	Pods []types.NamespacedName
	// Claim is the ResourceClaim holding the device, "namespace/name".
	Claim string
	// GPU is the UUID of the physical GPU the device is on: a MIG device's parentUUID
	// attribute, a whole GPU's own UUID; "" when the slice does not say.
	GPU string
}

// poolID is one driver's pool, as the scheduler keys pools.
type poolID struct{ driver, pool string }

// newestGenerations is, per pool, the highest spec.pool.generation its slices carry. A driver
// bumps the generation when it republishes a pool, and the slices of older generations linger
// until it deletes them: the scheduler allocates only from a pool's newest generation and
// ignores the rest as out of date (k8s.io/dynamic-resource-allocation
// structured/internal/stable/pools_stable.go, addSlice and checkSlicesInPool, v0.37.2).
func newestGenerations(slices []resourcev1.ResourceSlice) map[poolID]int64 {
	out := map[poolID]int64{}
	for i := range slices {
		s := &slices[i].Spec
		id := poolID{s.Driver, s.Pool.Name}
		if g, ok := out[id]; !ok || s.Pool.Generation > g {
			out[id] = s.Pool.Generation
		}
	}
	return out
}

// DRAHolders finds, by device UUID (a MIG instance's or a whole GPU's), the devices allocated
// to ResourceClaims of NVIDIA's DRA driver. An allocation result names a device by the node's
// pool and the driver's device name, which encodes the slot and not the instance
// (gpu-<minor>-mig-<profile>-<id>-<start>, cmd/gpu-kubelet-plugin/mig.go), so the UUID comes
// from the device's "uuid" attribute in the node's ResourceSlices. The agent's PodResources
// attribution sees only the device plugin's devices; without this, an instance a DRA pod holds
// but does not use yet would look idle and could be re-carved under it.
//
// An allocation records no generation. The scheduler allocates from a pool's newest
// generation, so a device name the newest generation lists is that device. A name only an
// older generation lists is a device the claim got before the driver republished its pool:
// the claim still holds it, so it counts under every UUID an older generation gives it (the
// planner then leaves its GPU alone when the agent does not report it there, GPU.DRAHeld).
func DRAHolders(claims []resourcev1.ResourceClaim, resourceSlices []resourcev1.ResourceSlice) map[string]DeviceHolder {
	type key struct{ pool, device string }
	type device struct{ uuid, gpu string }
	newest := newestGenerations(resourceSlices)
	current, older := map[key][]device{}, map[key][]device{}
	for i := range resourceSlices {
		s := &resourceSlices[i].Spec
		if s.Driver != nvidia.DRADriver {
			continue
		}
		byName := current
		if s.Pool.Generation < newest[poolID{s.Driver, s.Pool.Name}] {
			byName = older
		}
		for _, d := range s.Devices {
			a, ok := d.Attributes["uuid"]
			if !ok || a.StringValue == nil {
				continue
			}
			dev := device{uuid: *a.StringValue, gpu: *a.StringValue}
			if t := d.Attributes["type"]; t.StringValue != nil && *t.StringValue == "mig" {
				dev.gpu = ""
				if p := d.Attributes["parentUUID"]; p.StringValue != nil {
					dev.gpu = *p.StringValue
				}
			}
			byName[key{s.Pool.Name, d.Name}] = append(byName[key{s.Pool.Name, d.Name}], dev)
		}
	}
	var out map[string]DeviceHolder
	for i := range claims {
		c := &claims[i]
		if c.Status.Allocation == nil {
			continue
		}
		holder := DeviceHolder{Claim: c.Namespace + "/" + c.Name}
		for _, r := range c.Status.ReservedFor {
			// Consumers are in the claim's namespace (resource.k8s.io/v1 types.go,
			// ResourceClaimConsumerReference); pods are the only kind the kubelet runs.
			if r.APIGroup == "" && r.Resource == "pods" {
				holder.Pods = append(holder.Pods, types.NamespacedName{Namespace: c.Namespace, Name: r.Name})
			}
		}
		slices.SortFunc(holder.Pods, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
		holder.Pods = slices.Compact(holder.Pods)
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != nvidia.DRADriver {
				continue
			}
			devices, ok := current[key{r.Pool, r.Device}]
			if !ok {
				devices = older[key{r.Pool, r.Device}]
			}
			for _, dev := range devices {
				if out == nil {
					out = map[string]DeviceHolder{}
				}
				h := holder
				h.GPU = dev.gpu
				if prev, ok := out[dev.uuid]; ok {
					// Two claims name one device (an older generation's name, a shared
					// device): the device has every pod of either.
					h.Pods = append(slices.Clone(prev.Pods), h.Pods...)
					slices.SortFunc(h.Pods, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
					h.Pods = slices.Compact(h.Pods)
					h.Claim = prev.Claim
				}
				out[dev.uuid] = h
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
// Slices of every generation count: a node still showing the mode in a lingering older slice
// is left alone a little longer, which is the safe side.
func DynamicMIGNodes(slices []resourcev1.ResourceSlice) map[string]bool {
	var out map[string]bool
	for i := range slices {
		s := &slices[i].Spec
		if s.Driver != nvidia.DRADriver {
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
// re-land elsewhere (docs/design/dra.md).
const draHolderBlocker = "it holds a device NVIDIA's DRA driver allocated to its ResourceClaim, and gpupool does not move claim pods yet"

// dynamicMIGBlocker is the reason a DynamicMIG node is left alone.
const dynamicMIGBlocker = "NVIDIA's DRA driver runs DynamicMIG here: it carves MIG instances itself and destroys any it did not make " +
	"when it restarts, so gpupool leaves the node alone (see docs/design/dra.md)"

// DRAPublished lists, per node (the driver's pool), the UUIDs of the MIG devices NVIDIA's DRA
// driver publishes there; nodes without its slices are absent. Only the pool's newest
// generation counts, as for the scheduler (newestGenerations): an older slice not yet deleted
// lists instances that may be gone.
func DRAPublished(slices []resourcev1.ResourceSlice) map[string]map[string]bool {
	var out map[string]map[string]bool
	newest := newestGenerations(slices)
	for i := range slices {
		s := &slices[i].Spec
		if s.Driver != nvidia.DRADriver || s.Pool.Generation < newest[poolID{s.Driver, s.Pool.Name}] {
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
