package demand

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupool/gpupool/api/v1alpha1"
)

// Shape is one validated standby shape of a GPUPoolPolicy: units of a GPU resource to keep
// free so the next pod of that shape starts without a repartition.
type Shape struct {
	// Resource is the GPU resource to keep free.
	Resource corev1.ResourceName
	// Kind is what the planner must create to keep it free.
	Kind Kind
	// Profile is the canonical MIG profile for MIG shapes; empty otherwise.
	Profile string
	// MinFree is how many units to keep free across the pool.
	MinFree int32
	// Priority orders shapes against each other; pending pods always come first.
	Priority int32
}

// Standby validates a policy's spec.shapes and returns them sorted by priority (highest first)
// then resource name, the order in which the planner tries to keep them. The CRD already
// rejects most mistakes, but the offline CLI reads policies from files that never met the API
// server, so every problem is reported here too, all at once, each naming the entry.
func Standby(shapes []v1alpha1.StandbyShape) ([]Shape, error) {
	var errs []error
	out := make([]Shape, 0, len(shapes))
	first := make(map[corev1.ResourceName]int, len(shapes))
	for i, s := range shapes {
		res := corev1.ResourceName(s.Resource)
		kind, profile, ok := Classify(res)
		if !ok {
			errs = append(errs, fmt.Errorf("spec.shapes[%d].resource %q is not a GPU resource: want nvidia.com/gpu, nvidia.com/gpu.shared or nvidia.com/mig-<profile> such as nvidia.com/mig-1g.10gb", i, s.Resource))
		} else if j, dup := first[res]; dup {
			errs = append(errs, fmt.Errorf("spec.shapes[%d].resource %q repeats spec.shapes[%d]: keep one entry per resource", i, s.Resource, j))
		} else {
			first[res] = i
		}
		if s.MinFree < 0 {
			errs = append(errs, fmt.Errorf("spec.shapes[%d].minFree for %q is %d: it must be 0 or more", i, s.Resource, s.MinFree))
		}
		if s.Priority < 0 {
			errs = append(errs, fmt.Errorf("spec.shapes[%d].priority for %q is %d: it must be 0 or more", i, s.Resource, s.Priority))
		}
		out = append(out, Shape{Resource: res, Kind: kind, Profile: profile, MinFree: s.MinFree, Priority: s.Priority})
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid standby shapes: %w", errors.Join(errs...))
	}
	slices.SortFunc(out, func(a, b Shape) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), strings.Compare(string(a.Resource), string(b.Resource)))
	})
	return out, nil
}
