package planner_test

// The optimum with moves on pools of 8-GPU nodes. optimumSearch.moveChoices walks every
// target of every GPU (options^GPUs per node), which ends at about 4 GPUs a node; this search
// finds the same optimum from the distinct outcomes of each node's choices, built GPU by GPU
// and merged by effect, and walks the pool like bestWithMoves. It stays on the test model
// (model_test.go), not the planner's code.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/planner"
)

// eightGPUConfig draws the pools of issue 37: 2 to 4 nodes of 8 GPUs of one product (H100,
// H200 or A100 80GB), 60-90% of the free instances taken by running pods, PDBs, budgets of 1-2
// nodes, a catalog of 3 to 6 profiles and 4 to 12 pending pods of one priority.
var eightGPUConfig = genConfig{
	minNodes: 2, maxNodes: 4, minGPUs: 8, maxGPUs: 8, minPending: 4, maxPending: 12,
	minCatalog: 3, maxCatalog: 6, minBudget: 1, maxBudget: 2,
	priorities: []int32{0},
	products:   []string{"NVIDIA-H200", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"},
	minBusy:    0.6, maxBusy: 0.9,
}

// maxClasses8 bounds the classes the search counts; maxGPUDims the GPU dimensions of a
// capacity vector (a product's profiles and whole GPUs).
const (
	maxClasses8 = 32
	maxGPUDims  = 24
)

// nodeSearch finds the optimum with moves (the same number as bestWithMoves) on larger nodes.
//
// Running pods are grouped by need and nodes only, not by home node and PDBs as moveClasses
// does: a pod evicted from node A may take any slot a plan leaves for its class, on A or
// elsewhere, so which home a slot's pod comes from never matters, and the PDBs a change spends
// are counted from the evicted pods themselves. State keeps, per running class, the slots
// placed minus the pods evicted so far; a plan is valid when none is negative at the end.
type nodeSearch struct {
	o       *optimumSearch
	classes []*moveClass // pending classes (home -1) first, then running ones (home -2)
	// classOf is the running class of each movable pod.
	classOf map[types.NamespacedName]int
	// limit is the most pods of a class worth placing on any node: every pending pod, and
	// for a running class, the most a plan can evict (its pods on the nodes with the most of
	// them, as many nodes as the disruption budget allows).
	limit []int
	// evictable is, per node, how many pods of each running class its changes can evict.
	evictable [][maxClasses8]int
	// work counts state transitions; the search gives up past maxWork.
	work, maxWork int
}

// nodeOutcome is one distinct effect of a choice of targets on a node.
type nodeOutcome struct {
	capacity []int64
	evicts   [maxClasses8]int16
	cost     moveCost
	fills    [][maxClasses8]int16
}

func newNodeSearch(o *optimumSearch, maxWork int) (*nodeSearch, bool) {
	ns := &nodeSearch{o: o, classOf: map[types.NamespacedName]int{}, maxWork: maxWork}
	for _, c := range o.moveClasses() {
		if c.home < 0 {
			ns.classes = append(ns.classes, c)
		}
	}
	for _, mp := range o.w.movable() {
		k := slices.IndexFunc(ns.classes, func(c *moveClass) bool {
			return c.home == -2 && equalInts(c.need, mp.need) && equalInts(c.nodes, mp.nodes)
		})
		if k < 0 {
			k = len(ns.classes)
			ns.classes = append(ns.classes, &moveClass{need: mp.need, nodes: mp.nodes, home: -2})
		}
		c := ns.classes[k]
		c.count++
		c.pods = append(c.pods, mp.key)
		ns.classOf[mp.key] = k
	}
	if len(ns.classes) > maxClasses8 || len(o.w.sp.prod.Profiles)+1 > maxGPUDims {
		return nil, false
	}
	ns.evictable = make([][maxClasses8]int, len(o.w.nodes))
	for _, mp := range o.w.movable() {
		ns.evictable[mp.home][ns.classOf[mp.key]]++
	}
	ns.limit = make([]int, len(ns.classes))
	for k, c := range ns.classes {
		if c.home == -1 {
			ns.limit[k] = c.count
			continue
		}
		per := make([]int, len(o.w.nodes))
		for i := range per {
			per[i] = ns.evictable[i][k]
		}
		slices.SortFunc(per, func(a, b int) int { return cmp.Compare(b, a) })
		for _, n := range per[:min(len(per), o.w.budget)] {
			ns.limit[k] += n
		}
	}
	return ns, true
}

// state8 is bestWithMoves' moveState with signed counts: placed pending pods per pending
// class, and placed slots minus evicted pods per running class.
type state8 struct {
	counts [maxClasses8]int16
	cost   moveCost
}

// best is the most pending compute slices a plan serves; ok is false when the search ran
// past its work bound.
func (ns *nodeSearch) best() (best int, ok bool) {
	w := ns.o.w
	all := make([][]*nodeOutcome, len(w.nodes))
	size := make([]int, len(w.nodes))
	// most[i][k]: the most pods of running class k any fill of node i places.
	most := make([][maxClasses8]int, len(w.nodes))
	for i := range w.nodes {
		outcomes, fine := ns.outcomes(i)
		if !fine {
			return 0, false
		}
		all[i] = outcomes
		for _, oc := range outcomes {
			size[i] += len(oc.fills)
			for _, f := range oc.fills {
				for k := range ns.classes {
					most[i][k] = max(most[i][k], int(f[k]))
				}
			}
		}
	}
	// The walk's order does not change the optimum; the node with the most ways to go last
	// only has its states scored, never stored.
	order := make([]int, len(w.nodes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(size[a], size[b]) })
	// later[p][k] is how many pods of running class k the nodes after position p can still
	// evict: a surplus of slots beyond it is never used, so states cap it there. reach[p][k] is
	// how many they can still take: a state short of more than that cannot end valid.
	later := make([][maxClasses8]int, len(order))
	reach := make([][maxClasses8]int, len(order))
	for p := len(order) - 2; p >= 0; p-- {
		for k := range ns.classes {
			later[p][k] = later[p+1][k] + ns.evictable[order[p+1]][k]
			reach[p][k] = reach[p+1][k] + most[order[p+1]][k]
		}
	}
	states := map[state8]bool{{}: true}
	for p, i := range order {
		last := p == len(order)-1
		next := map[state8]bool{}
		for s := range states {
			for _, oc := range all[i] {
				cost, fits := ns.o.addCost(s.cost, oc.cost)
				if !fits {
					continue
				}
				ns.work += len(oc.fills)
				if ns.work > ns.maxWork {
					return 0, false
				}
			fill:
				for _, f := range oc.fills {
					n := state8{counts: s.counts, cost: cost}
					total := 0
					for k, c := range ns.classes {
						v := int(n.counts[k]) + int(f[k])
						if c.home == -1 {
							v = min(v, c.count)
							total += v * c.slices
						} else {
							v = min(v-int(oc.evicts[k]), later[p][k])
							if v < -reach[p][k] {
								continue fill
							}
						}
						n.counts[k] = int16(v)
					}
					if last {
						best = max(best, total)
						continue
					}
					next[n] = true
				}
			}
		}
		if last {
			return best, true
		}
		states = ns.undominatedStates(next)
		if states == nil {
			return 0, false
		}
	}
	return 0, true
}

// undominatedStates drops the states another one beats: as many pods placed (or slots left)
// in every class at no more cost of any kind. nil when the pruning runs past the work bound.
func (ns *nodeSearch) undominatedStates(states map[state8]bool) map[state8]bool {
	list := make([]state8, 0, len(states))
	for s := range states {
		list = append(list, s)
	}
	sum := func(s state8) int {
		total := 0
		for _, v := range s.counts {
			total += int(v)
		}
		return total
	}
	slices.SortFunc(list, func(a, b state8) int {
		return cmp.Or(cmp.Compare(sum(b), sum(a)), slices.Compare(b.counts[:], a.counts[:]),
			cmp.Compare(a.cost.disrupting, b.cost.disrupting), cmp.Compare(a.cost.reconfiguring, b.cost.reconfiguring),
			slices.Compare(a.cost.pdb[:], b.cost.pdb[:]))
	})
	var kept []state8
	out := map[state8]bool{}
	n := len(ns.classes)
	for _, s := range list {
		ns.work += len(kept)
		if ns.work > ns.maxWork {
			return nil
		}
		beaten := slices.ContainsFunc(kept, func(k state8) bool {
			if k.cost.disrupting > s.cost.disrupting || k.cost.reconfiguring > s.cost.reconfiguring {
				return false
			}
			for j := range k.cost.pdb {
				if k.cost.pdb[j] > s.cost.pdb[j] {
					return false
				}
			}
			for c := range n {
				if k.counts[c] < s.counts[c] {
					return false
				}
			}
			return true
		})
		if !beaten {
			kept = append(kept, s)
			out[s] = true
		}
	}
	return out
}

// partial is the effect of targets chosen for some of a node's GPUs: GPU capacity (capped),
// pods evicted per running class, PDB disruptions, and what decides the cost and whether
// mig-parted's mode change spares the GPUs left alone (modeChangeSpares).
type partial struct {
	gpu    [maxGPUDims]int16
	evicts [maxClasses8]int16
	pdb    [maxPDBs]int8
	// changed: some GPU takes a new target; toggles: one of them changes MIG mode; blocks: a
	// GPU left alone would not survive a mode change (an error, or on Ampere a pod or process
	// that stays).
	changed, toggles, blocks bool
}

// outcomes lists node i's distinct outcomes with their fills; fine is false when a node's
// outcomes ran past the work bound.
func (ns *nodeSearch) outcomes(i int) ([]*nodeOutcome, bool) {
	w, nm := ns.o.w, ns.o.w.nodes[i]
	sp := w.sp
	gpuDims := sp.wholeDim() + 1
	// ceiling is, per dimension, the most the pods that may land here could use: capacity
	// beyond it never changes which fills fit.
	ceiling := make([]int64, sp.size())
	for k, c := range ns.classes {
		if slices.Contains(c.nodes, i) {
			for d := range ceiling {
				ceiling[d] += int64(ns.limit[k]) * c.need[d]
			}
		}
	}
	if !nm.schedulable {
		return []*nodeOutcome{{fills: [][maxClasses8]int16{{}}}}, true
	}
	states := map[partial]bool{{}: true}
	for _, comp := range linkedGPUs(nm) {
		effects, ok := ns.componentEffects(nm, comp, ceiling[:gpuDims])
		if !ok {
			return nil, false
		}
		next := map[partial]bool{}
		for s := range states {
			ns.work += len(effects)
			if ns.work > ns.maxWork {
				return nil, false
			}
			for _, e := range effects {
				n := s
				for d := range gpuDims {
					n.gpu[d] = int16(min(int64(n.gpu[d])+int64(e.gpu[d]), ceiling[d]))
				}
				for k := range ns.classes {
					n.evicts[k] += e.evicts[k]
				}
				fits := true
				for j := range ns.o.pdbKeys {
					n.pdb[j] += e.pdb[j]
					fits = fits && int(n.pdb[j]) <= ns.o.allowed[j]
				}
				if !fits {
					continue
				}
				n.changed = n.changed || e.changed
				n.toggles = n.toggles || e.toggles
				n.blocks = n.blocks || e.blocks
				next[n] = true
			}
		}
		states = next
	}
	byKey := map[string]*nodeOutcome{}
	fillsOf := map[string][][maxClasses8]int16{}
	var out []*nodeOutcome
	for s := range states {
		if s.toggles && s.blocks {
			continue
		}
		// Rendering the key costs about as much as a hundred transitions.
		ns.work += 100
		if ns.work > ns.maxWork {
			return nil, false
		}
		oc := &nodeOutcome{capacity: make([]int64, sp.size()), evicts: s.evicts}
		for d := range gpuDims {
			oc.capacity[d] = int64(s.gpu[d])
		}
		evicting := false
		for k, c := range ns.classes {
			evicting = evicting || s.evicts[k] > 0
			for d := gpuDims; d < sp.size(); d++ {
				oc.capacity[d] += int64(s.evicts[k]) * c.need[d]
			}
		}
		for j, name := range sp.res {
			d := gpuDims + j
			oc.capacity[d] = min(oc.capacity[d]+nm.node.Free(name), ceiling[d])
		}
		switch {
		case evicting:
			oc.cost.disrupting = 1
		case s.changed:
			oc.cost.reconfiguring = 1
		}
		for j := range ns.o.pdbKeys {
			oc.cost.pdb[j] = int(s.pdb[j])
		}
		key := fmt.Sprint(oc.capacity, oc.evicts, oc.cost)
		if byKey[key] != nil {
			continue
		}
		byKey[key] = oc
		out = append(out, oc)
	}
	out = ns.undominated(out)
	for _, oc := range out {
		capKey := fmt.Sprint(oc.capacity)
		if _, seen := fillsOf[capKey]; !seen {
			fillsOf[capKey] = ns.fills(i, oc.capacity)
		}
		oc.fills = fillsOf[capKey]
	}
	return out, ns.work <= ns.maxWork
}

// undominated drops the outcomes another one beats: at least the capacity in every
// dimension, at most the evictions of every class and at most the cost of every kind. Any plan
// with the beaten outcome stays valid, and serves as much, with the other.
func (ns *nodeSearch) undominated(out []*nodeOutcome) []*nodeOutcome {
	total := func(oc *nodeOutcome) int64 {
		var sum int64
		for _, v := range oc.capacity {
			sum += v
		}
		return sum
	}
	// Larger capacity first, so that an outcome's dominators come before it; the rest of the
	// order keeps runs reproducible.
	slices.SortFunc(out, func(a, b *nodeOutcome) int {
		return cmp.Or(cmp.Compare(total(b), total(a)), slices.Compare(b.capacity, a.capacity),
			slices.Compare(a.evicts[:], b.evicts[:]), cmp.Compare(a.cost.disrupting, b.cost.disrupting),
			cmp.Compare(a.cost.reconfiguring, b.cost.reconfiguring), slices.Compare(a.cost.pdb[:], b.cost.pdb[:]))
	})
	var kept []*nodeOutcome
	for _, oc := range out {
		ns.work += len(kept)
		if ns.work > ns.maxWork {
			return nil
		}
		if !slices.ContainsFunc(kept, func(k *nodeOutcome) bool { return dominates(k, oc) }) {
			kept = append(kept, oc)
		}
	}
	return kept
}

// dominates reports whether outcome a is at least as good as b in every respect.
func dominates(a, b *nodeOutcome) bool {
	if a.cost.disrupting > b.cost.disrupting || a.cost.reconfiguring > b.cost.reconfiguring {
		return false
	}
	for j := range a.cost.pdb {
		if a.cost.pdb[j] > b.cost.pdb[j] {
			return false
		}
	}
	for k := range a.evicts {
		if a.evicts[k] > b.evicts[k] {
			return false
		}
	}
	for d := range a.capacity {
		if a.capacity[d] < b.capacity[d] {
			return false
		}
	}
	return true
}

// linkedGPUs groups a node's GPU positions that share a pod: a pod holding instances on two
// GPUs is evicted when either changes, which frees its instance on the other, so such GPUs are
// chosen together. Groups are in order of their first GPU.
func linkedGPUs(nm *nodeModel) [][]int {
	group := make([]int, len(nm.node.GPUs))
	for i := range group {
		group[i] = i
	}
	root := func(i int) int {
		for group[i] != i {
			i = group[i]
		}
		return i
	}
	first := map[types.NamespacedName]int{}
	for pos, g := range nm.node.GPUs {
		for _, key := range g.Pods {
			if other, ok := first[key]; ok {
				a, b := root(pos), root(other)
				group[max(a, b)] = min(a, b)
				continue
			}
			first[key] = pos
		}
	}
	var out [][]int
	index := map[int]int{}
	for pos := range nm.node.GPUs {
		r := root(pos)
		if k, ok := index[r]; ok {
			out[k] = append(out[k], pos)
			continue
		}
		index[r] = len(out)
		out = append(out, []int{pos})
	}
	return out
}

// componentEffects lists the distinct effects of every choice of targets for a group of
// linked GPUs (each GPU unchanged, or any catalog target but its current layout); ok is
// false when the group's choices run past the work bound.
func (ns *nodeSearch) componentEffects(nm *nodeModel, comp []int, ceiling []int64) ([]partial, bool) {
	w := ns.o.w
	ampere := false
	for _, g := range nm.node.GPUs {
		ampere = ampere || g.Product == nil || strings.HasPrefix(g.Product.Name, "A100") || strings.HasPrefix(g.Product.Name, "A30")
	}
	seen := map[partial]bool{}
	var out []partial
	change := map[int]target{}
	var walk func(j int) bool
	walk = func(j int) bool {
		if j == len(comp) {
			ns.work++
			if ns.work > ns.maxWork {
				return false
			}
			if e, ok := ns.effect(nm, comp, change, ampere, ceiling); ok && !seen[e] {
				seen[e] = true
				out = append(out, e)
			}
			return true
		}
		pos := comp[j]
		if !walk(j + 1) {
			return false
		}
		if !nm.gpuChangeable[pos] {
			return true
		}
		for _, t := range w.options {
			if isCurrent(nm.node.GPUs[pos], t) {
				continue
			}
			change[pos] = t
			if !walk(j + 1) {
				return false
			}
			delete(change, pos)
		}
		return true
	}
	if !walk(0) {
		return nil, false
	}
	return out, true
}

// effect is what one choice of targets for a group of linked GPUs contributes, read from the
// model's rules (gpuCapacity, evictedBy, modeChangeSpares) restricted to the group; ok is false
// when the choice is not allowed (a target names a profile the product lacks, it evicts a pod
// the model cannot place again, or it spends more of a PDB than it allows).
func (ns *nodeSearch) effect(nm *nodeModel, comp []int, change map[int]target, ampere bool, ceiling []int64) (partial, bool) {
	sp := ns.o.w.sp
	var e partial
	gone := evictedBy(nm, change)
	whole := sp.wholeDim()
	for _, pos := range comp {
		g := nm.node.GPUs[pos]
		if t, changed := change[pos]; changed {
			e.changed = true
			e.toggles = e.toggles || t.off == g.MIGEnabled
			if t.off {
				e.gpu[whole]++
				continue
			}
			for name, n := range t.layout {
				pr, found := sp.prod.Profile(name)
				if !found {
					return e, false
				}
				e.gpu[sp.profiles[pr.Name]] += int16(n)
			}
			continue
		}
		e.blocks = e.blocks || g.Error != "" || (ampere && staysBusy(g, gone))
		if !g.MIGEnabled {
			free := true
			for _, key := range g.Pods {
				free = free && gone[key]
			}
			if free {
				e.gpu[whole]++
			}
			continue
		}
		for _, in := range g.Instances {
			if (in.Pod == nil && !in.Busy) || (in.Pod != nil && gone[*in.Pod]) {
				if pr, found := sp.prod.Profile(in.Profile); found {
					e.gpu[sp.profiles[pr.Name]]++
				}
			}
		}
	}
	for d := range ceiling {
		e.gpu[d] = int16(min(int64(e.gpu[d]), ceiling[d]))
	}
	for key := range gone {
		k, ok := ns.classOf[key]
		if !ok {
			return e, false
		}
		e.evicts[k]++
		for _, pdb := range nm.node.Pod(key).PDBs {
			j := slices.Index(ns.o.pdbKeys, pdb)
			e.pdb[j]++
			if int(e.pdb[j]) > ns.o.allowed[j] {
				return e, false
			}
		}
	}
	return e, true
}

// staysBusy reports whether a GPU left alone keeps a pod or process that a change elsewhere on
// the node does not evict.
func staysBusy(g *inventory.GPU, gone map[types.NamespacedName]bool) bool {
	for _, key := range g.Pods {
		if !gone[key] {
			return true
		}
	}
	for _, in := range g.Instances {
		if in.Busy && (in.Pod == nil || !gone[*in.Pod]) {
			return true
		}
	}
	return false
}

// fills enumerates the maximal ways to fill a node's capacity with pods per class, as
// optimumSearch.fills does, each class up to its limit.
func (ns *nodeSearch) fills(i int, capacity []int64) [][maxClasses8]int16 {
	limit := make([]int, len(ns.classes))
	for k, c := range ns.classes {
		if slices.Contains(c.nodes, i) {
			limit[k] = ns.limit[k]
		}
	}
	var out [][maxClasses8]int16
	step := func() bool {
		ns.work++
		return ns.work <= ns.maxWork
	}
	maximalFills(capacity, classNeeds(ns.classes), limit, step, func(fill []int) {
		var f [maxClasses8]int16
		for k, n := range fill {
			f[k] = int16(n)
		}
		out = append(out, f)
	})
	return out
}

// TestNodeSearchMatchesBestWithMoves checks the 8-GPU search against the exhaustive one on the
// small pools both can solve: the same optimum on every case.
func TestNodeSearchMatchesBestWithMoves(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   genConfig
		cases int
	}{
		{"up to 3 nodes x 2 GPUs", optimumConfig, 300},
		{"up to 3 nodes x 3 GPUs", optimumConfig3x3, 200},
		{"up to 2 nodes x 4 GPUs", optimumConfig2x4, 200},
		{"1-2 busy nodes x 5-6 GPUs", crossCheckConfig, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cases := tc.cases
			if testing.Short() {
				cases /= 4
			}
			compared, skipped, served := 0, 0, 0
			for seed := uint64(0); compared < cases; seed++ {
				s := optimumCase(t, seed, tc.cfg)
				if s == nil {
					continue
				}
				in := s.input()
				o := newOptimumSearch(newWorld(in, s.prod), in.Pending)
				want, ok := o.bestWithMoves()
				if !ok {
					skipped++
					continue
				}
				ns, ok := newNodeSearch(o, 1<<30)
				if !ok {
					t.Fatalf("%s: too many classes for the node search\n%s", s.origin, s.describe())
				}
				got, ok := ns.best()
				if !ok {
					t.Fatalf("%s: the node search ran out of work\n%s", s.origin, s.describe())
				}
				if got != want {
					t.Fatalf("%s: node search %d, exhaustive search %d\n%s", s.origin, got, want, s.describe())
				}
				compared++
				if want > 0 {
					served++
				}
			}
			t.Logf("%d cases equal, %d where a plan serves some demand (%d the exhaustive search could not count)", compared, served, skipped)
		})
	}
}

// crossCheckConfig is eightGPUConfig with nodes of 5-6 GPUs and a catalog of 2 profiles, small
// enough for bestWithMoves' walk over every GPU's targets.
var crossCheckConfig = genConfig{
	minNodes: 1, maxNodes: 2, minGPUs: 5, maxGPUs: 6, minPending: 4, maxPending: 8,
	minCatalog: 2, maxCatalog: 2, minBudget: 1, maxBudget: 2,
	priorities: []int32{0},
	products:   eightGPUConfig.products,
	minBusy:    0.6, maxBusy: 0.9,
}

// eightGPUSeedBases are where the 8-GPU cases start. 370,000 was chosen before any result was
// seen; the planner's joint search (joint.go) was then tuned on its cases, so 5,550,000, drawn
// after, holds the planner to cases it was not tuned on. The pool search (poolsearch.go) was
// built against the misses of both; 9,100,000 was first run once it was done.
var eightGPUSeedBases = []uint64{370_000, 5_550_000, 9_100_000}

// eightGPUMaxWork bounds the optimum search's transitions per case, to keep the test quick;
// cases past it are counted and reported as skipped.
const eightGPUMaxWork = 40_000_000

// TestPlanReachesTheOptimumOnEightGPUNodes compares the demand the planner serves on pools of
// 2-4 nodes x 8 GPUs with the optimum with moves (nodeSearch), and holds it to the goal: the
// optimum in 99% of cases and 90% of it in every case (measured: 99.5%, 99.5% and 100% equal,
// worst 0.92, 0.92 and 1; the misses are pools whose search runs past its work bound, which
// counts steps, not time, so the numbers are the same on every machine). With -short, 40 cases
// per range are held to a floor instead: too few for a percentage.
func TestPlanReachesTheOptimumOnEightGPUNodes(t *testing.T) {
	cases := 200
	if testing.Short() {
		cases = 40
	}
	for _, base := range eightGPUSeedBases {
		t.Run(fmt.Sprintf("from seed %d", base), func(t *testing.T) {
			equal, compared, mean, worst := eightGPUOptimum(t, base, cases)
			switch {
			case testing.Short() && (float64(equal) < 0.95*float64(compared) || worst < 0.75):
				t.Errorf("the planner regressed on 8-GPU nodes: want the optimum in >= 95%% of %d cases, >= 75%% of it in each; got %d equal, mean %.4f, worst %.3f",
					compared, equal, mean, worst)
			case !testing.Short() && (float64(equal) < 0.99*float64(compared) || worst < 0.90):
				t.Errorf("the planner is below the goal on 8-GPU nodes: want the optimum in >= 99%% of cases and >= 90%% of it in every case; got %d/%d equal, mean %.4f, worst %.3f",
					equal, compared, mean, worst)
			}
		})
	}
}

// eightGPUOptimum plans cases from seed base on and compares each with the optimum; it logs
// the numbers and the cases below the optimum, and fails when the planner beats the optimum
// (a rule broken) or the optimum search skips too many cases.
func eightGPUOptimum(t *testing.T, base uint64, cases int) (equal, compared int, mean, worst float64) {
	var skipped, empty int
	worst, ratioSum := 1.0, 0.0
	var slowest time.Duration
	slowestCase := ""
	var below []string
	for seed := base; compared < cases; seed++ {
		s := optimumCase(t, seed, eightGPUConfig)
		if s == nil {
			continue
		}
		in := s.input()
		start := time.Now()
		res := planOrFail(t, s, in)
		if d := time.Since(start); d > slowest {
			slowest, slowestCase = d, s.origin
		}
		o := newOptimumSearch(newWorld(in, s.prod), in.Pending)
		ns, ok := newNodeSearch(o, eightGPUMaxWork)
		opt := 0
		if ok {
			opt, ok = ns.best()
		}
		if !ok {
			skipped++
			t.Logf("%s: skipped, the optimum search ran past its bound", s.origin)
			continue
		}
		got := servedSlices(o, res)
		if got > opt {
			t.Fatalf("%s: the planner serves %d slices, more than the optimum with moves %d: it breaks a rule or the model is wrong\n%s%s",
				s.origin, got, opt, s.describe(), describeResult(res))
		}
		if opt == 0 {
			empty++
			continue
		}
		compared++
		ratio := float64(got) / float64(opt)
		worst = min(worst, ratio)
		ratioSum += ratio
		if got == opt {
			equal++
			continue
		}
		below = append(below, fmt.Sprintf("planner %d, optimum %d\n", got, opt)+s.describe()+describeResult(res))
	}
	mean = ratioSum / float64(compared)
	t.Logf("%d cases from seed %d (%d skipped past the search bound, %d where no plan serves anything): planner equals the optimum in %d (%.1f%%), mean ratio %.4f, worst %.3f; slowest plan %v (%s)",
		compared, base, skipped, empty, equal, 100*float64(equal)/float64(compared), mean, worst, slowest, slowestCase)
	for _, d := range below[:min(len(below), 10)] {
		t.Log("below the optimum:\n" + d)
	}
	if skipped*10 > compared {
		t.Errorf("the optimum search skipped %d cases of %d: raise its bound or make it faster", skipped, compared)
	}
	return equal, compared, mean, worst
}

// BenchmarkPlanEightGPUNodes measures planning on the 8-GPU optimum cases, one plan per case
// per iteration.
func BenchmarkPlanEightGPUNodes(b *testing.B) {
	var inputs []planner.Input
	for seed := eightGPUSeedBases[0]; len(inputs) < 40; seed++ {
		if s := optimumCase(b, seed, eightGPUConfig); s != nil {
			inputs = append(inputs, s.input())
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for _, in := range inputs {
			if _, err := planner.Plan(in); err != nil {
				b.Fatal(err)
			}
		}
	}
	perCase := b.Elapsed() / time.Duration(b.N*len(inputs))
	b.ReportMetric(float64(perCase.Microseconds())/1000, "ms/plan")
}
