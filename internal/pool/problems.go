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
// durations outside their bounds (likewise), maintenance windows it cannot read (a cron
// schedule or time zone no CEL rule can check), catalog profiles that the entry's GPU product
// does not have, and catalog entries that shadow later ones (products match by substring and the
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
	out = append(out, WindowProblems(spec)...)
	for i, e := range spec.Catalog {
		out = append(out, catalogProfiles(spec.Catalog, i)...)
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
	}
	for j := range spec.Catalog {
		if p, ok := shadowed(spec.Catalog, j); ok {
			out = append(out, p)
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

// The catalog checks read an entry as the planner applies it (planner's catalog.entryFor):
// the first entry whose product is a case-insensitive substring of a GPU's NVML name, its
// node's nvidia.com/gpu.product label or its built-in product's canonical name. What the
// built-in table knows of each product's boards (mig.Product.Names) says which products an
// entry may apply to, and which an earlier entry takes whole.

// appliesTo reports whether a catalog product may match some GPUs of p: a substring of the
// canonical name or of one board's names, or a name LookupProduct resolves to p.
func appliesTo(entry string, p *mig.Product) bool {
	if containsFold(p.Name, entry) {
		return true
	}
	for _, n := range p.Names {
		if containsFold(n, entry) || containsFold(mig.ProductLabel(n), entry) {
			return true
		}
	}
	found, ok := mig.LookupProduct(entry)
	return ok && found == p
}

// takesWhole reports whether a catalog product matches every GPU of p: a substring of the
// canonical name, which the planner matches on every GPU of a built-in product, or of one of
// the two names of every board the table knows.
func takesWhole(entry string, p *mig.Product) bool {
	if containsFold(p.Name, entry) {
		return true
	}
	for _, n := range p.Names {
		if !containsFold(n, entry) && !containsFold(mig.ProductLabel(n), entry) {
			return false
		}
	}
	return len(p.Names) > 0
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// productsOf are the built-in products catalog entry i may apply to: those its product
// matches and no earlier entry takes whole.
func productsOf(catalog []v1alpha1.CatalogEntry, i int) []*mig.Product {
	var out []*mig.Product
	for _, p := range mig.Products() {
		if appliesTo(catalog[i].Product, p) && !slices.ContainsFunc(catalog[:i], func(e v1alpha1.CatalogEntry) bool {
			return takesWhole(e.Product, p)
		}) {
			out = append(out, p)
		}
	}
	return out
}

// catalogProfiles reports the entry's MIG profiles that a GPU product it applies to does not
// have: absent from every one, the profile is a mistake; present on some only, the entry's
// product name is ambiguous and the others never use it, which the user did not see. For a
// product gpupool does not know, the agent's NVML report is the only authority, so nothing
// is said here.
func catalogProfiles(catalog []v1alpha1.CatalogEntry, i int) []Problem {
	e := catalog[i]
	products := productsOf(catalog, i)
	if len(products) == 0 {
		return nil
	}
	field := fmt.Sprintf("spec.catalog[%d].migProfiles", i)
	var out []Problem
	for _, name := range e.MIGProfiles {
		var has, lacks []string
		for _, p := range products {
			if _, ok := p.Profile(string(name)); ok {
				has = append(has, p.Name)
			} else {
				lacks = append(lacks, p.Name)
			}
		}
		switch {
		case len(lacks) == 0:
		case len(products) == 1:
			out = append(out, Problem{Field: field, Message: fmt.Sprintf("%s has no MIG profile %s (it has %s): remove it or name the right product",
				products[0].Name, name, strings.Join(products[0].ProfileNames(), ", "))})
		case len(has) == 0:
			out = append(out, Problem{Field: field, Message: fmt.Sprintf("%q applies to %s, and none has MIG profile %s: remove it or name the right product",
				e.Product, strings.Join(lacks, ", "), name)})
		default:
			out = append(out, Problem{Field: field, Message: fmt.Sprintf("%q applies to %s, but MIG profile %s exists on %s only, so it is never used on %s: "+
				"give each product its own entry (such as %q) with its own profiles, the more specific entries first",
				e.Product, strings.Join(append(has, lacks...), ", "), name, strings.Join(has, " and "), strings.Join(lacks, " and "), has[0])})
		}
	}
	return out
}

// shadowed reports catalog entry j when earlier entries leave it nothing to apply to: its
// product contains an earlier one's (so every GPU it matches, known or not, the earlier one
// matches first), or every built-in product it may apply to is taken whole by earlier entries.
func shadowed(catalog []v1alpha1.CatalogEntry, j int) (Problem, bool) {
	later := catalog[j]
	field := fmt.Sprintf("spec.catalog[%d].product", j)
	for i, e := range catalog[:j] {
		if containsFold(later.Product, e.Product) {
			return Problem{Field: field, Message: fmt.Sprintf("entry %q is never used: every GPU whose product contains %q also contains %q, "+
				"and the earlier entry spec.catalog[%d] wins; list the more specific entry first", later.Product, later.Product, e.Product, i)}, true
		}
	}
	var by []string
	for _, p := range mig.Products() {
		if !appliesTo(later.Product, p) {
			continue
		}
		i := slices.IndexFunc(catalog[:j], func(e v1alpha1.CatalogEntry) bool { return takesWhole(e.Product, p) })
		if i < 0 {
			return Problem{}, false
		}
		by = append(by, fmt.Sprintf("spec.catalog[%d] (%q) takes every %s GPU", i, catalog[i].Product, p.Name))
	}
	if len(by) == 0 {
		return Problem{}, false
	}
	return Problem{Field: field, Message: fmt.Sprintf("entry %q is never used on a GPU gpupool knows: %s; list the more specific entry first, "+
		"or remove it", later.Product, strings.Join(by, ", "))}, true
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
