package sim

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/gpupool/gpupool/internal/mig"
)

// Blackwell's profile kinds at the simulated mig-parted: an entry in NVIDIA's config syntax
// naming +gfx, -me and +me.all profiles (as deployments/systemd/config-default.yaml does) is
// read with its names intact, and the simulated driver creates the layout.
func TestEntriesOfTheNewProfileKindsApply(t *testing.T) {
	for _, tc := range []struct {
		model  string
		layout mig.Layout
	}{
		{"RTX-PRO-6000-Blackwell", mig.Layout{"2g.48gb-me": 1, "1g.24gb+me.all": 1, "1g.24gb-me": 1}},
		{"RTX-PRO-6000-Blackwell", mig.Layout{"2g.48gb+gfx": 1, "1g.24gb+gfx": 2}},
		{"RTX-PRO-6000-Blackwell", mig.Layout{"4g.96gb+gfx": 1}},
		{"GB200", mig.Layout{"3g.93gb": 1, "2g.47gb": 1, "1g.23gb+me": 1, "1g.23gb": 1}},
	} {
		var devices strings.Builder
		for _, name := range tc.layout.Names() {
			fmt.Fprintf(&devices, "        %q: %d\n", name, tc.layout[name])
		}
		file, err := decodeMIGParted([]byte("version: v1\nmig-configs:\n  custom:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n" + devices.String()))
		if err != nil {
			t.Fatalf("%s: the simulated mig-parted refuses %s: %v", tc.model, tc.layout, err)
		}
		specs, err := file.selectMIGConfig("custom")
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
