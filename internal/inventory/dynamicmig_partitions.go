// The partition devices the driver publishes for a DynamicMIG GPU, for planners outside this
// package.

package inventory

import (
	"maps"
	"slices"
	"strings"

	"github.com/gpupool/gpupool/internal/mig"
)

// DynamicMIGPartition is one device NVIDIA's DRA driver publishes for a GPU in DynamicMIG mode:
// a profile at a placement (or the whole GPU), read from its attributes and counters.
type DynamicMIGPartition struct {
	// Name is the driver's device name, what a DeviceTaintRule and an allocation name.
	Name string
	// Profile is the MIG profile as the driver spells it; "" for the whole GPU.
	Profile   string
	Placement mig.Placement
	// Counters are what the device consumes besides memory slices (multiprocessors, engines).
	Counters map[string]int64
	// Taint says who taints the device NoSchedule or NoExecute (its slice, or a
	// DeviceTaintRule that ApplyDeviceTaints was given); "" when nothing keeps a claim off it.
	Taint string
}

// Partitions lists the GPU's partition devices by name; the whole GPU spans every memory
// slice. Nil when the driver's slices list none for the GPU.
func (g *DynamicMIGGPU) Partitions() []DynamicMIGPartition {
	var out []DynamicMIGPartition
	for _, p := range g.partitions {
		pl := p.placement
		if p.profile == "" && pl.Size == 0 {
			pl = mig.Placement{Start: 0, Size: len(g.Slices)}
		}
		out = append(out, DynamicMIGPartition{Name: p.name, Profile: p.profile, Placement: pl, Counters: maps.Clone(p.counters), Taint: p.taint})
	}
	slices.SortFunc(out, func(a, b DynamicMIGPartition) int { return strings.Compare(a.Name, b.Name) })
	return out
}
