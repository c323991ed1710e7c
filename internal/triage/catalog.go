package triage

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/snapshot"
)

// forbidden is a catalog entry (its index; -1 for none) that keeps a shape off GPUs of the
// products it names.
type forbidden struct {
	entry    int
	products []string
}

// catalogObstacle says what in the policy's catalog keeps the pod off the pool nodes it may
// run on, when that, and not the GPUs the pool has, is the obstacle: the GPUs whose product
// has the pod's MIG profile, or that could be turned whole, are all under entries that leave
// it out. GPUs whose product lacks the profile are left out of the answer, since no catalog
// could give it to them. taken is true for a capacity verdict: the GPUs that offer the shape
// now, whatever the catalog says, are full, so only they are left out. It returns the reason
// and what to do; ok is false when some entry allows the shape (the catalog is not the
// obstacle) or nothing the catalog could change would.
func catalogObstacle(s *snapshot.Snapshot, inv *inventory.Snapshot, rows []NodeRow, policyName string,
	req corev1.ResourceList, taken bool) (reason, next string, ok bool) {
	pi := slices.IndexFunc(s.Policies, func(p v1alpha1.GPUPoolPolicy) bool { return p.Name == policyName })
	if pi < 0 {
		return "", "", false
	}
	catalog := s.Policies[pi].Spec.Catalog
	var profiles []string
	whole := false
	for name := range req {
		switch kind, profile, isGPU := demand.Classify(name); {
		case !isGPU:
		case kind == demand.KindMIG:
			profiles = append(profiles, profile)
		case kind == demand.KindGPU:
			whole = true
		}
	}
	slices.Sort(profiles)
	nodes := map[string]*inventory.Node{}
	for _, n := range inv.Nodes {
		nodes[n.Name] = n
	}
	// The first shape the catalog forbids everywhere is the answer; a pod asks for one.
	for _, profile := range profiles {
		by, allowed := forbiddenFor(rows, nodes, policyName, catalog, func(n *inventory.Node, g *inventory.GPU, entry *v1alpha1.CatalogEntry) (bool, bool) {
			if _, has := g.Product.Profile(profile); !has {
				return false, false // no catalog can give it to this product
			}
			if pool.AllowsProfile(entry, g.Product, profile) {
				return true, false
			}
			return false, !taken || !offers(g, profile)
		})
		if allowed || len(by) == 0 {
			continue
		}
		var parts, fixes []string
		for _, f := range by {
			products := strings.Join(f.products, ", ")
			if f.entry < 0 {
				parts = append(parts, "the policy's catalog has no entry for "+products)
				fixes = append(fixes, fmt.Sprintf("add an entry for %s to spec.catalog with %s among its migProfiles", products, profile))
				continue
			}
			e := catalog[f.entry]
			parts = append(parts, fmt.Sprintf("the policy's catalog entry for %s (spec.catalog[%d], product %q) does not allow %s (it allows %s)",
				products, f.entry, e.Product, profile, orNothing(e.MIGProfiles)))
			fixes = append(fixes, fmt.Sprintf("add %s to spec.catalog[%d].migProfiles", profile, f.entry))
		}
		reason = fmt.Sprintf("no GPU of pool %s that has MIG profile %s may be carved into it: %s", policyName, profile, strings.Join(parts, "; "))
		if taken {
			reason += "; the GPUs that offer it now are taken"
		}
		return reason, fmt.Sprintf("%s of policy %s (kubectl edit gpupoolpolicy %s), or change the pod's request",
			strings.Join(fixes, " and "), policyName, policyName), true
	}
	if !whole {
		return "", "", false
	}
	by, allowed := forbiddenFor(rows, nodes, policyName, catalog, func(n *inventory.Node, g *inventory.GPU, entry *v1alpha1.CatalogEntry) (bool, bool) {
		if entry != nil && entry.AllowWholeGPU {
			return true, false
		}
		return false, g.MIGEnabled // a GPU whole now serves whole-GPU pods whatever the catalog says
	})
	if allowed || len(by) == 0 {
		return "", "", false
	}
	var parts, fixes []string
	for _, f := range by {
		products := strings.Join(f.products, ", ")
		if f.entry < 0 {
			parts = append(parts, "the policy's catalog has no entry for "+products)
			fixes = append(fixes, fmt.Sprintf("add an entry for %s to spec.catalog with allowWholeGPU: true", products))
			continue
		}
		parts = append(parts, fmt.Sprintf("its catalog entry for %s (spec.catalog[%d], product %q) does not set allowWholeGPU",
			products, f.entry, catalog[f.entry].Product))
		fixes = append(fixes, fmt.Sprintf("set spec.catalog[%d].allowWholeGPU: true", f.entry))
	}
	reason = fmt.Sprintf("the policy does not allow whole GPUs on the GPUs of pool %s, so gpupool never turns MIG off there: %s",
		policyName, strings.Join(parts, "; "))
	if taken {
		reason += "; the GPUs that are whole now are taken"
	}
	return reason, fmt.Sprintf("%s in policy %s (kubectl edit gpupoolpolicy %s) to let gpupool turn MIG off on idle GPUs, or ask for a MIG profile instead",
		strings.Join(fixes, " and "), policyName, policyName), true
}

// forbiddenFor walks the GPUs of the policy's nodes in the matrix that pass placement and
// groups, by catalog entry, the products whose GPUs judge says the entry keeps the shape off;
// allowed is true as soon as one GPU's entry allows it.
func forbiddenFor(rows []NodeRow, nodes map[string]*inventory.Node, policyName string, catalog []v1alpha1.CatalogEntry,
	judge func(n *inventory.Node, g *inventory.GPU, entry *v1alpha1.CatalogEntry) (allows, forbids bool)) (by []forbidden, allowed bool) {
	for _, r := range rows {
		n := nodes[r.Node]
		if n == nil || r.Placement != "ok" || !slices.Contains(strings.Split(r.Policy, ","), policyName) {
			continue
		}
		for _, g := range n.GPUs {
			if g.Product == nil {
				continue
			}
			i, entry := pool.CatalogEntry(catalog, n, g)
			allows, forbids := judge(n, g, entry)
			if allows {
				return nil, true
			}
			if !forbids {
				continue
			}
			j := slices.IndexFunc(by, func(f forbidden) bool { return f.entry == i })
			if j < 0 {
				by = append(by, forbidden{entry: i})
				j = len(by) - 1
			}
			if label := g.Label(); !slices.Contains(by[j].products, label) {
				by[j].products = append(by[j].products, label)
			}
		}
	}
	slices.SortFunc(by, func(a, b forbidden) int { return cmp.Compare(a.entry, b.entry) })
	return by, false
}

// offers says whether the GPU has an instance of the profile now.
func offers(g *inventory.GPU, profile string) bool {
	want, _ := g.Product.Profile(profile)
	return slices.ContainsFunc(g.Instances, func(in inventory.Instance) bool {
		pr, ok := g.Product.Profile(in.Profile)
		return ok && pr.Name == want.Name
	})
}

func orNothing(profiles []v1alpha1.MIGProfileName) string {
	if len(profiles) == 0 {
		return "no MIG profile"
	}
	names := make([]string, len(profiles))
	for i, p := range profiles {
		names[i] = string(p)
	}
	return strings.Join(names, ", ")
}
