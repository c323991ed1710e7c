package mig

import (
	"slices"
	"strings"
	"testing"
)

func mustProduct(t testing.TB, name string) *Product {
	t.Helper()
	p, ok := LookupProduct(name)
	if !ok {
		t.Fatalf("LookupProduct(%q) found nothing", name)
	}
	return p
}

func TestBuiltinProductsCompile(t *testing.T) {
	want := []string{"A30-24GB", "A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "B200",
		"H100-94GB", "H100-96GB", "GH200-144GB", "GB200", "B300", "GB300", "RTX-PRO-6000-Blackwell"}
	var got []string
	for _, p := range Products() {
		got = append(got, p.Name)
		if err := p.Err(); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
		for _, pr := range p.Profiles {
			if pr.MemoryMiB <= 0 {
				t.Errorf("%s %s: no memory size", p.Name, pr.Name)
			}
			if got := parseProfileName(pr.Name); !got.ok || got.compute != pr.ComputeSlices {
				t.Errorf("%s %s: name does not say %d compute slices", p.Name, pr.Name, pr.ComputeSlices)
			}
		}
		// Catalog order is the documented order: larger profiles first.
		if !slices.IsSortedFunc(p.Profiles, compareCatalog) {
			t.Errorf("%s: profiles not in catalog order", p.Name)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("Products() = %v, want %v", got, want)
	}
	// The slice is a copy: reordering it must not reorder the table.
	ps := Products()
	ps[0], ps[1] = ps[1], ps[0]
	if Products()[0].Name != "A30-24GB" {
		t.Error("Products() exposes the table itself")
	}
}

func TestProfileTables(t *testing.T) {
	type row struct {
		name    string
		id      int
		compute int
		size    int
		max     int
		starts  []int
		me      bool
		mib     int
	}
	eight := func(g7, g4, g3, g2, g1d, g1 string, mib [6]int) []row {
		return []row{
			{g7, GIProfile7Slice, 7, 8, 1, []int{0}, false, mib[0]},
			{g4, GIProfile4Slice, 4, 4, 1, []int{0}, false, mib[1]},
			{g3, GIProfile3Slice, 3, 4, 2, []int{0, 4}, false, mib[2]},
			{g2, GIProfile2Slice, 2, 2, 3, []int{0, 2, 4}, false, mib[3]},
			{g1d, GIProfile1SliceRev2, 1, 2, 4, []int{0, 2, 4, 6}, false, mib[4]},
			{g1, GIProfile1Slice, 1, 1, 7, []int{0, 1, 2, 3, 4, 5, 6}, false, mib[5]},
			{g1 + "+me", GIProfile1SliceRev1, 1, 1, 1, []int{0, 1, 2, 3, 4, 5, 6}, true, mib[5]},
		}
	}
	tests := []struct {
		product string
		mem     int
		compute int
		rows    []row
	}{
		{"A30-24GB", 4, 4, []row{
			{"4g.24gb", GIProfile4Slice, 4, 4, 1, []int{0}, false, 23344},
			{"2g.12gb", GIProfile2Slice, 2, 2, 2, []int{0, 2}, false, 11672},
			{"2g.12gb+me", GIProfile2SliceRev1, 2, 2, 1, []int{0, 2}, true, 11672},
			{"1g.6gb", GIProfile1Slice, 1, 1, 4, []int{0, 1, 2, 3}, false, 5836},
			{"1g.6gb+me", GIProfile1SliceRev1, 1, 1, 1, []int{0, 1, 2, 3}, true, 5836},
		}},
		{"A100-40GB", 8, 7, eight("7g.40gb", "4g.20gb", "3g.20gb", "2g.10gb", "1g.10gb", "1g.5gb", [6]int{40192, 19968, 19968, 9856, 9856, 4864})},
		{"A100-80GB", 8, 7, eight("7g.80gb", "4g.40gb", "3g.40gb", "2g.20gb", "1g.20gb", "1g.10gb", [6]int{80384, 40192, 40192, 19968, 19968, 9856})},
		{"H100-80GB", 8, 7, eight("7g.80gb", "4g.40gb", "3g.40gb", "2g.20gb", "1g.20gb", "1g.10gb", [6]int{81920, 40960, 40960, 20480, 20480, 10240})},
		{"H200-141GB", 8, 7, eight("7g.141gb", "4g.71gb", "3g.71gb", "2g.35gb", "1g.35gb", "1g.18gb", [6]int{144384, 72704, 72704, 35840, 35840, 18432})},
		{"B200", 8, 7, eight("7g.180gb", "4g.90gb", "3g.90gb", "2g.45gb", "1g.45gb", "1g.23gb", [6]int{184320, 92160, 92160, 46080, 46080, 23552})},
	}
	for _, tt := range tests {
		t.Run(tt.product, func(t *testing.T) {
			p := mustProduct(t, tt.product)
			if p.MemorySlices != tt.mem || p.ComputeSlices != tt.compute {
				t.Errorf("slices = %d memory, %d compute; want %d, %d", p.MemorySlices, p.ComputeSlices, tt.mem, tt.compute)
			}
			if len(p.Profiles) != len(tt.rows) {
				t.Fatalf("%d profiles, want %d", len(p.Profiles), len(tt.rows))
			}
			for i, r := range tt.rows {
				pr := p.Profiles[i]
				var starts []int
				for _, pl := range pr.Placements {
					if pl.Size != r.size {
						t.Errorf("%s: placement size %d, want %d", pr.Name, pl.Size, r.size)
					}
					starts = append(starts, pl.Start)
				}
				if pr.Name != r.name || pr.ID != r.id || pr.ComputeSlices != r.compute || pr.MemorySlices != r.size ||
					pr.MaxCount != r.max || !slices.Equal(starts, r.starts) || (pr.Media == MediaExtensions) != r.me || pr.MemoryMiB != r.mib {
					t.Errorf("profile %d = %+v, want %+v", i, pr, r)
				}
			}
		})
	}
}

func TestLookupProduct(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" means not found
	}{
		// Canonical names, any case.
		{"H200-141GB", "H200-141GB"},
		{"a100-40gb", "A100-40GB"},
		{"b200", "B200"},
		// nvidia.com/gpu.product label values written by GFD.
		{"NVIDIA-H100-80GB-HBM3", "H100-80GB"},
		{"NVIDIA-H200", "H200-141GB"},
		{"NVIDIA-H200-NVL", "H200-141GB"},
		{"NVIDIA-A100-SXM4-80GB", "A100-80GB"},
		{"NVIDIA-A100-SXM4-40GB", "A100-40GB"},
		{"NVIDIA-A100-PCIE-40GB", "A100-40GB"},
		{"NVIDIA-A100-80GB-PCIe", "A100-80GB"},
		{"NVIDIA-A30", "A30-24GB"},
		{"NVIDIA-B200", "B200"},
		{"NVIDIA-H100-PCIe", "H100-80GB"},
		{"NVIDIA-H800", "H100-80GB"},
		{"NVIDIA-A800-SXM4-80GB", "A100-80GB"},
		// GFD suffixes under the single strategy and time-slicing.
		{"NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "A100-40GB"},
		{"NVIDIA-H100-80GB-HBM3-SHARED", "H100-80GB"},
		// NVML device names.
		{"NVIDIA H100 80GB HBM3", "H100-80GB"},
		{"NVIDIA H200 141GB HBM3e", "H200-141GB"},
		{"NVIDIA B200 180GB HBM3e", "B200"},
		{"NVIDIA A30-PCIE-24GB", "A30-24GB"},
		{"Mock NVIDIA A100-SXM4-40GB", "A100-40GB"},
		{"NVIDIA A100-SXM-80GB", "A100-80GB"},
		// Different geometries that share a substring must not match.
		{"NVIDIA-H100-NVL", "H100-94GB"},
		{"NVIDIA H800 NVL", "H100-94GB"},
		{"NVIDIA-H100-SXM5-94GB", "H100-94GB"},
		{"NVIDIA-H100-SXM5-96GB", "H100-96GB"},
		{"NVIDIA-GH200-480GB", "H100-96GB"},
		{"NVIDIA GH200 144G HBM3e", "GH200-144GB"},
		{"NVIDIA-GH200-144G-HBM3e", "GH200-144GB"},
		{"NVIDIA-GB200", "GB200"},
		{"NVIDIA GB300", "GB300"},
		{"NVIDIA-B300-SXM6-AC", "B300"},
		{"NVIDIA-H20", "H100-96GB"},
		{"NVIDIA-H200-NVL", "H200-141GB"},
		{"NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "RTX-PRO-6000-Blackwell"},
		{"NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000-Blackwell"},
		{"NVIDIA-RTX-PRO-5000-Blackwell", ""}, // 48GB, two instances: not in NVIDIA's config
		{"NVIDIA-A30X", ""},
		{"NVIDIA-A100", ""}, // memory size unknown: refuse to guess
		{"Tesla-T4", ""},
		{"", ""},
		{"   ", ""},
	}
	for _, tt := range tests {
		p, ok := LookupProduct(tt.in)
		got := ""
		if ok {
			got = p.Name
		}
		if got != tt.want {
			t.Errorf("LookupProduct(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestLookupProductByPCIID(t *testing.T) {
	tests := []struct {
		id   uint32
		want string
	}{
		{0x20B010DE, "A100-40GB"},
		{0x20B0, "A100-40GB"},
		{0x20B210DE, "A100-80GB"},
		{0x20B710DE, "A30-24GB"},
		{0x233010DE, "H100-80GB"},
		{0x233510DE, "H200-141GB"},
		{0x233B10DE, "H200-141GB"},
		{0x290110DE, "B200"},
		{0x232110DE, "H100-94GB"}, // H100 NVL: 94GB, other profile names
		{0x233A10DE, "H100-94GB"}, // H800 NVL
		{0x232410DE, "H100-80GB"}, // H800-80GB, grouped with the H100 by NVIDIA's config
		{0x234210DE, "H100-96GB"}, // GH200
		{0x232910DE, "H100-96GB"}, // H20
		{0x234810DE, "GH200-144GB"},
		{0x294110DE, "GB200"},
		{0x318210DE, "B300"},
		{0x31C210DE, "GB300"},
		{0x2BB510DE, "RTX-PRO-6000-Blackwell"},
		{0x26B510DE, ""}, // L40: no MIG
		{0x20B01234, ""}, // not NVIDIA's vendor ID
		{0, ""},
	}
	for _, tt := range tests {
		p, ok := LookupProductByPCIID(tt.id)
		got := ""
		if ok {
			got = p.Name
		}
		if got != tt.want {
			t.Errorf("LookupProductByPCIID(%#x) = %q, want %q", tt.id, got, tt.want)
		}
	}
}

func TestProfileLookup(t *testing.T) {
	tests := []struct {
		product, name, want string // want "" means not found
	}{
		{"H100-80GB", "7g.80gb", "7g.80gb"},
		{"H100-80GB", "7g.79gb", "7g.80gb"}, // known alias
		{"A100-80GB", "7g.79gb", "7g.80gb"},
		{"H100-80GB", "3g.39gb", "3g.40gb"},
		{"H100-80GB", "4g.39gb", "4g.40gb"},
		{"H100-80GB", "3G.40GB", "3g.40gb"},
		{"H100-80GB", " 1g.10gb ", "1g.10gb"},
		{"H100-80GB", "1g.10gb+me", "1g.10gb+me"},
		{"H100-80GB", "nvidia.com/mig-1g.10gb.me", "1g.10gb+me"},
		{"H100-80GB", "mig-2g.20gb", "2g.20gb"},
		// Unlisted near misses are not guessed at.
		{"H100-80GB", "1g.19gb", ""},
		{"H200-141GB", "7g.140gb", ""},
		{"A100-40GB", "1g.6gb", ""},  // an A30 profile, not a drifted 1g.5gb
		{"H100-80GB", "1g.12gb", ""}, // an H100 NVL profile
		{"H100-80GB", "1g.10gb-me", ""},
		{"H100-80GB", "1g.10gb.me", "1g.10gb+me"}, // resource spelling
		{"H100-80GB", "3g.71gb", ""},
		{"A100-40GB", "1g.5gb", "1g.5gb"},
		{"A100-40GB", "1g.10gb", "1g.10gb"}, // the double-memory 1g here, not a drifted 1g.5gb
		{"A100-40GB", "2g.10gb", "2g.10gb"},
		{"A30-24GB", "2g.12gb+me", "2g.12gb+me"},
		{"A30-24GB", "", ""},
		{"A30-24GB", "garbage", ""},
	}
	for _, tt := range tests {
		p := mustProduct(t, tt.product)
		pr, ok := p.Profile(tt.name)
		got := ""
		if ok {
			got = pr.Name
		}
		if got != tt.want {
			t.Errorf("%s.Profile(%q) = %q, want %q", tt.product, tt.name, got, tt.want)
		}
	}
}

func TestProfileByID(t *testing.T) {
	p := mustProduct(t, "H200-141GB")
	tests := []struct {
		id, size int
		want     string
	}{
		{GIProfile1Slice, 1, "1g.18gb"},
		{GIProfile1SliceRev1, 1, "1g.18gb+me"},
		{GIProfile1SliceRev2, 2, "1g.35gb"},
		{GIProfile3Slice, 4, "3g.71gb"},
		{GIProfile7Slice, 8, "7g.141gb"},
		{GIProfile3Slice, 3, ""}, // go-nvml's H200 mock shape; real devices span 4 slices
		{GIProfile6Slice, 6, ""},
	}
	for _, tt := range tests {
		pr, ok := p.ProfileByID(tt.id, tt.size)
		got := ""
		if ok {
			got = pr.Name
		}
		if got != tt.want {
			t.Errorf("ProfileByID(%d, %d) = %q, want %q", tt.id, tt.size, got, tt.want)
		}
	}
}

func TestResourceNames(t *testing.T) {
	tests := []struct{ profile, resource string }{
		{"1g.10gb", "nvidia.com/mig-1g.10gb"},
		{"1g.10gb+me", "nvidia.com/mig-1g.10gb.me"},
		{"1g.23gb+me.all", "nvidia.com/mig-1g.23gb.me.all"},
		{"3g.71gb", "nvidia.com/mig-3g.71gb"},
	}
	for _, tt := range tests {
		if got := ResourceName(tt.profile); got != tt.resource {
			t.Errorf("ResourceName(%q) = %q, want %q", tt.profile, got, tt.resource)
		}
		if got, ok := ProfileFromResource(tt.resource); !ok || got != tt.profile {
			t.Errorf("ProfileFromResource(%q) = %q, %v; want %q", tt.resource, got, ok, tt.profile)
		}
	}
	for _, bad := range []string{"nvidia.com/gpu", "cpu", "", "mig-", "nvidia.com/mig-xg.1gb"} {
		if got, ok := ProfileFromResource(bad); ok {
			t.Errorf("ProfileFromResource(%q) = %q, want not a profile", bad, got)
		}
	}
}

// nvmlH100 is the H100 table as the agent reads it through NVML on a real
// device (3g and 7g span 4 and 8 memory slices), with driver names.
func nvmlH100() []Profile {
	return []Profile{
		{ID: GIProfile1Slice, Name: "1g.10gb", ComputeSlices: 1, MemoryMiB: 9856, MaxCount: 7, Placements: placements(1, 6, 5, 4, 3, 2, 1, 0)},
		{ID: GIProfile1SliceRev1, Name: "1g.10gb+me", ComputeSlices: 1, MemoryMiB: 9856, MaxCount: 1, Placements: placements(1, 0, 1, 2, 3, 4, 5, 6)},
		{ID: GIProfile1SliceRev2, Name: "1g.20gb", ComputeSlices: 1, MemoryMiB: 19968, MaxCount: 4, Placements: placements(2, 0, 2, 4, 6)},
		{ID: GIProfile2Slice, Name: "2g.20gb", ComputeSlices: 2, MemoryMiB: 19968, MaxCount: 3, Placements: placements(2, 0, 2, 4)},
		{ID: GIProfile3Slice, Name: "3g.39gb", ComputeSlices: 3, MemoryMiB: 40192, MaxCount: 2, Placements: placements(4, 0, 4)},
		{ID: GIProfile4Slice, Name: "4g.39gb", ComputeSlices: 4, MemoryMiB: 40192, MaxCount: 1, Placements: placements(4, 0)},
		{ID: GIProfile7Slice, Name: "7g.79gb", Aliases: []string{"7g.80gb"}, ComputeSlices: 7, MemoryMiB: 80384, MaxCount: 1, Placements: placements(8, 0)},
	}
}

func TestNewProductFromProfiles(t *testing.T) {
	in := nvmlH100()
	p, err := NewProductFromProfiles("NVIDIA H100 80GB HBM3", 8, 7, in)
	if err != nil {
		t.Fatal(err)
	}
	// Catalog order, placements sorted, sizes derived, +me detected.
	if got := strings.Join(p.ProfileNames(), ","); got != "7g.79gb,4g.39gb,3g.39gb,2g.20gb,1g.20gb,1g.10gb,1g.10gb+me" {
		t.Errorf("profile order = %s", got)
	}
	pr, _ := p.Profile("1g.10gb")
	if pr.MemorySlices != 1 || pr.Placements[0].Start != 0 || pr.Placements[6].Start != 6 {
		t.Errorf("1g.10gb = %+v", pr)
	}
	if me, _ := p.Profile("1g.10gb+me"); me.Media != MediaExtensions {
		t.Error("1g.10gb+me not marked as media extensions")
	}
	if pr, ok := p.Profile("7g.80gb"); !ok || pr.Name != "7g.79gb" {
		t.Errorf("alias 7g.80gb did not resolve to 7g.79gb")
	}
	// The input is copied.
	in[0].Placements[0].Start = 5
	if pr, _ := p.Profile("1g.10gb"); pr.Placements[0].Start != 0 {
		t.Error("NewProductFromProfiles kept a reference to the caller's placements")
	}
	// The NVML table behaves like the built-in one.
	h100 := mustProduct(t, "H100-80GB")
	if a, b := len(p.MaximalLayouts()), len(h100.MaximalLayouts()); a != b {
		t.Errorf("NVML table has %d maximal layouts, built-in %d", a, b)
	}
	if !p.Fits(Layout{"4g.39gb": 1, "3g.39gb": 1}) {
		t.Error("4g+3g should fit the NVML table")
	}
}

func TestNewProductFromProfilesRejects(t *testing.T) {
	base := func() []Profile { return nvmlH100() }
	tests := []struct {
		name    string
		mem     int
		compute int
		edit    func([]Profile) []Profile
		wantErr string
	}{
		{"", 8, 7, nil, "empty product name"},
		{"x", 0, 7, nil, "memory slices 0 outside 1..16"},
		{"x", 17, 7, nil, "memory slices 17 outside 1..16"},
		{"x", 8, 0, nil, "compute slices 0 outside"},
		{"x", 8, 7, func([]Profile) []Profile { return nil }, "no profiles"},
		{"x", 8, 7, func(ps []Profile) []Profile { ps[0].Name = "1g 10gb"; return ps }, `invalid name "1g 10gb"`},
		{"x", 8, 7, func(ps []Profile) []Profile { ps[0].Placements = nil; return ps }, "1g.10gb has no placements"},
		{"x", 8, 7, func(ps []Profile) []Profile { ps[0].Placements = append(ps[0].Placements, Placement{7, 2}); return ps }, "placement at 7 has size 2"},
		{"x", 8, 7, func(ps []Profile) []Profile { ps[0].Placements = append(ps[0].Placements, Placement{8, 1}); return ps }, "outside memory slices 0-7"},
		{"x", 8, 7, func(ps []Profile) []Profile { ps[0].Placements = append(ps[0].Placements, Placement{3, 1}); return ps }, "placement at 3 listed twice"},
		{"x", 8, 7, func(ps []Profile) []Profile { ps[0].ComputeSlices = 8; return ps }, "compute slices 8 outside 1..7"},
		{"x", 8, 7, func(ps []Profile) []Profile { ps[0].MaxCount = 9; return ps }, "max count 9 outside 1..8"},
		{"x", 8, 7, func(ps []Profile) []Profile { ps[0].MemoryMiB = -1; return ps }, "negative memory"},
		{"x", 8, 7, func(ps []Profile) []Profile { ps[1].ID = GIProfile1Slice; return ps }, "share NVML profile ID 0 with 1 memory slices"},
		{"x", 8, 7, func(ps []Profile) []Profile { ps[2].Name = "1G.10GB"; return ps }, "used by both 1G.10GB and 1g.10gb"},
		{"x", 8, 7, func(ps []Profile) []Profile { ps[2].Aliases = []string{"2g.20gb"}; return ps }, `profile name "2g.20gb" used by both`},
		{"x", 8, 7, func(ps []Profile) []Profile { ps[2].Aliases = []string{"a,b"}; return ps }, `invalid alias "a,b"`},
	}
	for _, tt := range tests {
		ps := base()
		if tt.edit != nil {
			ps = tt.edit(ps)
		}
		_, err := NewProductFromProfiles(tt.name, tt.mem, tt.compute, ps)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("NewProductFromProfiles(%q, %d, %d, ...) error = %v, want it to contain %q", tt.name, tt.mem, tt.compute, err, tt.wantErr)
		}
	}
}

func TestInvalidProductIsInert(t *testing.T) {
	var nilProduct *Product
	bad := &Product{Name: "broken", MemorySlices: 8, ComputeSlices: 7}
	for _, p := range []*Product{nilProduct, bad} {
		if p.Err() == nil {
			t.Error("Err() = nil for an unusable product")
		}
		if p.Fits(Layout{}) {
			t.Error("Fits on an unusable product")
		}
		if _, err := p.Place(Layout{}, nil); err == nil {
			t.Error("Place succeeded on an unusable product")
		}
		if p.Validate(nil) == nil {
			t.Error("Validate passed on an unusable product")
		}
		if p.MaximalLayouts() != nil || p.Addable(nil, nil) != nil || p.FreeMemorySlices(nil) != 0 {
			t.Error("unusable product reports capacity")
		}
		if _, err := p.Canonical(Layout{"1g.10gb": 1}); err == nil {
			t.Error("Canonical succeeded on an unusable product")
		}
	}
}

func TestLiteralProductCompilesLazily(t *testing.T) {
	p := &Product{Name: "tiny", MemorySlices: 2, ComputeSlices: 2, Profiles: []Profile{
		{ID: GIProfile2Slice, Name: "2g.2gb", ComputeSlices: 2, MemorySlices: 2, MaxCount: 1, Placements: placements(2, 0)},
		{ID: GIProfile1Slice, Name: "1g.1gb", ComputeSlices: 1, MemorySlices: 1, MaxCount: 2, Placements: placements(1, 0, 1)},
	}}
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	got := p.MaximalLayouts()
	if len(got) != 2 || got[0].String() != "2g.2gb:1" || got[1].String() != "1g.1gb:2" {
		t.Errorf("MaximalLayouts = %v", got)
	}
}

// TestConcurrentFirstUse: the lazily built tables are safe to build from many
// goroutines at once (run with -race).
func TestConcurrentFirstUse(t *testing.T) {
	p, err := NewProductFromProfiles("NVIDIA H100 80GB HBM3", 8, 7, nvmlH100())
	if err != nil {
		t.Fatal(err)
	}
	lit := &Product{Name: "tiny", MemorySlices: 2, ComputeSlices: 2, Profiles: []Profile{
		{ID: GIProfile1Slice, Name: "1g.1gb", ComputeSlices: 1, MemorySlices: 1, MaxCount: 2, Placements: placements(1, 0, 1)},
	}}
	done := make(chan [2]int)
	for range 8 {
		go func() {
			n := len(p.MaximalLayouts())
			if p.Fits(Layout{"3g.39gb": 2}) && lit.Fits(Layout{"1g.1gb": 2}) {
				n += 100
			}
			done <- [2]int{n, len(lit.MaximalLayouts())}
		}()
	}
	for range 8 {
		if got := <-done; got != [2]int{128, 1} {
			t.Errorf("concurrent first use = %v, want [128 1]", got)
		}
	}
}
