package planner

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/inventory"
)

// Cross-node moves. A change may evict pods whose replacements cannot come back on their own
// node (the new layouts lack their profile, or the pending pods the change serves take the
// room): each must then land on another pool node, in capacity that nothing else the plan
// counts on uses. That is the defragmentation move, emptying one GPU or node by moving its few
// small pods to free slices elsewhere, and what the largest requests need.
//
// The ledger says what every node still has free once the plan so far is done: its accepted
// choice (or its current layouts), the pending pods that fit it now, the pods it serves and
// the pods already moved to it. A landing takes from that, and from then on every state of
// the landing node keeps room for the moved pod (stateIn), so no later change or pending pod
// can take it: "never a net loss" holds across the pool, not only per node.

// landing is one evicted pod that the plan moves to another node.
type landing struct {
	pod  types.NamespacedName
	from *nodeInfo
	to   *nodeInfo
	// need is what the pod takes of to's GPUs, in to's profile positions.
	need podNeed
	vec  []int64
}

// acceptedState is what a node offers once the plan so far is done there: its accepted choice
// with the pods that proposal serves placed, or its current layouts.
func (p *planState) acceptedState(ni *nodeInfo) (state, bool) {
	pr := ni.accepted
	if pr == nil {
		return p.stateWith(ni, keepAll(len(ni.gpus)), nil, nil, false)
	}
	st, ok := p.stateWith(ni, pr.choice, pr.landings, nil, false)
	if !ok {
		return st, false
	}
	for _, c := range p.classes {
		if n := pr.served[c.id]; n > 0 {
			ni.take(p, c, &st, n)
		}
	}
	return st, st.valid()
}

// stateWith is the node's offer under a choice: pods moving away by the given landings leave
// the node, every other evicted pod comes back on it (when collect is set, those that do not
// fit are listed in displaced instead of failing the choice), then the pending pods that fit
// the node now and the pods moved here take their room.
func (p *planState) stateWith(ni *nodeInfo, ch choice, away []landing, buf *state, collect bool) (state, bool) {
	st, ok := ni.freedInto(ch, buf)
	if !ok {
		return st, false
	}
	if buf != nil {
		// Keep what displaced grows to for the next call, as freedInto keeps the rest.
		defer func() { buf.displaced = st.displaced }()
	}
	for _, key := range st.evicted {
		if movedAway(away, key) {
			ni.release(&st, key)
			continue
		}
		if !ni.retake(&st, key) {
			if !collect || !p.moves {
				return st, false
			}
			ni.release(&st, key)
		}
	}
	if ni.reserved != nil {
		for _, c := range p.classes {
			if n := ni.reserved[c.id]; n > 0 {
				ni.take(p, c, &st, n)
			}
		}
	}
	for _, l := range ni.landed {
		st.takeNeed(l.need.perProfile, l.need.whole, l.vec, 1)
	}
	return st, st.valid()
}

func movedAway(away []landing, key types.NamespacedName) bool {
	for _, l := range away {
		if l.pod == key {
			return true
		}
	}
	return false
}

// land finds a landing for every pod in keys, evicted from node from. With partial set, pods
// without a landing are left out; otherwise ok is false when any lacks one. Pods land on the
// first node, in name order, that has room for the whole pod and whose placement rules admit
// it: spare capacity is what no pending pod could use as it is, so which node takes it
// matters little, and the order keeps plans deterministic.
func (p *planState) land(from *nodeInfo, keys []types.NamespacedName, partial bool) ([]landing, bool) {
	if p.ledger == nil || len(keys) == 0 {
		return nil, len(keys) == 0
	}
	out := make([]landing, 0, len(keys))
	// taken is what this call's own landings have used, per node: a copy of the spare.
	taken := p.takenBuf[:0]
	defer func() { p.takenBuf = taken[:0] }()
	for _, key := range keys {
		pod := from.node.Pod(key)
		l, ok := p.landOne(from, pod, &taken)
		if !ok {
			if partial {
				continue
			}
			return nil, false
		}
		out = append(out, l)
	}
	return out, true
}

// landKey names one landing search of evaluateInto: the node the pods leave, the GPUs the
// choice changes (their pods, in GPU order, are the evicted list), which of the evicted pods
// are searched for (bits by position in that list), whether a partial answer will do, and the
// ledger searched.
type landKey struct {
	node          *nodeInfo
	changed, pods uint64
	partial       bool
	version       int
}

type landResult struct {
	landings []landing
	ok       bool
}

// maxLandMemo bounds the searches remembered; past it the memory starts afresh.
const maxLandMemo = 4096

// landRemembered is land(ni, keys, partial) for keys among the pods that choice ch evicts,
// remembered. A node's search tries every catalog layout on the same runs of GPUs, and each
// try evicts the same pods: where they land depends on which GPUs change, not on what they
// become, so on a large pool of busy GPUs the search would otherwise look for the same
// landings once per layout, most of a plan's cost. The landings returned are shared: callers
// must not write into them (appending copies them: their capacity is their length).
func (p *planState) landRemembered(ni *nodeInfo, ch choice, evicted, keys []types.NamespacedName, partial bool) ([]landing, bool) {
	key, ok := landKeyOf(ni, ch, evicted, keys, partial, p.ledgerVersion)
	if !ok {
		return p.land(ni, keys, partial)
	}
	if r, ok := p.landMemo[key]; ok {
		return r.landings, r.ok
	}
	landings, found := p.land(ni, keys, partial)
	landings = slices.Clip(landings)
	if p.landMemo == nil || len(p.landMemo) >= maxLandMemo {
		p.landMemo = make(map[landKey]landResult)
	}
	p.landMemo[key] = landResult{landings: landings, ok: found}
	return landings, found
}

// landKeyOf is the key of a search for keys, an ordered subset of evicted; ok is false when
// the search cannot be named in 64 bits or keys are not such a subset, and is then not
// remembered.
func landKeyOf(ni *nodeInfo, ch choice, evicted, keys []types.NamespacedName, partial bool, version int) (landKey, bool) {
	if len(ch) > 64 || len(evicted) > 64 {
		return landKey{}, false
	}
	k := landKey{node: ni, partial: partial, version: version}
	for i, o := range ch {
		if o != keep {
			k.changed |= 1 << i
		}
	}
	j := 0
	for i, e := range evicted {
		if j < len(keys) && keys[j] == e {
			k.pods |= 1 << i
			j++
		}
	}
	return k, j == len(keys)
}

// landOrCarve lands every pod in keys, which choice ch evicts with the others of evicted, in
// spare capacity where there is room and otherwise in room that carves on other nodes make,
// one GPU each.
func (p *planState) landOrCarve(from *nodeInfo, ch choice, evicted, keys []types.NamespacedName,
	pdbUse map[string]int32) ([]landing, []*carve, bool) {
	if ls, ok := p.landRemembered(from, ch, evicted, keys, false); ok {
		return ls, nil, true
	}
	if !p.thorough() || p.carveWork >= carveMaxWork {
		// Searching every node's GPUs for a carve on each candidate would cost seconds on a
		// large pool; there, spare capacity is plentiful and moves land in it. On a small
		// pool the search is bounded per plan: past the bound, moves land in spare capacity
		// only, and the pool search (poolsearch.go) still sees carves on other nodes.
		return nil, nil, false
	}
	// Spare capacity first and carves for the rest; failing that, carves for all, which may
	// re-carve a node whose spare alone was too small.
	spare, _ := p.landRemembered(from, ch, evicted, keys, true)
	for _, ls := range [][]landing{spare, nil} {
		var rest []*inventory.Pod
		for _, key := range keys {
			if !movedAway(ls, key) {
				rest = append(rest, from.node.Pod(key))
			}
		}
		if slices.Contains(rest, nil) {
			return nil, nil, false
		}
		if carves, more, ok := p.carvesFor(from, rest, ls, pdbUse); ok {
			return append(slices.Clone(ls), more...), carves, true
		}
		if len(spare) == 0 {
			break
		}
	}
	return nil, nil, false
}

// maxLandingTries bounds the nodes one landing search looks at, per product.
const maxLandingTries = 64

// spareCopy is one node's spare capacity with this evaluation's own landings taken.
type spareCopy struct {
	node *nodeInfo
	st   state
}

func (p *planState) landOne(from *nodeInfo, pod *inventory.Pod, taken *[]spareCopy) (landing, bool) {
	if pod == nil {
		return landing{}, false
	}
	// A pod that found no landing in this ledger finds none with less room either: on a large
	// pool the same pods are tried for every candidate change of their node, and walking every
	// node with spare capacity each time would cost most of the plan.
	if v, failed := p.landFailed[pod.Key]; failed && v == p.ledgerVersion {
		return landing{}, false
	}
	l, ok := p.landSearch(from, pod, taken)
	if !ok && len(*taken) == 0 {
		if p.landFailed == nil {
			p.landFailed = map[types.NamespacedName]int{}
		}
		p.landFailed[pod.Key] = p.ledgerVersion
	}
	return l, ok
}

func (p *planState) landSearch(from *nodeInfo, pod *inventory.Pod, taken *[]spareCopy) (landing, bool) {
	vec := from.podVec[pod.Key]
	for _, pi := range p.landingProducts {
		per, whole, ok := p.landingNeeds(pod, pi)
		if !ok || (whole == 0 && !slices.ContainsFunc(per, func(n int) bool { return n > 0 })) {
			continue
		}
		var candidates []*nodeInfo
		if whole > 0 {
			candidates = p.ledger.whole[pi.id]
		} else if rows := p.ledger.byProfile[pi.id]; len(rows) > 0 {
			candidates = rows[slices.IndexFunc(per, func(n int) bool { return n > 0 })]
		}
		tried := 0
		for _, to := range candidates {
			if to == from {
				continue
			}
			// Bounded: a pod whose placement rules exclude most of a large pool would otherwise
			// walk every node with spare capacity for each candidate change of its node.
			if tried++; tried > maxLandingTries {
				break
			}
			// A moved pod asks the device plugin (claim pods are never moved): a node NVIDIA's
			// DRA driver serves advertises none of its resources.
			if to.node.DRA || !pod.MayRunOn(to.node.Object) {
				continue
			}
			st := p.ledger.spare[to.pos]
			i := slices.IndexFunc(*taken, func(c spareCopy) bool { return c.node == to })
			if i >= 0 {
				st = &(*taken)[i].st
			}
			if !fitsNeed(st, per, whole, vec) {
				continue
			}
			if i < 0 {
				// The copy reuses the slices of an earlier call's copy where there is one.
				n := len(*taken)
				if n < cap(*taken) {
					*taken = (*taken)[:n+1]
				} else {
					*taken = append(*taken, spareCopy{})
				}
				c := &(*taken)[n]
				c.node = to
				c.st.free, c.st.vec, c.st.whole = append(c.st.free[:0], st.free...), append(c.st.vec[:0], st.vec...), st.whole
				st = &c.st
			}
			st.takeNeed(per, whole, vec, 1)
			return landing{pod: pod.Key, from: from, to: to, need: podNeed{perProfile: per, whole: whole}, vec: vec}, true
		}
	}
	return landing{}, false
}

// podProduct keys landingNeeds.
type podProduct struct {
	pod  *inventory.Pod
	prod *productInfo
}

type gpuNeed struct {
	perProfile []int
	whole      int
	ok         bool
}

// landingNeeds is gpuNeeds remembered: the same evicted pods are looked at for every candidate
// change of their node. The counts returned are shared and read-only.
func (p *planState) landingNeeds(pod *inventory.Pod, pi *productInfo) ([]int, int, bool) {
	key := podProduct{pod: pod, prod: pi}
	if n, ok := p.landingNeed[key]; ok {
		return n.perProfile, n.whole, n.ok
	}
	per, whole, ok := gpuNeeds(pod, pi)
	if p.landingNeed == nil || len(p.landingNeed) >= maxLandMemo {
		p.landingNeed = make(map[podProduct]gpuNeed)
	}
	p.landingNeed[key] = gpuNeed{perProfile: per, whole: whole, ok: ok}
	return per, whole, ok
}

// takeNeed takes (sign 1) or gives back (-1) what one pod needs: instances per profile
// position, whole GPUs and non-GPU resources.
func (st *state) takeNeed(per []int, whole int, vec []int64, sign int) {
	for k, n := range per {
		st.free[k] -= sign * n
	}
	st.whole -= sign * whole
	for d, v := range vec {
		st.vec[d] -= int64(sign) * v
	}
}

func fitsNeed(st *state, per []int, whole int, vec []int64) bool {
	if st.whole < whole {
		return false
	}
	for k, n := range per {
		if st.free[k] < n {
			return false
		}
	}
	for d, v := range vec {
		if st.vec[d] < v {
			return false
		}
	}
	return true
}

// commitLandings records (sign -1) or withdraws (+1) a proposal's landings on their nodes.
func (p *planState) commitLandings(pr *proposal, sign int) {
	for _, l := range pr.landings {
		if sign < 0 {
			l.to.landed = append(l.to.landed, l)
			continue
		}
		l.to.landed = slices.DeleteFunc(l.to.landed, func(x landing) bool { return x.pod == l.pod && x.from == l.from })
	}
}
