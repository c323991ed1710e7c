// The built-in table of NVIDIA's MIG-capable products: NVML profile IDs, each product's
// profiles and placements, and the helpers that spell them. Data, not logic.

package mig

import (
	"slices"
)

// NVML GPU-instance profile IDs (nvmlGpuInstanceProfile*, as go-nvml's const.go
// spells them). Names drift across drivers, so profiles are keyed by ID plus
// memory-slice size instead of by name.
const (
	// GIProfile1Slice is NVML_GPU_INSTANCE_PROFILE_1_SLICE: the plain 1g profile.
	GIProfile1Slice = 0
	// GIProfile2Slice is NVML_GPU_INSTANCE_PROFILE_2_SLICE: the 2g profile.
	GIProfile2Slice = 1
	// GIProfile3Slice is NVML_GPU_INSTANCE_PROFILE_3_SLICE: the 3g profile.
	GIProfile3Slice = 2
	// GIProfile4Slice is NVML_GPU_INSTANCE_PROFILE_4_SLICE: the 4g profile.
	GIProfile4Slice = 3
	// GIProfile7Slice is NVML_GPU_INSTANCE_PROFILE_7_SLICE: the whole-GPU 7g profile.
	GIProfile7Slice = 4
	// GIProfile8Slice is NVML_GPU_INSTANCE_PROFILE_8_SLICE, unused by the built-in products.
	GIProfile8Slice = 5
	// GIProfile6Slice is NVML_GPU_INSTANCE_PROFILE_6_SLICE, unused by the built-in products.
	GIProfile6Slice = 6
	// GIProfile1SliceRev1 is NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: 1g with media extensions (+me).
	GIProfile1SliceRev1 = 7
	// GIProfile2SliceRev1 is NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1: 2g with media extensions (A30).
	GIProfile2SliceRev1 = 8
	// GIProfile1SliceRev2 is NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: 1g with two memory slices.
	GIProfile1SliceRev2 = 9
	// GIProfile1SliceGfx is NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX: 1g with graphics (+gfx).
	GIProfile1SliceGfx = 10
	// GIProfile2SliceGfx is NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX: 2g with graphics (+gfx).
	GIProfile2SliceGfx = 11
	// GIProfile4SliceGfx is NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX: 4g with graphics (+gfx).
	GIProfile4SliceGfx = 12
	// GIProfile1SliceNoME is NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME: 1g without media engines (-me).
	GIProfile1SliceNoME = 13
	// GIProfile2SliceNoME is NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME: 2g without media engines (-me).
	GIProfile2SliceNoME = 14
	// GIProfile1SliceAllME is NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME: 1g with every media engine (+me.all).
	GIProfile1SliceAllME = 15
	// GIProfile2SliceAllME is NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME: 2g with every media engine (+me.all).
	GIProfile2SliceAllME = 16
)

func placements(size int, starts ...int) []Placement {
	out := make([]Placement, len(starts))
	for i, s := range starts {
		out[i] = Placement{Start: s, Size: size}
	}
	return out
}

// names of the seven profiles of an 8-slice product, larger first; mib holds
// the matching per-instance memory.
type eightSlice struct {
	g7, g4, g3, g2, g1d, g1 string
	mib                     [6]int // 7g, 4g, 3g, 2g, 1g double, 1g
	aliases                 map[string][]string
}

// The 8-memory-slice, 7-compute-slice products share one placement table
// (A100 and H100 from nvidia-smi captures; the later Hopper and Blackwell
// parts use the same profile IDs and are assumed to match: inferredEight).
func (e eightSlice) profiles() []Profile {
	ps := []Profile{
		{ID: GIProfile7Slice, Name: e.g7, ComputeSlices: 7, MemorySlices: 8, MemoryMiB: e.mib[0], MaxCount: 1, Placements: placements(8, 0)},
		{ID: GIProfile4Slice, Name: e.g4, ComputeSlices: 4, MemorySlices: 4, MemoryMiB: e.mib[1], MaxCount: 1, Placements: placements(4, 0)},
		{ID: GIProfile3Slice, Name: e.g3, ComputeSlices: 3, MemorySlices: 4, MemoryMiB: e.mib[2], MaxCount: 2, Placements: placements(4, 0, 4)},
		{ID: GIProfile2Slice, Name: e.g2, ComputeSlices: 2, MemorySlices: 2, MemoryMiB: e.mib[3], MaxCount: 3, Placements: placements(2, 0, 2, 4)},
		{ID: GIProfile1SliceRev2, Name: e.g1d, ComputeSlices: 1, MemorySlices: 2, MemoryMiB: e.mib[4], MaxCount: 4, Placements: placements(2, 0, 2, 4, 6)},
		{ID: GIProfile1Slice, Name: e.g1, ComputeSlices: 1, MemorySlices: 1, MemoryMiB: e.mib[5], MaxCount: 7, Placements: placements(1, 0, 1, 2, 3, 4, 5, 6)},
		{ID: GIProfile1SliceRev1, Name: e.g1 + "+me", ComputeSlices: 1, MemorySlices: 1, MemoryMiB: e.mib[5], MaxCount: 1, Placements: placements(1, 0, 1, 2, 3, 4, 5, 6), Media: MediaExtensions},
	}
	for i := range ps {
		ps[i].Aliases = e.aliases[ps[i].Name]
	}
	return ps
}

// inferredEight is the Inferred note of every 8-slice product without a capture.
const inferredEight = "same NVML profile IDs, counts and memory-slice sizes as the A100 and H100, whose placements are captured; assumed to share their placements"

// gib is a per-instance memory derived from the profile name (GB x 1024 MiB);
// used where no NVML capture was available, so expect the agent's report to
// differ by a few hundred MiB.
func gib(gb int) int { return gb * 1024 }

// driftAliases80 are names seen for the 80GB profiles on some drivers, whose
// naming rounds the memory fraction against a slightly smaller total.
var driftAliases80 = map[string][]string{
	"7g.80gb": {"7g.79gb"},
	"4g.40gb": {"4g.39gb"},
	"3g.40gb": {"3g.39gb"},
}

var builtin = []*Product{
	{
		Name:          "A30-24GB",
		Match:         []string{"A30"},
		PCIDeviceIDs:  []uint16{0x20B7},
		Names:         []string{"NVIDIA A30"},
		MemorySlices:  4,
		ComputeSlices: 4,
		// Memory from go-nvml's A30 mock, which docs/architecture.md says matches real devices.
		Profiles: []Profile{
			{ID: GIProfile4Slice, Name: "4g.24gb", ComputeSlices: 4, MemorySlices: 4, MemoryMiB: 23344, MaxCount: 1, Placements: placements(4, 0)},
			{ID: GIProfile2Slice, Name: "2g.12gb", ComputeSlices: 2, MemorySlices: 2, MemoryMiB: 11672, MaxCount: 2, Placements: placements(2, 0, 2)},
			{ID: GIProfile2SliceRev1, Name: "2g.12gb+me", ComputeSlices: 2, MemorySlices: 2, MemoryMiB: 11672, MaxCount: 1, Placements: placements(2, 0, 2), Media: MediaExtensions},
			{ID: GIProfile1Slice, Name: "1g.6gb", ComputeSlices: 1, MemorySlices: 1, MemoryMiB: 5836, MaxCount: 4, Placements: placements(1, 0, 1, 2, 3)},
			{ID: GIProfile1SliceRev1, Name: "1g.6gb+me", ComputeSlices: 1, MemorySlices: 1, MemoryMiB: 5836, MaxCount: 1, Placements: placements(1, 0, 1, 2, 3), Media: MediaExtensions},
		},
	},
	{
		Name:          "A100-40GB",
		Match:         []string{"A100-40GB", "A800-40GB"},
		PCIDeviceIDs:  []uint16{0x20B0, 0x20B1, 0x20F1, 0x20F6},
		Names:         []string{"NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"},
		MemorySlices:  8,
		ComputeSlices: 7,
		// Memory from go-nvml's dgxa100 mock (an nvidia-smi capture).
		Profiles: eightSlice{
			g7: "7g.40gb", g4: "4g.20gb", g3: "3g.20gb", g2: "2g.10gb", g1d: "1g.10gb", g1: "1g.5gb",
			mib: [6]int{40192, 19968, 19968, 9856, 9856, 4864},
		}.profiles(),
	},
	{
		Name:          "A100-80GB",
		Match:         []string{"A100-80GB", "A800-80GB"},
		PCIDeviceIDs:  []uint16{0x20B2, 0x20B5, 0x20F3, 0x20F5},
		Names:         []string{"NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A800-SXM4-80GB"},
		MemorySlices:  8,
		ComputeSlices: 7,
		// Memory from go-nvml's A100 80GB mock.
		Profiles: eightSlice{
			g7: "7g.80gb", g4: "4g.40gb", g3: "3g.40gb", g2: "2g.20gb", g1d: "1g.20gb", g1: "1g.10gb",
			mib:     [6]int{80384, 40192, 40192, 19968, 19968, 9856},
			aliases: driftAliases80,
		}.profiles(),
	},
	{
		Name: "H100-80GB",
		// H100 NVL and H800 NVL are 94GB parts with other profile names.
		Match: []string{"H100-80GB", "H100-PCIE-!NVL-!94GB-!96GB", "H100-SXM5-!94GB-!96GB-!64GB", "H800-!NVL-!94GB"},
		// 0x2324 is the H800-80GB, which NVIDIA's config groups with the H100-80GB.
		PCIDeviceIDs:  []uint16{0x2330, 0x2331, 0x2322, 0x2324},
		Names:         []string{"NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H800"},
		MemorySlices:  8,
		ComputeSlices: 7,
		Profiles: eightSlice{
			g7: "7g.80gb", g4: "4g.40gb", g3: "3g.40gb", g2: "2g.20gb", g1d: "1g.20gb", g1: "1g.10gb",
			mib:     [6]int{gib(80), gib(40), gib(40), gib(20), gib(20), gib(10)},
			aliases: driftAliases80,
		}.profiles(),
	},
	{
		Name:          "H200-141GB",
		Match:         []string{"H200"},
		PCIDeviceIDs:  []uint16{0x2335, 0x233B},
		Names:         []string{"NVIDIA H200", "NVIDIA H200 NVL"},
		MemorySlices:  8,
		ComputeSlices: 7,
		Profiles: eightSlice{
			g7: "7g.141gb", g4: "4g.71gb", g3: "3g.71gb", g2: "2g.35gb", g1d: "1g.35gb", g1: "1g.18gb",
			mib: [6]int{gib(141), gib(71), gib(71), gib(35), gib(35), gib(18)},
		}.profiles(),
		Inferred: inferredEight,
	},
	{
		Name:          "B200",
		Match:         []string{"B200"},
		PCIDeviceIDs:  []uint16{0x2901},
		Names:         []string{"NVIDIA B200"},
		MemorySlices:  8,
		ComputeSlices: 7,
		Profiles: eightSlice{
			g7: "7g.180gb", g4: "4g.90gb", g3: "3g.90gb", g2: "2g.45gb", g1d: "1g.45gb", g1: "1g.23gb",
			mib: [6]int{gib(180), gib(90), gib(90), gib(45), gib(45), gib(23)},
		}.profiles(),
		Inferred: inferredEight,
	},
	{
		Name:          "H100-94GB",
		Match:         []string{"H100-NVL", "H800-NVL", "H100-94GB", "H800-94GB"},
		PCIDeviceIDs:  []uint16{0x2321, 0x233A}, // H100 NVL, H800 NVL
		Names:         []string{"NVIDIA H100 NVL", "NVIDIA H800 NVL"},
		MemorySlices:  8,
		ComputeSlices: 7,
		Profiles: eightSlice{
			g7: "7g.94gb", g4: "4g.47gb", g3: "3g.47gb", g2: "2g.24gb", g1d: "1g.24gb", g1: "1g.12gb",
			mib: [6]int{gib(94), gib(47), gib(47), gib(24), gib(24), gib(12)},
		}.profiles(),
		Inferred: inferredEight,
	},
	{
		Name: "H100-96GB",
		// GH200's Hopper GPU with 96GB HBM3, the H100-96GB, the PG506-96GB and the H20.
		Match:         []string{"H100-96GB", "H20", "PG506-96GB", "GH200-!144G-!HBM3E"},
		PCIDeviceIDs:  []uint16{0x2342, 0x233D, 0x20B6, 0x2329},
		Names:         []string{"NVIDIA H20", "NVIDIA GH200 480GB"},
		MemorySlices:  8,
		ComputeSlices: 7,
		Profiles: eightSlice{
			g7: "7g.96gb", g4: "4g.48gb", g3: "3g.48gb", g2: "2g.24gb", g1d: "1g.24gb", g1: "1g.12gb",
			mib: [6]int{gib(96), gib(48), gib(48), gib(24), gib(24), gib(12)},
		}.profiles(),
		Inferred: inferredEight,
	},
	{
		Name:          "GH200-144GB",
		Match:         []string{"GH200-144G", "GH200-HBM3E", "GH200-144GB"},
		PCIDeviceIDs:  []uint16{0x2348},
		Names:         []string{"NVIDIA GH200 144G HBM3e"},
		MemorySlices:  8,
		ComputeSlices: 7,
		Profiles: eightSlice{
			g7: "7g.144gb", g4: "4g.72gb", g3: "3g.72gb", g2: "2g.36gb", g1d: "1g.36gb", g1: "1g.18gb",
			mib: [6]int{gib(144), gib(72), gib(72), gib(36), gib(36), gib(18)},
		}.profiles(),
		Inferred: inferredEight,
	},
	{
		Name:          "GB200",
		Match:         []string{"GB200"},
		PCIDeviceIDs:  []uint16{0x2941},
		Names:         []string{"NVIDIA GB200"},
		MemorySlices:  8,
		ComputeSlices: 7,
		Profiles: eightSlice{
			g7: "7g.186gb", g4: "4g.93gb", g3: "3g.93gb", g2: "2g.47gb", g1d: "1g.47gb", g1: "1g.23gb",
			mib: [6]int{gib(186), gib(93), gib(93), gib(47), gib(47), gib(23)},
			// NVIDIA first published the GB200 with these names (mig-parted commit
			// 89dd81a3, "add support for HGX GB200") and corrected them to the
			// production boards' in ebab1f77; config-default.yaml still carries
			// all-3g.95gb, all-4g.95gb and all-7g.189gb, which can only mean a GB200.
			aliases: map[string][]string{"7g.186gb": {"7g.189gb"}, "4g.93gb": {"4g.95gb"}, "3g.93gb": {"3g.95gb"}},
		}.profiles(),
		Inferred: inferredEight,
	},
	{
		Name:          "B300",
		Match:         []string{"B300"},
		PCIDeviceIDs:  []uint16{0x3182},
		Names:         []string{"NVIDIA B300 SXM6 AC"},
		MemorySlices:  8,
		ComputeSlices: 7,
		Profiles: eightSlice{
			g7: "7g.269gb", g4: "4g.135gb", g3: "3g.135gb", g2: "2g.67gb", g1d: "1g.67gb", g1: "1g.34gb",
			mib: [6]int{gib(269), gib(135), gib(135), gib(67), gib(67), gib(34)},
		}.profiles(),
		Inferred: inferredEight,
	},
	{
		Name:          "GB300",
		Match:         []string{"GB300"},
		PCIDeviceIDs:  []uint16{0x31C2},
		Names:         []string{"NVIDIA GB300"},
		MemorySlices:  8,
		ComputeSlices: 7,
		Profiles: eightSlice{
			g7: "7g.278gb", g4: "4g.139gb", g3: "3g.139gb", g2: "2g.70gb", g1d: "1g.70gb", g1: "1g.35gb",
			mib: [6]int{gib(278), gib(139), gib(139), gib(70), gib(70), gib(35)},
		}.profiles(),
		Inferred: inferredEight,
	},
	{
		Name:          "RTX-PRO-6000-Blackwell",
		Match:         []string{"RTX-PRO-6000-BLACKWELL"},
		PCIDeviceIDs:  []uint16{0x2BB5}, // Server Edition, as NVIDIA's config filters it
		Names:         []string{"NVIDIA RTX PRO 6000 Blackwell Server Edition"},
		MemorySlices:  4,
		ComputeSlices: 4,
		Profiles:      rtxProBlackwell(),
		Inferred: "placements as the A30's, the other 4-slice part (0, 0-1 and 2-3, 0-3); the variants share their plain profile's " +
			"placements; a +me.all instance is assumed to leave only -me instances beside it",
	},
}

// rtxProBlackwell is the RTX PRO 6000 Blackwell's table: four plain profiles'
// worth of slices, each size in a plain, a graphics (+gfx), a no-media (-me)
// and, for 1g and 2g, an all-media (+me.all) variant, as NVIDIA's config lists
// them (all-1g.24gb.gfx, all-1g.24gb-me, all-1g.24gb.me.all, ...).
func rtxProBlackwell() []Profile {
	type size struct {
		g, mem, max int
		name        string
		ids         [4]int // plain, +gfx, -me, +me.all (-1: no such variant)
	}
	sizes := []size{
		{4, 4, 1, "4g.96gb", [4]int{GIProfile4Slice, GIProfile4SliceGfx, -1, -1}},
		{2, 2, 2, "2g.48gb", [4]int{GIProfile2Slice, GIProfile2SliceGfx, GIProfile2SliceNoME, GIProfile2SliceAllME}},
		{1, 1, 4, "1g.24gb", [4]int{GIProfile1Slice, GIProfile1SliceGfx, GIProfile1SliceNoME, GIProfile1SliceAllME}},
	}
	var out []Profile
	for _, sz := range sizes {
		starts := make([]int, 0, 4)
		for s := 0; s+sz.mem <= 4; s += sz.mem {
			starts = append(starts, s)
		}
		base := Profile{ComputeSlices: sz.g, MemorySlices: sz.mem, MemoryMiB: gib(24 * sz.mem), MaxCount: sz.max,
			Placements: placements(sz.mem, starts...)}
		variants := []struct {
			suffix   string
			media    Media
			graphics bool
			max      int
		}{{"", MediaShare, false, sz.max}, {"+gfx", MediaShare, true, sz.max}, {"-me", MediaNone, false, sz.max}, {"+me.all", MediaAll, false, 1}}
		for k, v := range variants {
			if sz.ids[k] < 0 {
				continue
			}
			pr := base
			pr.ID, pr.Name, pr.Media, pr.Graphics, pr.MaxCount = sz.ids[k], sz.name+v.suffix, v.media, v.graphics, v.max
			pr.Placements = slices.Clone(base.Placements)
			out = append(out, pr)
		}
	}
	return out
}

// Products returns the built-in product table in a stable order. The products
// are shared: read them, never modify them.
func Products() []*Product { return slices.Clone(builtin) }
