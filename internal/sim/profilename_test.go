package sim

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupool/gpupool/internal/agent"
)

// TestProfileNamesAgreeWithTheAgents holds the simulator's namer, written from go-nvlib's
// rule with floating point as go-nvlib computes it, against the agent's integer one, on every
// profile of every simulated GPU model: the agent reports these names and the simulated
// mig-manager accepts them, so where the two differ one of them is wrong on real hardware.
func TestProfileNamesAgreeWithTheAgents(t *testing.T) {
	for _, m := range Models() {
		n := newTestNode(t, m.Name, 1, PresetAllDisabled)
		profiles, err := n.readProfiles(0)
		if err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		d, err := n.device(0)
		if err != nil {
			t.Fatal(err)
		}
		mem, ret := d.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			t.Fatalf("%s: GetMemoryInfo: %s", m.Name, ret.Error())
		}
		if len(profiles) == 0 {
			t.Fatalf("%s: no profiles", m.Name)
		}
		for _, p := range profiles {
			if want := agent.ProfileName(p.constant, p.info, mem.Total); p.slot.Name != want {
				t.Errorf("%s profile %d: simulator names it %s, the agent %s", m.Name, p.constant, p.slot.Name, want)
			}
		}
	}
}

// TestProfileNameRounding pins the rule on memory sizes where rounding to eighths matters: a
// profile a hair over an eighth of the GPU takes the next eighth.
func TestProfileNameRounding(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		id     int
		slices uint32
		memMB  uint64
		total  uint64
		want   string
	}{
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 9856, 80 * gib, "1g.10gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 1, 19968, 80 * gib, "1g.20gb"},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 7, 80000, 80 * gib, "7g.80gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 1, 9856, 80 * gib, "1g.10gb+me"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, 1, 9856, 80 * gib, "1g.10gb-me"},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX, 2, 19968, 80 * gib, "2g.20gb+gfx"},
	} {
		info := nvml.GpuInstanceProfileInfo{SliceCount: tc.slices, MemorySizeMB: tc.memMB}
		if got := profileName(tc.id, info, tc.total); got != tc.want {
			t.Errorf("profile %d with %d MiB of %d GiB: %s, want %s", tc.id, tc.memMB, tc.total/gib, got, tc.want)
		}
	}
}
