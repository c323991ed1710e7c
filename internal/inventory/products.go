// Each GPU's MIG product table: the built-in one, or the agent's NVML report where it differs or the table lacks the product.

package inventory

import (
	"fmt"
	"strings"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
)

// productCache shares one compiled Product among GPUs that report the same profile table, so
// a 5,000-node snapshot compiles a handful of products, not 40,000; GPUs of one table also
// share its comparison with the built-in table.
type productCache map[string]table

// table is one product's geometry as gpupool plans with it, and how it compares with the
// built-in table.
type table struct {
	product   *mig.Product
	diff      string
	noBuiltin bool
}

func (c productCache) get(name string, reported []v1alpha1.GPUInstanceProfile) table {
	builtin, _ := mig.LookupProduct(name)
	if len(reported) == 0 {
		return table{product: builtin}
	}
	var b strings.Builder
	b.WriteString(name)
	for _, p := range reported {
		fmt.Fprintf(&b, "|%d:%s:%d:%d:%d", p.ID, p.Name, p.MemoryMiB, p.Slices, p.MaxCount)
		for _, pl := range p.Placements {
			fmt.Fprintf(&b, ",%d+%d", pl.Start, pl.Size)
		}
	}
	key := b.String()
	if t, ok := c[key]; ok {
		return t
	}
	t := table{product: fromReport(name, builtin, reported)}
	t.noBuiltin = builtin == nil && t.product != nil
	if t.product != builtin {
		t.diff = strings.Join(mig.TableDiff(builtin, t.product), "; ")
	}
	c[key] = t
	return t
}

// fromReport builds the geometry the agent read through NVML; it overrides the built-in table
// because drivers rename profiles and NVML is the authority on placements. A report the
// geometry code rejects falls back to the built-in table.
func fromReport(name string, builtin *mig.Product, reported []v1alpha1.GPUInstanceProfile) *mig.Product {
	memSlices, computeSlices := 0, 0
	profiles := make([]mig.Profile, 0, len(reported))
	for _, r := range reported {
		pr := mig.Profile{ID: int(r.ID), Name: r.Name, ComputeSlices: int(r.Slices),
			MemoryMiB: int(r.MemoryMiB), MaxCount: int(r.MaxCount)}
		for _, pl := range r.Placements {
			pr.Placements = append(pr.Placements, mig.Placement{Start: int(pl.Start), Size: int(pl.Size)})
			memSlices = max(memSlices, int(pl.Start+pl.Size))
		}
		computeSlices = max(computeSlices, int(r.Slices))
		if builtin != nil {
			if b, ok := builtin.ProfileByID(pr.ID, memSlicesOf(pr)); ok {
				pr.Aliases = append([]string{b.Name}, b.Aliases...)
			}
		}
		profiles = append(profiles, pr)
	}
	productName := name
	if builtin != nil {
		productName = builtin.Name
		memSlices, computeSlices = builtin.MemorySlices, builtin.ComputeSlices
	}
	p, err := mig.NewProductFromProfiles(productName, memSlices, computeSlices, profiles)
	if err != nil {
		return builtin
	}
	return p
}

func memSlicesOf(p mig.Profile) int {
	if len(p.Placements) == 0 {
		return 0
	}
	return p.Placements[0].Size
}
