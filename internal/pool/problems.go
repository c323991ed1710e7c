// Package pool holds the pure decisions about a GPUPoolPolicy that the API server cannot make
// when the policy is written: which parts of it the controller cannot use, and why. The policy
// controller reports each problem as a condition, so a policy is never skipped in silence.
package pool

import (
	"fmt"
	"slices"
	"strings"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
)

// Problem is one thing wrong with a policy, with the field it is in and what to do.
type Problem struct {
	// Field is the JSON path of the offending field, e.g. spec.catalog[0].migProfiles.
	Field string
	// Message says what is wrong and what to change.
	Message string
	// Blocking is true when the controller cannot plan for the policy at all until it is fixed;
	// other problems only make a part of the policy ineffective.
	Blocking bool
}

func (p Problem) String() string { return p.Field + ": " + p.Message }

// Problems lists what is wrong with a policy spec beyond the API server's own checks: a
// selector the controller cannot parse (possible for a policy stored before today's rules),
// durations outside their bounds (likewise), catalog profiles that the entry's GPU product does
// not have, and catalog entries that shadow later ones (products match by substring and the
// first matching entry wins). Blocking problems come first.
func Problems(spec *v1alpha1.GPUPoolPolicySpec) []Problem {
	var out []Problem
	if sel, err := spec.NodeSelector.AsSelector(); err != nil {
		out = append(out, Problem{Field: "spec.nodeSelector", Blocking: true,
			Message: fmt.Sprintf("cannot be parsed (%v): fix the selector's keys, operators and values", err)})
	} else if sel.Empty() {
		out = append(out, Problem{Field: "spec.nodeSelector", Blocking: true,
			Message: "selects every node of the cluster: name the pool's nodes with matchLabels or matchExpressions"})
	} else if !spec.NodeSelector.NarrowsPool() {
		// The API server's rule refuses it since it was written; a policy stored before is
		// reported, never planned.
		out = append(out, Problem{Field: "spec.nodeSelector", Blocking: true,
			Message: "may select every node of the cluster (only NotIn, DoesNotExist, the operating system or architecture, " +
				"or Exists on a label the kubelet sets on every node): add a matchLabels entry, or an In or Exists expression, " +
				"on a label only the pool's nodes carry"})
	}
	for _, d := range spec.Durations() {
		if d.Value != nil && (d.Value.Duration < d.Min || d.Value.Duration > d.Max) {
			out = append(out, Problem{Field: d.Field, Blocking: true, Message: fmt.Sprintf(
				"%s is outside %s..%s: set a duration in that range", d.Value.Duration, d.Min, d.Max)})
		}
	}
	for i, e := range spec.Catalog {
		out = append(out, unknownProfiles(i, e)...)
		if e.Sharing != nil && e.Sharing.MPS != nil {
			// NVIDIA/k8s-device-plugin cmd/nvidia-device-plugin/main.go validateFlags; the GPU
			// Operator passes ClusterPolicy spec.mig.strategy to every device plugin.
			fix := "gpupool shares these GPUs with time-slicing instead"
			if e.Sharing.TimeSlicing == nil {
				fix = "allow spec.catalog[" + fmt.Sprint(i) + "].sharing.timeSlicing to share them at all"
			}
			out = append(out, Problem{Field: fmt.Sprintf("spec.catalog[%d].sharing.mps", i), Message: "NVIDIA's device plugin " +
				"refuses MPS under the mixed MIG strategy that gpupool needs (the node would advertise no GPU), so it is never " +
				"planned: " + fix})
		}
		for j := i + 1; j < len(spec.Catalog); j++ {
			later := spec.Catalog[j]
			if strings.Contains(strings.ToLower(later.Product), strings.ToLower(e.Product)) {
				out = append(out, Problem{Field: fmt.Sprintf("spec.catalog[%d].product", j), Message: fmt.Sprintf(
					"entry %q is never used: every GPU whose product contains %q also contains %q, and the earlier entry "+
						"spec.catalog[%d] wins; list the more specific entry first", later.Product, later.Product, e.Product, i)})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Problem) int {
		switch {
		case a.Blocking == b.Blocking:
			return 0
		case a.Blocking:
			return -1
		}
		return 1
	})
	return out
}

// unknownProfiles reports the entry's MIG profiles that its GPU product does not have, when
// the product is in the built-in table. For a product gpupool does not know, the agent's NVML
// report is the only authority, so nothing is said here.
func unknownProfiles(i int, e v1alpha1.CatalogEntry) []Problem {
	product, ok := mig.LookupProduct(e.Product)
	if !ok {
		return nil
	}
	var out []Problem
	for _, name := range e.MIGProfiles {
		if _, ok := product.Profile(string(name)); !ok {
			out = append(out, Problem{Field: fmt.Sprintf("spec.catalog[%d].migProfiles", i), Message: fmt.Sprintf(
				"%s has no MIG profile %s (it has %s): remove it or name the right product",
				product.Name, name, strings.Join(product.ProfileNames(), ", "))})
		}
	}
	return out
}

// Message joins problems for a condition message, at most max of them.
func Message(problems []Problem, max int) string {
	parts := make([]string, 0, len(problems))
	for i, p := range problems {
		if i == max {
			parts = append(parts, fmt.Sprintf("and %d more", len(problems)-max))
			break
		}
		parts = append(parts, p.String())
	}
	return strings.Join(parts, "; ")
}
