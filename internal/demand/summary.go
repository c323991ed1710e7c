package demand

import (
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ShapeCount is the pending demand for one GPU resource, the basis of a GPUPoolPolicy's
// status.demand entry.
type ShapeCount struct {
	// Resource is the GPU resource asked for.
	Resource corev1.ResourceName
	// Kind is the resource's kind.
	Kind Kind
	// Profile is the canonical MIG profile, empty for whole and shared whole GPUs.
	Profile string
	// Pods is how many pending pods ask for the resource.
	Pods int32
	// Units is how many units those pods ask for in total.
	Units int64
}

// Summarize counts pending pods and units per GPU resource, sorted by resource name (the
// status list's map key). A pod asking for several GPU resources counts once under each.
func Summarize(reqs []Request) []ShapeCount {
	idx := map[corev1.ResourceName]int{}
	var out []ShapeCount
	for _, r := range reqs {
		for _, g := range r.GPUs {
			i, ok := idx[g.Resource]
			if !ok {
				i = len(out)
				idx[g.Resource] = i
				out = append(out, ShapeCount{Resource: g.Resource, Kind: g.Kind, Profile: g.Profile})
			}
			if out[i].Pods < math.MaxInt32 {
				out[i].Pods++
			}
			out[i].Units = addSaturating(out[i].Units, max(g.Count, 0))
		}
	}
	slices.SortFunc(out, func(a, b ShapeCount) int { return strings.Compare(string(a.Resource), string(b.Resource)) })
	return out
}
