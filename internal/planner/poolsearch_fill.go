package planner

import (
	"math"
	"slices"
)

// fills lists the maximal ways to fill st with pods of the pool classes: pending pods only
// where the node changes (those that fit it as it is were placed before planning), evicted
// pods back home, and moved pods where they may land.
func (ps *poolSearch) fills(ni *nodeInfo, oc *poolOutcome) [][]uint8 {
	dims := len(ni.prod.names)
	st := &state{free: make([]int, dims), vec: slices.Clone(oc.capacity[dims+1:])}
	for k := range st.free {
		st.free[k] = int(oc.capacity[k])
	}
	st.whole = int(oc.capacity[dims])
	limits := make([]int, len(ps.classes))
	for k, pc := range ps.classes {
		t := pc.on[ni.pos]
		switch {
		case t == nil:
		case pc.pending != nil:
			if oc.changed {
				limits[k] = pc.pending.left
			}
		case ps.hostable[ni.pos]:
			limits[k] = min(oc.evicts[k]+ps.evictableElsewhere(k, ni.pos), ps.mostEvicted[k])
		default:
			limits[k] = oc.evicts[k]
		}
		limits[k] = min(limits[k], 255)
	}
	var out [][]uint8
	cur := make([]uint8, len(ps.classes))
	take := func(k int) *poolTake { return ps.classes[k].on[ni.pos] }
	// Only the classes that fit the node at all take part.
	var active []int
	for k := range ps.classes {
		if limits[k] > 0 && fitsPods(st, take(k), 1) > 0 {
			active = append(active, k)
		}
	}
	var dfs func(a int)
	dfs = func(a int) {
		if ps.work += poolCompareWork; ps.work > poolMaxWork || len(out) >= poolMaxFills {
			return
		}
		if a == len(active) {
			for _, j := range active {
				if int(cur[j]) < limits[j] && fitsPods(st, take(j), 1) > 0 {
					return // not maximal
				}
			}
			out = append(out, slices.Clone(cur))
			return
		}
		k := active[a]
		t := take(k)
		most := fitsPods(st, t, limits[k])
		st.takeNeed(t.per, t.whole, t.vec, most)
		n := most
		for ; n >= 0; n-- {
			cur[k] = uint8(n)
			// Fewer than fit is maximal only if the classes after this one can use up what
			// one more would take.
			if n == most || ps.blockable(st, t, active[a+1:], take, limits, cur) {
				dfs(a + 1)
			}
			if n > 0 {
				st.takeNeed(t.per, t.whole, t.vec, -1)
			}
		}
		cur[k] = 0
	}
	dfs(0)
	return out
}

// fitsPods is how many pods taking t fit st, at most limit.
func fitsPods(st *state, t *poolTake, limit int) int {
	n := limit
	if t.whole > 0 {
		n = min(n, st.whole/t.whole)
	}
	for k, per := range t.per {
		if per > 0 {
			n = min(n, st.free[k]/per)
		}
	}
	for d, per := range t.vec {
		if per > 0 {
			n = min(n, int(min(st.vec[d]/per, math.MaxInt32)))
		}
	}
	return max(n, 0)
}

// blockable reports whether the classes in later could, together, take enough of some
// resource that one more pod taking t no longer fits st: a necessary condition for a fill
// with room for t left to be maximal. Each later class is bounded by what fits it alone.
func (ps *poolSearch) blockable(st *state, t *poolTake, later []int, take func(int) *poolTake, limits []int, cur []uint8) bool {
	ub := make([]int, len(later))
	for i, j := range later {
		ub[i] = fitsPods(st, take(j), limits[j]-int(cur[j]))
	}
	if t.whole > 0 {
		used := 0
		for i, j := range later {
			used += ub[i] * take(j).whole
		}
		if st.whole-used < t.whole {
			return true
		}
	}
	for k, per := range t.per {
		if per <= 0 {
			continue
		}
		used := 0
		for i, j := range later {
			used += ub[i] * take(j).per[k]
		}
		if st.free[k]-used < per {
			return true
		}
	}
	for d, per := range t.vec {
		if per <= 0 {
			continue
		}
		var used int64
		for i, j := range later {
			used += int64(ub[i]) * take(j).vec[d]
		}
		if st.vec[d]-used < per {
			return true
		}
	}
	return false
}
