package planner

import (
	"cmp"
	"encoding/binary"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// One node's distinct outcomes for the pool search (poolsearch.go). A node of 8 GPUs with 15
// layouts each has billions of choices, but few distinct effects: what it offers afterwards
// (capped at what could ever use it), which pods it evicts by class, and what it spends of
// each PodDisruptionBudget. The walk builds those effects GPU by GPU, keeping the choice that
// changes the fewest GPUs for each; each survivor is then judged exactly (freedInto, the
// pending pods that fit the node now, CPU and memory) and listed with its maximal fills.

// poolOutcome is one distinct effect of a choice of layouts on one node.
type poolOutcome struct {
	choice choice
	// capacity is what the node offers afterwards, capped at what could use it: instances
	// per profile position, whole GPUs, then CPU, memory and the like.
	capacity []int64
	changed  bool
	// evicted are the pods the choice evicts; evicts counts them per pool class.
	evicted []types.NamespacedName
	evicts  []int
	pdbs    map[string]int32
	// spend is pdbs by position in poolSearch.pdbKeys.
	spend []int
	// fills are the maximal ways to fill what the node offers, pods per pool class.
	fills [][]uint8
}

func (o *poolOutcome) disrupts() bool { return len(o.evicted) > 0 }

// reconfigures says whether the outcome changes the node without evicting: it spends the
// reconfiguration budget instead of the disruption budget.
func (o *poolOutcome) reconfigures() bool { return o.changed && !o.disrupts() }

// poolPartial is one choice for the GPUs walked so far, standing for every choice with its
// effect.
type poolPartial struct {
	choice  choice
	changed int
}

// nodeOutcomes lists node ni's distinct outcomes that no other beats, keeping the choice with
// the fewest GPUs changed for each; ok is false past the search's bounds. The first outcome
// is always the node as it is.
func (ps *poolSearch) nodeOutcomes(ni *nodeInfo) ([]*poolOutcome, bool) {
	if ni.prod == nil || !ni.schedulable {
		return []*poolOutcome{{choice: nil, evicts: make([]int, len(ps.classes)), fills: [][]uint8{make([]uint8, len(ps.classes))}}}, true
	}
	partials, ok := ps.walkNode(ni)
	if !ok {
		return nil, false
	}
	ceiling := ps.ceiling(ni)
	vecCeiling := ps.vecCeiling(ni)
	seen := map[string]bool{}
	var out []*poolOutcome
	// In a fixed order, so that of two choices with one outcome the same one is kept.
	for _, key := range slices.Sorted(maps.Keys(partials)) {
		part := partials[key]
		if ps.work += poolJudgeWork; ps.work > poolMaxWork {
			return nil, false
		}
		oc := ps.judgeOutcome(ni, part.choice, ceiling, vecCeiling)
		if oc == nil {
			continue
		}
		id := string(appendKey(appendKey(appendKey(appendFlags(nil, oc.changed, oc.disrupts()), oc.capacity...), ints64(oc.evicts)...), ints64(oc.spend)...))
		if seen[id] {
			continue
		}
		seen[id] = true
		if part.changed == 0 {
			out = append([]*poolOutcome{oc}, out...)
		} else {
			out = append(out, oc)
		}
	}
	if len(out) == 0 || out[0].changed {
		return nil, false // the node as it is must always be a choice
	}
	if out = ps.undominatedOutcomes(out); out == nil || len(out) > poolMaxOutcomes {
		return nil, false
	}
	fillsOf := map[string][][]uint8{}
	kept := out[:0]
	for _, oc := range out {
		key := string(appendKey(appendKey(appendFlags(nil, oc.changed), oc.capacity...), ints64(oc.evicts)...))
		fills, known := fillsOf[key]
		if !known {
			fills = ps.fills(ni, oc)
			fillsOf[key] = fills
		}
		if ps.work > poolMaxWork {
			return nil, false
		}
		// A change that fills nothing, not even with its own evicted pods, serves nothing.
		if oc.changed && !slices.ContainsFunc(fills, func(f []uint8) bool { return slices.ContainsFunc(f, func(v uint8) bool { return v > 0 }) }) {
			continue
		}
		oc.fills = fills
		kept = append(kept, oc)
	}
	return kept, true
}

// undominatedOutcomes drops the outcomes another one beats: at least the capacity in every
// dimension, at most the evictions of every class, the budgets spent and the cost. Any plan
// with the beaten outcome stays valid, and serves as much, with the other. The node as it is
// stays first. nil past the work bound.
func (ps *poolSearch) undominatedOutcomes(out []*poolOutcome) []*poolOutcome {
	keepAsIs := out[0]
	rest := out[1:]
	total := func(oc *poolOutcome) int64 {
		var sum int64
		for _, v := range oc.capacity {
			sum += v
		}
		return sum
	}
	slices.SortStableFunc(rest, func(a, b *poolOutcome) int { return cmp.Compare(total(b), total(a)) })
	// Compared within outcomes of the same evictions, budgets and cost, where nearly all
	// dominance lies, and with the node as it is: comparing every pair costs more than the
	// few outcomes it would save.
	groups := map[string][]*poolOutcome{}
	kept := []*poolOutcome{keepAsIs}
	for _, oc := range rest {
		group := string(appendKey(appendKey(appendFlags(nil, oc.changed), ints64(oc.evicts)...), ints64(oc.spend)...))
		if ps.work += poolCompareWork * (len(groups[group]) + 1); ps.work > poolMaxWork {
			return nil
		}
		if keepAsIs.dominates(oc) || slices.ContainsFunc(groups[group], func(k *poolOutcome) bool { return k.dominates(oc) }) {
			continue
		}
		groups[group] = append(groups[group], oc)
		kept = append(kept, oc)
	}
	return kept
}

// dominates reports whether outcome o is at least as good as b in every respect.
func (o *poolOutcome) dominates(b *poolOutcome) bool {
	if od, or, bd, br := o.disrupts(), o.reconfigures(), b.disrupts(), b.reconfigures(); od && !bd || or && !br {
		return false
	}
	for d, v := range o.capacity {
		if v < b.capacity[d] {
			return false
		}
	}
	for k, v := range o.evicts {
		if v > b.evicts[k] {
			return false
		}
	}
	for j, v := range o.spend {
		if v > b.spend[j] {
			return false
		}
	}
	return true
}

// walkNode returns one choice per distinct approximate effect: capacity per profile and whole
// GPUs (capped at the node's ceiling), evictions per pool class and pods held on several GPUs,
// PodDisruptionBudgets spent, and whether a GPU changes MIG mode.
func (ps *poolSearch) walkNode(ni *nodeInfo) (map[string]*poolPartial, bool) {
	p := ps.p
	pi := ni.prod
	dims := len(pi.names) + 1
	ceiling := ps.ceiling(ni)
	// Layout: int16 per dimension, uint8 evictions per class, uint8 per PDB of the node's
	// pods, one flag per pod held on several GPUs, then the mode-change flag.
	var pdbs []string
	pdbAt := map[string]int{}
	holders := map[types.NamespacedName]int{}
	for _, gi := range ni.gpus {
		for _, pod := range gi.pods {
			holders[pod.Key]++
			for _, k := range pod.PDBs {
				if _, ok := pdbAt[k]; !ok {
					pdbAt[k] = len(pdbs)
					pdbs = append(pdbs, k)
				}
			}
		}
	}
	span := map[types.NamespacedName]int{}
	for _, key := range slices.SortedFunc(maps.Keys(holders), compareKeys) {
		if holders[key] > 1 {
			span[key] = len(span)
		}
	}
	evAt, pdbOff := 2*dims, 2*dims+len(ps.classes)
	spanOff := pdbOff + len(pdbs)
	size := spanOff + len(span) + 1
	add := func(buf []byte, k, n int) {
		v := min(int(int16(binary.LittleEndian.Uint16(buf[2*k:])))+n, ceiling[k])
		binary.LittleEndian.PutUint16(buf[2*k:], uint16(int16(v)))
	}
	start := make([]byte, size)
	states := map[string]*poolPartial{string(start): {choice: keepAll(len(ni.gpus))}}
	buf := make([]byte, size)
	for g, gi := range ni.gpus {
		next := make(map[string]*poolPartial, len(states)*2)
		keys := slices.Sorted(maps.Keys(states))
		for _, key := range keys {
			copy(buf, key)
			for k, n := range gi.freeNow {
				add(buf, k, n)
			}
			add(buf, dims-1, gi.wholeNow)
			if have := next[string(buf)]; have == nil || have.changed > states[key].changed {
				next[string(buf)] = states[key]
			}
		}
		if ni.blocker != "" || !gi.changeable || (p.noEvict && len(gi.pods) > 0) {
			states = next
			continue
		}
		for o := range pi.options {
			if o == gi.currentOpt {
				continue
			}
			opt := &pi.options[o]
		keys:
			for _, key := range keys {
				part := states[key]
				if ps.work += poolWalkWork; ps.work > poolMaxWork {
					return nil, false
				}
				copy(buf, key)
				for _, pod := range gi.pods {
					if i, ok := span[pod.Key]; ok {
						if buf[spanOff+i] == 1 {
							continue
						}
						buf[spanOff+i] = 1
					}
					buf[evAt+ps.classOf[pod.Key]]++
					for _, name := range pod.PDBs {
						j := pdbOff + pdbAt[name]
						buf[j]++
						if int32(buf[j]) > p.pdbLeft[name] {
							continue keys // this GPU's pods overspend a budget
						}
					}
				}
				for k, n := range opt.counts {
					add(buf, k, n)
				}
				if opt.disabled {
					add(buf, dims-1, 1)
				}
				if opt.disabled == gi.gpu.MIGEnabled {
					buf[size-1] = 1
				}
				if have := next[string(buf)]; have != nil && have.changed <= part.changed+1 {
					continue
				}
				ch := slices.Clone(part.choice)
				ch[g] = o
				next[string(buf)] = &poolPartial{choice: ch, changed: part.changed + 1}
			}
		}
		if len(next) > poolMaxPartials {
			return nil, false
		}
		states = next
	}
	return states, true
}

// ceiling is, per profile position and for whole GPUs, the most anything could use of node
// ni: the pods that fit it now, the pending pods that may run there and every pod that may
// land there. More capacity than that never changes what a plan serves.
func (ps *poolSearch) ceiling(ni *nodeInfo) []int {
	p := ps.p
	dims := len(ni.prod.names) + 1
	out := make([]int, dims)
	for _, c := range p.classes {
		need := p.needs(c, ni.prod)
		if need == nil || !p.eligible(ni, c) {
			continue
		}
		n := 0
		if !c.shared {
			n = c.left
		}
		if ni.reserved != nil {
			n += ni.reserved[c.id]
		}
		for k, per := range need.perProfile {
			out[k] += per * n
		}
		out[dims-1] += int(c.whole) * n
	}
	for _, pc := range ps.classes {
		t := pc.on[ni.pos]
		if pc.pending != nil || t == nil {
			continue
		}
		for k, per := range t.per {
			out[k] += per * ps.mostEvicted[pc.index]
		}
		out[dims-1] += t.whole * ps.mostEvicted[pc.index]
	}
	return out
}

// judgeOutcome computes what choice ch really leaves on node ni, as exactChoice does; nil
// when the choice is not allowed. Its capacity is capped at what could ever use it.
func (ps *poolSearch) judgeOutcome(ni *nodeInfo, ch choice, ceiling []int, vecCeiling []int64) *poolOutcome {
	p := ps.p
	st, ok := ni.freedInto(ch, nil)
	if !ok {
		return nil
	}
	oc := &poolOutcome{choice: ch, evicts: make([]int, len(ps.classes)), pdbs: map[string]int32{}, spend: make([]int, len(ps.pdbKeys))}
	for _, o := range ch {
		oc.changed = oc.changed || o != keep
	}
	for _, key := range st.evicted {
		k, known := ps.classOf[key]
		if !known {
			return nil
		}
		ni.release(&st, key)
		oc.evicted = append(oc.evicted, key)
		oc.evicts[k]++
		for _, name := range ps.pdbsOf[key] {
			oc.pdbs[name]++
			if oc.pdbs[name] > p.pdbLeft[name] {
				return nil
			}
			oc.spend[ps.pdbIndex[name]]++
		}
	}
	if ni.reserved != nil {
		for _, c := range p.classes {
			if n := ni.reserved[c.id]; n > 0 {
				ni.take(p, c, &st, n)
			}
		}
		if !st.valid() {
			return nil
		}
	}
	dims := len(st.free)
	oc.capacity = make([]int64, dims+1+len(st.vec))
	for k, v := range st.free {
		oc.capacity[k] = int64(min(v, ceiling[k]))
	}
	oc.capacity[dims] = int64(min(st.whole, ceiling[dims]))
	for d, v := range st.vec {
		oc.capacity[dims+1+d] = min(v, vecCeiling[d])
	}
	return oc
}

// vecCeiling is, per non-GPU resource, the most the pods that may land on node ni could use.
func (ps *poolSearch) vecCeiling(ni *nodeInfo) []int64 {
	out := make([]int64, len(ni.free))
	for _, pc := range ps.classes {
		t := pc.on[ni.pos]
		if t == nil {
			continue
		}
		n := ps.mostEvicted[pc.index]
		if pc.pending != nil {
			n = pc.pending.left
		}
		for d, v := range t.vec {
			out[d] += v * int64(n)
		}
	}
	return out
}

// appendKey appends values to a map key, each as a varint.
func appendKey(b []byte, vals ...int64) []byte {
	for _, v := range vals {
		b = binary.AppendVarint(b, v)
	}
	return b
}

func appendFlags(b []byte, flags ...bool) []byte {
	for _, f := range flags {
		if f {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	return b
}

func ints64(vals []int) []int64 {
	out := make([]int64, len(vals))
	for i, v := range vals {
		out[i] = int64(v)
	}
	return out
}
