package mig

import (
	"math/bits"
	"strings"
	"sync"
)

// counts is a layout in the compact form the hot paths use: instances per
// profile, indexed like Product.Profiles.
type counts [MaxProfiles]uint8

// gprof is one profile as the search sees it.
type gprof struct {
	compute, size, max uint8
	media              Media
	masks              []uint16 // memory-slice bitmask per allowed placement, ascending start
	starts             []uint8
}

// geometry is the compiled, immutable form of a Product.
type geometry struct {
	err     error
	mem     int
	compute int
	full    uint16 // bitmask of all memory slices
	profs   []gprof
	names   []string       // canonical names, indexed like profs
	index   map[string]int // canonical names, lowercased names and aliases
	allMask uint64         // every profile
	defMask uint64         // every profile that is not Special (media or graphics variant)

	tableOnce sync.Once
	shift     [MaxProfiles]uint8
	table     []uint64 // bitset over packed counts of every layout that fits; nil when too big

	maximal sync.Map // profile mask (uint64) -> []counts
}

// tableBits caps the feasibility bitset at 2^20 bits (128 KiB); the built-in
// products need 13 bits.
const tableBits = 20

func (p *Product) geometry() *geometry {
	if p == nil {
		return &geometry{err: errNilProduct}
	}
	if g := p.geo.Load(); g != nil {
		return g
	}
	g := compile(p)
	if !p.geo.CompareAndSwap(nil, g) {
		return p.geo.Load()
	}
	return g
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !nameRune(r) {
			return false
		}
	}
	return true
}

func compile(p *Product) *geometry {
	g := &geometry{mem: p.MemorySlices, compute: p.ComputeSlices}
	fail := func(format string, args ...any) *geometry {
		return &geometry{err: invalidf(p, format, args...)}
	}
	switch {
	case strings.TrimSpace(p.Name) == "":
		return fail("empty product name")
	case p.MemorySlices < 1 || p.MemorySlices > MaxMemorySlices:
		return fail("memory slices %d outside 1..%d", p.MemorySlices, MaxMemorySlices)
	case p.ComputeSlices < 1 || p.ComputeSlices > maxCompute:
		return fail("compute slices %d outside 1..%d", p.ComputeSlices, maxCompute)
	case len(p.Profiles) == 0:
		return fail("no profiles")
	case len(p.Profiles) > MaxProfiles:
		return fail("%d profiles, at most %d", len(p.Profiles), MaxProfiles)
	}
	g.full = uint16(1<<p.MemorySlices - 1)
	g.index = make(map[string]int, 2*len(p.Profiles))
	type key struct{ id, size int }
	seen := map[key]string{}
	addName := func(n string, i int) error {
		for _, k := range []string{n, strings.ToLower(n)} {
			if j, dup := g.index[k]; dup && j != i {
				return invalidf(p, "profile name %q used by both %s and %s", n, p.Profiles[j].Name, p.Profiles[i].Name)
			}
			g.index[k] = i
		}
		return nil
	}
	for i := range p.Profiles {
		pr := &p.Profiles[i]
		if !validName(pr.Name) {
			return fail("profile %d has invalid name %q", i, pr.Name)
		}
		if pr.ComputeSlices < 1 || pr.ComputeSlices > p.ComputeSlices {
			return fail("profile %s: compute slices %d outside 1..%d", pr.Name, pr.ComputeSlices, p.ComputeSlices)
		}
		if len(pr.Placements) == 0 {
			return fail("profile %s has no placements", pr.Name)
		}
		if pr.MemorySlices < 1 || pr.MemorySlices > p.MemorySlices {
			return fail("profile %s: memory slices %d outside 1..%d", pr.Name, pr.MemorySlices, p.MemorySlices)
		}
		if pr.MaxCount < 1 || pr.MaxCount > p.MemorySlices {
			return fail("profile %s: max count %d outside 1..%d", pr.Name, pr.MaxCount, p.MemorySlices)
		}
		if pr.MemoryMiB < 0 {
			return fail("profile %s: negative memory %d MiB", pr.Name, pr.MemoryMiB)
		}
		if pr.ID < 0 {
			return fail("profile %s: negative NVML profile ID %d", pr.Name, pr.ID)
		}
		k := key{pr.ID, pr.MemorySlices}
		if other, dup := seen[k]; dup {
			return fail("profiles %s and %s share NVML profile ID %d with %d memory slices", other, pr.Name, pr.ID, pr.MemorySlices)
		}
		seen[k] = pr.Name
		gp := gprof{
			compute: uint8(pr.ComputeSlices),
			size:    uint8(pr.MemorySlices),
			max:     uint8(pr.MaxCount),
			media:   pr.Media,
		}
		var startSeen uint16
		for _, pl := range pr.Placements {
			if pl.Size != pr.MemorySlices {
				return fail("profile %s: placement at %d has size %d, the profile spans %d memory slices", pr.Name, pl.Start, pl.Size, pr.MemorySlices)
			}
			if pl.Start < 0 || pl.Start+pl.Size > p.MemorySlices {
				return fail("profile %s: placement %d+%d outside memory slices 0-%d", pr.Name, pl.Start, pl.Size, p.MemorySlices-1)
			}
			if startSeen&(1<<pl.Start) != 0 {
				return fail("profile %s: placement at %d listed twice", pr.Name, pl.Start)
			}
			if len(gp.starts) > 0 && pl.Start < int(gp.starts[len(gp.starts)-1]) {
				return fail("profile %s: placements not in ascending start order", pr.Name)
			}
			startSeen |= 1 << pl.Start
			gp.masks = append(gp.masks, rangeMask(pl.Start, pl.Size))
			gp.starts = append(gp.starts, uint8(pl.Start))
		}
		g.profs = append(g.profs, gp)
		g.names = append(g.names, pr.Name)
		g.allMask |= 1 << i
		if pr.Media > MediaAll {
			return fail("profile %s: unknown media kind %d", pr.Name, pr.Media)
		}
		if !pr.Special() {
			g.defMask |= 1 << i
		}
		if err := addName(pr.Name, i); err != nil {
			return &geometry{err: err}
		}
	}
	// Aliases go in after every canonical name so an alias can never shadow one.
	for i := range p.Profiles {
		for _, a := range p.Profiles[i].Aliases {
			if !validName(a) {
				return fail("profile %s has invalid alias %q", p.Profiles[i].Name, a)
			}
			if err := addName(a, i); err != nil {
				return &geometry{err: err}
			}
		}
	}
	return g
}

func rangeMask(start, size int) uint16 {
	return uint16((1<<size - 1) << start)
}

// resolve maps a profile name to its index, or -1.
func (g *geometry) resolve(name string) int {
	if i, ok := g.index[name]; ok {
		return i
	}
	if g.err != nil {
		return -1
	}
	return g.resolveSlow(name)
}

func (g *geometry) resolveSlow(name string) int {
	n := strings.ToLower(strings.TrimSpace(name))
	if i, ok := g.index[n]; ok {
		return i
	}
	if r, ok := ProfileFromResource(n); ok {
		n = r
		if i, ok := g.index[n]; ok {
			return i
		}
	}
	return -1
}

// mediaTally counts instances by the media engines they take.
type mediaTally [MediaAll + 1]int

// ok is the media rule: one "+me" instance at most (there is one JPEG/OFA
// unit), one "+me.all" at most, and a "+me.all" instance shares the GPU with
// "-me" instances only.
func (t *mediaTally) ok() bool {
	return t[MediaExtensions] <= 1 && t[MediaAll] <= 1 &&
		(t[MediaAll] == 0 || t[MediaShare]+t[MediaExtensions] == 0)
}

// basic checks everything but geometry: per-profile limits, media engines,
// compute and memory totals.
func (g *geometry) basic(c *counts) bool {
	compute, mem := 0, 0
	var media mediaTally
	for i := range g.profs {
		n := c[i]
		if n == 0 {
			continue
		}
		pr := &g.profs[i]
		if n > pr.max {
			return false
		}
		compute += int(n) * int(pr.compute)
		mem += int(n) * int(pr.size)
		media[pr.media] += int(n)
	}
	return compute <= g.compute && mem <= g.mem && media.ok()
}

// fits reports whether the multiset c has a valid placement on an empty GPU.
func (g *geometry) fits(c *counts) bool {
	if g.err != nil || !g.basic(c) {
		return false
	}
	g.tableOnce.Do(g.buildTable)
	if g.table != nil {
		k := g.pack(c)
		return g.table[k>>6]&(1<<(k&63)) != 0
	}
	var s search
	return s.run(g, c, 0)
}

func (g *geometry) pack(c *counts) uint32 {
	var k uint32
	for i := range g.profs {
		k |= uint32(c[i]) << g.shift[i]
	}
	return k
}

// buildTable precomputes every layout that fits so fits is one bit test. It
// relies on fitting being closed under removing an instance: once n copies of
// a profile fail, n+1 fail too.
func (g *geometry) buildTable() {
	total := 0
	for i := range g.profs {
		g.shift[i] = uint8(total)
		total += bits.Len8(g.profs[i].max)
	}
	if total > tableBits {
		return
	}
	table := make([]uint64, max(1, (1<<total)/64))
	var c counts
	var rec func(i int)
	rec = func(i int) {
		if i == len(g.profs) {
			k := g.pack(&c)
			table[k>>6] |= 1 << (k & 63)
			return
		}
		for n := 0; n <= int(g.profs[i].max); n++ {
			c[i] = uint8(n)
			var s search
			if !g.basic(&c) || !s.run(g, &c, 0) {
				break
			}
			rec(i + 1)
		}
		c[i] = 0
	}
	rec(0)
	g.table = table
}

// search is a depth-first placement search: profiles in catalog order (larger
// first), and for each profile its instances at strictly increasing placement
// indexes, so the first solution found uses the lowest starts in that order
// and no arrangement is tried twice.
type search struct {
	g      *geometry
	need   counts
	suffix [MaxProfiles + 1]int // memory slices needed by profiles k.. of the order
	n      int
	prof   [MaxMemorySlices]uint8
	start  [MaxMemorySlices]uint8
}

// run places need on a GPU whose memory slices in used are taken.
func (s *search) run(g *geometry, need *counts, used uint16) bool {
	s.g, s.need, s.n = g, *need, 0
	s.suffix[len(g.profs)] = 0
	for k := len(g.profs) - 1; k >= 0; k-- {
		s.suffix[k] = s.suffix[k+1] + int(need[k])*int(g.profs[k].size)
	}
	if s.suffix[0] > bits.OnesCount16(g.full&^used) {
		return false
	}
	return s.dfs(-1, 0, 0, used)
}

func (s *search) dfs(k, left, j int, used uint16) bool {
	for left == 0 {
		k++
		if k == len(s.g.profs) {
			return true
		}
		left, j = int(s.need[k]), 0
	}
	pr := &s.g.profs[k]
	if left*int(pr.size)+s.suffix[k+1] > bits.OnesCount16(s.g.full&^used) {
		return false
	}
	for ; j+left <= len(pr.masks); j++ {
		m := pr.masks[j]
		if used&m != 0 {
			continue
		}
		s.prof[s.n], s.start[s.n] = uint8(k), pr.starts[j]
		s.n++
		if s.dfs(k, left-1, j+1, used|m) {
			return true
		}
		s.n--
	}
	return false
}
