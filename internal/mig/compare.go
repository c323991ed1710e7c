package mig

import (
	"fmt"
	"slices"
	"strings"
)

// TableDiff lists, profile by profile, where a device's table (what the agent read through
// NVML, see NewProductFromProfiles) disagrees with the built-in one for the same product:
// profiles one side lacks, and for the rest compute slices, instance counts and placements.
// Profiles are paired by NVML profile ID and memory-slice size, the key that survives driver
// renames, so a renamed profile is no disagreement. Nil means they agree. The device's
// table is the one gpupool plans with; the list exists so an error in the built-in table is
// visible.
func TableDiff(builtin, device *Product) []string {
	if builtin == nil || device == nil {
		return nil
	}
	var out []string
	for i := range builtin.Profiles {
		b := &builtin.Profiles[i]
		d, ok := device.ProfileByID(b.ID, b.MemorySlices)
		if !ok {
			out = append(out, fmt.Sprintf("%s is built in, the device does not offer it", b.Name))
			continue
		}
		var what []string
		if d.ComputeSlices != b.ComputeSlices {
			what = append(what, fmt.Sprintf("%d compute slices (built in: %d)", d.ComputeSlices, b.ComputeSlices))
		}
		if d.MaxCount != b.MaxCount {
			what = append(what, fmt.Sprintf("at most %d (built in: %d)", d.MaxCount, b.MaxCount))
		}
		if !slices.Equal(d.Placements, b.Placements) {
			what = append(what, fmt.Sprintf("placements %s (built in: %s)", PlacementsText(d.Placements), PlacementsText(b.Placements)))
		}
		if len(what) > 0 {
			out = append(out, d.Name+": "+strings.Join(what, ", "))
		}
	}
	for i := range device.Profiles {
		d := &device.Profiles[i]
		if _, ok := builtin.ProfileByID(d.ID, d.MemorySlices); !ok {
			out = append(out, fmt.Sprintf("%s is offered by the device, not built in", d.Name))
		}
	}
	return out
}

// PlacementsText renders placements as memory-slice ranges, "0-1,2-3" (or "0,2,4" for one-slice ones).
func PlacementsText(ps []Placement) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = rangeText(p.Start, p.Size)
	}
	return strings.Join(s, ",")
}
