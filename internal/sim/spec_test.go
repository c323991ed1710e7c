package sim

import (
	"reflect"
	"testing"

	"github.com/gpupool/gpupool/internal/mig"
)

// --nodes groups expand to uniquely named nodes, numbered per model across groups, and
// malformed groups are refused with the group named.
func TestParseNodeSpecs(t *testing.T) {
	got, err := ParseNodeSpecs("2xh200:8:all-1g, a100-80gb:4,H200-141GB:2:all-7g")
	if err != nil {
		t.Fatal(err)
	}
	want := []NodeSpec{
		{Name: "sim-h200-0", Model: "H200-141GB", GPUs: 8, InitialConfig: PresetAll1g},
		{Name: "sim-h200-1", Model: "H200-141GB", GPUs: 8, InitialConfig: PresetAll1g},
		{Name: "sim-a100-80gb-0", Model: "A100-80GB", GPUs: 4, InitialConfig: PresetAllDisabled},
		{Name: "sim-h200-2", Model: "H200-141GB", GPUs: 2, InitialConfig: PresetAll7g},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseNodeSpecs = %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{"", "h200", "h200:0", "h200:x", "0xh200:1", "v100:1", "h200:1:all-9g", "h200:1:all-1g:extra"} {
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

// Every preset builds on every model that has its profiles, the mock then holds exactly the
// preset's layout, and the profile names the simulator reads from NVML are the names
// internal/mig knows for the model (what pods request and plans write).
func TestPresetsOnEveryModel(t *testing.T) {
	for _, m := range Models() {
		product, _ := mig.LookupProduct(m.ProductLabel)
		for _, preset := range Presets() {
			n, err := NewNode(NodeSpec{Name: "n", Model: m.Name, GPUs: 2, InitialConfig: preset})
			if err != nil {
				if m.Name == "A30-24GB" && (preset == PresetAll3g || preset == PresetAll7g) {
					continue // the A30 has neither profile
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
