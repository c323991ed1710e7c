// Reserve: placements held free for large profiles on DynamicMIG GPUs, and the small partitions to taint so first-fit leaves them.

package placement

import (
	"cmp"
	"slices"
	"strings"

	"github.com/gpupool/gpupool/internal/mig"
)

// Headroom asks that MinFree placements of Profile stay free across the GPUs given, so that
// the next claims of it are allocated at once. A policy's standby shapes (GPUPoolPolicy
// spec.shapes) say the same for static MIG.
type Headroom struct {
	// Profile is the large MIG profile, in any spelling the products resolve.
	Profile string
	MinFree int
}

// Hold is one placement held free on one GPU for a large profile.
type Hold struct {
	Node      string
	GPU       int
	Profile   string // the product's canonical name
	Placement mig.Placement
	// Taint are the GPU's partitions of smaller profiles that overlap the placement: tainted
	// NoSchedule, the allocator cannot give them to a small claim, so first-fit takes the
	// next free partition in its device order instead, on a GPU already in use. Partitions
	// of the held profile or larger ones (and the whole GPU) stay untainted: a large claim
	// may still take the placement, which is what it is held for.
	Taint []Partition
}

// Reservation is what Reserve decides.
type Reservation struct {
	// Holds are sorted by node, GPU and placement.
	Holds []Hold
	// Short is, per headroom profile (as given), how many of its MinFree placements no GPU
	// has free: only moving claims (Plan) or claims ending opens them.
	Short map[string]int
}

// Reserve picks the placements to hold free for each headroom profile, largest profile first,
// among the placements free now (it never moves a claim): on GPUs already in use before idle
// GPUs, since a small claim beside a live instance costs nothing an idle GPU would give a
// whole-GPU or larger claim; then by node and index; and on one GPU the free placement with
// the highest start first, the one the allocator's first-fit, which walks placements by
// ascending start, reaches last. A placement held for one profile is not free for the next.
//
// What it costs the small claims: a held placement is closed to them. While the GPUs in use
// have other room they lose nothing (first-fit packs them there); once that room is gone they
// pend although the held slices are free, until a large claim takes its placement, a claim
// ends elsewhere, or the next decision holds less. The headroom given is that trade.
func Reserve(gpus []GPU, headroom []Headroom) Reservation {
	states := make([]*reserveGPU, 0, len(gpus))
	for i := range gpus {
		g := &gpus[i]
		if g.Product == nil || g.Product.Err() != nil {
			continue
		}
		st := &reserveGPU{g: g}
		for _, h := range g.Holders {
			st.occupied = append(st.occupied, mig.Instance{Profile: h.Profile, Placement: h.Placement})
		}
		st.valid = g.Product.Validate(st.occupied) == nil
		states = append(states, st)
	}
	slices.SortStableFunc(states, func(a, b *reserveGPU) int {
		return cmp.Or(strings.Compare(a.g.Node, b.g.Node), cmp.Compare(a.g.Index, b.g.Index))
	})
	wants := slices.Clone(headroom)
	size := func(h Headroom) int {
		for _, s := range states {
			if pr, ok := s.g.Product.Profile(h.Profile); ok {
				return pr.MemorySlices
			}
		}
		return 0
	}
	slices.SortStableFunc(wants, func(a, b Headroom) int {
		return cmp.Or(cmp.Compare(size(b), size(a)), strings.Compare(a.Profile, b.Profile))
	})
	res := Reservation{Short: map[string]int{}}
	for _, h := range wants {
		left := h.MinFree
		// Two passes: GPUs in use, then idle ones.
		for _, inUse := range []bool{true, false} {
			for _, s := range states {
				if left <= 0 {
					break
				}
				if (len(s.occupied) > 0) != inUse {
					continue
				}
				for left > 0 {
					hold, ok := s.hold(h.Profile)
					if !ok {
						break
					}
					res.Holds = append(res.Holds, hold)
					left--
				}
			}
		}
		if left > 0 {
			res.Short[h.Profile] += left
		}
	}
	slices.SortFunc(res.Holds, func(a, b Hold) int {
		return cmp.Or(strings.Compare(a.Node, b.Node), cmp.Compare(a.GPU, b.GPU), cmp.Compare(a.Placement.Start, b.Placement.Start))
	})
	return res
}

// reserveGPU is one GPU during Reserve: its holders' instances, and the holds made so far.
type reserveGPU struct {
	g        *GPU
	occupied []mig.Instance // holders, then holds
	// valid is whether the holders pass the product's own limits; when they do not (an
	// instance the table does not know), only memory slices decide.
	valid bool
}

// hold holds the free placement of profile with the highest start, if any, where the driver
// publishes a partition of it and the product's limits allow one more instance.
func (s *reserveGPU) hold(profile string) (Hold, bool) {
	pr, ok := s.g.Product.Profile(profile)
	if !ok {
		return Hold{}, false
	}
	free, err := s.g.Product.FreePlacements(pr.Name, s.occupied)
	if err != nil {
		return Hold{}, false
	}
	for i := len(free) - 1; i >= 0; i-- {
		pl := free[i]
		if !s.published(pr.Name, pl) {
			continue
		}
		in := mig.Instance{Profile: pr.Name, Placement: pl}
		if s.valid && s.g.Product.Validate(append(slices.Clone(s.occupied), in)) != nil {
			continue
		}
		s.occupied = append(s.occupied, in)
		return Hold{Node: s.g.Node, GPU: s.g.Index, Profile: pr.Name, Placement: pl, Taint: s.smallerOver(pr, pl)}, true
	}
	return Hold{}, false
}

// published says whether the driver publishes a partition of profile at pl: always when the
// GPU's partitions are not given.
func (s *reserveGPU) published(profile string, pl mig.Placement) bool {
	if s.g.Partitions == nil {
		return true
	}
	for _, p := range s.g.Partitions {
		if p.Placement == pl && s.canon(p.Profile) == profile {
			return true
		}
	}
	return false
}

func (s *reserveGPU) canon(name string) string {
	if pr, ok := s.g.Product.Profile(name); ok {
		return pr.Name
	}
	return name
}

// smallerOver lists the partitions of profiles with fewer memory slices than pr that overlap
// pl: the driver's published ones when given, else every allowed placement of every such
// profile of the product, sorted by profile and start.
func (s *reserveGPU) smallerOver(pr *mig.Profile, pl mig.Placement) []Partition {
	overlaps := func(o mig.Placement) bool { return o.Start < pl.Start+pl.Size && pl.Start < o.Start+o.Size }
	var out []Partition
	if s.g.Partitions != nil {
		for _, p := range s.g.Partitions {
			if q, ok := s.g.Product.Profile(p.Profile); ok && q.MemorySlices < pr.MemorySlices && overlaps(p.Placement) {
				out = append(out, p)
			}
		}
	} else {
		for _, q := range s.g.Product.Profiles {
			if q.MemorySlices >= pr.MemorySlices {
				continue
			}
			for _, o := range q.Placements {
				if overlaps(o) {
					out = append(out, Partition{Profile: q.Name, Placement: o})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b Partition) int {
		return cmp.Or(strings.Compare(a.Profile, b.Profile), cmp.Compare(a.Placement.Start, b.Placement.Start))
	})
	return out
}
