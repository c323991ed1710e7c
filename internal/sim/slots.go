package sim

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpupool/gpupool/internal/mig"
)

// SlotProfile is what the simulated driver knows about one GPU-instance profile when it
// places instances: its size and the memory slices an instance may start at.
type SlotProfile struct {
	// Name is the profile name as the device plugin and mig-parted write it, e.g. "3g.71gb".
	Name string
	// ComputeSlices is the "Ng" of the name.
	ComputeSlices int
	// MemorySlices is the size of every placement.
	MemorySlices int
	// MaxCount is the most instances of the profile one GPU holds.
	MaxCount int
	// Starts are the memory slices an instance may start at, as NVML lists them.
	Starts []int
	// JPEGs and OFAs are the JPEG decoders and optical-flow accelerators an instance takes
	// (NVML's JpegCount and OfaCount): the media engines "+me" and "+me.all" profiles hold,
	// of which the GPU has a fixed number.
	JPEGs, OFAs int
}

// Slot is a placed GPU instance: memory slices [Start, Start+Size).
type Slot struct {
	Profile string
	Start   int
	Size    int
}

// ChooseSlots places the multiset want on an empty GPU the way the simulated driver does when
// mig-parted creates instances without naming a placement: larger profiles first (by memory
// slices, then compute slices, then name), each at the first free valid placement. Greedy
// first-fit can paint itself into a corner for layouts that do fit (the driver then fails
// the creation and mig-parted retries in another order), so when it does, the search backs
// off and tries the next placements in the same order; a layout that fits at all is always
// placed, and deterministically. The result is sorted by start.
func ChooseSlots(profiles []SlotProfile, want mig.Layout) ([]Slot, error) {
	byName := make(map[string]SlotProfile, len(profiles))
	for _, p := range profiles {
		byName[p.Name] = p
	}
	if err := mediaEnginesSuffice(profiles, want); err != nil {
		return nil, err
	}
	var order []SlotProfile
	for _, name := range want.Names() {
		p, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("profile %s is not supported by this GPU", name)
		}
		if p.MaxCount > 0 && want[name] > p.MaxCount {
			return nil, fmt.Errorf("%d instances of %s asked, the GPU holds at most %d", want[name], name, p.MaxCount)
		}
		for range want[name] {
			order = append(order, p)
		}
	}
	slices.SortStableFunc(order, func(a, b SlotProfile) int {
		return cmp.Or(cmp.Compare(b.MemorySlices, a.MemorySlices), cmp.Compare(b.ComputeSlices, a.ComputeSlices), cmp.Compare(a.Name, b.Name))
	})
	placed := make([]Slot, len(order))
	if !placeFrom(order, placed, 0, 0) {
		return nil, fmt.Errorf("layout %s does not fit one GPU", want)
	}
	slices.SortFunc(placed, func(a, b Slot) int { return cmp.Compare(a.Start, b.Start) })
	return placed, nil
}

// placeFrom places order[k:] on the GPU whose occupied memory slices are the bits of used.
// Instances of one profile take ascending starts, which is what first-fit does and spares
// the search from trying the same set of slots in every permutation.
func placeFrom(order []SlotProfile, placed []Slot, k int, used uint64) bool {
	if k == len(order) {
		return true
	}
	p := order[k]
	minStart := 0
	if k > 0 && order[k-1].Name == p.Name {
		minStart = placed[k-1].Start + 1
	}
	for _, start := range p.Starts {
		if start < minStart {
			continue
		}
		mask := uint64(1)<<(start+p.MemorySlices) - uint64(1)<<start
		if used&mask != 0 {
			continue
		}
		placed[k] = Slot{Profile: p.Name, Start: start, Size: p.MemorySlices}
		if placeFrom(order, placed, k+1, used|mask) {
			return true
		}
	}
	return false
}

// mediaEnginesSuffice refuses a layout whose instances take more JPEG decoders or optical-flow
// accelerators than the GPU has, as the driver refuses to create the instance that would run
// out (NVML_ERROR_INSUFFICIENT_RESOURCES): this is what keeps a second "+me" instance, or a
// "+me.all" instance beside anything but "-me" ones, off a GPU. The GPU's engines are counted
// as the most any one of its profiles takes (the whole-GPU profile's, or the "+me" profile's
// where go-nvml's mock gives the whole GPU none). Decoders and encoders are not counted: the
// mock tables give the whole GPU fewer decoders than its seven 1g profiles together.
func mediaEnginesSuffice(profiles []SlotProfile, want mig.Layout) error {
	var haveJPEG, haveOFA int
	byName := make(map[string]SlotProfile, len(profiles))
	for _, p := range profiles {
		haveJPEG, haveOFA = max(haveJPEG, p.JPEGs), max(haveOFA, p.OFAs)
		byName[p.Name] = p
	}
	var jpeg, ofa int
	for name, n := range want {
		jpeg += n * byName[name].JPEGs
		ofa += n * byName[name].OFAs
	}
	if jpeg > haveJPEG || ofa > haveOFA {
		return fmt.Errorf("layout %s takes %d JPEG decoder(s) and %d optical-flow accelerator(s), the GPU has %d and %d",
			want, jpeg, ofa, haveJPEG, haveOFA)
	}
	return nil
}
