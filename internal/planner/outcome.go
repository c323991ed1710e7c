package planner

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/mig"
)

// stranded counts, per profile, free instances that neither the remaining pending demand nor
// the standby shapes can use.
func (p *planState) stranded(states map[*nodeInfo]*state, shapes []demand.Shape) map[string]int {
	free := map[*productInfo][]int{}
	for _, ni := range p.nodes {
		st := states[ni]
		if st == nil {
			continue
		}
		sum := free[ni.prod]
		if sum == nil {
			sum = make([]int, len(ni.prod.names))
			free[ni.prod] = sum
		}
		for k, n := range st.free {
			sum[k] += max(n, 0)
		}
	}
	out := map[string]int{}
	for _, pi := range sortedProducts(free) {
		want := make([]int, len(pi.names))
		for _, c := range p.classes {
			if c.left == 0 {
				continue
			}
			if need := p.needs(c, pi); need != nil {
				for k, per := range need.perProfile {
					want[k] += per * c.left
				}
			}
		}
		for _, s := range shapes {
			if s.Kind != demand.KindMIG {
				continue
			}
			if pr, ok := pi.product.Profile(s.Profile); ok {
				want[pi.index[pr.Name]] += int(s.MinFree)
			}
		}
		for k, n := range free[pi] {
			if n > want[k] {
				out[pi.names[k]] += n - want[k]
			}
		}
	}
	return out
}

func sortedProducts[V any](m map[*productInfo]V) []*productInfo {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b *productInfo) int { return cmp.Compare(a.product.Name, b.product.Name) })
	return keys
}

// standby re-carves idle GPUs toward the policy's standby shapes once pending demand is
// served: first on nodes the plan changes anyway, then on new nodes while budget, the nodes
// maxReconfiguringNodes still allows, lasts; it returns what is left of it. Standby never
// evicts: headroom is not worth disrupting running work.
func (p *planState) standby(budget int, steps map[*nodeInfo]*proposal, shapes []demand.Shape) int {
	if len(shapes) == 0 {
		return budget
	}
	for {
		deficit := p.deficits(steps, shapes)
		if !slices.ContainsFunc(deficit, func(n int) bool { return n > 0 }) {
			return budget
		}
		var bestNode *nodeInfo
		var bestChoice choice
		bestGain := 0
		for _, ni := range p.standbyCandidates(budget, steps) {
			base := keepAll(len(ni.gpus))
			if pr := steps[ni]; pr != nil {
				base = pr.choice
			}
			for gpu, gi := range ni.gpus {
				if base[gpu] != keep || !gi.changeable || len(gi.pods) > 0 {
					continue
				}
				for o := range ni.prod.options {
					if o == gi.currentOpt {
						continue
					}
					trial := slices.Clone(base)
					trial[gpu] = o
					gain, ok := p.standbyGain(ni, steps[ni], base, trial, shapes, deficit)
					if ok && gain > bestGain {
						bestNode, bestChoice, bestGain = ni, trial, gain
					}
				}
			}
		}
		if bestNode == nil {
			return budget
		}
		pr := steps[bestNode]
		if pr == nil {
			p.accepted++
			pr = &proposal{node: bestNode, served: make([]int, len(p.classes)), gain: p.newScore(), seq: p.accepted}
			steps[bestNode] = pr
			budget--
		}
		pr.choice = bestChoice
		pr.changed = 0
		for _, o := range bestChoice {
			if o != keep {
				pr.changed++
			}
		}
	}
}

// standbyCandidates are nodes the plan already changes, then, while the budget allows a new
// node, every other plannable node; in name order within each group.
func (p *planState) standbyCandidates(budget int, steps map[*nodeInfo]*proposal) []*nodeInfo {
	var touched, fresh []*nodeInfo
	for _, ni := range p.nodes {
		if ni.blocker != "" || ni.prod == nil || len(ni.prod.options) == 0 {
			continue
		}
		if steps[ni] != nil {
			touched = append(touched, ni)
		} else if budget > 0 {
			fresh = append(fresh, ni)
		}
	}
	return append(touched, fresh...)
}

// deficits is, per standby shape, how many more free units the pool needs.
func (p *planState) deficits(steps map[*nodeInfo]*proposal, shapes []demand.Shape) []int {
	states := p.finalStates(steps)
	out := make([]int, len(shapes))
	for i, s := range shapes {
		have := 0
		for _, ni := range p.nodes {
			if st := states[ni]; st != nil {
				have += shapeUnits(ni.prod, st, s)
			}
		}
		out[i] = max(0, int(s.MinFree)-have)
	}
	return out
}

func shapeUnits(pi *productInfo, st *state, s demand.Shape) int {
	switch s.Kind {
	case demand.KindMIG:
		if pr, ok := pi.product.Profile(s.Profile); ok {
			return max(0, st.free[pi.index[pr.Name]])
		}
	case demand.KindGPU:
		return max(0, st.whole)
	}
	return 0
}

// standbyGain is how much a trial choice reduces the standby deficits on one node (shapes of
// higher priority weigh more), without taking capacity from pods the plan serves there.
func (p *planState) standbyGain(ni *nodeInfo, pr *proposal, base, trial choice, shapes []demand.Shape, deficit []int) (int, bool) {
	var away []landing
	if pr != nil {
		away = pr.landings
	}
	before, ok := p.stateOf(ni, base, away)
	if !ok {
		return 0, false
	}
	after, ok := p.stateOf(ni, trial, away)
	if !ok {
		return 0, false
	}
	if pr != nil {
		for _, c := range p.classes {
			if n := pr.served[c.id]; n > 0 {
				ni.take(p, c, &before, n)
				ni.take(p, c, &after, n)
			}
		}
		if !after.valid() {
			return 0, false
		}
	}
	gain, loss := 0, 0
	for i, s := range shapes {
		delta := shapeUnits(ni.prod, &after, s) - shapeUnits(ni.prod, &before, s)
		weight := int(s.Priority) + 1
		if delta > 0 {
			gain += min(delta, deficit[i]) * weight
		} else if delta < 0 {
			loss += -delta * weight
		}
	}
	if loss > 0 {
		return 0, false
	}
	return gain, true
}

// waitsFor orders a node's step against the steps its moves touch, always the later accepted
// after the earlier, so the order has no cycle: a node whose pods land on a node the plan
// changes waits for that change (make before break), and a node the plan changes after pods
// were moved to it waits for them to move (they land before it is cordoned).
func waitsFor(ni *nodeInfo, chosen map[*nodeInfo]*proposal) []string {
	pr := chosen[ni]
	var out []string
	for _, l := range pr.landings {
		if other := chosen[l.to]; other != nil && other.changed > 0 && other.seq < pr.seq {
			out = append(out, l.to.node.Name)
		}
	}
	for _, l := range ni.landed {
		if other := chosen[l.from]; other != nil && other.seq < pr.seq {
			out = append(out, l.from.node.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// holding names what a pod holds on a GPU, e.g. "1g.18gb" or "the whole GPU".
func holding(gi *gpuInfo, key types.NamespacedName) string {
	var profiles []string
	for _, in := range gi.gpu.Instances {
		if in.Pod != nil && *in.Pod == key {
			profiles = append(profiles, in.Profile)
		}
	}
	if len(profiles) == 0 {
		return "the whole GPU"
	}
	slices.SortFunc(profiles, mig.CompareProfileNames)
	return strings.Join(profiles, ", ")
}
