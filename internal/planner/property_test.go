package planner_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/planner"
)

// placementSearchLimit bounds the exact search that places the pods a plan claims to serve;
// scenarios where it runs out are counted, not failed.
const placementSearchLimit = 200_000

// reasons are the Unserved reasons the planner may give.
var reasons = []planner.Reason{planner.ReasonPartitionShape, planner.ReasonNodePlacement, planner.ReasonCapacity,
	planner.ReasonDisruption, planner.ReasonNotInPool}

// planCheck is the outcome of checking one plan.
type planCheck struct {
	// problems lists the violated invariants, one line each.
	problems []string
	// undecided counts placement checks that hit placementSearchLimit.
	undecided int
}

func (pc *planCheck) fail(format string, args ...any) {
	pc.problems = append(pc.problems, fmt.Sprintf(format, args...))
}

// checkPlan checks a plan's safety and bookkeeping against the scenario it was made for:
//   - budget: no more nodes evict than maxDisruptedNodes minus in-flight, no more change without
//     evicting than maxReconfiguringNodes minus in-flight, and Result's budgets say so;
//   - targets: every changed GPU gets a catalog layout with a valid placement (or MIG off when
//     allowed), every other GPU keeps its layout, and only nodes the planner may change change;
//   - evictions: a GPU with pods changes only when all of them are evicted; evicted pods are
//     held on a changed GPU, evictable, not do-not-disrupt and within their PDBs' budgets, and
//     AutoIdle never evicts;
//   - never a net loss: every evicted pod names a landing, its own node or a hostable node its
//     placement rules admit, and steps that depend on each other through a landing are ordered;
//   - bookkeeping: every pending pod is in exactly one of Served, FitsNow and Unserved, with a
//     known reason and a "needs " message, and SlicesGained adds up the steps;
//   - the pods the plan serves, and those that fit now, can all be placed at once.
func checkPlan(s *scenario, in planner.Input, res *planner.Result) *planCheck {
	pc := &planCheck{}
	w := newWorld(in, s.prod)
	spec := &in.Policy.Spec
	if res.Budget != w.budget {
		pc.fail("Budget is %d, want %d (maxDisruptedNodes %s, in flight %d)", res.Budget, w.budget, describeBudget(spec.Disruption.MaxDisruptedNodes), in.InFlightDisrupting)
	}
	if res.ReconfigureBudget != w.reconfigureBudget {
		pc.fail("ReconfigureBudget is %d, want %d", res.ReconfigureBudget, w.reconfigureBudget)
	}
	disrupting := 0
	for _, st := range res.Steps {
		if len(st.Evictions) > 0 {
			disrupting++
		}
	}
	if disrupting > w.budget || len(res.Steps)-disrupting > w.reconfigureBudget {
		pc.fail("%d nodes evict and %d change without evicting; budgets %d and %d", disrupting, len(res.Steps)-disrupting, w.budget, w.reconfigureBudget)
	}
	if in.MaxSteps > 0 && len(res.Steps) > in.MaxSteps {
		pc.fail("%d steps, over MaxSteps %d", len(res.Steps), in.MaxSteps)
	}
	if res.PoolNodes != len(w.nodes) {
		pc.fail("PoolNodes is %d, want %d", res.PoolNodes, len(w.nodes))
	}
	byName := map[string]*nodeModel{}
	for _, nm := range w.nodes {
		byName[nm.node.Name] = nm
	}
	checkEntryNames(s, res, pc)
	evicted := map[types.NamespacedName]string{}
	for i := range res.Steps {
		step := &res.Steps[i]
		if i > 0 && res.Steps[i-1].Node >= step.Node {
			pc.fail("steps are not sorted by node: %s then %s", res.Steps[i-1].Node, step.Node)
		}
		nm := byName[step.Node]
		if nm == nil {
			pc.fail("step for %s, which is not a pool node", step.Node)
			continue
		}
		checkStep(pc, s, w, nm, step, evicted)
	}
	checkPDBs(pc, s, evicted)
	checkOrder(pc, res)
	if spec.Disruption.Approval == v1alpha1.ApprovalAutoIdle && res.Disruptive() {
		pc.fail("approval AutoIdle, yet the plan evicts %d pod(s)", len(evicted))
	}
	checkBookkeeping(pc, in, res)
	checkPlacement(pc, w, in, res)
	return pc
}

// checkStep checks one node's step: its targets and its evictions.
func checkStep(pc *planCheck, s *scenario, w *world, nm *nodeModel, step *planner.Step, evicted map[types.NamespacedName]string) {
	if !nm.changeable {
		pc.fail("%s changes, but the planner may not change it (frozen, cordoned or no catalog option)", step.Node)
	}
	if len(step.GPUs) == 0 {
		pc.fail("%s: a step that changes no GPU", step.Node)
	}
	if len(step.Target) != len(nm.node.GPUs) {
		pc.fail("%s: target lists %d GPUs, the node has %d", step.Node, len(step.Target), len(nm.node.GPUs))
		return
	}
	// held are the pods on the GPUs the step changes: exactly those it must evict.
	held := map[types.NamespacedName]bool{}
	changed := map[int]bool{}
	for pos, g := range nm.node.GPUs {
		tg := step.Target[pos]
		if tg.Index != g.Index {
			pc.fail("%s: target %d is GPU %d, want GPU %d", step.Node, pos, tg.Index, g.Index)
		}
		i := slices.IndexFunc(step.GPUs, func(c planner.GPUChange) bool { return c.Index == g.Index })
		if i < 0 {
			if tg.MIGEnabled != g.MIGEnabled || !tg.Layout.Equal(g.Layout()) {
				pc.fail("%s GPU %d: target %q (MIG %t) but no change listed; it has %q (MIG %t)",
					step.Node, g.Index, tg.Layout, tg.MIGEnabled, g.Layout(), g.MIGEnabled)
			}
			continue
		}
		if changed[g.Index] {
			pc.fail("%s GPU %d changes twice", step.Node, g.Index)
		}
		changed[g.Index] = true
		ch := step.GPUs[i]
		if !ch.From.Equal(g.Layout()) {
			pc.fail("%s GPU %d: From %q, but it has %q", step.Node, g.Index, ch.From, g.Layout())
		}
		if !ch.To.Equal(tg.Layout) {
			pc.fail("%s GPU %d: To %q differs from the target %q", step.Node, g.Index, ch.To, tg.Layout)
		}
		if tg.MIGEnabled == g.MIGEnabled && tg.Layout.Equal(g.Layout()) {
			pc.fail("%s GPU %d: listed as changed, but keeps %q", step.Node, g.Index, g.Layout())
		}
		if !nm.gpuChangeable[pos] {
			pc.fail("%s GPU %d changes, but it may not (pods that may not be evicted, a process, or AutoIdle)", step.Node, g.Index)
		}
		checkTarget(pc, s, w, step.Node, tg)
		for _, key := range g.Pods {
			held[key] = true
		}
	}
	inStep := map[types.NamespacedName]bool{}
	for _, e := range step.Evictions {
		if inStep[e.Pod] {
			pc.fail("%s evicts %s twice", step.Node, e.Pod)
		}
		inStep[e.Pod] = true
		if other, dup := evicted[e.Pod]; dup {
			pc.fail("%s is evicted by both %s and %s", e.Pod, other, step.Node)
		}
		evicted[e.Pod] = step.Node
		if e.Reason == "" {
			pc.fail("%s: eviction of %s has no reason", step.Node, e.Pod)
		}
		if !held[e.Pod] {
			pc.fail("%s evicts %s, which holds no GPU the step changes", step.Node, e.Pod)
		}
		raw := s.c.pod(e.Pod)
		p := nm.node.Pod(e.Pod)
		switch {
		case raw == nil || p == nil:
			pc.fail("%s evicts %s, which is not on the node", step.Node, e.Pod)
		case raw.Annotations[v1alpha1.AnnotationDoNotDisrupt] == "true":
			pc.fail("%s evicts %s, which is annotated do-not-disrupt", step.Node, e.Pod)
		case len(raw.OwnerReferences) == 0:
			pc.fail("%s evicts %s, which no controller would recreate", step.Node, e.Pod)
		case !p.Evictable:
			pc.fail("%s evicts %s, which may not be evicted: %s", step.Node, e.Pod, p.Blocker)
		}
	}
	for key := range held {
		if !inStep[key] {
			pc.fail("%s changes a GPU %s holds without evicting it", step.Node, key)
		}
	}
	if !modeChangeSpares(nm, stepChange(nm, step)) {
		pc.fail("%s changes a GPU's MIG mode while another GPU of the node, which mig-parted would clear or reset, is in use", step.Node)
	}
	for _, e := range step.Evictions {
		if e.Landing == step.Node {
			continue
		}
		i := slices.IndexFunc(w.nodes, func(o *nodeModel) bool { return o.node.Name == e.Landing })
		p := nm.node.Pod(e.Pod)
		switch {
		case i < 0:
			pc.fail("%s: %s lands on %q, not a pool node", step.Node, e.Pod, e.Landing)
		case !w.hostable(w.nodes[i]):
			pc.fail("%s: %s lands on %s, which may host no moved pod (cordoned, unreadable or frozen)", step.Node, e.Pod, e.Landing)
		case p != nil && !mayRunOn(p, w.nodes[i].node.Object):
			pc.fail("%s: %s lands on %s, which its placement rules exclude", step.Node, e.Pod, e.Landing)
		}
	}
}

// checkOrder checks the steps' order: every name a step waits for is another step, the order
// has no cycle, and a move to a node the plan also changes is ordered one way or the other.
func checkOrder(pc *planCheck, res *planner.Result) {
	byNode := map[string]*planner.Step{}
	for i := range res.Steps {
		byNode[res.Steps[i].Node] = &res.Steps[i]
	}
	waits := func(a, b string) bool { return slices.Contains(byNode[a].WaitsFor, b) }
	for _, st := range res.Steps {
		for _, other := range st.WaitsFor {
			if byNode[other] == nil || other == st.Node {
				pc.fail("%s waits for %q, not another step of the plan", st.Node, other)
			}
		}
		for _, e := range st.Evictions {
			if e.Landing != st.Node && byNode[e.Landing] != nil && !waits(st.Node, e.Landing) && !waits(e.Landing, st.Node) {
				pc.fail("%s moves %s to %s, which the plan changes too, but neither waits for the other", st.Node, e.Pod, e.Landing)
			}
		}
	}
	// Depth-first search for a cycle.
	state := map[string]int{}
	var visit func(n string) bool
	visit = func(n string) bool {
		switch state[n] {
		case 1:
			return false
		case 2:
			return true
		}
		state[n] = 1
		for _, m := range byNode[n].WaitsFor {
			if byNode[m] != nil && !visit(m) {
				return false
			}
		}
		state[n] = 2
		return true
	}
	for _, st := range res.Steps {
		if !visit(st.Node) {
			pc.fail("the steps' order has a cycle through %s", st.Node)
			return
		}
	}
}

// checkTarget checks that a changed GPU's target is one the catalog allows and the product can
// place.
func checkTarget(pc *planCheck, s *scenario, w *world, node string, tg mig.GPUTarget) {
	if !tg.MIGEnabled {
		if len(tg.Layout.Names()) > 0 {
			pc.fail("%s GPU %d: MIG off with instances %q", node, tg.Index, tg.Layout)
		}
		if !w.wholeOK {
			pc.fail("%s GPU %d: MIG off, but the catalog does not allow whole GPUs", node, tg.Index)
		}
		return
	}
	if !s.prod.Fits(tg.Layout) {
		pc.fail("%s GPU %d: %q does not fit a %s", node, tg.Index, tg.Layout, s.prod.Name)
	}
	placed, err := s.prod.Place(tg.Layout, nil)
	if err != nil || len(placed) != tg.Layout.Total() {
		pc.fail("%s GPU %d: %q has no placement (%d instances placed): %v", node, tg.Index, tg.Layout, len(placed), err)
	}
	for _, name := range tg.Layout.Names() {
		if !slices.Contains(w.allowed, name) {
			pc.fail("%s GPU %d: %s is not in the catalog %v", node, tg.Index, name, w.allowed)
		}
	}
}

// checkPDBs checks, per PodDisruptionBudget of the scenario, that the plan evicts no more of
// the pods it covers than it allows now.
func checkPDBs(pc *planCheck, s *scenario, evicted map[types.NamespacedName]string) {
	for _, pdb := range s.c.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			pc.fail("pdb %s: %v", pdb.Name, err)
			continue
		}
		allowed := pdb.Status.DisruptionsAllowed
		if pdb.Status.ObservedGeneration < pdb.Generation {
			allowed = 0
		}
		var hit []string
		for key := range evicted {
			if p := s.c.pod(key); p != nil && p.Namespace == pdb.Namespace && sel.Matches(labels.Set(p.Labels)) {
				hit = append(hit, key.Name)
			}
		}
		if int32(len(hit)) > allowed {
			slices.Sort(hit)
			pc.fail("PDB %s allows %d disruption(s), the plan evicts %v", pdb.Name, allowed, hit)
		}
	}
}

// checkBookkeeping checks that every pending pod is accounted for once, with a sound reason
// when unserved, and that SlicesGained adds up the steps.
func checkBookkeeping(pc *planCheck, in planner.Input, res *planner.Result) {
	seen := map[types.NamespacedName][]string{}
	for _, k := range res.Served {
		seen[k] = append(seen[k], "Served")
	}
	for _, k := range res.FitsNow {
		seen[k] = append(seen[k], "FitsNow")
	}
	for _, u := range res.Unserved {
		seen[u.Pod] = append(seen[u.Pod], "Unserved")
		if !slices.Contains(reasons, u.Reason) {
			pc.fail("%s: unknown reason %q", u.Pod, u.Reason)
		}
		if !strings.HasPrefix(u.Message, "needs ") || len(u.Message) <= len("needs ") {
			pc.fail("%s: message %q does not start with \"needs \"", u.Pod, u.Message)
		}
	}
	pending := map[types.NamespacedName]bool{}
	for _, r := range in.Pending {
		pending[r.Pod] = true
		if len(seen[r.Pod]) != 1 {
			pc.fail("pending pod %s appears in %v, want exactly one of Served, FitsNow, Unserved", r.Pod, seen[r.Pod])
		}
	}
	for k, where := range seen {
		if !pending[k] {
			pc.fail("%s in %v is not a pending pod", k, where)
		}
	}
	if len(res.Served) > 0 && len(res.Steps) == 0 {
		pc.fail("%d pod(s) served without any change", len(res.Served))
	}
	gained := map[string]int{}
	for _, s := range res.Steps {
		for _, g := range s.GPUs {
			for name, n := range g.To {
				gained[name] += n
			}
			for name, n := range g.From {
				gained[name] -= n
			}
		}
	}
	maps.DeleteFunc(gained, func(_ string, n int) bool { return n == 0 })
	if !maps.Equal(gained, res.SlicesGained) {
		pc.fail("SlicesGained is %v, the steps add up to %v", res.SlicesGained, gained)
	}
}

// checkPlacement checks that the pods the plan serves and those that fit now can all run at
// once on the target state, next to the evicted pods on their landings, and that the pods
// that fit now do fit the current state.
func checkPlacement(pc *planCheck, w *world, in planner.Input, res *planner.Result) {
	steps := map[string]*planner.Step{}
	for i := range res.Steps {
		steps[res.Steps[i].Node] = &res.Steps[i]
	}
	now := make([][]int64, len(w.nodes))
	after := make([][]int64, len(w.nodes))
	for i, nm := range w.nodes {
		if !nm.schedulable {
			continue
		}
		now[i], _, _ = w.capacity(nm, nil)
		after[i] = now[i]
		if s := steps[nm.node.Name]; s != nil {
			after[i], _, _ = w.freed(nm, stepChange(nm, s))
		}
	}
	// Evicted pods are pinned to their landings: their room is what the plan promises them.
	var moved []pendingPod
	for _, mp := range w.movable() {
		for _, st := range res.Steps {
			for _, e := range st.Evictions {
				if e.Pod != mp.key {
					continue
				}
				j := slices.IndexFunc(w.nodes, func(o *nodeModel) bool { return o.node.Name == e.Landing })
				if j < 0 {
					continue
				}
				moved = append(moved, pendingPod{key: mp.key, need: mp.need, nodes: []int{j}})
			}
		}
	}
	claims := func(keys ...[]types.NamespacedName) []demand.Request {
		var out []demand.Request
		for _, r := range in.Pending {
			for _, list := range keys {
				if slices.Contains(list, r.Pod) {
					out = append(out, r)
				}
			}
		}
		return out
	}
	check := func(what string, reqs []demand.Request, capacity [][]int64, extra ...pendingPod) {
		ok, decided := placeAll(append(w.pendingPods(reqs), extra...), capacity, placementSearchLimit)
		if !decided {
			pc.undecided++
		} else if !ok {
			pc.fail("%s cannot all be placed", what)
		}
	}
	check("the pods that fit now, on the current layouts,", claims(res.FitsNow), now)
	check("the pods served and those that fit now, on the target layouts, beside the evicted pods on their landings,",
		claims(res.Served, res.FitsNow), after, moved...)
}

// checkEntryNames holds the planner to the executor: the entry name a step carries must be the
// name of the target the executor would write from the same objects (inventory.NodeTarget),
// or every plan would be cancelled as drifted before it touched a GPU.
func checkEntryNames(s *scenario, res *planner.Result, pc *planCheck) {
	plan := res.RepartitionPlan(s.pol, now)
	if plan == nil {
		return
	}
	for _, step := range plan.Spec.Steps {
		ni := slices.IndexFunc(s.c.nodes, func(n corev1.Node) bool { return n.Name == step.Node })
		gi := slices.IndexFunc(s.c.gpuNodes, func(g v1alpha1.GPUNode) bool { return g.Name == step.Node })
		if ni < 0 || gi < 0 {
			pc.fail("step on %s: no such node or GPUNode", step.Node)
			continue
		}
		target := inventory.NodeTarget(&s.c.nodes[ni], &s.c.gpuNodes[gi], step.GPUs)
		if got := nvidia.MIGConfigName(target); got != step.MIGConfigName {
			pc.fail("step on %s names entry %s, but the executor's target %v is %s", step.Node, step.MIGConfigName, target, got)
		}
	}
}

// pod finds a pod of the cluster by key.
func (c *cluster) pod(key types.NamespacedName) *corev1.Pod {
	for i := range c.pods {
		if c.pods[i].Namespace == key.Namespace && c.pods[i].Name == key.Name {
			return &c.pods[i]
		}
	}
	return nil
}

// planOrFail runs the planner and stops the test on an error.
func planOrFail(t testing.TB, s *scenario, in planner.Input) *planner.Result {
	t.Helper()
	res, err := planner.Plan(in)
	if err != nil {
		t.Fatalf("%s: Plan: %v\n%s", s.origin, err, s.describe())
	}
	return res
}

// planAndCheck plans a scenario and checks the plan with checkPlan, and determinism: the same
// input planned again, and the same objects listed in another order (drawn from r), must give
// deep-equal results.
func planAndCheck(t testing.TB, s *scenario, r *rand.Rand) (*planner.Result, *planCheck) {
	t.Helper()
	in := s.input()
	res := planOrFail(t, s, in)
	pc := checkPlan(s, in, res)
	if again := planOrFail(t, s, in); !reflect.DeepEqual(res, again) {
		pc.fail("planning the same input twice gave different results:\nfirst:\n%ssecond:\n%s", describeResult(res), describeResult(again))
	}
	if shuffled := planOrFail(t, s, s.shuffledInput(r)); !reflect.DeepEqual(res, shuffled) {
		pc.fail("the same objects in another order gave a different result:\nsorted:\n%sshuffled:\n%s", describeResult(res), describeResult(shuffled))
	}
	return res, pc
}

// propertyStats counts what the random scenarios exercised, so that a generator that stops
// producing interesting cases fails the test instead of passing it vacuously.
type propertyStats struct {
	scenarios, withSteps, withEvictions, served, undecided int
	reasons                                                map[planner.Reason]int
}

// add counts one scenario.
func (ps *propertyStats) add(res *planner.Result, pc *planCheck) {
	ps.scenarios++
	if len(res.Steps) > 0 {
		ps.withSteps++
	}
	if res.Disruptive() {
		ps.withEvictions++
	}
	ps.served += len(res.Served)
	ps.undecided += pc.undecided
	for _, u := range res.Unserved {
		ps.reasons[u.Reason]++
	}
}

// TestPlanProperties plans thousands of random pools and checks each plan with planAndCheck.
func TestPlanProperties(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 300
	}
	stats := &propertyStats{reasons: map[planner.Reason]int{}}
	failures := 0
	for seed := range uint64(n) {
		r := newRand(seed, 1)
		s := genScenario(t, r, fmt.Sprintf("seed %d", seed), propertyConfig)
		res, pc := planAndCheck(t, s, r)
		stats.add(res, pc)
		if len(pc.problems) > 0 {
			t.Errorf("%s: %s\nscenario:\n%splan:\n%s", s.origin, strings.Join(pc.problems, "\n"), s.describe(), describeResult(res))
			if failures++; failures == 5 {
				t.Fatal("stopping after 5 failing seeds")
			}
		}
	}
	t.Logf("%d scenarios: %d change nodes, %d evict, %d pods served, unserved reasons %v, %d placement checks undecided",
		stats.scenarios, stats.withSteps, stats.withEvictions, stats.served, stats.reasons, stats.undecided)
	if stats.withSteps < n/4 || stats.withEvictions < n/20 {
		t.Errorf("the generator is too tame: %d of %d scenarios change nodes, %d evict", stats.withSteps, n, stats.withEvictions)
	}
	for _, reason := range reasons {
		if stats.reasons[reason] == 0 {
			t.Errorf("no scenario left a pod unserved for %s", reason)
		}
	}
	if stats.undecided > n/100 {
		t.Errorf("%d placement checks undecided in %d scenarios", stats.undecided, n)
	}
}

// TestScenariosAreReproducible: a seed reported by a failing test must rebuild the same pool.
func TestScenariosAreReproducible(t *testing.T) {
	for seed := range uint64(200) {
		origin := fmt.Sprintf("seed %d", seed)
		a := genScenario(t, newRand(seed, 1), origin, propertyConfig).describe()
		b := genScenario(t, newRand(seed, 1), origin, propertyConfig).describe()
		if a != b {
			t.Fatalf("%s gave two pools:\n%s\n%s", origin, a, b)
		}
	}
}
