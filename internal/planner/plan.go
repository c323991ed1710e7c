package planner

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
)

// planState is one planning pass's working memory, by concern: the pool as read (nodes), what
// is still asked for (demandLedger), what the plan may still spend (budgetLedger), where moved
// pods may land (landingLedger), and the searches' memory and reused buffers (searchMemory).
type planState struct {
	in    *Input
	dims  *dims
	nodes []*nodeInfo
	demandLedger
	budgetLedger
	landingLedger
	searchMemory
}

// demandLedger is the pending demand by class: each class's pods not yet served (class.left),
// its priority tier, and what one pod of it takes from a node of each product.
type demandLedger struct {
	classes   []*class
	tiers     []int32         // distinct priorities, highest first
	tierOf    []int           // per class
	needCache [][]cachedNeeds // per class, per product id
}

// budgetLedger is what the plan may still spend: PodDisruptionBudgets, whether it may evict at
// all, the two node budgets, and how many nodes it may change.
type budgetLedger struct {
	pdbLeft map[string]int32
	evictOK bool
	// moves is true when evicted pods may land on other nodes (evictions are allowed at all).
	moves bool
	// noEvict is set once the plan has used maxDisruptedNodes: later changes evict nobody.
	noEvict bool
	// disruptLeft and reconfigureLeft are what the greedy has left of the two budgets; a
	// carve (moves.go) is only proposed when they pay for it too.
	disruptLeft, reconfigureLeft int
	// maxSteps is Input.MaxSteps: how many nodes the plan may change in all; 0 is no bound.
	maxSteps int
	// accepted counts the proposals accepted so far, to order steps that depend on each other.
	accepted int
}

// landingLedger is the spare capacity moved pods may land in (moves.go, ledger.go) and what
// the searches for landings remember.
type landingLedger struct {
	// ledger is the spare capacity; ledgerVersion counts its changes, and landFailed
	// remembers, per pod, the version in which it found no landing.
	ledger        *ledger
	ledgerVersion int
	landFailed    map[types.NamespacedName]int
	// landingProducts are the pool's products, in a fixed order, for finding landings.
	landingProducts []*productInfo
	// landMemo remembers evaluateInto's landing searches (landRemembered), landingNeed what
	// evicted pods need of each product (landingNeeds).
	landMemo    map[landKey]landResult
	landingNeed map[podProduct]gpuNeed
}

// searchMemory is what the searches remember within one plan, and the buffers their inner
// loops reuse.
type searchMemory struct {
	// jointMemo remembers jointSearch's outcomes per node, caps and noEvict (joint.go).
	jointMemo map[string]map[string]*jointPartial
	// jointWork counts the work joint searches did in this plan (joint.go, jointMaxWork).
	jointWork int
	// carveWork counts the layouts the carve searches tried in this plan (carve.go,
	// carveMaxWork).
	carveWork int
	scratch   state // reused by the search loops; see scratchStateOf
	// evictedBuf is evaluateInto's reused list of the pods a choice evicts.
	evictedBuf []types.NamespacedName
	// wantedBuf is leftover's reused per-profile demand.
	wantedBuf []int
	// takenBuf, awayScratch and awayServed are reused by land and evaluateInto.
	takenBuf    []spareCopy
	awayScratch state
	awayServed  []int
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
	p := &planState{in: &in, dims: d, budgetLedger: budgetLedger{pdbLeft: map[string]int32{}, maxSteps: in.MaxSteps}}
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
			if exact == nil {
				// Pools of a few 8-GPU nodes: the same plans, walked by outcome (poolsearch.go).
				exact = p.poolSearch(res.Budget, res.ReconfigureBudget)
			}
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
	res.Steps, res.Served = p.render(steps, shares, res)
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
	slices.SortFunc(out, compareKeys)
	return out
}

// compareKeys orders pods by namespace, then name: the planner's one order of pod keys, so
// that equal inputs give equal plans.
func compareKeys(a, b types.NamespacedName) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}
