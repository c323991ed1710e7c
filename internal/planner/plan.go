package planner

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
)

// planState is one planning pass's working memory.
type planState struct {
	in        *Input
	dims      *dims
	classes   []*class
	tiers     []int32 // distinct priorities, highest first
	tierOf    []int   // per class
	nodes     []*nodeInfo
	needCache [][]cachedNeeds // per class, per product id
	pdbLeft   map[string]int32
	evictOK   bool
	scratch   state // reused by the search loops; see scratchStateOf
	// evictedBuf is evaluateInto's reused list of the pods a choice evicts.
	evictedBuf []types.NamespacedName
	// wantedBuf is leftover's reused per-profile demand.
	wantedBuf []int
	// moves is true when evicted pods may land on other nodes (evictions are allowed at all).
	moves bool
	// noEvict is set once the plan has used maxDisruptedNodes: later changes evict nobody.
	noEvict bool
	// ledger is the spare capacity moved pods may land in; see moves.go. ledgerVersion counts
	// its changes, and landFailed remembers, per pod, the version in which it found no landing.
	ledger        *ledger
	ledgerVersion int
	landFailed    map[types.NamespacedName]int
	// landingProducts are the pool's products, in a fixed order, for finding landings.
	landingProducts []*productInfo
	// takenBuf, awayScratch and awayServed are reused by land and evaluateInto.
	takenBuf    []spareCopy
	awayScratch state
	awayServed  []int
	// landMemo remembers evaluateInto's landing searches (landRemembered), landingNeed what
	// evicted pods need of each product (landingNeeds).
	landMemo    map[landKey]landResult
	landingNeed map[podProduct]gpuNeed
	// accepted counts the proposals accepted so far, to order steps that depend on each other.
	accepted int
	// disruptLeft and reconfigureLeft are what the greedy has left of the two budgets; a
	// carve (moves.go) is only proposed when they pay for it too.
	disruptLeft, reconfigureLeft int
	// maxSteps is Input.MaxSteps: how many nodes the plan may change in all; 0 is no bound.
	maxSteps int
	// jointMemo remembers jointSearch's outcomes per node, caps and noEvict (joint.go).
	jointMemo map[string]map[string]*jointPartial
	// jointWork counts the work joint searches did in this plan (joint.go, jointMaxWork).
	jointWork int
}

// stepRoom is how many more nodes a plan that changes these may change, under maxSteps.
func (p *planState) stepRoom(changing int) int {
	if p.maxSteps <= 0 {
		return math.MaxInt
	}
	return max(0, p.maxSteps-changing)
}

// needs is what one pod of a class takes from a node of one product.
type needs struct {
	perProfile []int
}

func (p *planState) needs(c *class, pi *productInfo) *needs {
	if pi == nil {
		return nil
	}
	// The innermost loops ask this for every fit, so it is a slice lookup, not a map one.
	row := p.needCache[c.id]
	if pi.id < len(row) && row[pi.id].known {
		return row[pi.id].needs
	}
	var n *needs
	if per, ok := c.needs(pi.product, pi.index); ok {
		n = &needs{perProfile: per}
		if per == nil {
			n.perProfile = make([]int, len(pi.names))
		}
	}
	for len(row) <= pi.id {
		row = append(row, cachedNeeds{})
	}
	row[pi.id] = cachedNeeds{needs: n, known: true}
	p.needCache[c.id] = row
	return n
}

// cachedNeeds is one entry of planState.needCache; known tells "no such profile" (nil needs)
// from "not computed yet".
type cachedNeeds struct {
	needs *needs
	known bool
}

func (p *planState) eligible(ni *nodeInfo, c *class) bool {
	switch ni.eligible[c.id] {
	case 1:
		return true
	case -1:
		return false
	}
	ok := c.sample.ViaClaims == ni.node.DRA
	if ok {
		ok, _ = c.sample.Matches(ni.node.Object)
	}
	if ok {
		ni.eligible[c.id] = 1
	} else {
		ni.eligible[c.id] = -1
	}
	return ok
}

// score ranks what a change serves: GPU compute slices per priority tier, highest tier first
// (demand of higher priority outweighs any amount of lower, as with preemption). Slices rather
// than pods, so that large requests, the ones fragmentation strands, are not starved by a
// stream of small ones. Ties go to serving classes earlier in serving order (larger, then
// older requests), then to more pods.
type score struct {
	tiers []int
	// byClass is the pods served per class; it shares the proposal's served slice.
	byClass []int
	pods    int
}

func (p *planState) newScore() score {
	return score{tiers: make([]int, len(p.tiers)), byClass: make([]int, len(p.classes))}
}

// scoreInto scores pods served per class into sc, reusing its tiers buffer and sharing the
// served slice.
func (p *planState) scoreInto(served []int, sc *score) {
	*sc = score{tiers: resize(sc.tiers, len(p.tiers)), byClass: served}
	for _, c := range p.classes {
		if n := served[c.id]; n > 0 {
			sc.tiers[p.tierOf[c.id]] += c.slices * n
			sc.pods += n
		}
	}
}

// plus is the score of serving both s and o.
func (s score) plus(o score) score {
	out := score{tiers: slices.Clone(s.tiers), byClass: slices.Clone(s.byClass), pods: s.pods + o.pods}
	for i, v := range o.tiers {
		out.tiers[i] += v
	}
	for i, v := range o.byClass {
		out.byClass[i] += v
	}
	return out
}

func (s score) compare(o score) int {
	for i := range s.tiers {
		if c := cmp.Compare(s.tiers[i], o.tiers[i]); c != 0 {
			return c
		}
	}
	for i := range s.byClass {
		if c := cmp.Compare(s.byClass[i], o.byClass[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(s.pods, o.pods)
}

// proposal is the best change found for one node against the current remaining demand.
type proposal struct {
	node      *nodeInfo
	choice    choice
	gain      score
	served    []int
	evictions int
	changed   int
	version   int
	leftover  int // stranded compute slices this choice leaves; -1 until computed
	// landings are the evicted pods this choice moves to other nodes.
	landings []landing
	// carves are the changes on other nodes that make room for some of the landings.
	carves []*carve
	// seq is the order the proposal was accepted in, from 1; 0 until it is.
	seq int
}

// Plan computes the next change for a pool. It never fails on odd input: nodes it cannot
// reason about are left alone and pods it cannot serve are explained.
func Plan(in Input) (*Result, error) {
	if in.Snapshot == nil || in.Policy == nil {
		return nil, fmt.Errorf("planning needs a snapshot and a policy")
	}
	spec := &in.Policy.Spec
	pool, err := poolNodes(in.Snapshot, in.Policy)
	if err != nil {
		return nil, err
	}
	d := newDims(in.Pending, runningRequests(pool))
	p := &planState{in: &in, dims: d, pdbLeft: map[string]int32{}, maxSteps: in.MaxSteps}
	p.classes = groupClasses(in.Pending, d)
	p.needCache = make([][]cachedNeeds, len(p.classes))
	for _, c := range p.classes {
		if len(p.tiers) == 0 || p.tiers[len(p.tiers)-1] != c.priority {
			p.tiers = append(p.tiers, c.priority)
		}
		p.tierOf = append(p.tierOf, len(p.tiers)-1)
	}
	for k, v := range in.Snapshot.DisruptionsAllowed {
		p.pdbLeft[k] = v
	}
	approval := spec.Disruption.Approval
	p.evictOK = approval != v1alpha1.ApprovalAutoIdle && in.EvictionsPaused == ""
	p.moves = p.evictOK && !in.NoMoves
	cat := &catalog{entries: spec.Catalog, products: map[catalogKey]*productInfo{}}
	for i, n := range pool {
		ni := newNodeInfo(n, cat, d, &in, len(p.classes), p.evictOK)
		ni.pos = i
		p.nodes = append(p.nodes, ni)
		if ni.prod != nil && !slices.Contains(p.landingProducts, ni.prod) {
			p.landingProducts = append(p.landingProducts, ni.prod)
		}
	}

	res := &Result{PoolNodes: len(pool), SlicesGained: map[string]int{}}
	res.Budget = max(0, Budget(spec.Disruption.MaxDisruptedNodes, len(pool))-in.InFlightDisrupting)
	if left := in.DisruptiveStepsLeft; left != nil && *left < res.Budget {
		// Every evicting step is one node, so the hour's cap bounds the plan's evicting nodes.
		res.Budget, res.BudgetByHourlyCap = max(0, *left), true
	}
	res.ReconfigureBudget = max(0, ReconfigureBudget(spec.Disruption.MaxReconfiguringNodes, len(pool))-in.InFlightReconfiguring)
	standby, err := demand.Standby(spec.Shapes)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", in.Policy.Name, err)
	}

	// Pods that fit what exists already need no change; take their capacity first.
	current := make(map[*nodeInfo]*state, len(p.nodes))
	for _, ni := range p.nodes {
		if ni.prod == nil || !ni.schedulable {
			continue
		}
		st, _ := ni.stateFor(keepAll(len(ni.gpus)))
		current[ni] = &st
	}
	fitsNow := make([]int, len(p.classes))
	for _, ni := range p.nodes {
		st := current[ni]
		if st == nil {
			continue
		}
		ni.reserved = make([]int, len(p.classes))
		ni.fill(p, st, ni.reserved)
		for _, c := range p.classes {
			fitsNow[c.id] += ni.reserved[c.id]
			c.left -= ni.reserved[c.id]
		}
	}
	res.FitsNow = p.takePods(fitsNow)
	res.StrandedBefore = p.stranded(exclusiveOnly(current, nil, nil), standby)

	steps := map[*nodeInfo]*proposal{}
	shares := map[*nodeInfo]*shareProposal{}
	if !spec.Planning.Paused {
		before := p.saveGreedyState()
		reconfigureLeft := p.greedy(res.Budget, res.ReconfigureBudget, steps)
		if p.unservedExclusive() {
			// The greedy left demand unserved: on a tiny pool, search every plan from the same
			// start, and keep the greedy's unless that search does better.
			greedySteps, after := steps, p.saveGreedyState()
			p.restoreGreedyState(before)
			noEvict := p.noEvict
			p.noEvict = res.Budget <= 0
			exact := p.exactSearch(res.Budget, res.ReconfigureBudget)
			p.noEvict = noEvict
			applied := false
			if exact != nil && exact.changes() <= p.stepRoom(0) && p.exactBeats(exact, greedySteps) {
				steps = map[*nodeInfo]*proposal{}
				if reconfiguring, ok := p.applyExact(exact, steps); ok {
					reconfigureLeft, applied = res.ReconfigureBudget-reconfiguring, true
				}
			}
			if !applied {
				steps = greedySteps
				p.restoreGreedyState(after)
				for ni, pr := range steps {
					ni.accepted = pr
				}
				for _, pr := range steps {
					p.commitLandings(pr, -1)
				}
			}
		}
		reconfigureLeft = p.standby(min(reconfigureLeft, p.stepRoom(len(steps))), steps, standby)
		shares = p.share(min(reconfigureLeft, p.stepRoom(len(steps))), steps)
	}
	res.StrandedAfter = p.stranded(exclusiveOnly(p.finalStates(steps), steps, shares), standby)
	res.Steps, res.Served = p.steps(steps, res)
	if len(shares) > 0 {
		shareSteps, shareServed := p.shareSteps(shares, res)
		res.Steps = append(res.Steps, shareSteps...)
		slices.SortFunc(res.Steps, func(a, b Step) int { return strings.Compare(a.Node, b.Node) })
		res.Served = append(res.Served, shareServed...)
		slices.SortFunc(res.Served, func(a, b types.NamespacedName) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
	}
	res.Unserved = p.unserved(res, steps, spec)
	return res, nil
}

// finalStates is what every schedulable pool node offers once the plan is done and the pods it
// serves are placed.
func (p *planState) finalStates(steps map[*nodeInfo]*proposal) map[*nodeInfo]*state {
	out := make(map[*nodeInfo]*state, len(p.nodes))
	for _, ni := range p.nodes {
		if ni.prod == nil || !ni.schedulable {
			continue
		}
		ch := keepAll(len(ni.gpus))
		pr := steps[ni]
		var away []landing
		if pr != nil {
			ch, away = pr.choice, pr.landings
		}
		st, ok := p.stateWith(ni, ch, away, nil, false)
		if !ok {
			continue
		}
		if pr != nil {
			for _, c := range p.classes {
				if n := pr.served[c.id]; n > 0 {
					ni.take(p, c, &st, n)
				}
			}
		}
		out[ni] = &st
	}
	return out
}

func keepAll(n int) choice {
	ch := make(choice, n)
	for i := range ch {
		ch[i] = keep
	}
	return ch
}

// stateOf is the node's offer under a choice once the pending pods that already fit it now are
// placed, the pods moved here have their room, and the pods the landings name have left; ok is
// false when the choice would destroy the instances those pods are about to use.
func (p *planState) stateOf(ni *nodeInfo, ch choice, away []landing) (state, bool) {
	return p.stateWith(ni, ch, away, nil, false)
}

// runningRequests lists the requests of the pods on the pool's GPUs, the pods a plan may move.
func runningRequests(pool []*inventory.Node) []corev1.ResourceList {
	var out []corev1.ResourceList
	for _, n := range pool {
		for _, g := range n.GPUs {
			for _, key := range g.Pods {
				if pod := n.Pod(key); pod != nil {
					out = append(out, pod.Requests)
				}
			}
		}
	}
	return out
}

func (st *state) valid() bool {
	if st.whole < 0 {
		return false
	}
	for _, n := range st.free {
		if n < 0 {
			return false
		}
	}
	for _, v := range st.vec {
		if v < 0 {
			return false
		}
	}
	return true
}

// takePods names the pods behind per-class counts. Pods are taken in each class's serving
// order, and c.left must already exclude them: the n pods named are those just before the
// still-unserved tail.
func (p *planState) takePods(counts []int) []types.NamespacedName {
	var out []types.NamespacedName
	for _, c := range p.classes {
		n := counts[c.id]
		if n == 0 {
			continue
		}
		start := len(c.pods) - c.left - n
		out = append(out, c.pods[start:start+n]...)
	}
	slices.SortFunc(out, func(a, b types.NamespacedName) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// proposalHeap orders proposals best first: most served, then fewest evictions, fewest GPUs
// changed, then node name, so that equal inputs give equal plans. With pack set, nodes with
// fewer idle GPUs come first whatever they serve; see greedy.
type proposalHeap struct {
	items []*proposal
	pack  bool
}

func (h *proposalHeap) Len() int           { return len(h.items) }
func (h *proposalHeap) Less(i, j int) bool { return h.before(h.items[i], h.items[j]) }

// before is the heap's order: servesBefore, or fewest idle GPUs first while packing.
func (h *proposalHeap) before(a, b *proposal) bool {
	if h.pack && a.node.idleGPUs != b.node.idleGPUs {
		return a.node.idleGPUs < b.node.idleGPUs
	}
	return servesBefore(a, b)
}

func (h *proposalHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *proposalHeap) Push(x any)    { h.items = append(h.items, x.(*proposal)) }
func (h *proposalHeap) Pop() any {
	old := h.items
	x := old[len(old)-1]
	h.items = old[:len(old)-1]
	return x
}

// servesBefore is the plain proposal order: most served, fewest evictions, fewest GPUs changed,
// node name.
func servesBefore(a, b *proposal) bool {
	if c := compareProposals(a, b); c != 0 {
		return c < 0
	}
	return a.node.node.Name < b.node.node.Name
}

// compareProposals orders proposals by what they serve (more first), then evictions and GPUs
// changed (fewer first): negative when a comes first, 0 when they tie on all three.
func compareProposals(a, b *proposal) int {
	return cmp.Or(-a.gain.compare(b.gain), cmp.Compare(a.evictions, b.evictions), cmp.Compare(a.changed, b.changed))
}

// greedy picks, node by node, the change that serves the most remaining demand, until the
// budget is spent or nothing more can be served. Remaining demand only shrinks, so a node's
// best gain only falls: stale proposals are re-evaluated lazily when they reach the top.
//
// When the budget covers every node that could serve something, the budget no longer decides
// what is served, only where: then nodes that already run work change first (fewest idle
// GPUs), so pending pods pack beside running ones and idle nodes stay whole for pods that need
// many GPUs of one node. On the trace benchmark this serves more, with fewer evictions, than
// largest-gain-first, which reaches for the emptiest nodes. Small pools are not affected: there
// every step compares all nodes by what they serve (bestImproved).
func (p *planState) greedy(disruptBudget, reconfigureBudget int, steps map[*nodeInfo]*proposal) (reconfigureLeft int) {
	disruptLeft, reconfigureLeft := disruptBudget, reconfigureBudget
	if disruptLeft <= 0 {
		p.noEvict = true
	}
	if disruptLeft+reconfigureLeft <= 0 {
		return reconfigureLeft
	}
	p.disruptLeft, p.reconfigureLeft = disruptLeft, reconfigureLeft
	p.refreshLedger()
	version := 0
	h := &proposalHeap{}
	for _, pr := range p.proposeAll(version) {
		if pr != nil {
			h.items = append(h.items, pr)
		}
	}
	h.pack = min(disruptLeft+reconfigureLeft, p.stepRoom(0)) >= len(h.items)
	heap.Init(h)
	for h.Len() > 0 && (disruptLeft > 0 || reconfigureLeft > 0) && p.stepRoom(len(steps)) > 0 {
		top := heap.Pop(h).(*proposal)
		if top.version != version {
			if pr := p.propose(top.node, version); pr != nil {
				heap.Push(h, pr)
			}
			continue
		}
		if p.thorough() {
			top = p.bestImproved(h, top, version, disruptLeft, reconfigureLeft)
		} else {
			top = p.improve(top)
		}
		needDisrupt, needReconfigure := top.cost()
		if needDisrupt > disruptLeft || needReconfigure > reconfigureLeft ||
			needDisrupt+needReconfigure > p.stepRoom(len(steps)) {
			// The budget for this kind of change, or the bound on the plan's size, is spent;
			// the node stays as it is.
			continue
		}
		// Landings are carved first: their steps come before the one that moves pods there.
		carveSeq := p.accepted
		p.accepted += len(top.carves) + 1
		top.seq = p.accepted
		steps[top.node] = top
		p.consume(top, -1)
		for i, c := range top.carves {
			c.proposal.seq = carveSeq + 1 + i
			steps[c.node] = p.fillCarve(c)
		}
		disruptLeft -= needDisrupt
		reconfigureLeft -= needReconfigure
		p.disruptLeft, p.reconfigureLeft = disruptLeft, reconfigureLeft
		// From now on changes evict nobody; every proposal is stale anyway.
		p.noEvict = disruptLeft == 0
		version++
	}
	return reconfigureLeft
}

// cost is how many nodes of each budget accepting the proposal spends.
func (pr *proposal) cost() (disrupt, reconfigure int) {
	if pr.evictions > 0 {
		disrupt++
	} else {
		reconfigure++
	}
	for _, c := range pr.carves {
		if len(c.evictions) > 0 {
			disrupt++
		} else {
			reconfigure++
		}
	}
	return disrupt, reconfigure
}

// fillCarve lets an accepted carve node serve what pending demand fits beside the pods moved
// there, and returns its proposal.
func (p *planState) fillCarve(c *carve) *proposal {
	full := p.evaluate(c.node, c.choice, make([]int, len(p.classes)))
	if full == nil || full.gain.compare(c.proposal.gain) <= 0 {
		return c.proposal
	}
	full.seq = c.proposal.seq
	for _, cl := range p.classes {
		cl.left -= full.served[cl.id]
	}
	c.proposal.served, c.proposal.gain = full.served, full.gain
	if p.ledger != nil {
		p.indexLedger(c.node, false)
	}
	return c.proposal
}

// proposeAll computes every node's first proposal, spread over the available CPUs: this first
// pass is most of a large plan's cost, and nodes do not depend on each other in it. Each
// worker has its own scratch buffers; the shared tables are filled before the workers start,
// and each node's eligibility cache is written by the one worker that owns the node, so the
// result is the same as a sequential pass.
func (p *planState) proposeAll(version int) []*proposal {
	for _, c := range p.classes {
		for _, ni := range p.nodes {
			p.needs(c, ni.prod)
		}
	}
	out := make([]*proposal, len(p.nodes))
	workers := min(runtime.GOMAXPROCS(0), max(1, len(p.nodes)/64))
	var wg sync.WaitGroup
	for w := range workers {
		worker := *p
		worker.scratch, worker.evictedBuf, worker.wantedBuf = state{}, nil, nil
		worker.takenBuf, worker.awayScratch, worker.awayServed, worker.landFailed = nil, state{}, nil, nil
		worker.landMemo, worker.landingNeed, worker.jointMemo = nil, nil, nil
		wg.Go(func() {
			for i := w; i < len(p.nodes); i += workers {
				out[i] = worker.propose(p.nodes[i], version)
			}
		})
	}
	wg.Wait()
	return out
}

func changedGPUs(pr *proposal) []*gpuInfo {
	var out []*gpuInfo
	for i, gi := range pr.node.gpus {
		if pr.choice[i] != keep {
			out = append(out, gi)
		}
	}
	return out
}

// propose finds the node's best change against the remaining demand: GPUs are considered
// cheapest first (idle, then fewest pods to evict) and each takes the catalog layout that adds
// the most served demand; a layout is also tried on several GPUs at once, for pods that need
// more instances or whole GPUs than one GPU offers.
func (p *planState) propose(ni *nodeInfo, version int) *proposal {
	if ni.blocker != "" || ni.prod == nil || len(ni.prod.options) == 0 {
		return nil
	}
	order := p.changeOrder(ni)
	if len(order) == 0 {
		return nil
	}
	ch := keepAll(len(ni.gpus))
	best := p.evaluate(ni, ch, make([]int, len(p.classes)))
	if best == nil {
		return nil
	}
	base := best.gain
	scratch := make([]int, len(p.classes))
	trial := make(choice, len(ni.gpus))
	var cand proposal
	// GPUs that look alike (same layout, same pods' needs) give the same marginal gain until
	// something is committed, so one that brought nothing rules out its twins.
	fruitless := map[string]bool{}
	for pos := 0; pos < len(order); pos++ {
		gpu := order[pos]
		if ch[gpu] != keep || fruitless[ni.gpus[gpu].sig] {
			continue
		}
		var winner *proposal
		for o := range ni.prod.options {
			if o == ni.gpus[gpu].currentOpt {
				continue
			}
			// Apply option o to this GPU and, while it helps, to the next cheapest ones.
			copy(trial, ch)
			for k := pos; k < len(order); k++ {
				g := order[k]
				if trial[g] != keep || ni.gpus[g].currentOpt == o {
					continue
				}
				trial[g] = o
				if !p.evaluateInto(ni, trial, scratch, &cand) {
					break
				}
				if winner == nil || better(&cand, winner, p, ni) {
					winner = keepCopy(&cand)
				}
				if !p.needsMore(ni, &cand) {
					break
				}
			}
		}
		if winner == nil || winner.gain.compare(best.gain) <= 0 {
			fruitless[ni.gpus[gpu].sig] = true
			continue
		}
		best = winner
		ch = slices.Clone(winner.choice)
		clear(fruitless)
		if p.saturated(ni, best) {
			break
		}
	}
	if p.thorough() && !p.saturated(ni, best) {
		// GPUs changed together, where one pays for another's loss (joint.go). A change
		// that serves every pod the node may run is left as it is.
		if joint := p.jointSearch(ni, best); joint != nil {
			best = joint
		}
	}
	if best.gain.compare(base) <= 0 || best.changed == 0 {
		return nil
	}
	best.version = version
	return best
}

// thoroughLimit is the pool size (in GPUs) up to which every acceptance compares the polished
// proposals of all nodes instead of polishing only the greedy favourite. On small pools the
// choice of node is most of the answer and the search is cheap; on large ones the greedy
// order is good and the extra search would cost seconds.
const thoroughLimit = 64

func (p *planState) thorough() bool {
	gpus := 0
	for _, ni := range p.nodes {
		gpus += len(ni.gpus)
	}
	return gpus <= thoroughLimit
}

// bestImproved polishes the top proposal and every other node's current proposal, each from
// its greedy choice and from no change at all, and returns the one that serves the most
// together with the best next step it leaves possible (a one-step look-ahead: the node whose
// capacity only it can offer a pod is chosen for that pod). The others go back on the heap.
func (p *planState) bestImproved(h *proposalHeap, top *proposal, version int, disruptLeft, reconfigureLeft int) *proposal {
	candidates := []*proposal{top}
	for h.Len() > 0 {
		pr := heap.Pop(h).(*proposal)
		if pr.version != version {
			pr = p.propose(pr.node, version)
		}
		if pr != nil {
			candidates = append(candidates, pr)
		}
	}
	var best *proposal
	var bestTotal score
	for _, pr := range candidates {
		for _, polished := range p.alternatives(pr, version) {
			if d, r := polished.cost(); d > disruptLeft || r > reconfigureLeft {
				continue
			}
			total := polished.gain
			if disruptLeft+reconfigureLeft > 1 {
				total = total.plus(p.nextBest(polished, candidates, version, disruptLeft, reconfigureLeft))
			}
			if best == nil || total.compare(bestTotal) > 0 ||
				(total.compare(bestTotal) == 0 && servesBefore(polished, best)) {
				best, bestTotal = polished, total
			}
		}
	}
	if best == nil {
		// No alternative fits what is left of the budgets; the greedy refuses top.
		best = top
	}
	for _, pr := range candidates {
		if pr.node != best.node {
			heap.Push(h, pr)
		}
	}
	return best
}

// alternatives are the polished proposals worth comparing for one node: from its greedy
// choice, from no change, and, for each class the greedy choice serves, without that class,
// so that a node can leave a pod to another node that has room for it.
func (p *planState) alternatives(pr *proposal, version int) []*proposal {
	var out []*proposal
	keepIfChanged := func(cand *proposal) {
		if cand != nil && cand.changed > 0 {
			cand.version = version
			out = append(out, cand)
		}
	}
	keepIfChanged(p.improve(pr))
	if base := p.evaluate(pr.node, keepAll(len(pr.node.gpus)), make([]int, len(p.classes))); base != nil {
		keepIfChanged(p.improve(base))
	}
	for _, c := range p.classes {
		if pr.served[c.id] == 0 {
			continue
		}
		left := c.left
		c.left = 0
		var choice choice
		if alt := p.propose(pr.node, version); alt != nil {
			choice = p.improve(alt).choice
		}
		c.left = left
		if choice != nil {
			// Judge the layouts chosen without c against the whole demand again.
			keepIfChanged(p.evaluate(pr.node, choice, make([]int, len(p.classes))))
		}
	}
	return out
}

// nextBest is the gain of the best proposal on another node once pr is accepted, within what
// pr leaves of the budgets.
func (p *planState) nextBest(pr *proposal, candidates []*proposal, version int, disruptLeft, reconfigureLeft int) score {
	if pr.evictions > 0 {
		disruptLeft--
	} else {
		reconfigureLeft--
	}
	for _, c := range pr.carves {
		if len(c.evictions) > 0 {
			disruptLeft--
		} else {
			reconfigureLeft--
		}
	}
	p.consume(pr, -1)
	noEvict, savedDisrupt, savedReconfigure := p.noEvict, p.disruptLeft, p.reconfigureLeft
	p.noEvict = noEvict || disruptLeft <= 0
	p.disruptLeft, p.reconfigureLeft = disruptLeft, reconfigureLeft
	defer func() {
		p.noEvict, p.disruptLeft, p.reconfigureLeft = noEvict, savedDisrupt, savedReconfigure
		p.consume(pr, +1)
	}()
	best := p.newScore()
	for _, other := range candidates {
		if other.node == pr.node {
			continue
		}
		next := p.propose(other.node, version)
		if next == nil {
			continue
		}
		if d, r := next.cost(); d > disruptLeft || r > reconfigureLeft {
			continue
		}
		if next.gain.compare(best) > 0 {
			best = next.gain
		}
	}
	return best
}

// consume takes (sign -1) or gives back (+1) the demand, PDB budget and spare capacity a
// proposal uses, as if it were accepted.
func (p *planState) consume(pr *proposal, sign int) {
	for _, c := range p.classes {
		c.left += sign * pr.served[c.id]
	}
	if sign < 0 {
		pr.node.accepted = pr
	} else {
		pr.node.accepted = nil
	}
	p.acceptCarves(pr, sign)
	p.commitLandings(pr, sign)
	defer p.updateLedger(pr)
	var evicted []types.NamespacedName
	for _, gi := range changedGPUs(pr) {
		for _, pod := range gi.pods {
			if containsKey(evicted, pod.Key) {
				continue
			}
			evicted = append(evicted, pod.Key)
			for _, key := range pod.PDBs {
				p.pdbLeft[key] += int32(sign)
			}
		}
	}
}

// improve polishes an accepted proposal by local search: it moves to the best single-GPU
// change (another layout, or back to the current one) while that serves more, or the same
// with less disruption or stranding. The GPU-by-GPU greedy in propose commits to a layout for
// one GPU before it sees the next; on the few nodes a plan changes, this repairs those early
// choices (a 4g+3g that should have been 3g+3g, a GPU changed for nothing) at little cost.
func (p *planState) improve(pr *proposal) *proposal {
	ni := pr.node
	order := p.changeOrder(ni)
	scratch := make([]int, len(p.classes))
	trial := make(choice, len(ni.gpus))
	var cand proposal
	for range 2 * len(ni.gpus) {
		var next *proposal
		for _, gpu := range order {
			gi := ni.gpus[gpu]
			for o := keep; o < len(ni.prod.options); o++ {
				if o == pr.choice[gpu] || (o != keep && o == gi.currentOpt) {
					continue
				}
				copy(trial, pr.choice)
				trial[gpu] = o
				if !p.evaluateInto(ni, trial, scratch, &cand) || cand.changed == 0 || !better(&cand, pr, p, ni) {
					continue
				}
				if next == nil || better(&cand, next, p, ni) {
					next = keepCopy(&cand)
				}
			}
		}
		if next == nil {
			break
		}
		next.version = pr.version
		pr = next
	}
	return pr
}

// saturated is true when a proposal serves every remaining pod that may run on the node:
// changing more GPUs could only add disruption.
func (p *planState) saturated(ni *nodeInfo, pr *proposal) bool {
	for _, c := range p.classes {
		if c.left > pr.served[c.id] && !c.shared && p.eligible(ni, c) && p.needs(c, ni.prod) != nil {
			return false
		}
	}
	return true
}

// needsMore is true when some eligible class still has pods left on this node that the
// candidate does not serve, so applying the same layout to one more GPU might.
func (p *planState) needsMore(ni *nodeInfo, cand *proposal) bool {
	for _, c := range p.classes {
		if c.multi && c.left > cand.served[c.id] && p.eligible(ni, c) {
			return true
		}
	}
	return false
}

// better breaks ties between candidates for one GPU: more served, then fewer evictions and
// GPUs changed, then fewer stranded instances, then catalog order (earlier wins: the caller
// tries options in order and keeps the first of equals).
func better(a, b *proposal, p *planState, ni *nodeInfo) bool {
	if c := compareProposals(a, b); c != 0 {
		return c < 0
	}
	return p.leftoverOf(ni, a) < p.leftoverOf(ni, b)
}

// leftoverOf caches leftover on the proposal: ties are common and each costs a node state.
func (p *planState) leftoverOf(ni *nodeInfo, pr *proposal) int {
	if pr.leftover < 0 {
		pr.leftover = p.leftover(ni, pr)
	}
	return pr.leftover
}

// leftover counts the compute slices a candidate leaves that no remaining demand on this node
// can use: free instances nobody asks for, and the compute slices the target layouts of the
// GPUs it changes leave uncarved. Without the second part a layout that runs out of memory
// slices first (4g.40gb with two 1g.20gb on an H100 strands a compute slice) would look
// better than one that carves all seven (4g.40gb with 3g.40gb).
func (p *planState) leftover(ni *nodeInfo, pr *proposal) int {
	st, ok := p.stateWith(ni, pr.choice, pr.landings, &p.scratch, false)
	if !ok {
		return 0
	}
	for _, c := range p.classes {
		if n := pr.served[c.id]; n > 0 {
			ni.take(p, c, &st, n)
		}
	}
	p.wantedBuf = resize(p.wantedBuf, len(st.free))
	wanted := p.wantedBuf
	for _, c := range p.classes {
		rest := c.left - pr.served[c.id]
		if rest <= 0 || !p.eligible(ni, c) {
			continue
		}
		if need := p.needs(c, ni.prod); need != nil {
			for k, per := range need.perProfile {
				wanted[k] += per * rest
			}
		}
	}
	stranded := 0
	for k, n := range st.free {
		if n > wanted[k] {
			stranded += (n - wanted[k]) * ni.prod.compute[k]
		}
	}
	for _, o := range pr.choice {
		if o == keep || ni.prod.options[o].disabled {
			continue
		}
		stranded += ni.prod.product.ComputeSlices
		for k, n := range ni.prod.options[o].counts {
			stranded -= n * ni.prod.compute[k]
		}
	}
	return stranded
}

// evaluate scores a choice on a node; nil when it would lose an evicted pod or overspend a
// PodDisruptionBudget.
func (p *planState) evaluate(ni *nodeInfo, ch choice, served []int) *proposal {
	pr := &proposal{}
	if !p.evaluateInto(ni, ch, served, pr) {
		return nil
	}
	return pr
}

// evaluateInto is evaluate writing into pr, reusing its score buffer: the search loops score
// thousands of candidates per node and keep only a few. pr shares ch and served.
//
// Evicted pods come back on the node where they fit; those that do not must land on other
// nodes (moves.go), or the choice is refused. When the node's change could serve more with
// room it gives its evicted pods, moving every one that has a landing elsewhere is tried too,
// and kept when it serves more.
func (p *planState) evaluateInto(ni *nodeInfo, ch choice, served []int, pr *proposal) bool {
	*pr = proposal{node: ni, choice: ch, leftover: -1, gain: score{tiers: pr.gain.tiers}}
	evicted := p.evictedBuf[:0]
	defer func() { p.evictedBuf = evicted[:0] }()
	var pdbUse map[string]int32
	for i, gi := range ni.gpus {
		if ch[i] == keep {
			continue
		}
		if p.noEvict && len(gi.pods) > 0 {
			return false
		}
		pr.changed++
		for _, pod := range gi.pods {
			// A pod holding instances on several changed GPUs is evicted once.
			if containsKey(evicted, pod.Key) {
				continue
			}
			evicted = append(evicted, pod.Key)
			pr.evictions++
			for _, key := range pod.PDBs {
				if pdbUse == nil {
					pdbUse = map[string]int32{}
				}
				pdbUse[key]++
				if pdbUse[key] > p.pdbLeft[key] {
					return false
				}
			}
		}
	}
	st, ok := p.stateWith(ni, ch, nil, &p.scratch, true)
	if !ok {
		return false
	}
	if len(st.displaced) > 0 {
		if pr.landings, pr.carves, ok = p.landOrCarve(ni, ch, st.evicted, st.displaced, pdbUse); !ok {
			return false
		}
	}
	ni.fillInto(p, &st, served, &pr.gain)
	pr.served = served
	if !p.moves || len(evicted) == 0 || p.saturated(ni, pr) {
		return true
	}
	away, _ := p.landRemembered(ni, ch, evicted, evicted, true)
	if len(away) <= len(pr.landings) {
		return true
	}
	alt, ok := p.stateWith(ni, ch, away, &p.awayScratch, false)
	if !ok {
		return true
	}
	p.awayServed = resize(p.awayServed, len(served))
	var altGain score
	ni.fillInto(p, &alt, p.awayServed, &altGain)
	if altGain.compare(pr.gain) > 0 {
		copy(served, p.awayServed)
		p.scoreInto(served, &pr.gain)
		pr.landings, pr.carves = away, nil
	}
	return true
}

// keepCopy turns a candidate that lives in reused buffers into a proposal of its own.
func keepCopy(cand *proposal) *proposal {
	out := *cand
	out.choice = slices.Clone(cand.choice)
	out.served = slices.Clone(cand.served)
	out.gain = score{tiers: slices.Clone(cand.gain.tiers), byClass: out.served, pods: cand.gain.pods}
	out.landings = slices.Clone(cand.landings)
	out.carves = slices.Clone(cand.carves)
	return &out
}

// changeOrder lists the node's changeable GPUs, cheapest to change first.
func (p *planState) changeOrder(ni *nodeInfo) []int {
	var order []int
	for i, gi := range ni.gpus {
		if gi.changeable {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(len(ni.gpus[a].pods), len(ni.gpus[b].pods)), cmp.Compare(a, b))
	})
	return order
}
