package rollout

import (
	"fmt"
	"slices"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// PartitionFact is one device of NVIDIA's DRA driver in a node's pool, read from its attributes
// and counters (never from its name): the GPU it is on, its MIG profile ("" for the whole GPU)
// and the memory slices it consumes.
type PartitionFact struct {
	GPU         int // NVML index; -1 when the agent does not report the device's GPU
	Profile     string
	Start, Size int
}

// overlaps says whether two devices on the same GPU share a memory slice.
func (p PartitionFact) overlaps(q PartitionFact) bool {
	return p.GPU == q.GPU && p.Start < q.Start+q.Size && q.Start < p.Start+p.Size
}

// PodHold is what a pod the step evicts holds on the step's node: its UID, and the devices its
// allocated ResourceClaims hold in the node's pool.
type PodHold struct {
	UID     string
	Devices []string
}

// PlacementFacts are what CheckPlacement judges a placement step by.
type PlacementFacts struct {
	// DynamicMIG is true when the step's driver publishes partitionable devices (consuming
	// shared counters) in the node's pool: only then does the driver carve on allocation.
	DynamicMIG bool
	// Devices are the driver's devices in the node's pool (its newest generation), by name.
	Devices map[string]PartitionFact
	// Pods are the pods the step evicts that still run on the node and are not terminating,
	// by "namespace/name"; those gone are not judged.
	Pods map[string]PodHold
	// ClaimRead is true when the pending claim was read for this check (before the step
	// starts); ClaimExists and ClaimAllocated are then what was read.
	ClaimRead, ClaimExists, ClaimAllocated bool
}

// CheckPlacement says why a placement step must not run, or go on, against the world as it is
// ("" when it may). The plan is untrusted input: anyone allowed to create a RepartitionPlan
// could name any device, so the step's devices must be the driver's partitions in the node's
// own pool, its Device the partition of its Profile at Start/Size on its GPU, every device it
// keeps free one that would refill the slices it opens (never a device of another GPU or
// node), and every pod it evicts one whose claim holds a device in those slices. Before it
// starts, its claim must exist and wait for an allocation.
func CheckPlacement(step v1alpha1.NodeStep, f PlacementFacts) string {
	p := step.Placement
	if p == nil {
		return "the step opens no placement"
	}
	if !f.DynamicMIG {
		return fmt.Sprintf("driver %s does not run DynamicMIG on node %s (its ResourceSlices for the node publish no partitionable devices)", p.Driver, step.Node)
	}
	opening := PartitionFact{GPU: int(p.GPU), Profile: string(p.Profile), Start: int(p.Start), Size: int(p.Size)}
	d, ok := f.Devices[p.Device]
	switch {
	case !ok:
		return fmt.Sprintf("device %s is not in driver %s's pool %s", p.Device, p.Driver, step.Node)
	case d != opening:
		return fmt.Sprintf("device %s is %s, not the %s partition at memory slices %s of GPU %d the step names",
			p.Device, d.describe(), p.Profile, sliceRange(p.Start, p.Size), p.GPU)
	}
	for _, name := range p.KeepFree {
		k, ok := f.Devices[name]
		switch {
		case !ok:
			return fmt.Sprintf("device %s, which the step would taint, is not in driver %s's pool %s", name, p.Driver, step.Node)
		case !k.overlaps(opening):
			return fmt.Sprintf("device %s, which the step would taint, is %s: it does not overlap memory slices %s of GPU %d, which the step opens",
				name, k.describe(), sliceRange(p.Start, p.Size), p.GPU)
		}
	}
	for _, e := range step.Evictions {
		key := e.Namespace + "/" + e.Name
		hold, ok := f.Pods[key]
		if !ok {
			continue
		}
		if hold.UID != e.UID {
			continue // a replacement under the same name: never evicted (drain checks the UID)
		}
		if !slices.ContainsFunc(hold.Devices, func(name string) bool {
			dev, ok := f.Devices[name]
			return ok && dev.overlaps(opening)
		}) {
			return fmt.Sprintf("pod %s, which the step evicts, holds no device in memory slices %s of GPU %d: evicting it opens nothing",
				key, sliceRange(p.Start, p.Size), p.GPU)
		}
	}
	if f.ClaimRead {
		switch {
		case !f.ClaimExists:
			return fmt.Sprintf("ResourceClaim %s/%s does not exist", p.Claim.Namespace, p.Claim.Name)
		case f.ClaimAllocated:
			return fmt.Sprintf("ResourceClaim %s/%s is allocated already: nothing to open", p.Claim.Namespace, p.Claim.Name)
		}
	}
	return ""
}

func (p PartitionFact) describe() string {
	what := "the whole GPU " + fmt.Sprint(p.GPU)
	if p.Profile != "" {
		what = fmt.Sprintf("%s at memory slices %s of GPU %d", p.Profile, sliceRange(int32(p.Start), int32(p.Size)), p.GPU)
	}
	if p.GPU < 0 {
		what += " (a GPU the agent does not report)"
	}
	return what
}
