// Proposing one node's change: choosing layouts GPU by GPU, evaluating them against demand and improving them.

package planner

import (
	"cmp"
	"runtime"
	"slices"
	"sync"
)

// proposeAll computes every node's first proposal, spread over the available CPUs: this first
// pass is most of a large plan's cost, and nodes do not depend on each other in it. Each
// worker has its own scratch buffers; the shared tables are filled before the workers start,
// and each node's eligibility cache is written by the one worker that owns the node, so the
// result is the same as a sequential pass.
func (p *planState) proposeAll(version int) []*proposal {
	for _, c := range p.classes {
		for _, ni := range p.nodes {
			p.needs(c, ni.prod)
		}
	}
	out := make([]*proposal, len(p.nodes))
	workers := min(runtime.GOMAXPROCS(0), max(1, len(p.nodes)/64))
	var wg sync.WaitGroup
	for w := range workers {
		worker := *p
		worker.scratch, worker.evictedBuf, worker.wantedBuf = state{}, nil, nil
		worker.takenBuf, worker.awayScratch, worker.awayServed, worker.landFailed = nil, state{}, nil, nil
		worker.landMemo, worker.landingNeed, worker.jointMemo = nil, nil, nil
		wg.Go(func() {
			for i := w; i < len(p.nodes); i += workers {
				out[i] = worker.propose(p.nodes[i], version)
			}
		})
	}
	wg.Wait()
	return out
}

// propose finds the node's best change against the remaining demand: GPUs are considered
// cheapest first (idle, then fewest pods to evict) and each takes the catalog layout that adds
// the most served demand; a layout is also tried on several GPUs at once, for pods that need
// more instances or whole GPUs than one GPU offers.
func (p *planState) propose(ni *nodeInfo, version int) *proposal {
	if ni.blocker != "" || ni.prod == nil || len(ni.prod.options) == 0 {
		return nil
	}
	order := p.changeOrder(ni)
	if len(order) == 0 {
		return nil
	}
	ch := keepAll(len(ni.gpus))
	best := p.evaluate(ni, ch, make([]int, len(p.classes)))
	if best == nil {
		return nil
	}
	base := best.gain
	scratch := make([]int, len(p.classes))
	trial := make(choice, len(ni.gpus))
	var cand proposal
	// GPUs that look alike (same layout, same pods' needs) give the same marginal gain until
	// something is committed, so one that brought nothing rules out its twins.
	fruitless := map[string]bool{}
	for pos := 0; pos < len(order); pos++ {
		gpu := order[pos]
		if ch[gpu] != keep || fruitless[ni.gpus[gpu].sig] {
			continue
		}
		var winner *proposal
		for o := range ni.prod.options {
			if o == ni.gpus[gpu].currentOpt {
				continue
			}
			// Apply option o to this GPU and, while it helps, to the next cheapest ones.
			copy(trial, ch)
			for k := pos; k < len(order); k++ {
				g := order[k]
				if trial[g] != keep || ni.gpus[g].currentOpt == o {
					continue
				}
				trial[g] = o
				if !p.evaluateInto(ni, trial, scratch, &cand) {
					break
				}
				if winner == nil || better(&cand, winner, p, ni) {
					winner = keepCopy(&cand)
				}
				if !p.needsMore(ni, &cand) {
					break
				}
			}
		}
		if winner == nil || winner.gain.compare(best.gain) <= 0 {
			fruitless[ni.gpus[gpu].sig] = true
			continue
		}
		best = winner
		ch = slices.Clone(winner.choice)
		clear(fruitless)
		if p.saturated(ni, best) {
			break
		}
	}
	if p.thorough() && !p.saturated(ni, best) {
		// GPUs changed together, where one pays for another's loss (joint.go). A change
		// that serves every pod the node may run is left as it is.
		if joint := p.jointSearch(ni, best); joint != nil {
			best = joint
		}
	}
	if best.gain.compare(base) <= 0 || best.changed == 0 {
		return nil
	}
	best.version = version
	return best
}

// improve polishes an accepted proposal by local search: it moves to the best single-GPU
// change (another layout, or back to the current one) while that serves more, or the same
// with less disruption or stranding. The GPU-by-GPU greedy in propose commits to a layout for
// one GPU before it sees the next; on the few nodes a plan changes, this repairs those early
// choices (a 4g+3g that should have been 3g+3g, a GPU changed for nothing) at little cost.
func (p *planState) improve(pr *proposal) *proposal {
	ni := pr.node
	order := p.changeOrder(ni)
	scratch := make([]int, len(p.classes))
	trial := make(choice, len(ni.gpus))
	var cand proposal
	for range 2 * len(ni.gpus) {
		var next *proposal
		for _, gpu := range order {
			gi := ni.gpus[gpu]
			for o := keep; o < len(ni.prod.options); o++ {
				if o == pr.choice[gpu] || (o != keep && o == gi.currentOpt) {
					continue
				}
				copy(trial, pr.choice)
				trial[gpu] = o
				if !p.evaluateInto(ni, trial, scratch, &cand) || cand.changed == 0 || !better(&cand, pr, p, ni) {
					continue
				}
				if next == nil || better(&cand, next, p, ni) {
					next = keepCopy(&cand)
				}
			}
		}
		if next == nil {
			break
		}
		next.version = pr.version
		pr = next
	}
	return pr
}

// saturated is true when a proposal serves every remaining pod that may run on the node:
// changing more GPUs could only add disruption.
func (p *planState) saturated(ni *nodeInfo, pr *proposal) bool {
	for _, c := range p.classes {
		if c.left > pr.served[c.id] && !c.shared && p.eligible(ni, c) && p.needs(c, ni.prod) != nil {
			return false
		}
	}
	return true
}

// needsMore is true when some eligible class still has pods left on this node that the
// candidate does not serve, so applying the same layout to one more GPU might.
func (p *planState) needsMore(ni *nodeInfo, cand *proposal) bool {
	for _, c := range p.classes {
		if c.multi && c.left > cand.served[c.id] && p.eligible(ni, c) {
			return true
		}
	}
	return false
}

// better breaks ties between candidates for one GPU: more served, then fewer evictions and
// GPUs changed, then fewer stranded instances, then catalog order (earlier wins: the caller
// tries options in order and keeps the first of equals).
func better(a, b *proposal, p *planState, ni *nodeInfo) bool {
	if c := compareProposals(a, b); c != 0 {
		return c < 0
	}
	return p.leftoverOf(ni, a) < p.leftoverOf(ni, b)
}

// leftoverOf caches leftover on the proposal: ties are common and each costs a node state.
func (p *planState) leftoverOf(ni *nodeInfo, pr *proposal) int {
	if pr.leftover < 0 {
		pr.leftover = p.leftover(ni, pr)
	}
	return pr.leftover
}

// leftover counts the compute slices a candidate leaves that no remaining demand on this node
// can use: free instances nobody asks for, and the compute slices the target layouts of the
// GPUs it changes leave uncarved. Without the second part a layout that runs out of memory
// slices first (4g.40gb with two 1g.20gb on an H100 strands a compute slice) would look
// better than one that carves all seven (4g.40gb with 3g.40gb).
func (p *planState) leftover(ni *nodeInfo, pr *proposal) int {
	st, ok := p.stateWith(ni, pr.choice, pr.landings, &p.scratch, false)
	if !ok {
		return 0
	}
	for _, c := range p.classes {
		if n := pr.served[c.id]; n > 0 {
			ni.take(p, c, &st, n)
		}
	}
	p.wantedBuf = resize(p.wantedBuf, len(st.free))
	wanted := p.wantedBuf
	for _, c := range p.classes {
		rest := c.left - pr.served[c.id]
		if rest <= 0 || !p.eligible(ni, c) {
			continue
		}
		if need := p.needs(c, ni.prod); need != nil {
			for k, per := range need.perProfile {
				wanted[k] += per * rest
			}
		}
	}
	stranded := 0
	for k, n := range st.free {
		if n > wanted[k] {
			stranded += (n - wanted[k]) * ni.prod.compute[k]
		}
	}
	for _, o := range pr.choice {
		if o == keep || ni.prod.options[o].disabled {
			continue
		}
		stranded += ni.prod.product.ComputeSlices
		for k, n := range ni.prod.options[o].counts {
			stranded -= n * ni.prod.compute[k]
		}
	}
	return stranded
}

// evaluate scores a choice on a node; nil when it would lose an evicted pod or overspend a
// PodDisruptionBudget.
func (p *planState) evaluate(ni *nodeInfo, ch choice, served []int) *proposal {
	pr := &proposal{}
	if !p.evaluateInto(ni, ch, served, pr) {
		return nil
	}
	return pr
}

// evaluateInto is evaluate writing into pr, reusing its score buffer: the search loops score
// thousands of candidates per node and keep only a few. pr shares ch and served.
//
// Evicted pods come back on the node where they fit; those that do not must land on other
// nodes (moves.go), or the choice is refused. When the node's change could serve more with
// room it gives its evicted pods, moving every one that has a landing elsewhere is tried too,
// and kept when it serves more.
func (p *planState) evaluateInto(ni *nodeInfo, ch choice, served []int, pr *proposal) bool {
	*pr = proposal{node: ni, choice: ch, leftover: -1, gain: score{tiers: pr.gain.tiers}}
	evicted := p.evictedBuf[:0]
	defer func() { p.evictedBuf = evicted[:0] }()
	var pdbUse map[string]int32
	for i, gi := range ni.gpus {
		if ch[i] == keep {
			continue
		}
		if p.noEvict && len(gi.pods) > 0 {
			return false
		}
		pr.changed++
		for _, pod := range gi.pods {
			// A pod holding instances on several changed GPUs is evicted once.
			if containsKey(evicted, pod.Key) {
				continue
			}
			evicted = append(evicted, pod.Key)
			pr.evictions++
			for _, key := range pod.PDBs {
				if pdbUse == nil {
					pdbUse = map[string]int32{}
				}
				pdbUse[key]++
				if pdbUse[key] > p.pdbLeft[key] {
					return false
				}
			}
		}
	}
	st, ok := p.stateWith(ni, ch, nil, &p.scratch, true)
	if !ok {
		return false
	}
	if len(st.displaced) > 0 {
		if pr.landings, pr.carves, ok = p.landOrCarve(ni, ch, st.evicted, st.displaced, pdbUse); !ok {
			return false
		}
	}
	ni.fillInto(p, &st, served, &pr.gain)
	pr.served = served
	if !p.moves || len(evicted) == 0 || p.saturated(ni, pr) {
		return true
	}
	away, _ := p.landRemembered(ni, ch, evicted, evicted, true)
	if len(away) <= len(pr.landings) {
		return true
	}
	alt, ok := p.stateWith(ni, ch, away, &p.awayScratch, false)
	if !ok {
		return true
	}
	p.awayServed = resize(p.awayServed, len(served))
	var altGain score
	ni.fillInto(p, &alt, p.awayServed, &altGain)
	if altGain.compare(pr.gain) > 0 {
		copy(served, p.awayServed)
		p.scoreInto(served, &pr.gain)
		pr.landings, pr.carves = away, nil
	}
	return true
}

// changeOrder lists the node's changeable GPUs, cheapest to change first.
func (p *planState) changeOrder(ni *nodeInfo) []int {
	var order []int
	for i, gi := range ni.gpus {
		if gi.changeable {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(len(ni.gpus[a].pods), len(ni.gpus[b].pods)), cmp.Compare(a, b))
	})
	return order
}
