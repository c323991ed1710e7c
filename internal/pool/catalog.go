package pool

import (
	"strings"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// CatalogEntry finds the policy's catalog entry for a GPU of node n as the planner applies it
// (internal/planner/pool.go, catalog.entryFor): the first entry whose product is a
// case-insensitive substring of the GPU's reported name, the node's nvidia.com/gpu.product
// label or the built-in product's canonical name. It returns the entry's index, or -1 and nil
// when no entry names the GPU (the planner then carves nothing on it).
func CatalogEntry(catalog []v1alpha1.CatalogEntry, n *inventory.Node, g *inventory.GPU) (int, *v1alpha1.CatalogEntry) {
	names := []string{g.ProductName, ""}
	if n.Object != nil {
		names[1] = n.Object.Labels[nvidia.LabelGPUProduct]
	}
	if g.Product != nil {
		names = append(names, g.Product.Name)
	}
	for i := range catalog {
		want := strings.ToLower(catalog[i].Product)
		for _, name := range names {
			if name != "" && strings.Contains(strings.ToLower(name), want) {
				return i, &catalog[i]
			}
		}
	}
	return -1, nil
}

// AllowsProfile says whether a catalog entry lets the planner carve profile on a GPU of
// product p: one of its migProfiles is that profile under any of its names (aliases and the
// agent's spellings resolve through p). A nil entry allows nothing.
func AllowsProfile(entry *v1alpha1.CatalogEntry, p *mig.Product, profile string) bool {
	want, ok := p.Profile(profile)
	if entry == nil || !ok {
		return false
	}
	for _, name := range entry.MIGProfiles {
		if pr, ok := p.Profile(string(name)); ok && pr.Name == want.Name {
			return true
		}
	}
	return false
}

// AllowsTimeSlicing says whether a catalog entry lets the planner share its GPUs (or their MIG
// devices) by time-slicing, the only sharing it plans: NVIDIA's device plugin refuses MPS under
// the mixed MIG strategy (see Problems).
func AllowsTimeSlicing(entry *v1alpha1.CatalogEntry) bool {
	return entry != nil && entry.Sharing != nil && entry.Sharing.TimeSlicing != nil
}
