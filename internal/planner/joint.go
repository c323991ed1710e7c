package planner

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// Joint search over the GPUs of one node. propose changes one GPU at a time and keeps a change
// only when it serves more on its own; improve moves one GPU at a time. Both miss plans where a
// GPU's change is a loss on its own (it evicts a pod it has no room to take back) and another
// GPU of the same node pays for it (its new layout takes that pod, and more): three H200 GPUs
// re-carved together to 2g.35gb x2 + 3g.71gb, so that two 3g pods run instead of one 4g, while
// each of the three changes alone loses a 2g pod.
//
// On pools small enough for the thorough search, jointSearch walks the node's GPUs one by one
// and keeps one choice per distinct outcome: per profile (and for whole GPUs), what the node
// offers less what the pods it evicts need to come back, capped at what the remaining demand
// could use; how many pods it evicts; and what it spends of each PodDisruptionBudget. Choices
// with one outcome serve the same pending pods, so the outcomes stay few where the choices
// number billions (8 GPUs with 15 layouts each). The outcomes are then judged as every
// candidate is, by evaluateInto, in order of an optimistic bound (evicted pods that do not fit
// back land elsewhere), until the bound falls below the best found.

const (
	// jointMaxStates bounds the distinct partial outcomes the walk keeps; past it the node
	// keeps what the one-GPU-at-a-time search found.
	jointMaxStates = 20_000
	// jointMaxEvaluations bounds the outcomes judged in full per search.
	jointMaxEvaluations = 2_000
	// jointMaxLandings bounds the outcomes judged whose evicted pods must land on other nodes:
	// finding landings is the costly part of judging, and the bound, which assumes they land,
	// is loosest there. The one-GPU-at-a-time search still finds the usual moves.
	jointMaxLandings = 200
	// jointMaxWork bounds what all joint searches of one plan may do, in outcomes walked plus
	// outcomes judged (one that must find landings counts jointLandingWork): a few hundred
	// milliseconds on one core. Past it the plan keeps what the one-GPU-at-a-time search finds.
	jointMaxWork     = 300_000
	jointLandingWork = 500
)

// jointPartial is one choice for the GPUs walked so far, standing for every choice with its
// outcome.
type jointPartial struct {
	choice  choice
	changed int
}

// jointWalk is one search's fixed figures.
type jointWalk struct {
	// dims is the profile positions, then whole GPUs.
	dims int
	// caps are, per dimension and per GPU in walking order, the most a partial outcome needs
	// to remember: what the remaining demand could use, plus what the GPUs still to walk could
	// take away by evicting. Capping there merges outcomes without losing any.
	caps [][]int
	// give is, per GPU and dimension, what the GPU offers kept (free now).
	// evicts lists, per GPU, the pods its change evicts.
	evicts [][]jointPod
	// pdbs are the PodDisruptionBudgets the node's pods spend, with what is left of each.
	pdbs    []string
	pdbLeft []int
	// spanning counts the pods held on several GPUs, each with a flag in the outcome so that
	// it is evicted once however many of its GPUs change.
	spanning int
}

// jointPod is what evicting one pod does to an outcome.
type jointPod struct {
	need []int // per dimension, to come back
	pdbs []int // positions in jointWalk.pdbs
	span int   // its spanning flag's position; -1 for a pod on one GPU
}

// outcome layout: an int16 per dimension (net offer), then evictions (uint16), then one byte
// per PodDisruptionBudget spent, then one per spanning pod.
func (w *jointWalk) outcomeSize() int { return 2*w.dims + 2 + len(w.pdbs) + w.spanning }

func (w *jointWalk) net(out []byte, k int) int {
	return int(int16(binary.LittleEndian.Uint16(out[2*k:])))
}

func (w *jointWalk) setNet(out []byte, k, v int) {
	binary.LittleEndian.PutUint16(out[2*k:], uint16(int16(v)))
}

// jointSearch finds the node's best change among every choice of layouts for its GPUs taken
// together; nil when none is better than incumbent, the best the node's other searches found,
// or the search would exceed its bounds.
func (p *planState) jointSearch(ni *nodeInfo, incumbent *proposal) *proposal {
	order := p.changeOrder(ni)
	walked := order[:0:0]
	for _, g := range order {
		if !p.noEvict || len(ni.gpus[g].pods) == 0 {
			walked = append(walked, g)
		}
	}
	if len(walked) < 2 || p.jointWork >= jointMaxWork {
		return nil
	}
	w := p.newJointWalk(ni, walked)
	// The outcomes depend on the node, the caps (what the remaining demand could use), what is
	// left of the budgets and whether changes may evict: the greedy asks again and again with
	// the same.
	memoKey := fmt.Sprint(ni.pos, w.caps[0], w.pdbLeft, p.noEvict)
	states, known := p.jointMemo[memoKey]
	if !known {
		states = p.jointOutcomes(ni, w, walked)
		if p.jointMemo == nil {
			p.jointMemo = map[string]map[string]*jointPartial{}
		}
		p.jointMemo[memoKey] = states
	}
	if states == nil {
		return nil
	}
	return p.judgeJoint(ni, w, states, incumbent)
}

// newJointWalk computes the caps, the pods each GPU's change evicts and the budgets they spend.
func (p *planState) newJointWalk(ni *nodeInfo, walked []int) *jointWalk {
	pi := ni.prod
	w := &jointWalk{dims: len(pi.names) + 1}
	whole := len(pi.names)
	demand := make([]int, w.dims)
	for _, c := range p.classes {
		if c.left <= 0 || c.shared || !p.eligible(ni, c) {
			continue
		}
		need := p.needs(c, pi)
		if need == nil {
			continue
		}
		for k, per := range need.perProfile {
			demand[k] += per * c.left
		}
		demand[whole] += int(c.whole) * c.left
	}
	holders := map[types.NamespacedName]int{}
	for _, g := range walked {
		for _, pod := range ni.gpus[g].pods {
			holders[pod.Key]++
		}
	}
	span := map[types.NamespacedName]int{}
	for _, key := range slices.SortedFunc(maps.Keys(holders), compareKeys) {
		if holders[key] > 1 {
			span[key] = w.spanning
			w.spanning++
		}
	}
	pdbAt := map[string]int{}
	w.evicts = make([][]jointPod, len(ni.gpus))
	for _, g := range walked {
		for _, pod := range ni.gpus[g].pods {
			need := ni.podNeeds[pod.Key]
			jp := jointPod{need: make([]int, w.dims), span: -1}
			copy(jp.need, need.perProfile)
			jp.need[whole] = need.whole
			if i, ok := span[pod.Key]; ok {
				jp.span = i
			}
			for _, key := range pod.PDBs {
				i, ok := pdbAt[key]
				if !ok {
					i = len(w.pdbs)
					pdbAt[key] = i
					w.pdbs = append(w.pdbs, key)
					w.pdbLeft = append(w.pdbLeft, int(max(0, p.pdbLeft[key])))
				}
				jp.pdbs = append(jp.pdbs, i)
			}
			w.evicts[g] = append(w.evicts[g], jp)
		}
	}
	// caps[i] holds for the outcome after walking i GPUs: demand plus what GPUs i.. may take.
	w.caps = make([][]int, len(walked)+1)
	w.caps[len(walked)] = demand
	for i := len(walked) - 1; i >= 0; i-- {
		c := slices.Clone(w.caps[i+1])
		for _, jp := range w.evicts[walked[i]] {
			for k, n := range jp.need {
				c[k] += n
			}
		}
		w.caps[i] = c
	}
	return w
}

// jointOutcomes walks the node's GPUs and returns one choice per distinct outcome; nil past
// jointMaxStates.
func (p *planState) jointOutcomes(ni *nodeInfo, w *jointWalk, walked []int) map[string]*jointPartial {
	isWalked := make([]bool, len(ni.gpus))
	for _, g := range walked {
		isWalked[g] = true
	}
	start := make([]byte, w.outcomeSize())
	// GPUs the walk does not change offer what they offer now.
	for i, gi := range ni.gpus {
		if !isWalked[i] {
			w.offer(start, gi.freeNow, gi.wholeNow, w.caps[0])
		}
	}
	states := map[string]*jointPartial{string(start): {choice: keepAll(len(ni.gpus))}}
	buf := make([]byte, len(start))
	for step, g := range walked {
		gi, limit := ni.gpus[g], w.caps[step+1]
		next := make(map[string]*jointPartial, len(states)*2)
		// In a fixed order, so that of two choices with one outcome the same one is kept.
		keys := slices.Sorted(maps.Keys(states))
		for _, key := range keys {
			part := states[key]
			copy(buf, key)
			w.offer(buf, gi.freeNow, gi.wholeNow, limit)
			if have := next[string(buf)]; have == nil || have.changed > part.changed {
				next[string(buf)] = part
			}
		}
		for _, key := range keys {
			part := states[key]
			for o := range ni.prod.options {
				if o == gi.currentOpt {
					continue
				}
				copy(buf, key)
				if !w.change(buf, g, &ni.prod.options[o], limit) {
					break // the budgets refuse this GPU's pods whatever its layout
				}
				if have := next[string(buf)]; have != nil && have.changed <= part.changed+1 {
					continue
				}
				p.jointWork++
				ch := slices.Clone(part.choice)
				ch[g] = o
				next[string(buf)] = &jointPartial{choice: ch, changed: part.changed + 1}
			}
		}
		if len(next) > jointMaxStates {
			return nil
		}
		states = next
	}
	return states
}

// offer adds free instances and whole GPUs to an outcome, capped at limit.
func (w *jointWalk) offer(out []byte, free []int, whole int, limit []int) {
	for k, n := range free {
		w.setNet(out, k, min(limit[k], w.net(out, k)+n))
	}
	wk := w.dims - 1
	w.setNet(out, wk, min(limit[wk], w.net(out, wk)+whole))
}

// change adds a GPU changed to option o: its new layout, and its pods evicted, each needing
// room to come back and spending its budgets. false when a budget is overspent. A pod evicted
// here that also holds instances on a kept GPU frees them too; the outcome leaves that out, so
// its bound errs low for such rare pods (evaluateInto judges every candidate in full).
func (w *jointWalk) change(out []byte, g int, o *option, limit []int) bool {
	evictions := 2 * w.dims
	spans := evictions + 2 + len(w.pdbs)
	for _, jp := range w.evicts[g] {
		if jp.span >= 0 {
			if out[spans+jp.span] == 1 {
				continue
			}
			out[spans+jp.span] = 1
		}
		for k, n := range jp.need {
			if n > 0 {
				w.setNet(out, k, w.net(out, k)-n)
			}
		}
		binary.LittleEndian.PutUint16(out[evictions:], binary.LittleEndian.Uint16(out[evictions:])+1)
		for _, i := range jp.pdbs {
			out[evictions+2+i]++
			if int(out[evictions+2+i]) > w.pdbLeft[i] {
				return false
			}
		}
	}
	// Offered after the evictions are taken off, so that the cap keeps the outcome exact.
	whole := 0
	if o.disabled {
		whole = 1
	}
	w.offer(out, o.counts, whole, limit)
	return true
}

// jointCandidate is one outcome with the most it could serve: bound assumes every evicted pod
// that does not fit back lands on another node. displaced says whether any must.
type jointCandidate struct {
	choice    choice
	bound     score
	evictions int
	changed   int
	displaced bool
}

// compareJoint orders candidates for judging: the most they could serve, then the ones whose
// pods all come back on the node (no landing to find), then fewest evictions and changes.
func compareJoint(a, b jointCandidate) int {
	if c := b.bound.compare(a.bound); c != 0 {
		return c
	}
	if a.displaced != b.displaced {
		if a.displaced {
			return 1
		}
		return -1
	}
	if a.evictions != b.evictions {
		return a.evictions - b.evictions
	}
	return a.changed - b.changed
}

// judgeJoint evaluates the outcomes best bound first and returns the best change if it is
// better than incumbent, or nil.
func (p *planState) judgeJoint(ni *nodeInfo, w *jointWalk, states map[string]*jointPartial, incumbent *proposal) *proposal {
	// CPU and memory as if every evicted pod left the node: an upper bound.
	optimistic := slices.Clone(ni.free)
	for _, key := range slices.SortedFunc(maps.Keys(ni.podVec), compareKeys) {
		for d, v := range ni.podVec[key] {
			optimistic[d] += v
		}
	}
	var cands []jointCandidate
	// A fixed order, so that equal inputs give equal plans whatever the map's order.
	for _, key := range slices.Sorted(maps.Keys(states)) {
		part := states[key]
		if part.changed == 0 {
			continue
		}
		out := []byte(key)
		st := state{free: make([]int, len(ni.prod.names)), whole: max(0, w.net(out, w.dims-1)),
			vec: slices.Clone(optimistic)}
		displaced := w.net(out, w.dims-1) < 0
		for k := range st.free {
			st.free[k] = max(0, w.net(out, k))
			displaced = displaced || w.net(out, k) < 0
		}
		served := make([]int, len(p.classes))
		var sc score
		ni.fillInto(p, &st, served, &sc)
		if sc.pods == 0 {
			continue
		}
		cands = append(cands, jointCandidate{choice: part.choice, bound: sc, changed: part.changed,
			evictions: int(binary.LittleEndian.Uint16(out[2*w.dims:])), displaced: displaced})
	}
	slices.SortStableFunc(cands, compareJoint)
	best := incumbent
	var cand proposal
	scratch := make([]int, len(p.classes))
	landingTries := jointMaxLandings
	for i, c := range cands {
		if i >= jointMaxEvaluations {
			break
		}
		if best != nil {
			// The bound only falls from here; a candidate that can at most tie what is found
			// is worth judging only when it evicts fewer pods.
			if c.bound.compare(best.gain) < 0 {
				break
			}
			if c.bound.compare(best.gain) == 0 && c.evictions >= best.evictions {
				continue
			}
		}
		if p.jointWork >= jointMaxWork {
			break
		}
		p.jointWork++
		if c.displaced {
			if landingTries == 0 {
				continue
			}
			landingTries--
			p.jointWork += jointLandingWork
		}
		if !p.evaluateInto(ni, c.choice, scratch, &cand) || cand.changed == 0 {

			continue
		}
		if best == nil || better(&cand, best, p, ni) {
			best = keepCopy(&cand)
		}
	}
	if best == incumbent {
		return nil
	}
	return best
}
