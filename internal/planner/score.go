// The score a plan is judged by: served demand in priority tiers, compared tier by tier.

package planner

import (
	"cmp"
	"slices"
)

// score ranks what a change serves: GPU compute slices per priority tier, highest tier first
// (demand of higher priority outweighs any amount of lower, as with preemption). Slices rather
// than pods, so that large requests, the ones fragmentation strands, are not starved by a
// stream of small ones. Ties go to serving classes earlier in serving order (larger, then
// older requests), then to more pods.
type score struct {
	tiers []int
	// byClass is the pods served per class; it shares the proposal's served slice.
	byClass []int
	pods    int
}

func (p *planState) newScore() score {
	return score{tiers: make([]int, len(p.tiers)), byClass: make([]int, len(p.classes))}
}

// scoreInto scores pods served per class into sc, reusing its tiers buffer and sharing the
// served slice.
func (p *planState) scoreInto(served []int, sc *score) {
	*sc = score{tiers: resize(sc.tiers, len(p.tiers)), byClass: served}
	for _, c := range p.classes {
		if n := served[c.id]; n > 0 {
			sc.tiers[p.tierOf[c.id]] += c.slices * n
			sc.pods += n
		}
	}
}

// plus is the score of serving both s and o.
func (s score) plus(o score) score {
	out := score{tiers: slices.Clone(s.tiers), byClass: slices.Clone(s.byClass), pods: s.pods + o.pods}
	for i, v := range o.tiers {
		out.tiers[i] += v
	}
	for i, v := range o.byClass {
		out.byClass[i] += v
	}
	return out
}

func (s score) compare(o score) int {
	for i := range s.tiers {
		if c := cmp.Compare(s.tiers[i], o.tiers[i]); c != 0 {
			return c
		}
	}
	for i := range s.byClass {
		if c := cmp.Compare(s.byClass[i], o.byClass[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(s.pods, o.pods)
}
