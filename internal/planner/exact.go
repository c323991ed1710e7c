package planner

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpupool/gpupool/internal/inventory"
)

// Exact search for tiny pools. The greedy commits to one node at a time, so it misses plans
// where several nodes change together for one pending pod: chains of moves, a node re-carved
// only to take another node's pods. On a pool of a few nodes every combination of targets can
// be tried: the search below walks the nodes one by one over states of (pending pods served
// per class, running pods evicted and placed again, budgets and PodDisruptionBudgets spent),
// and at each node tries every choice of targets and every maximal way to fill it. It keeps
// the plan only when it beats the greedy one (more demand served, or the same with fewer
// evictions), so it never makes a plan worse.

// exactMaxGPUs, exactMaxItems and exactMaxStates bound the pools the search runs on and the work
// it may do; past them the greedy plan stands.
const (
	exactMaxGPUs   = 8
	exactMaxItems  = 40
	exactMaxStates = 20000
	// exactMaxChoices is per node, before deduplication: enough for a node of 4 GPUs with 15
	// layouts each, where a pod evicted from one GPU lands on another of the same node.
	exactMaxChoices = 1 << 16
	// exactMaxWork bounds the steps (fill candidates and state transitions) the whole search
	// may take, a few hundred milliseconds at most, so that a plan of a tiny pool never waits
	// long on it; past it the greedy plan stands.
	exactMaxWork = 3_000_000
)

// exactItem is a pending class or one running pod a change may evict.
type exactItem struct {
	class *class         // a pending class; nil for a running pod
	pod   *inventory.Pod // the running pod
	home  *nodeInfo      // the running pod's node
	limit int            // pods of the item
}

// exactChoice is one choice of targets on a node with what it offers and costs.
type exactChoice struct {
	choice  choice
	evicted []int // items the choice evicts
	id      string
	disrupt bool
	changed bool
	pdbs    map[string]int32
	fills   [][]uint8 // maximal ways to fill the node, per item
}

type exactState struct {
	placed  string // per item, pods placed (bytes)
	evicted string // per item, 1 when evicted
	disrupt int
	reconf  int
	pdb     string // per PDB key, evictions (bytes)
}

type exactEntry struct {
	prev   exactState
	choice int
	fill   int
}

// exactPlan is the search's best plan: per node, the choice and the fill.
type exactPlan struct {
	items   []exactItem
	choices []*exactChoice // per node; nil where the node keeps its layouts and takes nothing
	fills   [][]uint8      // per node
	served  []int          // per class
	gain    score
	evicts  int
}

// changes is how many nodes the exact plan changes.
func (x *exactPlan) changes() int {
	n := 0
	for _, ch := range x.choices {
		if ch != nil && ch.changed {
			n++
		}
	}
	return n
}

func (p *planState) exactSearch(disruptBudget, reconfigureBudget int) *exactPlan {
	gpus := 0
	for _, ni := range p.nodes {
		gpus += len(ni.gpus)
	}
	if gpus > exactMaxGPUs || gpus == 0 {
		return nil
	}
	var items []exactItem
	for _, c := range p.classes {
		if c.left > 0 && !c.shared {
			items = append(items, exactItem{class: c, limit: c.left})
		}
	}
	for _, ni := range p.nodes {
		seen := map[string]bool{}
		for _, gi := range ni.gpus {
			if !gi.changeable {
				continue
			}
			for _, pod := range gi.pods {
				if _, known := ni.podNeeds[pod.Key]; known && !seen[pod.Key.String()] {
					seen[pod.Key.String()] = true
					items = append(items, exactItem{pod: pod, home: ni, limit: 1})
				}
			}
		}
	}
	if len(items) == 0 || len(items) > exactMaxItems || len(items) > 255 {
		return nil
	}
	pdbKeys := slices.Sorted(func(yield func(string) bool) {
		for k := range p.pdbLeft {
			if !yield(k) {
				return
			}
		}
	})
	work := exactMaxWork
	nodeChoices := make([][]*exactChoice, len(p.nodes))
	for i, ni := range p.nodes {
		if nodeChoices[i] = p.exactChoices(ni, items, &work); nodeChoices[i] == nil || work < 0 {
			return nil
		}
	}
	zero := exactState{placed: string(make([]byte, len(items))), evicted: string(make([]byte, len(items))), pdb: string(make([]byte, len(pdbKeys)))}
	layers := []map[exactState]exactEntry{{zero: {}}}
	for i := range p.nodes {
		next := map[exactState]exactEntry{}
		// In a fixed order, so that the first path to reach a state, the one kept, is the same
		// whatever order the map gives.
		for _, s := range sortedStates(layers[i]) {
			for ci, ch := range nodeChoices[i] {
				d, r := s.disrupt, s.reconf
				if ch.disrupt {
					d++
				} else if ch.changed {
					r++
				}
				if d > disruptBudget || r > reconfigureBudget {
					continue
				}
				pdb := []byte(s.pdb)
				ok := true
				for k, n := range ch.pdbs {
					j := slices.Index(pdbKeys, k)
					if j < 0 || int32(pdb[j])+n > p.pdbLeft[k] {
						ok = false
						break
					}
					pdb[j] += byte(n)
				}
				if !ok {
					continue
				}
				evicted := []byte(s.evicted)
				for _, it := range ch.evicted {
					evicted[it] = 1
				}
				if work -= len(ch.fills); work < 0 {
					return nil
				}
				for fi, f := range ch.fills {
					placed := []byte(s.placed)
					for it, n := range f {
						placed[it] = byte(min(items[it].limit, int(placed[it])+int(n)))
					}
					key := exactState{placed: string(placed), evicted: string(evicted), disrupt: d, reconf: r, pdb: string(pdb)}
					if _, seen := next[key]; !seen {
						next[key] = exactEntry{prev: s, choice: ci, fill: fi}
					}
				}
			}
		}
		if len(next) > exactMaxStates {
			return nil
		}
		layers = append(layers, next)
	}
	var best *exactPlan
	var bestState exactState
	for _, s := range sortedStates(layers[len(p.nodes)]) {
		valid := true
		served := make([]int, len(p.classes))
		evicts := 0
		for it, item := range items {
			if item.class != nil {
				served[item.class.id] = int(s.placed[it])
			} else if s.evicted[it] == 1 {
				evicts++
				valid = valid && s.placed[it] >= 1
			}
		}
		if !valid {
			continue
		}
		cand := &exactPlan{served: served, evicts: evicts}
		p.scoreInto(served, &cand.gain)
		if best == nil || exactBetter(cand, best, s, bestState) {
			best, bestState = cand, s
		}
	}
	if best == nil {
		return nil
	}
	// Walk back to the choice and fill of every node.
	best.items = items
	best.choices = make([]*exactChoice, len(p.nodes))
	best.fills = make([][]uint8, len(p.nodes))
	s := bestState
	for i := len(p.nodes) - 1; i >= 0; i-- {
		e := layers[i+1][s]
		ch := nodeChoices[i][e.choice]
		best.choices[i], best.fills[i] = ch, ch.fills[e.fill]
		s = e.prev
	}
	return best
}

func sortedStates(m map[exactState]exactEntry) []exactState {
	out := make([]exactState, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b exactState) int {
		return cmp.Or(strings.Compare(a.placed, b.placed), strings.Compare(a.evicted, b.evicted),
			cmp.Compare(a.disrupt, b.disrupt), cmp.Compare(a.reconf, b.reconf), strings.Compare(a.pdb, b.pdb))
	})
	return out
}

// exactBetter orders plans: more served (the planner's score), then fewer evictions, then
// fewer nodes changed, then a fixed order of the states so that equal inputs give equal plans.
func exactBetter(a, b *exactPlan, sa, sb exactState) bool {
	if c := a.gain.compare(b.gain); c != 0 {
		return c > 0
	}
	if a.evicts != b.evicts {
		return a.evicts < b.evicts
	}
	if ca, cb := sa.disrupt+sa.reconf, sb.disrupt+sb.reconf; ca != cb {
		return ca < cb
	}
	return strings.Compare(sa.placed+sa.evicted, sb.placed+sb.evicted) < 0
}

// exactChoices enumerates a node's choices of targets, each with its maximal fills. A node
// that keeps its layouts only takes moved pods (pending pods that fit it as it is were placed
// before planning); a node nothing may land on and that may not change has one empty choice.
func (p *planState) exactChoices(ni *nodeInfo, items []exactItem, work *int) []*exactChoice {
	var out []*exactChoice
	if ni.prod == nil || !ni.schedulable {
		return []*exactChoice{{fills: [][]uint8{make([]uint8, len(items))}}}
	}
	count := 1
	for _, gi := range ni.gpus {
		if ni.blocker == "" && gi.changeable {
			count *= len(ni.prod.options) + 1
		}
	}
	if count > exactMaxChoices {
		return nil
	}
	// Choices that leave the same capacity and evict the same pods are one choice.
	seen := map[string]bool{}
	ch := keepAll(len(ni.gpus))
	var walk func(g int)
	walk = func(g int) {
		if g == len(ni.gpus) {
			if *work < 0 {
				return
			}
			if c := p.exactChoice(ni, slices.Clone(ch), items, work); c != nil && !seen[c.id] {
				seen[c.id] = true
				out = append(out, c)
			}
			return
		}
		walk(g + 1)
		gi := ni.gpus[g]
		if ni.blocker != "" || !gi.changeable || (p.noEvict && len(gi.pods) > 0) {
			return
		}
		for o := range ni.prod.options {
			if o == gi.currentOpt {
				continue
			}
			ch[g] = o
			walk(g + 1)
			ch[g] = keep
		}
	}
	walk(0)
	return out
}

func (p *planState) exactChoice(ni *nodeInfo, ch choice, items []exactItem, work *int) *exactChoice {
	st, ok := ni.freedInto(ch, nil)
	if !ok {
		return nil
	}
	c := &exactChoice{choice: ch, pdbs: map[string]int32{}}
	for _, o := range ch {
		c.changed = c.changed || o != keep
	}
	for _, key := range st.evicted {
		ni.release(&st, key)
		it := slices.IndexFunc(items, func(x exactItem) bool { return x.pod != nil && x.pod.Key == key && x.home == ni })
		if it < 0 {
			return nil
		}
		c.evicted = append(c.evicted, it)
		c.disrupt = true
		for _, k := range items[it].pod.PDBs {
			c.pdbs[k]++
		}
	}
	if ni.reserved != nil {
		for _, cl := range p.classes {
			if n := ni.reserved[cl.id]; n > 0 {
				ni.take(p, cl, &st, n)
			}
		}
		if !st.valid() {
			return nil
		}
	}
	// What each item takes of this node, and how many of it may land here.
	type take struct {
		per   []int
		whole int
		vec   []int64
		limit int
	}
	takes := make([]take, len(items))
	for it, item := range items {
		switch {
		case item.class != nil:
			need := p.needs(item.class, ni.prod)
			if !c.changed || need == nil || !p.eligible(ni, item.class) {
				continue
			}
			takes[it] = take{per: need.perProfile, whole: int(item.class.whole), vec: item.class.vec, limit: item.limit}
		case item.home == ni:
			if slices.Contains(c.evicted, it) {
				need := ni.podNeeds[item.pod.Key]
				takes[it] = take{per: need.perProfile, whole: need.whole, vec: ni.podVec[item.pod.Key], limit: 1}
			}
		default:
			if !p.hostable(ni) || !item.pod.MayRunOn(ni.node.Object) {
				continue
			}
			per, whole, known := gpuNeeds(item.pod, ni.prod)
			if known {
				takes[it] = take{per: per, whole: whole, vec: item.home.podVec[item.pod.Key], limit: 1}
			}
		}
	}
	fits := func(st *state, t take) bool { return t.limit > 0 && fitsNeed(st, t.per, t.whole, t.vec) }
	apply := func(st *state, t take, sign int) { st.takeNeed(t.per, t.whole, t.vec, sign) }
	cur := make([]uint8, len(items))
	var dfs func(it int)
	dfs = func(it int) {
		if *work--; *work < 0 || len(c.fills) > 200 {
			return
		}
		if it == len(items) {
			for j := range items {
				if int(cur[j]) < takes[j].limit && fits(&st, takes[j]) {
					return // not maximal
				}
			}
			c.fills = append(c.fills, slices.Clone(cur))
			return
		}
		t := takes[it]
		n := 0
		for n < t.limit && fits(&st, t) {
			apply(&st, t, 1)
			n++
		}
		for ; n >= 0; n-- {
			cur[it] = uint8(n)
			dfs(it + 1)
			if n > 0 {
				apply(&st, t, -1)
			}
		}
		cur[it] = 0
	}
	dfs(0)
	if len(c.fills) == 0 {
		return nil
	}
	c.id = fmt.Sprint(c.changed, c.evicted, c.fills)
	return c
}
