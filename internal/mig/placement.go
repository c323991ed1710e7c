package mig

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// countsOf turns a layout into counts; ok is false when a name is unknown or
// a count negative (countsErr says which).
func (g *geometry) countsOf(l Layout) (c counts, ok bool) {
	for name, n := range l {
		if n == 0 {
			continue
		}
		i := g.resolve(name)
		if i < 0 || n < 0 {
			return c, false
		}
		c[i] = uint8(min(int(c[i])+min(n, 255), 255)) // saturate: any count past 16 fails anyway
	}
	return c, true
}

// countsErr explains why countsOf failed, naming the first bad entry in name order.
func (p *Product) countsErr(l Layout) error {
	g := p.geometry()
	names := make([]string, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		switch {
		case l[n] < 0:
			return fmt.Errorf("negative count %d for %s", l[n], n)
		case l[n] > 0 && g.resolve(n) < 0:
			return p.unknownProfile(n)
		}
	}
	return nil
}

func (p *Product) unknownProfile(name string) error {
	return fmt.Errorf("unknown MIG profile %q for %s (known: %s)", name, p.Name, strings.Join(p.ProfileNames(), ", "))
}

// layoutOf renders counts with canonical names.
func (g *geometry) layoutOf(c *counts) Layout {
	l := Layout{}
	for i := range g.profs {
		if c[i] > 0 {
			l[g.names[i]] = int(c[i])
		}
	}
	return l
}

// checkCounts explains why counts break a limit that does not depend on
// placement, or returns nil.
func (p *Product) checkCounts(c *counts) error {
	g := p.geometry()
	compute, mem := 0, 0
	var media mediaTally
	var holders []string // instances that take media engines beyond their share
	for i := range g.profs {
		n := int(c[i])
		if n == 0 {
			continue
		}
		pr := &g.profs[i]
		if n > int(pr.max) {
			return fmt.Errorf("%s x%d does not fit %s: at most %d", g.names[i], n, p.anName(), pr.max)
		}
		compute += n * int(pr.compute)
		mem += n * int(pr.size)
		media[pr.media] += n
		if pr.media == MediaExtensions || pr.media == MediaAll {
			holders = append(holders, fmt.Sprintf("%s x%d", g.names[i], n))
		}
	}
	switch {
	case media[MediaExtensions] > 1:
		return fmt.Errorf("%s do not fit %s: at most one media-extension (+me) instance per GPU", strings.Join(holders, " and "), p.anName())
	case media[MediaAll] > 1:
		return fmt.Errorf("%s do not fit %s: at most one +me.all instance per GPU", strings.Join(holders, " and "), p.anName())
	case !media.ok():
		return fmt.Errorf("%s does not fit %s: a +me.all instance takes every media engine, so it shares the GPU only with -me instances", g.layoutOf(c), p.anName())
	}
	if compute > g.compute {
		return fmt.Errorf("%s needs %d compute slices, %s has %d", g.layoutOf(c), compute, p.anName(), g.compute)
	}
	if mem > g.mem {
		return fmt.Errorf("%s needs %d memory slices, %s has %d", g.layoutOf(c), mem, p.anName(), g.mem)
	}
	return nil
}

// Fits reports whether the multiset has a valid placement on an empty GPU of
// this product. Unknown profile names make it false.
func (p *Product) Fits(want Layout) bool {
	g := p.geometry()
	c, ok := g.countsOf(want)
	return ok && g.fits(&c)
}

// Canonical rewrites aliases and resource spellings to canonical profile names,
// merging counts and dropping zeros; the error names the first unknown profile.
func (p *Product) Canonical(l Layout) (Layout, error) {
	g := p.geometry()
	if g.err != nil {
		return nil, g.err
	}
	if err := p.countsErr(l); err != nil {
		return nil, err
	}
	out := make(Layout, len(l))
	for n, c := range l {
		if c != 0 {
			out[g.names[g.resolve(n)]] += c
		}
	}
	return out, nil
}

func slicesText(start, size int) string {
	if size == 1 {
		return fmt.Sprintf("slice %d", start)
	}
	return fmt.Sprintf("slices %d-%d", start, start+size-1)
}

func rangeText(start, size int) string {
	if size == 1 {
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d-%d", start, start+size-1)
}

// String renders an instance the way error messages name it, "1g.10gb at slice 2".
func (in Instance) String() string {
	return in.Profile + " at " + slicesText(in.Placement.Start, in.Placement.Size)
}

// placementIndex finds pl among profile i's allowed placements, or -1.
func (g *geometry) placementIndex(i int, pl Placement) int {
	pr := &g.profs[i]
	if pl.Size != int(pr.size) {
		return -1
	}
	for j, s := range pr.starts {
		if int(s) == pl.Start {
			return j
		}
	}
	return -1
}

func (p *Product) badPlacement(i int, in Instance, busy string) error {
	var allowed []string
	for _, pl := range p.Profiles[i].Placements {
		allowed = append(allowed, rangeText(pl.Start, pl.Size))
	}
	return fmt.Errorf("%s%s is not an allowed placement on %s (allowed memory slices: %s)",
		busy, Instance{p.Profiles[i].Name, in.Placement}, p.anName(), strings.Join(allowed, ", "))
}

// Validate checks a set of instances at their real placements: known
// profiles, allowed placements, no shared memory slice, per-profile and media
// limits, and compute slices.
func (p *Product) Validate(instances []Instance) error {
	g := p.geometry()
	if g.err != nil {
		return g.err
	}
	var c counts
	var used uint16
	for k, in := range instances {
		i := g.resolve(in.Profile)
		if i < 0 {
			return p.unknownProfile(in.Profile)
		}
		j := g.placementIndex(i, in.Placement)
		if j < 0 {
			return p.badPlacement(i, in, "")
		}
		m := g.profs[i].masks[j]
		if used&m != 0 {
			for _, prev := range instances[:k] {
				if overlaps(prev.Placement, in.Placement) {
					return fmt.Errorf("%s overlaps %s", in, prev)
				}
			}
		}
		used |= m
		c[i] = uint8(min(int(c[i])+1, 255))
	}
	return p.checkCounts(&c)
}

func overlaps(a, b Placement) bool {
	return a.Start < b.Start+b.Size && b.Start < a.Start+a.Size
}

// occupied is the memory-slice mask of instances as they sit, whatever their
// profile; placements outside the GPU are clipped.
func (g *geometry) occupied(instances []Instance) uint16 {
	var used uint16
	for _, in := range instances {
		lo, hi := max(in.Placement.Start, 0), min(in.Placement.Start+in.Placement.Size, g.mem)
		if lo < hi {
			used |= rangeMask(lo, hi-lo)
		}
	}
	return used
}

// FreeMemorySlices counts memory slices no instance occupies. Free slices are
// not necessarily usable: seven 1g instances leave slice 7 free with no compute
// left to use it (see Addable).
func (p *Product) FreeMemorySlices(instances []Instance) int {
	g := p.geometry()
	if g.err != nil {
		return 0
	}
	return g.mem - bits.OnesCount16(g.occupied(instances))
}

// profileMask resolves a list of names to a profile bitmask; nil means dflt.
// Unknown names are skipped: they can never be created on this product.
func (g *geometry) profileMask(names []string, dflt uint64) uint64 {
	if names == nil {
		return dflt
	}
	var m uint64
	for _, n := range names {
		if i := g.resolve(n); i >= 0 {
			m |= 1 << i
		}
	}
	return m
}

// Addable lists, in catalog order, the profiles from allowed (every profile,
// +me included, when allowed is nil) of which one more instance could be
// created next to the existing instances at their real placements. Instances
// of unknown profiles still occupy their memory slices.
func (p *Product) Addable(instances []Instance, allowed []string) []string {
	g := p.geometry()
	if g.err != nil {
		return nil
	}
	var c counts
	compute := 0
	var media mediaTally
	for _, in := range instances {
		if i := g.resolve(in.Profile); i >= 0 {
			c[i] = uint8(min(int(c[i])+1, 255))
			compute += int(g.profs[i].compute)
			media[g.profs[i].media]++
		}
	}
	used := g.occupied(instances)
	mask := g.profileMask(allowed, g.allMask)
	var out []string
	for i := range g.profs {
		pr := &g.profs[i]
		with := media
		with[pr.media]++
		if mask&(1<<i) == 0 || c[i] >= pr.max || compute+int(pr.compute) > g.compute || !with.ok() {
			continue
		}
		for _, m := range pr.masks {
			if used&m == 0 {
				out = append(out, g.names[i])
				break
			}
		}
	}
	return out
}

// Place finds concrete placements for the multiset want that keep every fixed
// (busy) instance where it is; want counts the fixed instances too. The
// search takes profiles larger first and gives each the lowest free starts, so
// the answer is deterministic. The result is sorted by start; an error says
// why no placement exists.
func (p *Product) Place(want Layout, fixed []Instance) ([]Instance, error) {
	g := p.geometry()
	if g.err != nil {
		return nil, g.err
	}
	c, ok := g.countsOf(want)
	if !ok {
		return nil, p.countsErr(want)
	}
	// Every valid busy instance takes a memory slice and overlaps are refused
	// below, so fc cannot count past MaxMemorySlices.
	var fc counts
	var used uint16
	for k, in := range fixed {
		i := g.resolve(in.Profile)
		if i < 0 {
			return nil, fmt.Errorf("busy instance: %w", p.unknownProfile(in.Profile))
		}
		j := g.placementIndex(i, in.Placement)
		if j < 0 {
			return nil, p.badPlacement(i, in, "busy ")
		}
		m := g.profs[i].masks[j]
		if used&m != 0 {
			for _, prev := range fixed[:k] {
				if overlaps(prev.Placement, in.Placement) {
					return nil, fmt.Errorf("busy %s overlaps busy %s", in, prev)
				}
			}
		}
		used |= m
		fc[i]++
	}
	for i := range g.profs {
		if fc[i] > c[i] {
			return nil, fmt.Errorf("layout %s has %s x%d, fewer than the %d busy %s instances that cannot move",
				want, g.names[i], c[i], fc[i], g.names[i])
		}
	}
	if !g.basic(&c) {
		return nil, p.checkCounts(&c)
	}
	var s search
	var need counts
	for i := range g.profs {
		need[i] = c[i] - fc[i]
	}
	if !s.run(g, &need, used) {
		return nil, p.explain(&c, &need, fixed, used)
	}
	out := make([]Instance, 0, len(fixed)+s.n)
	for _, in := range fixed {
		i := g.resolve(in.Profile)
		out = append(out, Instance{Profile: g.names[i], Placement: in.Placement})
	}
	for k := 0; k < s.n; k++ {
		i := s.prof[k]
		out = append(out, Instance{Profile: g.names[i], Placement: Placement{Start: int(s.start[k]), Size: int(g.profs[i].size)}})
	}
	// Insertion sort: at most 16 elements and no allocation, unlike sort.Slice.
	for a := 1; a < len(out); a++ {
		for b := a; b > 0 && out[b].Placement.Start < out[b-1].Placement.Start; b-- {
			out[b], out[b-1] = out[b-1], out[b]
		}
	}
	return out, nil
}

// explain says why need cannot be placed around the busy instances.
func (p *Product) explain(c, need *counts, fixed []Instance, used uint16) error {
	g := p.geometry()
	for i := range g.profs {
		n := int(need[i])
		if n == 0 {
			continue
		}
		pr := &g.profs[i]
		var free, taken []string
		var blockers []Instance
		for j, m := range pr.masks {
			r := rangeText(int(pr.starts[j]), int(pr.size))
			if used&m == 0 {
				free = append(free, r)
				continue
			}
			taken = append(taken, r)
			pl := Placement{Start: int(pr.starts[j]), Size: int(pr.size)}
			for _, f := range fixed {
				f.Profile = g.names[g.resolve(f.Profile)]
				if overlaps(f.Placement, pl) && !slices.Contains(blockers, f) {
					blockers = append(blockers, f)
				}
			}
		}
		if len(free) >= n {
			continue
		}
		slices.SortFunc(blockers, func(a, b Instance) int { return a.Placement.Start - b.Placement.Start })
		busy := make([]string, len(blockers))
		for k, b := range blockers {
			busy[k] = "busy " + b.String()
		}
		name := g.names[i]
		if int(c[i]) > 1 {
			name = fmt.Sprintf("%s x%d", name, c[i])
		}
		if len(busy) == 0 {
			return fmt.Errorf("%s does not fit %s: it has only %d placements for %s", name, p.anName(), len(pr.starts), g.names[i])
		}
		word := "memory slices"
		if pr.size == 1 {
			word = "memory slice"
		}
		if len(free) == 0 {
			return fmt.Errorf("%s needs %s %s, occupied by %s", name, word, strings.Join(taken, " or "), strings.Join(busy, " and "))
		}
		all := make([]string, len(pr.starts))
		for j, st := range pr.starts {
			all[j] = rangeText(int(st), int(pr.size))
		}
		verb := "is"
		if len(free) > 1 {
			verb = "are"
		}
		return fmt.Errorf("%s needs %d free placements among memory slices %s, but only %s %s free next to %s",
			name, n, strings.Join(all, ", "), strings.Join(free, " and "), verb, strings.Join(busy, " and "))
	}
	var freeSlices []string
	for s := 0; s < g.mem; s++ {
		if used&(1<<s) == 0 {
			freeSlices = append(freeSlices, fmt.Sprint(s))
		}
	}
	if len(fixed) == 0 {
		return fmt.Errorf("%s does not fit %s: no choice of allowed placements keeps the instances off each other's memory slices", g.layoutOf(c), p.anName())
	}
	busy := make([]string, len(fixed))
	for k, f := range fixed {
		f.Profile = g.names[g.resolve(f.Profile)]
		busy[k] = "busy " + f.String()
	}
	return fmt.Errorf("%s does not fit %s around %s: the other instances have no allowed placements within free memory slices %s",
		g.layoutOf(c), p.anName(), strings.Join(busy, ", "), strings.Join(freeSlices, ","))
}
