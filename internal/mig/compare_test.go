package mig

import (
	"slices"
	"testing"
)

func TestTableDiff(t *testing.T) {
	h200, _ := LookupProduct("H200-141GB")
	device := func(edit func([]Profile) []Profile) *Product {
		ps := edit(slices.Clone(h200.Profiles))
		p, err := NewProductFromProfiles("NVIDIA H200", h200.MemorySlices, h200.ComputeSlices, ps)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		edit func([]Profile) []Profile
		want []string
	}{
		{"the same table", func(ps []Profile) []Profile { return ps }, nil},
		{"a driver's rename is no disagreement", func(ps []Profile) []Profile {
			ps[0].Name = "7g.140gb"
			return ps
		}, nil},
		{"one placement fewer", func(ps []Profile) []Profile {
			i := slices.IndexFunc(ps, func(p Profile) bool { return p.Name == "1g.35gb" })
			ps[i].Placements = ps[i].Placements[:3]
			ps[i].MaxCount = 3
			return ps
		}, []string{"1g.35gb: at most 3 (built in: 4), placements 0-1,2-3,4-5 (built in: 0-1,2-3,4-5,6-7)"}},
		{"a profile missing, another extra", func(ps []Profile) []Profile {
			ps = slices.DeleteFunc(ps, func(p Profile) bool { return p.Name == "1g.18gb+me" })
			return append(ps, Profile{ID: GIProfile1SliceGfx, Name: "1g.18gb+gfx", ComputeSlices: 1, MemoryMiB: 18000,
				Placements: placements(1, 0, 1, 2, 3, 4, 5, 6)})
		}, []string{"1g.18gb+me is built in, the device does not offer it", "1g.18gb+gfx is offered by the device, not built in"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TableDiff(h200, device(tt.edit)); !slices.Equal(got, tt.want) {
				t.Errorf("TableDiff = %q, want %q", got, tt.want)
			}
		})
	}
	if TableDiff(nil, h200) != nil || TableDiff(h200, nil) != nil {
		t.Error("a missing side is no disagreement")
	}
}
