package planner

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/inventory"
)

// Pool search: the exact search for pools of a few 8-GPU nodes. The greedy takes one node's
// change at a time and the joint search one node's GPUs together; both miss plans where the
// nodes pay for each other: a node re-carved only so that the pods another node's change
// evicts have somewhere to go, or two nodes each losing a pod of a profile the other gives
// back. exactSearch sees those, but enumerates every choice of layouts, which ends at about
// 8 GPUs in all.
//
// This search walks the same plans in two levels. Per node (poolsearch_node.go), the distinct
// outcomes of its choices: what it offers, which pods it evicts by class, what it spends of
// each PodDisruptionBudget, and every maximal way to fill it. Across nodes, states of
// (pending pods placed per class; per class of running pods, the room made for them less the
// pods evicted; nodes disrupted and reconfigured; budgets spent; evictions), one per distinct
// state and none that another beats in every respect. A plan is valid when every evicted
// pod has room somewhere. The best valid state becomes an exactPlan, which the planner's own
// accounting confirms (applyExact) before it replaces the greedy's plan, and only when it
// serves more, or the same with fewer evictions.
//
// Running pods are grouped in classes of pods that are interchangeable for a plan: the same
// needs and CPU and memory on every node they may run on. A pod's home
// node always takes it back; other nodes only when pods may land there (hostable).

const (
	// poolSearchMaxGPUs is the largest pool the search runs on: the thorough limit.
	poolSearchMaxGPUs = thoroughLimit
	// poolMaxClasses bounds pending plus running classes; poolMaxPartials the effects one
	// node's walk keeps; poolMaxOutcomes a node's distinct outcomes; poolMaxFills the fills
	// of one outcome; poolMaxStates the states kept between two nodes.
	poolMaxClasses  = 48
	poolMaxPartials = 20_000
	poolMaxOutcomes = 3_000
	poolMaxFills    = 200
	poolMaxStates   = 100_000
	// poolPruneAt is the number of states past which dominated ones are dropped;
	// poolMaxCompared the largest group of a node's moves compared pair by pair.
	poolPruneAt     = 300
	poolMaxCompared = 500
	// poolMaxWork bounds the steps the whole search may take (walk steps, fills, state
	// transitions, comparisons): about 0.2 seconds on one core. Past it the greedy plan
	// stands.
	poolMaxWork = 14_000_000
	// poolWalkWork, poolJudgeWork and poolCompareWork are what one step of a node's walk,
	// judging one of its outcomes, and comparing two outcomes, moves or states (or one step
	// of filling) cost, in units of about 25 ns (a state transition takes a few).
	poolWalkWork    = 6
	poolJudgeWork   = 120
	poolCompareWork = 3
)

// poolSearch holds one search's classes and figures.
type poolSearch struct {
	p *planState
	// classes are the pending classes, then the classes of running pods.
	classes []*poolClass
	classOf map[types.NamespacedName]int
	pods    map[types.NamespacedName]*inventory.Pod
	pdbsOf  map[types.NamespacedName][]string
	// pdbKeys are the PodDisruptionBudgets the plan may spend, sorted; pdbIndex their positions.
	pdbKeys  []string
	pdbIndex map[string]int
	// hostable is, per node position, whether pods may land there.
	hostable []bool
	// evictable is, per class and node position, the class's pods the node's changes may evict.
	evictable [][]int
	// mostEvicted is, per class, the most pods of it a plan may evict: its pods on the nodes
	// with the most of them, as many nodes as the disruption budget allows. Room for more is
	// never used.
	mostEvicted []int
	work        int
}

// poolClass is a pending class or a class of running pods.
type poolClass struct {
	// index is the class's position in poolSearch.classes.
	index   int
	pending *class
	pods    []types.NamespacedName
	// on is, per node position, what one pod of the class takes there; nil where it may not run.
	on []*poolTake
}

type poolTake struct {
	per   []int
	whole int
	vec   []int64
}

// poolEntry is how a state was first reached: from state prev by a move of the node.
type poolEntry struct {
	prev string
	move int32
}

// poolSearch returns the best plan for a pool of more than exactMaxGPUs and at most
// poolSearchMaxGPUs GPUs, or nil when the pool is outside that range or the search runs past
// its bounds.
func (p *planState) poolSearch(disruptBudget, reconfigureBudget int) *exactPlan {
	gpus := 0
	for _, ni := range p.nodes {
		gpus += len(ni.gpus)
	}
	if gpus <= exactMaxGPUs || gpus > poolSearchMaxGPUs {
		return nil
	}
	ps, ok := newPoolSearch(p, disruptBudget)
	if !ok {
		return nil
	}
	return ps.search(disruptBudget, reconfigureBudget)
}

func newPoolSearch(p *planState, disruptBudget int) (*poolSearch, bool) {
	ps := &poolSearch{p: p, classOf: map[types.NamespacedName]int{}, pods: map[types.NamespacedName]*inventory.Pod{},
		pdbsOf: map[types.NamespacedName][]string{}, hostable: make([]bool, len(p.nodes))}
	for i, ni := range p.nodes {
		ps.hostable[i] = p.hostable(ni)
	}
	ps.pdbKeys = slices.Sorted(maps.Keys(p.pdbLeft))
	ps.pdbIndex = make(map[string]int, len(ps.pdbKeys))
	for j, name := range ps.pdbKeys {
		ps.pdbIndex[name] = j
	}
	for _, c := range p.classes {
		if c.left <= 0 || c.shared {
			continue
		}
		if c.left > 255 {
			return nil, false
		}
		pc := &poolClass{index: len(ps.classes), pending: c, on: make([]*poolTake, len(p.nodes))}
		for i, ni := range p.nodes {
			if ni.prod == nil || !p.eligible(ni, c) {
				continue
			}
			if need := p.needs(c, ni.prod); need != nil {
				pc.on[i] = &poolTake{per: need.perProfile, whole: int(c.whole), vec: c.vec}
			}
		}
		ps.classes = append(ps.classes, pc)
	}
	bySignature := map[string]int{}
	for _, ni := range p.nodes {
		if ni.prod == nil || ni.blocker != "" || p.noEvict {
			continue
		}
		for _, gi := range ni.gpus {
			if !gi.changeable {
				continue
			}
			for _, pod := range gi.pods {
				if _, seen := ps.classOf[pod.Key]; seen {
					continue
				}
				if _, known := ni.podNeeds[pod.Key]; !known {
					continue // no choice may evict it (freedInto)
				}
				// Budgets are spent per pod evicted (poolOutcome.pdbs), so they do not part
				// pods that land alike.
				on, sig := ps.runningTakes(ni, pod)
				k, known := bySignature[sig]
				if !known {
					k = len(ps.classes)
					bySignature[sig] = k
					ps.classes = append(ps.classes, &poolClass{index: k, on: on})
				}
				ps.classes[k].pods = append(ps.classes[k].pods, pod.Key)
				ps.classOf[pod.Key] = k
				ps.pods[pod.Key] = pod
				ps.pdbsOf[pod.Key] = pod.PDBs
			}
		}
	}
	if len(ps.classes) > poolMaxClasses {
		return nil, false
	}
	ps.evictable = make([][]int, len(ps.classes))
	for k := range ps.classes {
		ps.evictable[k] = make([]int, len(p.nodes))
	}
	for i, ni := range p.nodes {
		seen := map[types.NamespacedName]bool{}
		for _, gi := range ni.gpus {
			for _, pod := range gi.pods {
				if k, ok := ps.classOf[pod.Key]; ok && !seen[pod.Key] {
					seen[pod.Key] = true
					ps.evictable[k][i]++
				}
			}
		}
	}
	ps.mostEvicted = make([]int, len(ps.classes))
	for k := range ps.classes {
		per := slices.Sorted(slices.Values(ps.evictable[k]))
		slices.Reverse(per)
		for _, n := range per[:min(len(per), disruptBudget)] {
			ps.mostEvicted[k] += n
		}
	}
	return ps, true
}

// runningTakes is what a running pod takes on each node it may run on, and a signature of
// it: its home node always takes it back, other nodes when pods may land there.
func (ps *poolSearch) runningTakes(home *nodeInfo, pod *inventory.Pod) ([]*poolTake, string) {
	p := ps.p
	on := make([]*poolTake, len(p.nodes))
	vec := home.podVec[pod.Key]
	var sig strings.Builder
	for j, nj := range p.nodes {
		switch {
		case nj == home:
			need := home.podNeeds[pod.Key]
			on[j] = &poolTake{per: need.perProfile, whole: need.whole, vec: vec}
		case ps.hostable[j] && pod.MayRunOn(nj.node.Object):
			if per, whole, known := gpuNeeds(pod, nj.prod); known {
				on[j] = &poolTake{per: per, whole: whole, vec: vec}
			}
		}
		if on[j] == nil {
			sig.WriteString("-|")
		} else {
			fmt.Fprint(&sig, on[j].per, on[j].whole, on[j].vec, "|")
		}
	}
	return on, sig.String()
}

// evictableElsewhere is how many pods of class k nodes other than position i may evict.
func (ps *poolSearch) evictableElsewhere(k, i int) int {
	if ps.classes[k].pending != nil {
		return 0
	}
	n := 0
	for j, v := range ps.evictable[k] {
		if j != i {
			n += v
		}
	}
	return n
}

// search walks the nodes over states and returns the best valid plan, or nil.
func (ps *poolSearch) search(disruptBudget, reconfigureBudget int) *exactPlan {
	p := ps.p
	n := len(ps.classes)
	pdbKeys := ps.pdbKeys
	outcomes := make([][]*poolOutcome, len(p.nodes))
	moves := make([][]*poolMove, len(p.nodes))
	most := make([][]int, len(p.nodes))
	for i, ni := range p.nodes {
		ocs, ok := ps.nodeOutcomes(ni)
		if !ok {
			return nil
		}
		outcomes[i] = ocs
		if moves[i], ok = ps.moves(ocs, pdbKeys); !ok {
			return nil
		}
		most[i] = make([]int, n)
		for _, oc := range ocs {
			for _, f := range oc.fills {
				for k, v := range f {
					most[i][k] = max(most[i][k], int(v))
				}
			}
		}
	}
	// The walk's order does not change the best plan; the node with the most moves goes last,
	// where its states are only scored, never stored.
	order := make([]int, len(p.nodes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(len(moves[a]), len(moves[b])) })
	// later[x][k]: pods of running class k the nodes after position x may still evict (room
	// beyond it is never used); reach[x][k]: room they may still make (a state short of more
	// cannot end valid).
	later := make([][]int, len(order))
	reach := make([][]int, len(order))
	for x := len(order) - 1; x >= 0; x-- {
		later[x], reach[x] = make([]int, n), make([]int, n)
		if x+1 < len(order) {
			next := order[x+1]
			for k := range n {
				later[x][k] = later[x+1][k] + ps.evictable[k][next]
				reach[x][k] = reach[x+1][k] + most[next][k]
			}
		}
	}
	codec := poolCodec{classes: n, pdbs: len(pdbKeys)}
	layers := []map[string]poolEntry{{string(make([]byte, codec.size())): {}}}
	var final *poolFinal
	t := poolState{counts: make([]int, n), pdb: make([]int, len(pdbKeys))}
	s := poolState{counts: make([]int, n), pdb: make([]int, len(pdbKeys))}
	buf := make([]byte, codec.size())
	for x, i := range order {
		last := x == len(order)-1
		next := map[string]poolEntry{}
		for _, key := range slices.Sorted(maps.Keys(layers[x])) {
			codec.decodeInto(key, &s)
		move:
			for mi, m := range moves[i] {
				if ps.work += 1 + n/4; ps.work > poolMaxWork {
					return nil
				}
				t.disrupt, t.reconf = s.disrupt+m.disrupt, s.reconf+m.reconf
				if t.disrupt > disruptBudget || t.reconf > reconfigureBudget {
					continue
				}
				for j, name := range pdbKeys {
					t.pdb[j] = s.pdb[j] + m.pdb[j]
					if t.pdb[j] > int(p.pdbLeft[name]) || t.pdb[j] > 255 {
						continue move
					}
				}
				t.evictions = s.evictions + m.evictions
				for k, pc := range ps.classes {
					v := s.counts[k] + m.delta[k]
					if pc.pending != nil {
						v = min(v, pc.pending.left)
					} else {
						v = min(v, later[x][k])
						if v < -reach[x][k] {
							continue move
						}
					}
					t.counts[k] = v
				}
				if last {
					final = ps.better(final, &t, key, mi)
					continue
				}
				codec.encodeInto(&t, buf)
				if _, seen := next[string(buf)]; !seen {
					next[string(buf)] = poolEntry{prev: key, move: int32(mi)}
				}
			}
		}
		if last {
			break
		}
		if len(next) > poolPruneAt {
			if next = ps.undominated(codec, next); next == nil {
				return nil
			}
		}
		if len(next) > poolMaxStates {
			return nil
		}
		layers = append(layers, next)
	}
	if final == nil {
		return nil
	}
	chosen := make([]*poolOutcome, len(p.nodes))
	fills := make([][]uint8, len(p.nodes))
	key, mi := final.prev, final.move
	for x := len(order) - 1; x >= 0; x-- {
		i := order[x]
		m := moves[i][mi]
		chosen[i] = outcomes[i][m.outcome]
		fills[i] = chosen[i].fills[m.fill]
		if x > 0 {
			e := layers[x][key]
			key, mi = e.prev, int(e.move)
		}
	}
	return ps.render(final.plan, chosen, fills)
}

// poolFinal is the best final state found: its plan's score, and how it was reached.
type poolFinal struct {
	plan  *exactPlan
	state poolState
	prev  string
	move  int
}

// better returns the better of best and the final state t reached from prev by move; nil
// when neither is valid (every evicted pod must have room).
func (ps *poolSearch) better(best *poolFinal, t *poolState, prev string, move int) *poolFinal {
	p := ps.p
	served := make([]int, len(p.classes))
	for k, pc := range ps.classes {
		if pc.pending != nil {
			served[pc.pending.id] = t.counts[k]
		} else if t.counts[k] < 0 {
			return best
		}
	}
	cand := &exactPlan{served: served, evicts: t.evictions}
	p.scoreInto(served, &cand.gain)
	if best != nil && !poolBetter(cand, best.plan, *t, best.state) {
		return best
	}
	return &poolFinal{plan: cand, state: poolState{disrupt: t.disrupt, reconf: t.reconf}, prev: prev, move: move}
}

// poolBetter orders plans as exactBetter does: more served, fewer evictions, fewer nodes
// changed; equal plans keep the first found (the states are walked in a fixed order).
func poolBetter(a, b *exactPlan, sa, sb poolState) bool {
	if c := a.gain.compare(b.gain); c != 0 {
		return c > 0
	}
	if a.evicts != b.evicts {
		return a.evicts < b.evicts
	}
	return sa.disrupt+sa.reconf < sb.disrupt+sb.reconf
}

// render turns the chosen outcome and fill of every node into an exactPlan: items are the
// pending classes and each evicted pod, and each evicted pod is given a slot of its class,
// at home first.
func (ps *poolSearch) render(x *exactPlan, chosen []*poolOutcome, fills [][]uint8) *exactPlan {
	p := ps.p
	var items []exactItem
	itemOf := make([]int, len(ps.classes))
	for k, pc := range ps.classes {
		itemOf[k] = -1
		if pc.pending != nil {
			itemOf[k] = len(items)
			items = append(items, exactItem{class: pc.pending, limit: pc.pending.left})
		}
	}
	podItem := map[types.NamespacedName]int{}
	homeOf := map[types.NamespacedName]int{}
	for i, oc := range chosen {
		for _, key := range oc.evicted {
			podItem[key] = len(items)
			homeOf[key] = i
			items = append(items, exactItem{pod: ps.pods[key], home: p.nodes[i], limit: 1})
		}
	}
	x.items = items
	x.choices = make([]*exactChoice, len(p.nodes))
	x.fills = make([][]uint8, len(p.nodes))
	slots := make([][]int, len(p.nodes)) // per node, free slots per running class
	for i, oc := range chosen {
		x.fills[i] = make([]uint8, len(items))
		slots[i] = make([]int, len(ps.classes))
		for k, v := range fills[i] {
			if it := itemOf[k]; it >= 0 {
				x.fills[i][it] = v
			} else {
				slots[i][k] = int(v)
			}
		}
		if !oc.changed {
			continue
		}
		ch := &exactChoice{choice: oc.choice, changed: true, disrupt: oc.disrupts(), pdbs: maps.Clone(oc.pdbs)}
		for _, key := range oc.evicted {
			ch.evicted = append(ch.evicted, podItem[key])
		}
		x.choices[i] = ch
	}
	// Home first, so that a pod moves only when its node has no room for it.
	var away []types.NamespacedName
	for i, oc := range chosen {
		for _, key := range oc.evicted {
			k := ps.classOf[key]
			if slots[i][k] > 0 {
				slots[i][k]--
				x.fills[i][podItem[key]] = 1
				continue
			}
			away = append(away, key)
		}
	}
	for _, key := range away {
		k := ps.classOf[key]
		to := slices.IndexFunc(slots, func(s []int) bool { return s[k] > 0 })
		if to < 0 || to == homeOf[key] {
			return nil // the state said every evicted pod has room: a bug, keep the greedy plan
		}
		slots[to][k]--
		x.fills[to][podItem[key]] = 1
	}
	return x
}
