package sim

import (
	"reflect"
	"slices"
	"testing"

	"github.com/gpupool/gpupool/internal/mig"
)

// --nodes groups expand to uniquely named nodes, numbered per model across groups, and
// malformed groups are refused with the group named.
func TestParseNodeSpecs(t *testing.T) {
	got, err := ParseNodeSpecs("2xh200:8:all-1g, a100-80gb:4,H200-141GB:2:all-7g,h200:2:all-1g:dra")
	if err != nil {
		t.Fatal(err)
	}
	want := []NodeSpec{
		{Name: "sim-h200-0", Model: "H200-141GB", GPUs: 8, InitialConfig: PresetAll1g},
		{Name: "sim-h200-1", Model: "H200-141GB", GPUs: 8, InitialConfig: PresetAll1g},
		{Name: "sim-a100-80gb-0", Model: "A100-80GB", GPUs: 4, InitialConfig: PresetAllDisabled},
		{Name: "sim-h200-2", Model: "H200-141GB", GPUs: 2, InitialConfig: PresetAll7g},
		{Name: "sim-h200-3", Model: "H200-141GB", GPUs: 2, InitialConfig: PresetAll1g, DRA: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseNodeSpecs = %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{"", "h200", "h200:0", "h200:x", "0xh200:1", "v100:1", "h200:1:all-9g", "h200:1:all-1g:extra", "h200:1:all-1g:dra:x"} {
		if specs, err := ParseNodeSpecs(bad); err == nil {
			t.Errorf("ParseNodeSpecs(%q) = %+v, want an error", bad, specs)
		}
	}
}

// Every model's GPU Feature Discovery product label is recognised by internal/mig as that
// model, so the controller plans simulated nodes with the right geometry.
func TestModelProductLabelsMatchGeometry(t *testing.T) {
	for _, m := range Models() {
		p, ok := mig.LookupProduct(m.ProductLabel)
		if !ok {
			t.Errorf("%s: label %q not recognised by mig.LookupProduct", m.Name, m.ProductLabel)
			continue
		}
		if p.Name != m.Name {
			t.Errorf("%s: label %q looks up %s", m.Name, m.ProductLabel, p.Name)
		}
		if again, err := LookupModel(m.Aliases[0]); err != nil || again.Name != m.Name {
			t.Errorf("LookupModel(%q) = %s, %v", m.Aliases[0], again.Name, err)
		}
	}
}

// The simulator's NVML table of every model (go-nvml's mock, corrected, or derived from one)
// and internal/mig's built-in table are written independently; they must agree on every
// profile's name, slices, count and placements, or one of them is wrong about the part.
func TestModelTablesMatchBuiltinGeometry(t *testing.T) {
	for _, m := range Models() {
		product, ok := mig.LookupProduct(m.ProductLabel)
		if !ok {
			continue // reported by TestModelProductLabelsMatchGeometry
		}
		n, err := NewNode(NodeSpec{Name: "n", Model: m.Name, GPUs: 1})
		if err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		simulated := map[string]SlotProfile{}
		for _, sp := range n.slotProfiles(0) {
			simulated[sp.Name] = sp
		}
		for _, pr := range product.Profiles {
			sp, ok := simulated[pr.Name]
			if !ok {
				t.Errorf("%s: the simulated GPU has no %s", m.Name, pr.Name)
				continue
			}
			delete(simulated, pr.Name)
			var starts []int
			for _, pl := range pr.Placements {
				starts = append(starts, pl.Start)
			}
			if sp.ComputeSlices != pr.ComputeSlices || sp.MemorySlices != pr.MemorySlices || sp.MaxCount != pr.MaxCount || !slices.Equal(sp.Starts, starts) {
				t.Errorf("%s %s: simulated %+v, built-in %dg %d memory slices x%d at %v", m.Name, pr.Name, sp,
					pr.ComputeSlices, pr.MemorySlices, pr.MaxCount, starts)
			}
		}
		for name := range simulated {
			t.Errorf("%s: the simulated GPU has %s, the built-in table does not", m.Name, name)
		}
	}
}

// Every preset builds on every model that has its profiles, the mock then holds exactly the
// preset's layout, and the profile names the simulator reads from NVML are the names
// internal/mig knows for the model (what pods request and plans write).
func TestPresetsOnEveryModel(t *testing.T) {
	for _, m := range Models() {
		product, _ := mig.LookupProduct(m.ProductLabel)
		for _, preset := range Presets() {
			n, err := NewNode(NodeSpec{Name: "n", Model: m.Name, GPUs: 2, InitialConfig: preset})
			if err != nil {
				if product.MemorySlices == 4 && (preset == PresetAll3g || preset == PresetAll7g) {
					continue // the 4-slice parts (A30, RTX PRO 6000) have neither profile
				}
				t.Errorf("%s %s: %v", m.Name, preset, err)
				continue
			}
			target, err := presetTarget(preset, n.profiles[0])
			if err != nil {
				t.Fatal(err)
			}
			gpus, err := n.GPUs()
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range gpus {
				if !target.equal(g) {
					t.Errorf("%s %s: GPU %d is %s, want %s", m.Name, preset, g.Index, describe(g), target)
				}
				for _, in := range g.Instances {
					if product != nil {
						if _, ok := product.Profile(in.Profile); !ok {
							t.Errorf("%s %s: profile %s unknown to internal/mig", m.Name, preset, in.Profile)
						}
					}
				}
			}
		}
	}
}

// The simulated driver and the built-in geometry decide independently which layouts a GPU
// takes: the driver by placements and the media engines NVML says each profile takes, the
// geometry by placements and the media kinds in the profile names. They must agree on every
// layout of one or two instances (where the media rules bite: two +me, a +me.all beside a
// plain slice) and accept every maximal layout the geometry lists.
func TestSimulatedDriverAgreesWithTheGeometry(t *testing.T) {
	for _, m := range Models() {
		product, ok := mig.LookupProduct(m.ProductLabel)
		if !ok {
			continue
		}
		n, err := NewNode(NodeSpec{Name: "n", Model: m.Name, GPUs: 1})
		if err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		profiles := n.slotProfiles(0)
		names := product.ProfileNames()
		var layouts []mig.Layout
		for i, a := range names {
			layouts = append(layouts, mig.Layout{a: 1})
			for _, b := range names[i:] {
				l := mig.Layout{a: 1}
				l[b]++
				layouts = append(layouts, l)
			}
		}
		for _, l := range layouts {
			_, err := ChooseSlots(profiles, l)
			if fits := product.Fits(l); fits != (err == nil) {
				t.Errorf("%s %s: geometry fits %t, simulated driver: %v", m.Name, l, fits, err)
			}
		}
		for _, l := range product.MaximalLayoutsOf(names) {
			if _, err := ChooseSlots(profiles, l); err != nil {
				t.Errorf("%s: maximal layout %s refused: %v", m.Name, l, err)
			}
		}
	}
}
