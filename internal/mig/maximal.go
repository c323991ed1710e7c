package mig

import "slices"

// MaximalLayouts lists every layout of the product's plain profiles to which
// no such profile can be added, in CompareLayouts order. Media and graphics
// variants (+me, -me, +me.all, +gfx; Profile.Special) are left out because a
// policy has to ask for them on purpose (+me holds the GPU's only JPEG/OFA
// unit); use MaximalLayoutsOf to include them.
func (p *Product) MaximalLayouts() []Layout { return p.MaximalLayoutsOf(nil) }

// MaximalLayoutsOf is MaximalLayouts over a catalog subset: every layout of
// allowed profiles that fits and to which no allowed profile can be added.
// Aliases are accepted and unknown names ignored; nil means the plain
// profiles, and an empty list yields the single empty layout.
// Results are cached per subset; the returned layouts are fresh copies.
func (p *Product) MaximalLayoutsOf(allowed []string) []Layout {
	g := p.geometry()
	if g.err != nil {
		return nil
	}
	mask := g.profileMask(allowed, g.defMask)
	var cs []counts
	if v, ok := g.maximal.Load(mask); ok {
		cs = v.([]counts)
	} else {
		cs = g.enumerateMaximal(mask)
		slices.SortStableFunc(cs, func(a, b counts) int {
			return CompareLayouts(g.layoutOf(&a), g.layoutOf(&b))
		})
		g.maximal.Store(mask, cs)
	}
	out := make([]Layout, len(cs))
	for i := range cs {
		out[i] = g.layoutOf(&cs[i])
	}
	return out
}

// enumerateMaximal walks every fitting layout of the masked profiles (fitting
// is closed under removal, so each profile's count loop stops at the first
// failure) and keeps those that no masked profile extends.
func (g *geometry) enumerateMaximal(mask uint64) []counts {
	var out []counts
	var c counts
	var rec func(i int)
	rec = func(i int) {
		if i == len(g.profs) {
			if g.maximalIn(&c, mask) {
				out = append(out, c)
			}
			return
		}
		if mask&(1<<i) == 0 {
			rec(i + 1)
			return
		}
		for n := 0; n <= int(g.profs[i].max); n++ {
			c[i] = uint8(n)
			if !g.fits(&c) {
				break
			}
			rec(i + 1)
		}
		c[i] = 0
	}
	rec(0)
	return out
}

func (g *geometry) maximalIn(c *counts, mask uint64) bool {
	for i := range g.profs {
		if mask&(1<<i) == 0 || c[i] >= g.profs[i].max {
			continue
		}
		c[i]++
		ok := g.fits(c)
		c[i]--
		if ok {
			return false
		}
	}
	return true
}
