package planner

import (
	"k8s.io/apimachinery/pkg/types"
)

// choice is a tentative target for a node: per GPU, an option index or keep (-1).
type choice []int

const keep = -1

// state is what a node offers pods under a choice: free instances per profile position, free
// whole GPUs and free non-GPU resources, after the pods a choice evicts have been put back.
type state struct {
	free  []int
	whole int
	vec   []int64
	// evicted are the pods the choice evicts, in GPU order.
	evicted []types.NamespacedName
}

// stateFor computes the node's offer under a choice; ok is false when the pods the choice
// evicts cannot all fit back on the node, which would be a net loss. It is the planner's
// innermost loop, so it works from per-GPU figures computed once in newNodeInfo.
func (ni *nodeInfo) stateFor(ch choice) (state, bool) { return ni.stateInto(ch, nil) }

// stateInto is stateFor writing into buf's slices when buf is not nil, so the search loops
// reuse one state instead of allocating one per candidate.
func (ni *nodeInfo) stateInto(ch choice, buf *state) (state, bool) {
	pi := ni.prod
	var st state
	if buf == nil {
		st = state{free: make([]int, len(pi.names)), vec: append([]int64(nil), ni.free...)}
	} else {
		st = state{free: resize(buf.free, len(pi.names)), vec: append(buf.vec[:0], ni.free...), evicted: buf.evicted[:0]}
		// Keep whatever the slices grew to for the next call.
		defer func() { *buf = st }()
	}
	for i, gi := range ni.gpus {
		if ch[i] == keep {
			continue
		}
		for _, p := range gi.pods {
			if !containsKey(st.evicted, p.Key) {
				st.evicted = append(st.evicted, p.Key)
			}
		}
	}
	for i, gi := range ni.gpus {
		if ch[i] != keep {
			o := &pi.options[ch[i]]
			for k, n := range o.counts {
				st.free[k] += n
			}
			if o.disabled {
				st.whole++
			}
			continue
		}
		if len(st.evicted) == 0 || !sharesPod(gi, st.evicted) {
			for k, n := range gi.freeNow {
				st.free[k] += n
			}
			st.whole += gi.wholeNow
			continue
		}
		// A pod evicted from another GPU also held this one (a multi-GPU pod): what it held
		// here comes free too.
		g := gi.gpu
		if !g.MIGEnabled {
			if allIn(g.Pods, st.evicted) {
				st.whole++
			}
			continue
		}
		for _, in := range g.Instances {
			free := !in.Busy && in.Pod == nil
			if in.Pod != nil && containsKey(st.evicted, *in.Pod) {
				free = true
			}
			if k, ok := pi.index[in.Profile]; ok && free {
				st.free[k]++
			}
		}
	}
	// Evicted pods come back as pending and must fit again: take their GPUs first. Their CPU
	// and memory are already counted as requested on this node, so only GPUs are re-taken.
	for _, key := range st.evicted {
		need, ok := ni.podNeeds[key]
		if !ok {
			return st, false
		}
		for k, n := range need.perProfile {
			st.free[k] -= n
			if st.free[k] < 0 {
				return st, false
			}
		}
		st.whole -= need.whole
		if st.whole < 0 {
			return st, false
		}
	}
	return st, true
}

func resize(s []int, n int) []int {
	if cap(s) < n {
		return make([]int, n)
	}
	s = s[:n]
	clear(s)
	return s
}

func containsKey(keys []types.NamespacedName, k types.NamespacedName) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

func sharesPod(gi *gpuInfo, evicted []types.NamespacedName) bool {
	for _, p := range gi.gpu.Pods {
		if containsKey(evicted, p) {
			return true
		}
	}
	return false
}

func allIn(keys, set []types.NamespacedName) bool {
	for _, k := range keys {
		if !containsKey(set, k) {
			return false
		}
	}
	return true
}

// fits is how many pods of class c the state can take, at most limit.
func (ni *nodeInfo) fits(p *planState, c *class, st *state, limit int) int {
	if limit <= 0 || c.shared {
		return 0
	}
	need := p.needs(c, ni.prod)
	if need == nil {
		return 0
	}
	n := limit
	for k, per := range need.perProfile {
		if per > 0 {
			n = min(n, st.free[k]/per)
		}
	}
	if c.whole > 0 {
		n = min(n, st.whole/int(c.whole))
	}
	if n <= 0 {
		// Most classes do not fit a state's GPUs; skip the resource divisions for them.
		return 0
	}
	for d, per := range c.vec {
		if per > 0 {
			n = min(n, saturate(st.vec[d]/per))
		}
	}
	return max(n, 0)
}

// take removes n pods of class c from the state.
func (ni *nodeInfo) take(p *planState, c *class, st *state, n int) {
	need := p.needs(c, ni.prod)
	for k, per := range need.perProfile {
		st.free[k] -= per * n
	}
	st.whole -= int(c.whole) * n
	for d, per := range c.vec {
		st.vec[d] -= per * int64(n)
	}
}

// fill serves the remaining demand in class order and returns the pods served per class and
// the score; st is consumed.
func (ni *nodeInfo) fill(p *planState, st *state, served []int) score {
	var sc score
	ni.fillInto(p, st, served, &sc)
	return sc
}

// fillInto is fill writing the score into sc, reusing its buffer.
func (ni *nodeInfo) fillInto(p *planState, st *state, served []int, sc *score) {
	for _, c := range p.classes {
		served[c.id] = 0
		if c.left == 0 || !p.eligible(ni, c) {
			continue
		}
		n := ni.fits(p, c, st, c.left)
		if n > 0 {
			ni.take(p, c, st, n)
			served[c.id] = n
		}
	}
	p.scoreInto(served, sc)
}
