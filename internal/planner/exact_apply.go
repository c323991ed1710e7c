// Applying the exact search: whether its plan beats the greedy one, and replacing the greedy's steps with it.

package planner

import (
	"maps"
	"slices"
)

// unservedExclusive reports whether pending demand the exact search could serve is left: pods
// that ask for MIG instances or whole GPUs (shared replicas are the share phase's).
func (p *planState) unservedExclusive() bool {
	return slices.ContainsFunc(p.classes, func(c *class) bool { return c.left > 0 && !c.shared })
}

// exactBeats reports whether the exact plan serves more than the greedy one, or the same with
// fewer evictions.
func (p *planState) exactBeats(x *exactPlan, steps map[*nodeInfo]*proposal) bool {
	served := make([]int, len(p.classes))
	evicts := 0
	for _, pr := range steps {
		for _, c := range p.classes {
			served[c.id] += pr.served[c.id]
		}
		evicts += pr.evictions
	}
	greedy := p.newScore()
	p.scoreInto(served, &greedy)
	if c := x.gain.compare(greedy); c != 0 {
		return c > 0
	}
	return x.evicts < evicts
}

// greedyState is what the greedy changes in the planner's working memory, so that its plan can
// be set aside for the exact one.
type greedyState struct {
	left     []int
	pdbLeft  map[string]int32
	accepted int
}

func (p *planState) saveGreedyState() greedyState {
	s := greedyState{pdbLeft: maps.Clone(p.pdbLeft), accepted: p.accepted}
	for _, c := range p.classes {
		s.left = append(s.left, c.left)
	}
	return s
}

func (p *planState) restoreGreedyState(s greedyState) {
	for i, c := range p.classes {
		c.left = s.left[i]
	}
	p.pdbLeft, p.accepted = s.pdbLeft, s.accepted
	for _, ni := range p.nodes {
		ni.accepted, ni.landed = nil, nil
	}
}

// applyExact turns the exact plan into accepted proposals in steps, as the greedy would have
// left them, and returns how many nodes change without evicting; ok is false, with nothing
// changed, when the planner's own accounting does not confirm the plan.
func (p *planState) applyExact(x *exactPlan, steps map[*nodeInfo]*proposal) (reconfiguring int, ok bool) {
	// Where each evicted pod lands: back on its node when a fill puts it there, else the first
	// node that takes it.
	landAt := map[int]*nodeInfo{}
	for i, ni := range p.nodes {
		for it, n := range x.fills[i] {
			item := x.items[it]
			if n == 0 || item.pod == nil {
				continue
			}
			if _, seen := landAt[it]; !seen || ni == item.home {
				landAt[it] = ni
			}
		}
	}
	left := make([]int, len(p.classes))
	for _, c := range p.classes {
		left[c.id] = c.left
	}
	made := map[*nodeInfo]*proposal{}
	for _, evicting := range []bool{false, true} {
		for i, ni := range p.nodes {
			ch := x.choices[i]
			if ch == nil || !ch.changed || ch.disrupt != evicting {
				continue
			}
			pr := &proposal{node: ni, choice: ch.choice, served: make([]int, len(p.classes)), gain: p.newScore(), leftover: -1}
			for _, o := range ch.choice {
				if o != keep {
					pr.changed++
				}
			}
			for it, n := range x.fills[i] {
				if c := x.items[it].class; c != nil {
					take := min(int(n), left[c.id])
					pr.served[c.id] += take
					left[c.id] -= take
				}
			}
			for _, it := range ch.evicted {
				pr.evictions++
				to := landAt[it]
				if to == nil {
					return 0, false
				}
				if to == ni {
					continue
				}
				pod := x.items[it].pod
				per, whole, known := gpuNeeds(pod, to.prod)
				if !known {
					return 0, false
				}
				pr.landings = append(pr.landings, landing{pod: pod.Key, from: ni, to: to, need: podNeed{perProfile: per, whole: whole}, vec: ni.podVec[pod.Key]})
			}
			p.scoreInto(pr.served, &pr.gain)
			made[ni] = pr
		}
	}
	saved := p.saveGreedyState()
	seq := p.accepted
	for _, evicting := range []bool{false, true} {
		for _, ni := range p.nodes {
			if pr := made[ni]; pr != nil && (pr.evictions > 0) == evicting {
				seq++
				pr.seq = seq
				ni.accepted = pr
				p.commitLandings(pr, -1)
			}
		}
	}
	// The planner's own accounting must agree: every node keeps room for what it serves and
	// for the pods moved to it.
	for _, ni := range p.nodes {
		if ni.prod == nil || !ni.schedulable {
			continue
		}
		if _, ok := p.acceptedState(ni); !ok {
			p.restoreGreedyState(saved)
			return 0, false
		}
	}
	p.accepted = seq
	for ni, pr := range made {
		steps[ni] = pr
		if pr.evictions == 0 {
			reconfiguring++
		}
		for _, c := range p.classes {
			c.left -= pr.served[c.id]
		}
		for _, gi := range changedGPUs(pr) {
			for _, pod := range gi.pods {
				for _, key := range pod.PDBs {
					p.pdbLeft[key]--
				}
			}
		}
	}
	return reconfiguring, true
}
