package sim

import (
	"maps"
	"testing"

	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// The boundary for Blackwell's profile kinds: an entry gpupool writes for the RTX PRO 6000's
// +gfx, -me and +me.all profiles (and for a GB200) is read by the simulated mig-parted as
// NVIDIA's reads it, keeps its names, and the simulated driver can create the layout.
func TestWrittenEntriesOfTheNewProfileKindsApply(t *testing.T) {
	for _, tc := range []struct {
		model  string
		layout mig.Layout
	}{
		{"RTX-PRO-6000-Blackwell", mig.Layout{"2g.48gb-me": 1, "1g.24gb+me.all": 1, "1g.24gb-me": 1}},
		{"RTX-PRO-6000-Blackwell", mig.Layout{"2g.48gb+gfx": 1, "1g.24gb+gfx": 2}},
		{"RTX-PRO-6000-Blackwell", mig.Layout{"4g.96gb+gfx": 1}},
		{"GB200", mig.Layout{"3g.93gb": 1, "2g.47gb": 1, "1g.23gb+me": 1, "1g.23gb": 1}},
	} {
		out, err := nvidia.UpdateConfig(nil, map[string][]mig.GPUTarget{
			"gpupool-test": {{Index: 0, MIGEnabled: true, Layout: tc.layout}},
		}, nil, nil)
		if err != nil {
			t.Fatalf("%s: writing %s: %v", tc.model, tc.layout, err)
		}
		file, err := decodeMIGParted(out)
		if err != nil {
			t.Fatalf("%s: the simulated mig-parted refuses gpupool's file: %v\n%s", tc.model, err, out)
		}
		specs, err := file.selectMIGConfig("gpupool-test")
		if err != nil || len(specs) != 1 {
			t.Fatalf("%s: entry %v, %v", tc.model, specs, err)
		}
		if got := mig.Layout(specs[0].MIGDevices); !maps.Equal(got, tc.layout) {
			t.Errorf("%s: mig-devices %v, want %v", tc.model, got, tc.layout)
		}
		n, err := NewNode(NodeSpec{Name: "n", Model: tc.model, GPUs: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ChooseSlots(n.slotProfiles(0), tc.layout); err != nil {
			t.Errorf("%s: the simulated driver refuses %s: %v", tc.model, tc.layout, err)
		}
	}
}
