package mig

import (
	"slices"
	"testing"
)

// FreePlacements is what a DynamicMIG GPU offers a new instance: the dra-driver-nvidia-gpu#933
// pattern (1g at slices 0, 1 and 5 of an H200) leaves a 3g no placement and a 2g one.
func TestFreePlacements(t *testing.T) {
	h200, ok := LookupProduct("NVIDIA H200")
	if !ok {
		t.Fatal("no H200 in the built-in table")
	}
	at := func(specs ...string) []Instance {
		var out []Instance
		for _, s := range specs {
			out = append(out, inst(t, h200, s))
		}
		return out
	}
	for _, tc := range []struct {
		name, profile string
		occupied      []Instance
		want          []Placement
	}{
		{"empty GPU", "3g.71gb", nil, []Placement{{0, 4}, {4, 4}}},
		{"dra-driver#933: 1g at 0, 1, 5 block a 3g", "3g.71gb", at("1g.18gb@0", "1g.18gb@1", "1g.18gb@5"), nil},
		{"dra-driver#933: a 2g still fits at 2", "2g.35gb", at("1g.18gb@0", "1g.18gb@1", "1g.18gb@5"), []Placement{{2, 2}}},
		{"1g at 3 leaves 4-7", "3g.71gb", at("1g.18gb@3"), []Placement{{4, 4}}},
		{"alias of the profile", "3g.71gb", at("4g.71gb@0"), []Placement{{4, 4}}},
		{"full GPU", "1g.18gb", at("7g.141gb@0"), nil},
		// An instance of a profile the table lacks still holds its slices.
		{"unknown occupant", "1g.18gb", []Instance{{Profile: "5g.99gb", Placement: Placement{0, 6}}}, []Placement{{6, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := h200.FreePlacements(tc.profile, tc.occupied)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("FreePlacements(%s, %v) = %v, want %v", tc.profile, tc.occupied, got, tc.want)
			}
		})
	}
	if _, err := h200.FreePlacements("9g.1tb", nil); err == nil {
		t.Error("an unknown profile has no placements: want an error naming it")
	}
}
