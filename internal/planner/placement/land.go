// Landings for the claims in an opening's way, and committing an opening to the plan.

package placement

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/gpupool/gpupool/internal/mig"
)

// tentative is what the landings tried so far take of one GPU.
type tentative struct {
	mask      uint16
	instances []mig.Instance
	counters  map[string]int64
}

// land finds a landing for every claim in cand's way, trying the largest claims first and,
// for each, the opening's own GPU, then the node's other GPUs, then other nodes, each in the
// driver's device order (lowest start first, as first-fit takes them). The search backtracks,
// so it fails only when no assignment exists (or maxSearch tries are spent).
func (p *planner) land(cand *candidate) bool {
	s := cand.gpu
	order := slices.Clone(cand.inWay)
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(s.holders[b].Placement.Size, s.holders[a].Placement.Size)
	})
	tent := map[*gpuState]*tentative{s: {
		mask:      maskOf(cand.part.Placement),
		instances: []mig.Instance{{Profile: cand.part.Profile, Placement: cand.part.Placement}},
		counters:  map[string]int64{},
	}}
	gpus := p.landingOrder(s)
	landings := make([]landingAt, len(order))
	tries := 0
	var place func(k int) bool
	place = func(k int) bool {
		if k == len(order) {
			return true
		}
		h := s.holders[order[k]]
		for _, lg := range gpus {
			if !allowed(h.Nodes, lg.g.Node) {
				continue
			}
			pr, ok := lg.g.Product.Profile(h.Profile)
			if !ok {
				continue
			}
			t := tent[lg]
			if t == nil {
				t = &tentative{counters: map[string]int64{}}
				tent[lg] = t
			}
			for _, part := range lg.parts[pr.Name] {
				p.work++
				if tries++; tries > maxSearch {
					return false
				}
				if !p.landsOn(cand, lg, t, part) {
					continue
				}
				in := mig.Instance{Profile: part.Profile, Placement: part.Placement}
				m, n := t.mask, len(t.instances)
				t.mask |= maskOf(part.Placement)
				t.instances = append(t.instances, in)
				addCounters(t.counters, part.Counters)
				landings[k] = landingAt{gpu: lg, part: part}
				if place(k + 1) {
					return true
				}
				t.mask, t.instances = m, t.instances[:n]
				for name, v := range part.Counters {
					t.counters[name] -= v
				}
			}
		}
		return false
	}
	if !place(0) {
		return false
	}
	// Back in the opening's order of claims, by placement.
	cand.landings = make([]landingAt, len(cand.inWay))
	for k, i := range order {
		cand.landings[slices.Index(cand.inWay, i)] = landings[k]
	}
	return true
}

// landingOrder is the GPUs a claim moved off s may land on, in the order they are tried.
func (p *planner) landingOrder(s *gpuState) []*gpuState {
	out := []*gpuState{s}
	for _, g := range p.gpus {
		if g != s && g.g.Node == s.g.Node {
			out = append(out, g)
		}
	}
	if !p.opts.SameNodeOnly {
		for _, g := range p.gpus {
			if g.g.Node != s.g.Node {
				out = append(out, g)
			}
		}
	}
	return out
}

// landsOn says whether part on lg is free now (no holder, no reservation of the plan, no
// landing tried so far), its counters are left, and the GPU may hold it beside the rest.
func (p *planner) landsOn(cand *candidate, lg *gpuState, t *tentative, part Partition) bool {
	if maskOf(part.Placement)&(lg.held|lg.reserved|t.mask) != 0 || !lg.countersLeft(part.Counters, t.counters, false) {
		return false
	}
	in := mig.Instance{Profile: part.Profile, Placement: part.Placement}
	var skip []int
	if lg == cand.gpu {
		skip = cand.inWay
		// The claim must still fit the counters the moved claims give back once the landings
		// on its own GPU take theirs.
		use := maps.Clone(t.counters)
		addCounters(use, part.Counters)
		for name, v := range use {
			cand.freed[name] -= v
		}
		ok := lg.countersAfterMoves(cand.part.Counters, cand.freed)
		for name, v := range use {
			cand.freed[name] += v
		}
		if !ok {
			return false
		}
	}
	return lg.valid(lg.instances(skip, append(slices.Clone(t.instances), in)))
}

// commit records cand in the plan: the opening, the claims moved and their landings reserved,
// the budgets spent.
func (p *planner) commit(c Claim, cand *candidate) *Opening {
	clear(p.landableMemo)
	s := cand.gpu
	o := &Opening{Node: s.g.Node, GPU: s.g.Index, Profile: cand.part.Profile, Placement: cand.part.Placement,
		Device: cand.part.Device, Claim: c}
	before := map[*gpuState]mig.Layout{s: layout(s.instances(nil, nil))}
	for _, part := range s.parts {
		for _, q := range part {
			if q.Placement != cand.part.Placement || q.Profile != cand.part.Profile {
				if maskOf(q.Placement)&maskOf(cand.part.Placement) != 0 {
					o.KeepFree = append(o.KeepFree, q)
				}
			}
		}
	}
	slices.SortFunc(o.KeepFree, func(a, b Partition) int {
		return cmp.Or(cmp.Compare(a.Placement.Start, b.Placement.Start), cmp.Compare(a.Placement.Size, b.Placement.Size),
			cmp.Compare(a.Profile, b.Profile), cmp.Compare(a.Device, b.Device))
	})
	for k, i := range cand.inWay {
		h := s.holders[i]
		l := cand.landings[k]
		if _, ok := before[l.gpu]; !ok && l.gpu.g.Node == s.g.Node {
			before[l.gpu] = layout(l.gpu.instances(nil, nil))
		}
		o.Moves = append(o.Moves, Move{Holder: h,
			Landing: Landing{Node: l.gpu.g.Node, GPU: l.gpu.g.Index, Placement: l.part.Placement, Device: l.part.Device},
			Reason: fmt.Sprintf("holds %s at %s of GPU %d, in the way of %s for claim %s; lands on node %s GPU %d at %s",
				h.Profile, slicesText(h.Placement), s.g.Index, cand.part.Profile, c.Claim, l.gpu.g.Node, l.gpu.g.Index, slicesText(l.part.Placement))})
		s.moved[i] = true
		s.reserved |= maskOf(h.Placement)
		addCounters(s.counterFreed, s.holderCounters(h))
		l.gpu.reserved |= maskOf(l.part.Placement)
		l.gpu.landed = append(l.gpu.landed, mig.Instance{Profile: l.part.Profile, Placement: l.part.Placement})
		addCounters(l.gpu.counterUse, l.part.Counters)
		for _, pod := range h.Pods {
			for _, pdb := range pod.PDBs {
				p.pdbLeft[pdb]--
			}
		}
		if p.evictLeft != Unlimited {
			p.evictLeft -= len(h.Pods)
		}
	}
	s.reserved |= maskOf(cand.part.Placement)
	s.landed = append(s.landed, mig.Instance{Profile: cand.part.Profile, Placement: cand.part.Placement})
	addCounters(s.counterUse, cand.part.Counters)
	p.opened[s.g.Node] = true
	if p.nodesLeft != Unlimited {
		p.nodesLeft--
	}
	for g, from := range before {
		o.GPUs = append(o.GPUs, GPUChange{Index: g.g.Index, From: from, To: layout(g.instances(nil, nil))})
	}
	slices.SortFunc(o.GPUs, func(a, b GPUChange) int { return a.Index - b.Index })
	return o
}
