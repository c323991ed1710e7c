package inventory_test

import (
	"maps"
	"testing"

	"github.com/gpupool/gpupool/internal/mig"
)

// Partitions are the driver's devices for the GPU with their placements and counters besides
// memory slices, by name, the whole GPU spanning every slice.
func TestDynamicMIGPartitions(t *testing.T) {
	p := h200Product(t)
	supply := dmSupply(t, []held{{"1g.18gb", 0, true}})
	parts := supply.GPUs[0].Partitions()
	n := 1 // the whole GPU
	for _, pr := range p.Profiles {
		n += len(pr.Placements)
	}
	if len(parts) != n {
		t.Fatalf("%d partitions, want %d", len(parts), n)
	}
	three, _ := p.Profile("3g.71gb")
	for _, part := range parts {
		switch part.Name {
		case dmDevice(0, *three, 4):
			if part.Profile != "3g.71gb" || part.Placement != (mig.Placement{Start: 4, Size: 4}) {
				t.Errorf("3g at 4: %+v", part)
			}
			want := map[string]int64{"multiprocessors": 48, "decoders": 3, "memory": 4 * 18 << 30, "ofa-engines": 0}
			if !maps.Equal(part.Counters, want) {
				t.Errorf("3g at 4 consumes %v, want %v", part.Counters, want)
			}
		case "gpu-0":
			if part.Profile != "" || part.Placement != (mig.Placement{Start: 0, Size: 8}) {
				t.Errorf("the whole GPU: %+v", part)
			}
		}
	}
}
