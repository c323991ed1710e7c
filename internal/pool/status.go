package pool

import (
	"cmp"
	"slices"

	"k8s.io/apimachinery/pkg/labels"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/planner"
)

// Status summarises the pool for the policy's status: its nodes and GPUs, every MIG profile's
// instances (used, free, stranded) and the pending demand per resource with how many pool
// nodes it may run on (eligible) and how many could be carved to host it (feasible).
func Status(policy *v1alpha1.GPUPoolPolicy, selector labels.Selector, snap *inventory.Snapshot, pending []demand.Request,
	res *planner.Result) v1alpha1.GPUPoolPolicyStatus {
	st := v1alpha1.GPUPoolPolicyStatus{PendingPods: int32(len(pending))}
	slicesByProfile := map[string]*v1alpha1.ProfileSlices{}
	pool := Nodes(snap, selector)
	for _, n := range pool {
		st.Pool.Nodes++
		if n.Unreported {
			st.Pool.UnreportedNodes++
		}
		for _, g := range n.GPUs {
			st.Pool.GPUs++
			if st.Pool.GPUsByProduct == nil {
				st.Pool.GPUsByProduct = map[string]int32{}
			}
			st.Pool.GPUsByProduct[g.Label()]++
			for _, in := range g.Instances {
				ps := slicesByProfile[in.Profile]
				if ps == nil {
					ps = &v1alpha1.ProfileSlices{Profile: in.Profile}
					slicesByProfile[in.Profile] = ps
				}
				ps.Total++
				if in.Busy || in.Pod != nil {
					ps.Used++
				} else {
					ps.Free++
				}
			}
		}
	}
	for profile, n := range res.StrandedBefore {
		ps := slicesByProfile[profile]
		if ps == nil {
			continue
		}
		// One unit everywhere: free MIG instances, whatever their size (the planner's, the
		// plan's expectation and the gpupool_stranded_slices metric count the same).
		ps.Stranded = int32(n)
		st.Pool.StrandedSlices += int32(n)
	}
	for _, ps := range slicesByProfile {
		st.Pool.Slices = append(st.Pool.Slices, *ps)
	}
	slices.SortFunc(st.Pool.Slices, func(a, b v1alpha1.ProfileSlices) int { return mig.CompareProfileNames(a.Profile, b.Profile) })

	for _, shape := range demand.Summarize(pending) {
		d := v1alpha1.ShapeDemand{Resource: string(shape.Resource), PendingPods: shape.Pods}
		sample := firstAsking(pending, shape)
		for _, n := range pool {
			if ok, _ := sample.Matches(n.Object); !ok {
				continue
			}
			d.EligibleNodes++
			if n.Blocker == "" && canHost(policy, n, shape) {
				d.FeasibleNodes++
			}
		}
		st.Demand = append(st.Demand, d)
	}
	slices.SortFunc(st.Demand, func(a, b v1alpha1.ShapeDemand) int { return cmp.Compare(a.Resource, b.Resource) })
	return st
}

// firstAsking is the first pending pod asking for the shape's resource; its constraints stand
// for the shape's when counting eligible nodes.
func firstAsking(pending []demand.Request, shape demand.ShapeCount) demand.Request {
	for _, r := range pending {
		for _, g := range r.GPUs {
			if g.Resource == shape.Resource {
				return r
			}
		}
	}
	return demand.Request{}
}

// canHost says whether some GPU of the node could hold the shape after a repartition,
// ignoring who runs there now, as the planner decides it (internal/planner/outcome.go,
// shapeObstacle, and sharing.go, shareLayout): the policy's catalog entry for the GPU's
// product allows the profile (or whole GPUs, or time-slicing), or the GPU offers it already.
// A product that could be carved into the shape is not enough: the planner never carves what
// the catalog leaves out.
func canHost(policy *v1alpha1.GPUPoolPolicy, n *inventory.Node, shape demand.ShapeCount) bool {
	for _, g := range n.GPUs {
		if g.Product == nil {
			continue
		}
		_, entry := CatalogEntry(policy.Spec.Catalog, n, g)
		switch shape.Kind {
		case demand.KindMIG:
			if AllowsProfile(entry, g.Product, shape.Profile) || offers(g, shape.Profile) {
				return true
			}
		case demand.KindGPU:
			if (entry != nil && entry.AllowWholeGPU) || !g.MIGEnabled {
				return true
			}
		case demand.KindShared:
			// Whole GPUs leave MIG to be shared; MIG devices are carved from the catalog's profiles.
			if AllowsTimeSlicing(entry) && (shape.Profile == "" || AllowsProfile(entry, g.Product, shape.Profile)) {
				return true
			}
		}
	}
	return false
}

// offers says whether the GPU has an instance of the profile now, which pods may use whatever
// the catalog says.
func offers(g *inventory.GPU, profile string) bool {
	want, ok := g.Product.Profile(profile)
	if !ok {
		return false
	}
	for _, in := range g.Instances {
		if pr, ok := g.Product.Profile(in.Profile); ok && pr.Name == want.Name {
			return true
		}
	}
	return false
}

// Nodes are the snapshot's nodes that the policy's selector picks, in the snapshot's order.
func Nodes(snap *inventory.Snapshot, selector labels.Selector) []*inventory.Node {
	var out []*inventory.Node
	for _, n := range snap.Nodes {
		if selector.Matches(labels.Set(n.Object.Labels)) {
			out = append(out, n)
		}
	}
	return out
}
