// The plan's ledger per GPU: what holds memory slices now, what the plan has reserved
// (openings, landings, claims moved), and the counters landings use.

package placement

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpupool/gpupool/internal/mig"
)

// gpuState is one GPU as the plan has left it so far.
type gpuState struct {
	g       *GPU
	holders []Holder // canonical profile names, ascending by placement
	// held is the memory slices the holders hold now; reserved those the plan has taken:
	// openings, landings, and the slices of claims it moves (freed only once they move, so
	// never a landing).
	held, reserved uint16
	moved          []bool
	// landed are the instances landings put on this GPU.
	landed []mig.Instance
	// counterUse is what landings and openings take of FreeCounters; counterFreed what the
	// claims moved off this GPU give back (usable only by the GPU's own opening: a landing is
	// free before any eviction).
	counterUse, counterFreed map[string]int64
	// validBase is true when the holders as they are pass mig.Product.Validate, so that any
	// state the plan makes must pass it too.
	validBase bool
	// parts are the partitions per canonical profile, ascending by start (the driver's order).
	parts map[string][]Partition
}

func newGPUState(g *GPU) *gpuState {
	s := &gpuState{g: g, counterUse: map[string]int64{}, counterFreed: map[string]int64{}, parts: map[string][]Partition{}}
	for _, h := range g.Holders {
		h.Profile = s.canon(h.Profile)
		s.holders = append(s.holders, h)
		s.held |= maskOf(h.Placement)
	}
	slices.SortStableFunc(s.holders, func(a, b Holder) int {
		return cmp.Or(cmp.Compare(a.Placement.Start, b.Placement.Start), cmp.Compare(a.Claim, b.Claim))
	})
	s.moved = make([]bool, len(s.holders))
	s.validBase = g.Product != nil && g.Product.Validate(s.instances(nil, nil)) == nil
	if g.Partitions == nil && g.Product != nil {
		for _, pr := range g.Product.Profiles {
			for _, pl := range pr.Placements {
				s.parts[pr.Name] = append(s.parts[pr.Name], Partition{Profile: pr.Name, Placement: pl})
			}
		}
	}
	for _, p := range g.Partitions {
		p.Profile = s.canon(p.Profile)
		s.parts[p.Profile] = append(s.parts[p.Profile], p)
	}
	for name := range s.parts {
		slices.SortStableFunc(s.parts[name], func(a, b Partition) int { return a.Placement.Start - b.Placement.Start })
	}
	return s
}

// canon is the product's canonical name for a profile, or the name itself.
func (s *gpuState) canon(name string) string {
	if s.g.Product != nil {
		if p, ok := s.g.Product.Profile(name); ok {
			return p.Name
		}
	}
	return name
}

// maskOf is the memory-slice mask of a placement, clipped to 16 slices.
func maskOf(pl mig.Placement) uint16 {
	var m uint16
	for s := max(pl.Start, 0); s < min(pl.Start+pl.Size, mig.MaxMemorySlices); s++ {
		m |= 1 << s
	}
	return m
}

// instances is the GPU's instances once the plan is done so far, without the holders in
// skip (moved by the opening being tried), with extra added.
func (s *gpuState) instances(skip []int, extra []mig.Instance) []mig.Instance {
	var out []mig.Instance
	for i, h := range s.holders {
		if !s.moved[i] && !slices.Contains(skip, i) {
			out = append(out, mig.Instance{Profile: h.Profile, Placement: h.Placement})
		}
	}
	out = append(out, s.landed...)
	return append(out, extra...)
}

// valid says whether the GPU may hold this set of instances: always where the holders as
// they are already break the product's limits (an unknown profile, say), since the plan can
// only make it more crowded where it checks.
func (s *gpuState) valid(ins []mig.Instance) bool {
	return !s.validBase || s.g.Product.Validate(ins) == nil
}

// countersLeft says whether need fits what the allocated devices, the plan's use so far and
// extra leave, adding back freed when the opening itself asks.
func (s *gpuState) countersLeft(need, extra map[string]int64, freed bool) bool {
	if s.g.FreeCounters == nil {
		return true
	}
	for name, v := range need {
		left := s.g.FreeCounters[name] - s.counterUse[name] - extra[name]
		if freed {
			left += s.counterFreed[name]
		}
		if v > left {
			return false
		}
	}
	return true
}

// holderCounters is what a holder's partition consumes besides memory slices.
func (s *gpuState) holderCounters(h Holder) map[string]int64 {
	for _, p := range s.parts[h.Profile] {
		if p.Placement == h.Placement {
			return p.Counters
		}
	}
	return nil
}

// layout counts the profiles of a set of instances.
func layout(ins []mig.Instance) mig.Layout {
	l := mig.Layout{}
	for _, in := range ins {
		l[in.Profile]++
	}
	return l
}

func addCounters(dst, src map[string]int64) {
	for k, v := range src {
		dst[k] += v
	}
}

func slicesText(pl mig.Placement) string {
	if pl.Size == 1 {
		return fmt.Sprintf("memory slice %d", pl.Start)
	}
	return fmt.Sprintf("memory slices %d-%d", pl.Start, pl.Start+pl.Size-1)
}
