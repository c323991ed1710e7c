// The greedy search: accept the best proposal, improve the rest, repeat within the budgets.

package planner

import (
	"container/heap"

	"k8s.io/apimachinery/pkg/types"
)

// greedy picks, node by node, the change that serves the most remaining demand, until the
// budget is spent or nothing more can be served. Remaining demand only shrinks, so a node's
// best gain only falls: stale proposals are re-evaluated lazily when they reach the top.
//
// When the budget covers every node that could serve something, the budget no longer decides
// what is served, only where: then nodes that already run work change first (fewest idle
// GPUs), so pending pods pack beside running ones and idle nodes stay whole for pods that need
// many GPUs of one node. On the trace benchmark this serves more, with fewer evictions, than
// largest-gain-first, which reaches for the emptiest nodes. Small pools are not affected: there
// every step compares all nodes by what they serve (bestImproved).
func (p *planState) greedy(disruptBudget, reconfigureBudget int, steps map[*nodeInfo]*proposal) (reconfigureLeft int) {
	disruptLeft, reconfigureLeft := disruptBudget, reconfigureBudget
	if disruptLeft <= 0 {
		p.noEvict = true
	}
	if disruptLeft+reconfigureLeft <= 0 {
		return reconfigureLeft
	}
	p.disruptLeft, p.reconfigureLeft = disruptLeft, reconfigureLeft
	p.refreshLedger()
	version := 0
	h := &proposalHeap{}
	for _, pr := range p.proposeAll(version) {
		if pr != nil {
			h.items = append(h.items, pr)
		}
	}
	h.pack = min(disruptLeft+reconfigureLeft, p.stepRoom(0)) >= len(h.items)
	heap.Init(h)
	for h.Len() > 0 && (disruptLeft > 0 || reconfigureLeft > 0) && p.stepRoom(len(steps)) > 0 {
		top := heap.Pop(h).(*proposal)
		if top.version != version {
			if pr := p.propose(top.node, version); pr != nil {
				heap.Push(h, pr)
			}
			continue
		}
		if p.thorough() {
			top = p.bestImproved(h, top, version, disruptLeft, reconfigureLeft)
		} else {
			top = p.improve(top)
		}
		needDisrupt, needReconfigure := top.cost()
		if needDisrupt > disruptLeft || needReconfigure > reconfigureLeft ||
			needDisrupt+needReconfigure > p.stepRoom(len(steps)) {
			// The budget for this kind of change, or the bound on the plan's size, is spent;
			// the node stays as it is.
			continue
		}
		// Landings are carved first: their steps come before the one that moves pods there.
		carveSeq := p.accepted
		p.accepted += len(top.carves) + 1
		top.seq = p.accepted
		steps[top.node] = top
		p.consume(top, -1)
		for i, c := range top.carves {
			c.proposal.seq = carveSeq + 1 + i
			steps[c.node] = p.fillCarve(c)
		}
		disruptLeft -= needDisrupt
		reconfigureLeft -= needReconfigure
		p.disruptLeft, p.reconfigureLeft = disruptLeft, reconfigureLeft
		// From now on changes evict nobody; every proposal is stale anyway.
		p.noEvict = disruptLeft == 0
		version++
	}
	return reconfigureLeft
}

// fillCarve lets an accepted carve node serve what pending demand fits beside the pods moved
// there, and returns its proposal.
func (p *planState) fillCarve(c *carve) *proposal {
	full := p.evaluate(c.node, c.choice, make([]int, len(p.classes)))
	if full == nil || full.gain.compare(c.proposal.gain) <= 0 {
		return c.proposal
	}
	full.seq = c.proposal.seq
	for _, cl := range p.classes {
		cl.left -= full.served[cl.id]
	}
	c.proposal.served, c.proposal.gain = full.served, full.gain
	if p.ledger != nil {
		p.indexLedger(c.node, false)
	}
	return c.proposal
}

// thoroughLimit is the pool size (in GPUs) up to which every acceptance compares the polished
// proposals of all nodes instead of polishing only the greedy favourite. On small pools the
// choice of node is most of the answer and the search is cheap; on large ones the greedy
// order is good and the extra search would cost seconds.
const thoroughLimit = 64

func (p *planState) thorough() bool {
	gpus := 0
	for _, ni := range p.nodes {
		gpus += len(ni.gpus)
	}
	return gpus <= thoroughLimit
}

// bestImproved polishes the top proposal and every other node's current proposal, each from
// its greedy choice and from no change at all, and returns the one that serves the most
// together with the best next step it leaves possible (a one-step look-ahead: the node whose
// capacity only it can offer a pod is chosen for that pod). The others go back on the heap.
func (p *planState) bestImproved(h *proposalHeap, top *proposal, version int, disruptLeft, reconfigureLeft int) *proposal {
	candidates := []*proposal{top}
	for h.Len() > 0 {
		pr := heap.Pop(h).(*proposal)
		if pr.version != version {
			pr = p.propose(pr.node, version)
		}
		if pr != nil {
			candidates = append(candidates, pr)
		}
	}
	var best *proposal
	var bestTotal score
	for _, pr := range candidates {
		for _, polished := range p.alternatives(pr, version) {
			if d, r := polished.cost(); d > disruptLeft || r > reconfigureLeft {
				continue
			}
			total := polished.gain
			if disruptLeft+reconfigureLeft > 1 {
				total = total.plus(p.nextBest(polished, candidates, version, disruptLeft, reconfigureLeft))
			}
			if best == nil || total.compare(bestTotal) > 0 ||
				(total.compare(bestTotal) == 0 && servesBefore(polished, best)) {
				best, bestTotal = polished, total
			}
		}
	}
	if best == nil {
		// No alternative fits what is left of the budgets; the greedy refuses top.
		best = top
	}
	for _, pr := range candidates {
		if pr.node != best.node {
			heap.Push(h, pr)
		}
	}
	return best
}

// alternatives are the polished proposals worth comparing for one node: from its greedy
// choice, from no change, and, for each class the greedy choice serves, without that class,
// so that a node can leave a pod to another node that has room for it.
func (p *planState) alternatives(pr *proposal, version int) []*proposal {
	var out []*proposal
	keepIfChanged := func(cand *proposal) {
		if cand != nil && cand.changed > 0 {
			cand.version = version
			out = append(out, cand)
		}
	}
	keepIfChanged(p.improve(pr))
	if base := p.evaluate(pr.node, keepAll(len(pr.node.gpus)), make([]int, len(p.classes))); base != nil {
		keepIfChanged(p.improve(base))
	}
	for _, c := range p.classes {
		if pr.served[c.id] == 0 {
			continue
		}
		left := c.left
		c.left = 0
		var choice choice
		if alt := p.propose(pr.node, version); alt != nil {
			choice = p.improve(alt).choice
		}
		c.left = left
		if choice != nil {
			// Judge the layouts chosen without c against the whole demand again.
			keepIfChanged(p.evaluate(pr.node, choice, make([]int, len(p.classes))))
		}
	}
	return out
}

// nextBest is the gain of the best proposal on another node once pr is accepted, within what
// pr leaves of the budgets.
func (p *planState) nextBest(pr *proposal, candidates []*proposal, version int, disruptLeft, reconfigureLeft int) score {
	if pr.evictions > 0 {
		disruptLeft--
	} else {
		reconfigureLeft--
	}
	for _, c := range pr.carves {
		if len(c.evictions) > 0 {
			disruptLeft--
		} else {
			reconfigureLeft--
		}
	}
	p.consume(pr, -1)
	noEvict, savedDisrupt, savedReconfigure := p.noEvict, p.disruptLeft, p.reconfigureLeft
	p.noEvict = noEvict || disruptLeft <= 0
	p.disruptLeft, p.reconfigureLeft = disruptLeft, reconfigureLeft
	defer func() {
		p.noEvict, p.disruptLeft, p.reconfigureLeft = noEvict, savedDisrupt, savedReconfigure
		p.consume(pr, +1)
	}()
	best := p.newScore()
	for _, other := range candidates {
		if other.node == pr.node {
			continue
		}
		next := p.propose(other.node, version)
		if next == nil {
			continue
		}
		if d, r := next.cost(); d > disruptLeft || r > reconfigureLeft {
			continue
		}
		if next.gain.compare(best) > 0 {
			best = next.gain
		}
	}
	return best
}

// consume takes (sign -1) or gives back (+1) the demand, PDB budget and spare capacity a
// proposal uses, as if it were accepted.
func (p *planState) consume(pr *proposal, sign int) {
	for _, c := range p.classes {
		c.left += sign * pr.served[c.id]
	}
	if sign < 0 {
		pr.node.accepted = pr
	} else {
		pr.node.accepted = nil
	}
	p.acceptCarves(pr, sign)
	p.commitLandings(pr, sign)
	defer p.updateLedger(pr)
	var evicted []types.NamespacedName
	for _, gi := range changedGPUs(pr) {
		for _, pod := range gi.pods {
			if containsKey(evicted, pod.Key) {
				continue
			}
			evicted = append(evicted, pod.Key)
			for _, key := range pod.PDBs {
				p.pdbLeft[key] += int32(sign)
			}
		}
	}
}
