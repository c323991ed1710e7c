package planner

import (
	"k8s.io/apimachinery/pkg/types"
)

// choice is a tentative target for a node: per GPU, an option index or keep (-1).
type choice []int

const keep = -1

// state is what a node offers pods under a choice: free instances per profile position, free
// whole GPUs and free non-GPU resources, after the pods a choice evicts have been put back on
// the node or sent away.
type state struct {
	free  []int
	whole int
	vec   []int64
	// evicted are the pods the choice evicts, in GPU order.
	evicted []types.NamespacedName
	// displaced are the evicted pods that do not come back on this node: their replacements
	// must land on another node.
	displaced []types.NamespacedName
}

// freedInto computes the node's GPUs under a choice with every pod the choice evicts gone: free
// instances and whole GPUs as the new layouts offer them, non-GPU resources still counted as
// used by the evicted pods. ok is false when an evicted pod's needs are unknown (it could come
// back nowhere, so no change may evict it). It is the planner's innermost loop, so it works
// from per-GPU figures computed once in newNodeInfo, and writes into buf's slices when buf is
// not nil so that the search loops reuse one state instead of allocating one per candidate.
func (ni *nodeInfo) freedInto(ch choice, buf *state) (state, bool) {
	pi := ni.prod
	var st state
	if buf == nil {
		st = state{free: make([]int, len(pi.names)), vec: append([]int64(nil), ni.free...)}
	} else {
		st = state{free: resize(buf.free, len(pi.names)), vec: append(buf.vec[:0], ni.free...),
			evicted: buf.evicted[:0], displaced: buf.displaced[:0]}
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
	if ni.toggleHurts(ch, st.evicted) {
		return st, false
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
	for _, key := range st.evicted {
		if _, ok := ni.podNeeds[key]; !ok {
			return st, false
		}
	}
	return st, true
}

// toggleHurts says whether a choice changes a GPU's MIG mode while pods it does not evict
// would suffer for it. Where the change stays pending until a reset (Ampere), mig-parted
// resets every GPU of the node (cmd/nvidia-mig-parted/apply/mode.go ApplyMigMode,
// cmd/nvidia-mig-parted/util/device.go ResetAllGPUs), and where a failure may make mig-manager
// reboot the node (rebootRisk) every pod there dies: on such a node (resetAll) every GPU the
// choice keeps must be unused, and no pod but DaemonSet and static ones may stay (stayers).
//
// Not enforced yet: to toggle any GPU, ApplyMigMode also destroys the instances of every
// MIG-enabled GPU of the node, Hopper included, so pods on a kept MIG-enabled GPU lose their
// devices (or, in use, fail the step). Forbidding that leaves the greedy search unable to
// find the drain-and-move plans the exhaustive optimum finds (TestPlanReachesTheOptimumWithMoves).
func (ni *nodeInfo) toggleHurts(ch choice, evicted []types.NamespacedName) bool {
	toggles := false
	for i, gi := range ni.gpus {
		if ch[i] != keep && ni.prod.options[ch[i]].disabled == gi.gpu.MIGEnabled {
			toggles = true
			break
		}
	}
	if !toggles {
		return false
	}
	if len(ni.stayers) > 0 {
		return true
	}
	for i, gi := range ni.gpus {
		if ch[i] != keep {
			continue
		}
		if gi.gpu.Error != "" {
			return true // what uses it is unknown
		}
		if gi.idle || !ni.resetAll {
			continue
		}
		// A kept GPU in use is fine only when every pod on it leaves anyway (a multi-GPU pod
		// evicted from a changed GPU) and nothing else holds it.
		if len(gi.gpu.Pods) == 0 || !allIn(gi.gpu.Pods, evicted) {
			return true
		}
		for _, in := range gi.gpu.Instances {
			if in.Busy && in.Pod == nil {
				return true
			}
		}
	}
	return false
}

// stateFor is the node's offer under a choice with every evicted pod back on the node; ok is
// false when they do not all fit, which would be a net loss.
func (ni *nodeInfo) stateFor(ch choice) (state, bool) {
	st, ok := ni.freedInto(ch, nil)
	if !ok {
		return st, false
	}
	for _, key := range st.evicted {
		if !ni.retake(&st, key) {
			return st, false
		}
	}
	return st, true
}

// retake puts an evicted pod's replacement back on the node's GPUs, when they have room. Its
// CPU and memory are still counted as requested on this node, so only GPUs are taken.
func (ni *nodeInfo) retake(st *state, key types.NamespacedName) bool {
	need := ni.podNeeds[key]
	if st.whole < need.whole {
		return false
	}
	for k, n := range need.perProfile {
		if st.free[k] < n {
			return false
		}
	}
	for k, n := range need.perProfile {
		st.free[k] -= n
	}
	st.whole -= need.whole
	return true
}

// release gives back the non-GPU resources of an evicted pod whose replacement lands elsewhere.
func (ni *nodeInfo) release(st *state, key types.NamespacedName) {
	for d, v := range ni.podVec[key] {
		st.vec[d] += v
	}
	st.displaced = append(st.displaced, key)
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
