package sim

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpupool/gpupool/internal/mig"
)

// h200Slots is an H200's profile table as the corrected mock reports it (docs/architecture.md, "MIG geometry").
var h200Slots = []SlotProfile{
	{Name: "1g.18gb", ComputeSlices: 1, MemorySlices: 1, MaxCount: 7, Starts: []int{0, 1, 2, 3, 4, 5, 6}},
	{Name: "1g.18gb+me", ComputeSlices: 1, MemorySlices: 1, MaxCount: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}, JPEGs: 1, OFAs: 1},
	{Name: "1g.35gb", ComputeSlices: 1, MemorySlices: 2, MaxCount: 4, Starts: []int{0, 2, 4, 6}},
	{Name: "2g.35gb", ComputeSlices: 2, MemorySlices: 2, MaxCount: 3, Starts: []int{0, 2, 4}},
	{Name: "3g.71gb", ComputeSlices: 3, MemorySlices: 4, MaxCount: 2, Starts: []int{0, 4}},
	{Name: "4g.71gb", ComputeSlices: 4, MemorySlices: 4, MaxCount: 1, Starts: []int{0}},
	{Name: "7g.141gb", ComputeSlices: 7, MemorySlices: 8, MaxCount: 1, Starts: []int{0}},
}

func slot(profile string, start, size int) Slot {
	return Slot{Profile: profile, Start: start, Size: size}
}

// ChooseSlots is the simulated driver's placement rule: larger profiles first, each at the
// first free valid placement, backing off only when first-fit strands a layout that fits;
// layouts that cannot exist are refused with a reason.
func TestChooseSlots(t *testing.T) {
	for _, tc := range []struct {
		name    string
		want    mig.Layout
		slots   []Slot
		errText string
	}{
		{name: "all 1g fills slots 0-6", want: mig.Layout{"1g.18gb": 7}, slots: []Slot{
			slot("1g.18gb", 0, 1), slot("1g.18gb", 1, 1), slot("1g.18gb", 2, 1), slot("1g.18gb", 3, 1),
			slot("1g.18gb", 4, 1), slot("1g.18gb", 5, 1), slot("1g.18gb", 6, 1)}},
		{name: "larger profiles placed first", want: mig.Layout{"1g.18gb": 1, "2g.35gb": 1, "4g.71gb": 1}, slots: []Slot{
			slot("4g.71gb", 0, 4), slot("2g.35gb", 4, 2), slot("1g.18gb", 6, 1)}},
		{name: "double-memory 1g before plain 1g", want: mig.Layout{"1g.18gb": 2, "1g.35gb": 1}, slots: []Slot{
			slot("1g.35gb", 0, 2), slot("1g.18gb", 2, 1), slot("1g.18gb", 3, 1)}},
		{name: "first-fit strands 3g+4x1g, back-off places 3g at 4", want: mig.Layout{"3g.71gb": 1, "1g.18gb": 4}, slots: []Slot{
			slot("1g.18gb", 0, 1), slot("1g.18gb", 1, 1), slot("1g.18gb", 2, 1), slot("1g.18gb", 3, 1), slot("3g.71gb", 4, 4)}},
		{name: "whole GPU", want: mig.Layout{"7g.141gb": 1}, slots: []Slot{slot("7g.141gb", 0, 8)}},
		{name: "empty layout", want: mig.Layout{}, slots: []Slot{}},
		{name: "unknown profile", want: mig.Layout{"1g.10gb": 1}, errText: "not supported"},
		{name: "over the profile's maximum", want: mig.Layout{"3g.71gb": 3}, errText: "at most 2"},
		{name: "does not fit", want: mig.Layout{"4g.71gb": 1, "3g.71gb": 1, "1g.18gb": 1}, errText: "does not fit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ChooseSlots(h200Slots, tc.want)
			if tc.errText != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("ChooseSlots(%s) = %v, %v; want an error containing %q", tc.want, got, err, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatalf("ChooseSlots(%s): %v", tc.want, err)
			}
			if len(got) == 0 && len(tc.slots) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tc.slots) {
				t.Errorf("ChooseSlots(%s) = %v, want %v", tc.want, got, tc.slots)
			}
		})
	}
}

// Every layout the geometry package says fits an H200 is placed by the simulated driver, so
// the planner never proposes a layout the simulator cannot apply.
func TestChooseSlotsPlacesEveryMaximalLayout(t *testing.T) {
	p, ok := mig.LookupProduct("H200-141GB")
	if !ok {
		t.Fatal("H200-141GB not in the built-in products")
	}
	layouts := p.MaximalLayouts()
	if len(layouts) == 0 {
		t.Fatal("no maximal layouts")
	}
	for _, l := range layouts {
		if _, err := ChooseSlots(h200Slots, l); err != nil {
			t.Errorf("maximal layout %s: %v", l, err)
		}
	}
}
