package controllers

import (
	"cmp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/planner"
)

// poolStatus summarises the pool for the policy's status: its nodes and GPUs, every MIG
// profile's instances (used, free, stranded) and the pending demand per resource with how many
// pool nodes it may run on (eligible) and how many could be carved to host it (feasible).
func poolStatus(policy *v1alpha1.GPUPoolPolicy, selector labels.Selector, snap *inventory.Snapshot, pending []demand.Request,
	res *planner.Result) v1alpha1.GPUPoolPolicyStatus {
	st := v1alpha1.GPUPoolPolicyStatus{PendingPods: int32(len(pending))}
	slicesByProfile := map[string]*v1alpha1.ProfileSlices{}
	pool := poolNodes(snap, selector)
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
			st.Pool.GPUsByProduct[productName(g)]++
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
		ps.Stranded = int32(n)
		st.Pool.StrandedSlices += int32(n * mig.ComputeSlices(profile))
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

func productName(g *inventory.GPU) string {
	if g.Product != nil {
		return g.Product.Name
	}
	return g.ProductName
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

// canHost says whether some GPU of the node could be carved, or shared, to hold the shape,
// ignoring who runs there now.
func canHost(policy *v1alpha1.GPUPoolPolicy, n *inventory.Node, shape demand.ShapeCount) bool {
	for _, g := range n.GPUs {
		if g.Product == nil {
			continue
		}
		switch shape.Kind {
		case demand.KindMIG:
			if _, ok := g.Product.Profile(shape.Profile); ok {
				return true
			}
		case demand.KindGPU:
			return true
		case demand.KindShared:
			// Whole GPUs are shared by MPS or time-slicing, MIG devices by time-slicing only.
			names := []string{g.ProductName, n.Object.Labels[v1alpha1.LabelGPUProduct], g.Product.Name}
			if shape.Profile == "" {
				return sharingAllowed(policy, false, names...)
			}
			if _, ok := g.Product.Profile(shape.Profile); ok && sharingAllowed(policy, true, names...) {
				return true
			}
		}
	}
	return false
}

// sharingAllowed says whether the catalog entry for a product allows time-slicing, or MPS when
// whole GPUs are shared (MPS does not share MIG devices); the entry is found as the planner finds
// it, by case-insensitive substring of any of the names.
func sharingAllowed(policy *v1alpha1.GPUPoolPolicy, migDevices bool, names ...string) bool {
	for _, e := range policy.Spec.Catalog {
		for _, n := range names {
			if n != "" && strings.Contains(strings.ToLower(n), strings.ToLower(e.Product)) {
				return e.Sharing != nil && (e.Sharing.TimeSlicing != nil || (!migDevices && e.Sharing.MPS != nil))
			}
		}
	}
	return false
}

// poolNodes are the snapshot's nodes that the policy's selector picks, in the snapshot's order.
func poolNodes(snap *inventory.Snapshot, selector labels.Selector) []*inventory.Node {
	var out []*inventory.Node
	for _, n := range snap.Nodes {
		if selector.Matches(labels.Set(n.Object.Labels)) {
			out = append(out, n)
		}
	}
	return out
}
