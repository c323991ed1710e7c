// What a DynamicMIG node offers: the memory slices each GPU's claims hold, and where a pending
// claim of a profile could still go.

package inventory

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// DynamicMIGNode is a node whose GPUs NVIDIA's DRA driver serves in its DynamicMIG mode, as
// the scheduler's allocator sees it: each GPU's memory slices, held by the claims allocated
// there or free. The driver publishes every (profile, placement) of a GPU as a device
// consuming that GPU's shared counters, one per memory slice and one per engine kind, and the
// allocator takes the first device whose counters are free (cmd/gpu-kubelet-plugin/
// partitions.go, docs/design/dra.md): a live instance is an allocated claim at its placement, and
// nothing ever moves it.
type DynamicMIGNode struct {
	// Node is the node's name, which is also the driver's pool.
	Node string
	// GPUs are the GPUs the agent reports, by index.
	GPUs []*DynamicMIGGPU
	// Notes are claims on the node's pool that name devices its slices do not list.
	Notes []string
}

// DynamicMIGGPU is one GPU of a DynamicMIG node.
type DynamicMIGGPU struct {
	// Index and UUID as NVML reports them; Product is its MIG geometry, nil when unknown.
	Index       int
	UUID        string
	ProductName string
	Product     *mig.Product
	// Holders are what holds memory slices, ascending by placement.
	Holders []SliceHolder
	// Slices has one entry per memory slice: the index in Holders of what holds it, or -1
	// when it is free.
	Slices []int
	// FreeCounters are the GPU's counters other than memory slices (multiprocessors, engines,
	// memory) that the allocated devices leave; nil when the driver publishes no counter set
	// for the GPU.
	FreeCounters map[string]int64
	// Notes say where the claims, the driver's slices and NVML disagree about this GPU.
	Notes []string

	partitions []partitionDevice
}

// SliceHolder is one claim's device, or one instance no claim explains, on a GPU.
type SliceHolder struct {
	// Claim is the ResourceClaim ("namespace/name") allocated the device; "" for an instance
	// NVML reports that no claim holds.
	Claim string
	// Pods are the pods the claim is reserved for (or the pod the agent attributes an
	// unclaimed instance to), sorted.
	Pods []types.NamespacedName
	// Profile is the instance's MIG profile; "" for the whole GPU.
	Profile   string
	Placement mig.Placement
	// Device is the driver's device the claim was allocated, "" for an unclaimed instance.
	Device string
	// Carved is true when NVML reports the instance at this placement. The driver carves at
	// prepare, once the claim's pod is on the node, so an allocated claim may hold its slices
	// before the instance exists; the allocator counts them taken either way.
	Carved bool
}

// partitionDevice is a device of the driver's DynamicMIG slices, read from its attributes and
// counters, never from its name.
type partitionDevice struct {
	name, gpu, set, profile string // profile "" for the whole GPU
	placement               mig.Placement
	counters                map[string]int64 // every counter but memory slices
	// taint says who taints the device NoSchedule or NoExecute, "" when nothing does: the
	// allocator gives it to no claim that does not tolerate the taint.
	taint string
}

// memorySliceCounter prefixes a memory slice's counter (partitions.go memsliceCounterName).
const memorySliceCounter = "memory-slice-"

// readPartition reads a device that consumes counters, or a whole GPU published without them
// (a GPU the driver does not serve dynamically: partitions.go fullGpuCapacity), whose
// placement is left empty for settle to stretch over every slice; ok is false for any other.
func readPartition(d *resourcev1.Device) (partitionDevice, bool) {
	str := func(name resourcev1.QualifiedName) string {
		if a := d.Attributes[name]; a.StringValue != nil {
			return *a.StringValue
		}
		return ""
	}
	if len(d.ConsumesCounters) == 0 {
		if str("type") != "gpu" || str("uuid") == "" {
			return partitionDevice{}, false
		}
		return partitionDevice{name: d.Name, gpu: str("uuid"), taint: taintOf(d)}, true
	}
	p := partitionDevice{name: d.Name, set: d.ConsumesCounters[0].CounterSet, counters: map[string]int64{}, taint: taintOf(d)}
	if str("type") == "mig" {
		p.profile, p.gpu = str("profile"), str("parentUUID")
	} else {
		p.gpu = str("uuid")
	}
	lo, hi := -1, -1
	for _, c := range d.ConsumesCounters {
		for name, v := range c.Counters {
			if s, ok := strings.CutPrefix(name, memorySliceCounter); ok {
				if i, err := strconv.Atoi(s); err == nil && v.Value.Value() > 0 {
					if lo < 0 || i < lo {
						lo = i
					}
					hi = max(hi, i)
				}
				continue
			}
			p.counters[name] += v.Value.Value()
		}
	}
	if lo >= 0 {
		p.placement = mig.Placement{Start: lo, Size: hi - lo + 1}
	}
	return p, true
}

// DynamicMIGSupply reads one DynamicMIG node: the agent's report for its GPUs and instances,
// the node's ResourceSlices of NVIDIA's driver (the pool's newest generation, as the scheduler
// allocates from it) for the partition devices and their counters, and the claims allocated
// from the pool for who holds which slices. An allocated partition holds its memory slices
// whether or not NVML shows the instance yet; an NVML instance no claim explains holds its
// slices too (the driver destroys it only when its plugin restarts, and a claim allocated over
// it would fail to prepare). Disagreements are Notes. report may be nil (no GPUs).
func DynamicMIGSupply(node *corev1.Node, report *v1alpha1.GPUNode, claims []resourcev1.ResourceClaim,
	resourceSlices []resourcev1.ResourceSlice) *DynamicMIGNode {
	out := &DynamicMIGNode{Node: node.Name}
	newest := newestGenerations(resourceSlices)
	sets := map[string]map[string]int64{}
	devices := map[string]partitionDevice{}
	for i := range resourceSlices {
		s := &resourceSlices[i].Spec
		if s.Driver != nvidia.DRADriver || s.Pool.Name != node.Name || s.Pool.Generation < newest[poolID{s.Driver, s.Pool.Name}] {
			continue
		}
		for _, set := range s.SharedCounters {
			counters := map[string]int64{}
			for name, c := range set.Counters {
				if !strings.HasPrefix(name, memorySliceCounter) {
					counters[name] = c.Value.Value()
				}
			}
			sets[set.Name] = counters
		}
		for j := range s.Devices {
			if p, ok := readPartition(&s.Devices[j]); ok {
				devices[p.name] = p
			}
		}
	}
	if report == nil {
		return out
	}
	byUUID := map[string]*DynamicMIGGPU{}
	for _, g := range readGPUs(node, report, productCache{}, nil, nil) {
		d := &DynamicMIGGPU{Index: g.Index, ProductName: g.ProductName, Product: g.Product}
		s := report.Status.GPUs[slices.IndexFunc(report.Status.GPUs, func(s v1alpha1.GPUStatus) bool { return int(s.Index) == g.Index })]
		d.UUID = s.UUID
		if d.UUID != "" {
			byUUID[d.UUID] = d
		}
		out.GPUs = append(out.GPUs, d)
	}
	names := make([]string, 0, len(devices))
	for name := range devices {
		names = append(names, name)
	}
	// The driver sorts a slice's devices by name and the allocator takes the first that fits
	// (mig.go ToCanonicalName), so name order is the order a claim would be placed in.
	slices.Sort(names)
	for _, name := range names {
		if g := byUUID[devices[name].gpu]; g != nil {
			g.partitions = append(g.partitions, devices[name])
			if g.FreeCounters == nil && sets[devices[name].set] != nil {
				g.FreeCounters = maps.Clone(sets[devices[name].set])
			}
		}
	}
	for i := range claims {
		out.Notes = append(out.Notes, holdClaim(&claims[i], node.Name, devices, byUUID)...)
	}
	for _, g := range out.GPUs {
		g.settle(report)
	}
	return out
}

// holdClaim records what an allocated claim holds on the node's GPUs, and says what it names
// that the slices do not list.
func holdClaim(c *resourcev1.ResourceClaim, node string, devices map[string]partitionDevice, byUUID map[string]*DynamicMIGGPU) []string {
	if c.Status.Allocation == nil {
		return nil
	}
	key := c.Namespace + "/" + c.Name
	var pods []types.NamespacedName
	for _, r := range c.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" {
			pods = append(pods, types.NamespacedName{Namespace: c.Namespace, Name: r.Name})
		}
	}
	slices.SortFunc(pods, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	var notes []string
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != nvidia.DRADriver || r.Pool != node {
			continue
		}
		p, ok := devices[r.Device]
		if !ok {
			notes = append(notes, fmt.Sprintf("ResourceClaim %s holds device %s, which the driver's slices for the node do not list", key, r.Device))
			continue
		}
		g := byUUID[p.gpu]
		if g == nil {
			notes = append(notes, fmt.Sprintf("ResourceClaim %s holds device %s on GPU %s, which the agent does not report", key, r.Device, p.gpu))
			continue
		}
		g.Holders = append(g.Holders, SliceHolder{Claim: key, Pods: pods, Profile: p.profile, Placement: p.placement, Device: p.name})
		for name, v := range p.counters {
			if g.FreeCounters != nil {
				g.FreeCounters[name] -= v
			}
		}
	}
	return notes
}

// settle matches the claims' devices with the instances NVML reports, adds the instances no
// claim explains, and draws the slice map.
func (g *DynamicMIGGPU) settle(report *v1alpha1.GPUNode) {
	var status *v1alpha1.GPUStatus
	for i := range report.Status.GPUs {
		if int(report.Status.GPUs[i].Index) == g.Index {
			status = &report.Status.GPUs[i]
		}
	}
	size := 0
	if g.Product != nil {
		size = g.Product.MemorySlices
	}
	for _, p := range g.partitions {
		size = max(size, p.placement.Start+p.placement.Size)
	}
	canon := func(profile string) string {
		if g.Product != nil {
			if pr, ok := g.Product.Profile(profile); ok {
				return pr.Name
			}
		}
		return profile
	}
	for _, in := range status.Instances {
		pl := mig.Placement{Start: int(in.Placement.Start), Size: int(in.Placement.Size)}
		size = max(size, pl.Start+pl.Size)
		k := slices.IndexFunc(g.Holders, func(h SliceHolder) bool {
			return h.Profile != "" && h.Placement == pl && canon(h.Profile) == canon(in.Profile)
		})
		if k >= 0 {
			g.Holders[k].Carved = true
			continue
		}
		h := SliceHolder{Profile: in.Profile, Placement: pl, Carved: true}
		if in.Pod != nil {
			h.Pods = []types.NamespacedName{{Namespace: in.Pod.Namespace, Name: in.Pod.Name}}
		}
		g.Holders = append(g.Holders, h)
		g.Notes = append(g.Notes, fmt.Sprintf("NVML reports %s on GPU %d, which no claim holds: the driver destroys it when its "+
			"kubelet plugin restarts, and until then a claim allocated over it fails to prepare", mig.Instance{Profile: in.Profile, Placement: pl}, g.Index))
	}
	for _, h := range g.Holders {
		if h.Claim != "" && h.Profile != "" && !h.Carved {
			g.Notes = append(g.Notes, fmt.Sprintf("ResourceClaim %s is allocated %s on GPU %d and NVML has no instance there yet "+
				"(the driver carves it when the claim's pod is prepared on the node)", h.Claim, mig.Instance{Profile: h.Profile, Placement: h.Placement}, g.Index))
		}
	}
	slices.SortStableFunc(g.Holders, func(a, b SliceHolder) int {
		return cmp.Or(cmp.Compare(a.Placement.Start, b.Placement.Start), cmp.Compare(a.Claim, b.Claim))
	})
	for k := range g.Holders {
		if h := &g.Holders[k]; h.Profile == "" && h.Placement.Size == 0 {
			h.Placement = mig.Placement{Start: 0, Size: size} // a whole GPU without counters
		}
	}
	g.Slices = make([]int, size)
	for i := range g.Slices {
		g.Slices[i] = -1
	}
	for k, h := range g.Holders {
		for s := max(h.Placement.Start, 0); s < min(h.Placement.Start+h.Placement.Size, size); s++ {
			if g.Slices[s] >= 0 {
				g.Notes = append(g.Notes, fmt.Sprintf("memory slice %d of GPU %d is held twice, by %s and %s", s, g.Index,
					g.Holders[g.Slices[s]].name(), h.name()))
				continue
			}
			g.Slices[s] = k
		}
	}
}

// name says who a holder is, for messages: its claim, or the unclaimed instance.
func (h SliceHolder) name() string {
	if h.Claim != "" {
		return "ResourceClaim " + h.Claim
	}
	return "unclaimed " + mig.Instance{Profile: h.Profile, Placement: h.Placement}.String()
}

// FreeSlices counts the GPU's memory slices nothing holds.
func (g *DynamicMIGGPU) FreeSlices() int {
	n := 0
	for _, k := range g.Slices {
		if k < 0 {
			n++
		}
	}
	return n
}
