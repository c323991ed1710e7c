// Carves: changing a GPU on another node so that pods a proposal moves there have somewhere to land (make before break).

package planner

import (
	"maps"
	"slices"

	"github.com/gpupool/gpupool/internal/inventory"
)

// carve is a change of one GPU on another node that makes room for pods a proposal moves
// there: the landing is carved first (make before break). Its own evicted pods, if any, come
// back on it, so a move never starts a chain of moves.
type carve struct {
	node   *nodeInfo
	choice choice
	// proposal is the node's proposal while the carve is accepted.
	proposal *proposal
	// evictions are the pods the carve evicts on its node.
	evictions []*inventory.Pod
}

// carvesFor finds one-GPU changes on nodes without an accepted proposal that make room for
// all of pods (evicted from node from) next to what those nodes already keep, on nodes none of
// landed uses; ok is false when they cannot all land or the budgets left cannot pay for the
// carves. pdbUse is what the moving proposal already spends of the PodDisruptionBudgets.
func (p *planState) carvesFor(from *nodeInfo, pods []*inventory.Pod, landed []landing, pdbUse map[string]int32) ([]*carve, []landing, bool) {
	var carves []*carve
	var out []landing
	disruptLeft, reconfigureLeft := p.disruptLeft-1, p.reconfigureLeft // the mover itself evicts
	pdbs := maps.Clone(pdbUse)
	for _, to := range p.nodes {
		if len(pods) == 0 {
			break
		}
		if to == from || to.accepted != nil || to.blocker != "" || !p.hostable(to) || len(to.prod.options) == 0 {
			continue
		}
		if slices.ContainsFunc(landed, func(l landing) bool { return l.to == to }) {
			// Its spare already takes some of the pods; one node, one way of landing.
			continue
		}
		c, ls := p.carveOn(to, from, pods, pdbs, disruptLeft > 0 && !p.noEvict, reconfigureLeft > 0)
		if c == nil {
			continue
		}
		if len(c.evictions) > 0 {
			disruptLeft--
		} else {
			reconfigureLeft--
		}
		for _, pod := range c.evictions {
			for _, key := range pod.PDBs {
				if pdbs == nil {
					pdbs = map[string]int32{}
				}
				pdbs[key]++
			}
		}
		carves, out = append(carves, c), append(out, ls...)
		pods = slices.DeleteFunc(pods, func(pod *inventory.Pod) bool { return movedAway(ls, pod.Key) })
	}
	return carves, out, len(pods) == 0
}

// carveOn finds the one-GPU change on node to that lands the most of pods, the first of them
// first; nil when it lands none.
func (p *planState) carveOn(to, from *nodeInfo, pods []*inventory.Pod, pdbUse map[string]int32, mayEvict, mayReconfigure bool) (*carve, []landing) {
	tried := map[string]bool{}
	var best *carve
	var bestLandings []landing
	for _, gpu := range p.changeOrder(to) {
		gi := to.gpus[gpu]
		if tried[gi.sig] {
			continue
		}
		tried[gi.sig] = true
		if (len(gi.pods) > 0 && !mayEvict) || (len(gi.pods) == 0 && !mayReconfigure) || !p.pdbsAllow(gi.pods, pdbUse) {
			continue
		}
		for o := range to.prod.options {
			if o == gi.currentOpt {
				continue
			}
			ch := keepAll(len(to.gpus))
			ch[gpu] = o
			p.carveWork++
			st, ok := p.stateWith(to, ch, nil, nil, false)
			if !ok {
				continue
			}
			var out []landing
			for _, pod := range pods {
				per, whole, known := gpuNeeds(pod, to.prod)
				vec := from.podVec[pod.Key]
				if !known || !pod.MayRunOn(to.node.Object) || !fitsNeed(&st, per, whole, vec) {
					continue
				}
				st.takeNeed(per, whole, vec, 1)
				out = append(out, landing{pod: pod.Key, from: from, to: to, need: podNeed{perProfile: per, whole: whole}, vec: vec})
			}
			if len(out) > len(bestLandings) {
				best, bestLandings = &carve{node: to, choice: ch, evictions: gi.pods}, out
				if len(out) == len(pods) {
					return best, bestLandings
				}
			}
		}
	}
	return best, bestLandings
}

// pdbsAllow reports whether evicting pods as well as what pdbUse counts stays within the
// PodDisruptionBudgets.
func (p *planState) pdbsAllow(pods []*inventory.Pod, pdbUse map[string]int32) bool {
	use := map[string]int32{}
	for _, pod := range pods {
		for _, key := range pod.PDBs {
			use[key]++
			if use[key]+pdbUse[key] > p.pdbLeft[key] {
				return false
			}
		}
	}
	return true
}

// acceptCarves makes (sign -1) or unmakes (+1) a proposal's carves their nodes' accepted
// proposals, serving nothing yet, with the PodDisruptionBudgets their evictions spend.
func (p *planState) acceptCarves(pr *proposal, sign int) {
	for _, c := range pr.carves {
		p.acceptCarve(c, sign)
	}
}

func (p *planState) acceptCarve(c *carve, sign int) {
	if sign < 0 {
		c.proposal = &proposal{node: c.node, choice: c.choice, served: make([]int, len(p.classes)), gain: p.newScore(),
			changed: 1, evictions: len(c.evictions), leftover: -1}
		c.node.accepted = c.proposal
	} else {
		c.node.accepted = nil
	}
	for _, pod := range c.evictions {
		for _, key := range pod.PDBs {
			p.pdbLeft[key] += int32(sign)
		}
	}
}

// carveMaxWork bounds the layouts the carve searches of one plan may try (each a state of
// the node under one GPU's new layout): about 0.3 s on one core.
const carveMaxWork = 150_000
