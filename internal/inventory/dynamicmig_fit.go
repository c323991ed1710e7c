// Whether a pending claim of one MIG profile fits a DynamicMIG GPU, where, and if not why.

package inventory

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpupool/gpupool/internal/mig"
)

// FitKind is the answer to "does one more instance of this profile fit this GPU?".
type FitKind string

const (
	// FitFree: some allowed placement has all its memory slices, and the GPU enough of every
	// engine counter, free; the allocator would take it.
	FitFree FitKind = "Fits"
	// FitStranded: enough memory slices are free in count, but at no placement the profile
	// allows (dra-driver-nvidia-gpu#933): only moving claims frees one.
	FitStranded FitKind = "StrandedByPlacement"
	// FitNoRoom: fewer memory slices are free than the profile takes.
	FitNoRoom FitKind = "NoRoom"
	// FitEngines: a placement is free, but a counter the driver counts besides memory slices
	// (multiprocessors, decoders, ...) is used up by the devices allocated.
	FitEngines FitKind = "Engines"
	// FitNoProfile: the GPU has no such profile, or the driver publishes no partition of it.
	FitNoProfile FitKind = "NoProfile"
)

// PlacementFit is the answer for one GPU and one profile.
type PlacementFit struct {
	GPU     int
	Profile string
	Kind    FitKind
	// At is the placement the allocator would take (the first free partition in the driver's
	// device order), set when Kind is FitFree; Device is that partition's name when the
	// driver publishes it.
	At     mig.Placement
	Device string
	// FreeSlices are the memory slices nothing holds; NeedSlices those one instance takes.
	FreeSlices, NeedSlices int
	// Cheapest is, when Kind is FitStranded, the allowed placement (among the partitions the
	// driver publishes) whose memory slices the fewest holders hold, lowest start first on a
	// tie; InTheWay are those holders: freeing it means moving them.
	Cheapest mig.Placement
	InTheWay []SliceHolder
	// Reason says it in a sentence.
	Reason string
}

// Fit says, for every GPU of the node, whether one more claim of profile fits.
func (n *DynamicMIGNode) Fit(profile string) []PlacementFit {
	out := make([]PlacementFit, 0, len(n.GPUs))
	for _, g := range n.GPUs {
		out = append(out, g.Fit(profile))
	}
	return out
}

// Fit says whether one more claim of profile fits the GPU: the profile's allowed placements
// (the product's table, mig.Product.FreePlacements) whose memory slices are all free, among
// those the driver publishes a partition for, and whose partition's other counters the
// allocated devices leave. Without a product table, the driver's partitions alone say where the
// profile may go.
func (g *DynamicMIGGPU) Fit(profile string) PlacementFit {
	f := PlacementFit{GPU: g.Index, Profile: profile, FreeSlices: g.FreeSlices()}
	var legal []mig.Placement // allowed placements, ascending start
	canon := func(name string) string { return name }
	if g.Product != nil {
		pr, ok := g.Product.Profile(profile)
		if !ok {
			f.Kind = FitNoProfile
			f.Reason = fmt.Sprintf("GPU %d (%s) has no MIG profile %s", g.Index, g.ProductName, profile)
			return f
		}
		f.Profile, f.NeedSlices, legal = pr.Name, pr.MemorySlices, pr.Placements
		canon = func(name string) string {
			if p, ok := g.Product.Profile(name); ok {
				return p.Name
			}
			return name
		}
	}
	published := map[mig.Placement]partitionDevice{}
	tainted, taintedAt := 0, map[mig.Placement]string{}
	for _, p := range g.partitions {
		if p.profile != "" && canon(p.profile) == f.Profile {
			if p.taint != "" {
				// The allocator gives a tainted partition to no claim that does not tolerate it.
				tainted++
				taintedAt[p.placement] = p.taint
				continue
			}
			published[p.placement] = p
			if g.Product == nil {
				legal = append(legal, p.placement)
				f.NeedSlices = p.placement.Size
			}
		}
	}
	if g.Product == nil {
		slices.SortFunc(legal, func(a, b mig.Placement) int { return a.Start - b.Start })
	}
	if len(legal) == 0 && len(published) == 0 {
		f.Kind = FitNoProfile
		f.Reason = fmt.Sprintf("neither a MIG table for GPU %d (%s) nor the driver's slices give %s a placement", g.Index, g.ProductName, profile)
		return f
	}
	if len(published) == 0 && tainted > 0 {
		f.Kind = FitNoProfile
		f.Reason = fmt.Sprintf("every %s partition on GPU %d is tainted NoSchedule or NoExecute", f.Profile, g.Index)
		return f
	}
	if len(g.partitions) > 0 && len(published) == 0 {
		f.Kind = FitNoProfile
		f.Reason = fmt.Sprintf("NVIDIA's DRA driver publishes no %s partition on GPU %d", f.Profile, g.Index)
		return f
	}
	// The product's geometry says which allowed placements the holders leave free; without a
	// table, the slice map does.
	candidates := slices.DeleteFunc(slices.Clone(legal), func(pl mig.Placement) bool { return !g.slicesFree(pl) })
	if g.Product != nil {
		candidates, _ = g.Product.FreePlacements(f.Profile, g.occupied()) // the profile resolved above
	}
	var free []mig.Placement
	closed := "" // a free placement whose partition is tainted
	for _, pl := range candidates {
		if _, ok := published[pl]; ok || len(g.partitions) == 0 {
			free = append(free, pl)
		} else if who := taintedAt[pl]; who != "" && closed == "" {
			closed = fmt.Sprintf("; %s is free but %s taints its partition", slicesText(pl), who)
		}
	}
	var short []string
	for _, pl := range free {
		lacking := g.lacking(published[pl])
		if lacking == "" {
			f.Kind, f.At, f.Device = FitFree, pl, published[pl].name
			f.Reason = fmt.Sprintf("%s fits GPU %d at %s", f.Profile, g.Index, slicesText(pl))
			return f
		}
		short = append(short, lacking)
	}
	switch {
	case len(free) > 0:
		f.Kind = FitEngines
		f.Reason = fmt.Sprintf("%s has free memory slices on GPU %d at %s, but the claims there use up its %s",
			f.Profile, g.Index, slicesText(free[0]), short[0])
	case f.FreeSlices >= f.NeedSlices && f.NeedSlices > 0:
		f.Kind = FitStranded
		starts := make([]string, len(legal))
		for i, pl := range legal {
			starts[i] = rangeOf(pl)
		}
		held := g.blockers(legal)
		if held == "" {
			held, closed = strings.TrimPrefix(closed, "; "), ""
		}
		f.Reason = fmt.Sprintf("GPU %d has %d free memory slices, enough for %s (%d), but none of its placements (memory slices %s) is free: %s",
			g.Index, f.FreeSlices, f.Profile, f.NeedSlices, strings.Join(starts, ", "), held) + closed
		for _, pl := range legal {
			if _, ok := published[pl]; !ok && len(g.partitions) > 0 {
				continue
			}
			if in := g.holdersIn(pl); f.InTheWay == nil || len(in) < len(f.InTheWay) {
				f.Cheapest, f.InTheWay = pl, in
			}
		}
	default:
		f.Kind = FitNoRoom
		f.Reason = fmt.Sprintf("GPU %d has %d free memory slices, %s takes %d", g.Index, f.FreeSlices, f.Profile, f.NeedSlices)
	}
	return f
}

// occupied is every holder as an instance at its placement.
func (g *DynamicMIGGPU) occupied() []mig.Instance {
	out := make([]mig.Instance, len(g.Holders))
	for i, h := range g.Holders {
		out[i] = mig.Instance{Profile: h.Profile, Placement: h.Placement}
	}
	return out
}

// slicesFree says whether nothing holds any memory slice of pl.
func (g *DynamicMIGGPU) slicesFree(pl mig.Placement) bool {
	if pl.Start < 0 || pl.Start+pl.Size > len(g.Slices) {
		return false
	}
	for s := pl.Start; s < pl.Start+pl.Size; s++ {
		if g.Slices[s] >= 0 {
			return false
		}
	}
	return true
}

// lacking names the first counter (in name order) the partition needs more of than the
// allocated devices leave, "" when none; a GPU without a published counter set lacks nothing.
func (g *DynamicMIGGPU) lacking(p partitionDevice) string {
	if g.FreeCounters == nil {
		return ""
	}
	names := make([]string, 0, len(p.counters))
	for name := range p.counters {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if left := g.FreeCounters[name]; p.counters[name] > left {
			return fmt.Sprintf("%s (%d left, %d needed)", name, left, p.counters[name])
		}
	}
	return ""
}

// holdersIn are the holders of pl's memory slices, in slice order.
func (g *DynamicMIGGPU) holdersIn(pl mig.Placement) []SliceHolder {
	out := []SliceHolder{}
	var seen []int
	for s := max(pl.Start, 0); s < min(pl.Start+pl.Size, len(g.Slices)); s++ {
		if k := g.Slices[s]; k >= 0 && !slices.Contains(seen, k) {
			seen = append(seen, k)
			out = append(out, g.Holders[k])
		}
	}
	return out
}

// blockers names, per allowed placement, what holds its slices.
func (g *DynamicMIGGPU) blockers(legal []mig.Placement) string {
	var parts []string
	for _, pl := range legal {
		var who []string
		for s := pl.Start; s < min(pl.Start+pl.Size, len(g.Slices)); s++ {
			if k := g.Slices[s]; k >= 0 {
				if w := g.Holders[k].short(); !slices.Contains(who, w) {
					who = append(who, w)
				}
			}
		}
		if len(who) == 0 {
			continue // free, but closed by a taint: the reason says so after the holders
		}
		parts = append(parts, rangeOf(pl)+" holds "+strings.Join(who, " and "))
	}
	return strings.Join(parts, "; ")
}

// short names a holder in a few words: "1g.18gb of team/small-0" (its first pod, else its
// claim).
func (h SliceHolder) short() string {
	what := h.Profile
	if what == "" {
		what = "the whole GPU"
	}
	switch {
	case len(h.Pods) > 0:
		return what + " of pod " + h.Pods[0].String()
	case h.Claim != "":
		return what + " of claim " + h.Claim
	}
	return what + " (no claim)"
}

func rangeOf(pl mig.Placement) string {
	if pl.Size == 1 {
		return fmt.Sprint(pl.Start)
	}
	return fmt.Sprintf("%d-%d", pl.Start, pl.Start+pl.Size-1)
}

func slicesText(pl mig.Placement) string {
	if pl.Size == 1 {
		return fmt.Sprintf("memory slice %d", pl.Start)
	}
	return "memory slices " + rangeOf(pl)
}
