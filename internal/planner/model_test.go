package planner_test

// An independent model of what a node offers pending pods, written from docs/architecture.md
// ("The planner's objectives", "MIG geometry") and the inventory and demand packages rather than from the planner's code, so that
// property and optimality tests check the planner against a second opinion.

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/planner"
)

// space fixes the order of the capacity vectors the model compares: one entry per MIG profile
// of the product (canonical names, in the product's order), one for whole GPUs (MIG off, no pod), then
// the non-GPU resources pending pods request.
type space struct {
	prod     *mig.Product
	profiles map[string]int
	res      []corev1.ResourceName
}

// newSpace lays out the vectors for one product and the resources the pending pods and the
// running pods a plan may move request.
func newSpace(prod *mig.Product, pending []demand.Request, running []corev1.ResourceList) *space {
	sp := &space{prod: prod, profiles: map[string]int{}}
	for i, pr := range prod.Profiles {
		sp.profiles[pr.Name] = i
	}
	lists := slices.Clone(running)
	for _, r := range pending {
		lists = append(lists, r.Requests)
	}
	for _, list := range lists {
		for name := range list {
			if _, _, gpu := demand.Classify(name); !gpu && !slices.Contains(sp.res, name) {
				sp.res = append(sp.res, name)
			}
		}
	}
	slices.Sort(sp.res)
	return sp
}

// wholeDim is the position of whole GPUs in a vector.
func (sp *space) wholeDim() int { return len(sp.prod.Profiles) }

// size is the length of a vector.
func (sp *space) size() int { return len(sp.prod.Profiles) + 1 + len(sp.res) }

// gpuVector is the GPU part of a resource list; ok is false when it asks for something no
// layout of the product provides (shared replicas, a profile the product lacks).
func (sp *space) gpuVector(list corev1.ResourceList) ([]int64, bool) {
	v := make([]int64, sp.size())
	for name, q := range list {
		kind, profile, gpu := demand.Classify(name)
		if !gpu {
			continue
		}
		switch kind {
		case demand.KindGPU:
			v[sp.wholeDim()] += q.Value()
		case demand.KindMIG:
			pr, ok := sp.prod.Profile(profile)
			if !ok {
				return nil, false
			}
			v[sp.profiles[pr.Name]] += q.Value()
		default:
			return nil, false
		}
	}
	return v, true
}

// podVector is everything a pending pod takes from a node.
func (sp *space) podVector(list corev1.ResourceList) ([]int64, bool) {
	v, ok := sp.gpuVector(list)
	if !ok {
		return nil, false
	}
	for i, name := range sp.res {
		v[sp.wholeDim()+1+i] = demand.Quantity(list, name)
	}
	return v, true
}

// covers reports whether capacity holds need in every dimension.
func covers(capacity, need []int64) bool {
	for i := range need {
		if need[i] > capacity[i] {
			return false
		}
	}
	return true
}

// subtract takes need from capacity.
func subtract(capacity, need []int64) {
	for i := range need {
		capacity[i] -= need[i]
	}
}

// add adds v to sum.
func add(sum, v []int64) {
	for i := range v {
		sum[i] += v[i]
	}
}

// target is one GPU's layout after a change; off is MIG disabled.
type target struct {
	off    bool
	layout mig.Layout
}

// nodeModel is one pool node with what the rules let the planner do to it.
type nodeModel struct {
	node *inventory.Node
	// schedulable: pending pods may land on it (no blocker, not cordoned).
	schedulable bool
	// changeable: the planner may re-carve some of its GPUs.
	changeable bool
	// gpuChangeable says, per GPU position, whether that GPU may take a new layout.
	gpuChangeable []bool
}

// world is a planning input seen through the model.
type world struct {
	in      planner.Input
	sp      *space
	nodes   []*nodeModel
	options []target // targets the catalog allows, for every GPU of the product
	allowed []string // canonical catalog profiles
	wholeOK bool
	budget  int // nodes with evictions the plan may change
	// reconfigureBudget is how many nodes without evictions the plan may change.
	reconfigureBudget int
	evictOK           bool
}

// newWorld models the pool of a single-product input.
func newWorld(in planner.Input, prod *mig.Product) *world {
	var running []corev1.ResourceList
	for _, n := range in.Snapshot.Nodes {
		for _, p := range n.Pods {
			running = append(running, p.Requests)
		}
	}
	w := &world{in: in, sp: newSpace(prod, in.Pending, running)}
	spec := &in.Policy.Spec
	w.evictOK = spec.Disruption.Approval != v1alpha1.ApprovalAutoIdle
	hasEntry := false
	for _, e := range spec.Catalog {
		if e.Product != prod.Name {
			continue
		}
		hasEntry = true
		w.wholeOK = e.AllowWholeGPU
		for _, name := range e.MIGProfiles {
			if pr, ok := prod.Profile(string(name)); ok && !slices.Contains(w.allowed, pr.Name) {
				w.allowed = append(w.allowed, pr.Name)
			}
		}
	}
	if len(w.allowed) > 0 {
		for _, l := range prod.MaximalLayoutsOf(w.allowed) {
			w.options = append(w.options, target{layout: l})
		}
	}
	if w.wholeOK {
		w.options = append(w.options, target{off: true, layout: mig.Layout{}})
	}
	for _, n := range in.Snapshot.Nodes {
		if n.Object.Labels["pool"] != "a" {
			continue
		}
		nm := &nodeModel{node: n}
		nm.schedulable = n.Blocker == "" && !n.Object.Spec.Unschedulable
		nm.changeable = nm.schedulable && in.Frozen[n.Name] == "" && len(n.GPUs) > 0 && hasEntry && len(w.options) > 0
		for _, g := range n.GPUs {
			nm.gpuChangeable = append(nm.gpuChangeable, nm.changeable && w.gpuMayChange(n, g))
		}
		w.nodes = append(w.nodes, nm)
	}
	w.budget = max(0, maxDisruptedNodes(spec.Disruption.MaxDisruptedNodes, len(w.nodes))-in.InFlightDisrupting)
	w.reconfigureBudget = max(0, maxReconfiguringNodes(spec.Disruption.MaxReconfiguringNodes, len(w.nodes))-in.InFlightReconfiguring)
	return w
}

// maxReconfiguringNodes resolves maxReconfiguringNodes like maxDisruptedNodes; 50% when unset,
// as the API defaults it.
func maxReconfiguringNodes(v *intstr.IntOrString, poolNodes int) int {
	if v == nil {
		half := intstr.FromString("50%")
		v = &half
	}
	return maxDisruptedNodes(v, poolNodes)
}

// hostable reports whether a moved pod may land on the node: pods may be scheduled there and
// no other plan or policy is changing it.
func (w *world) hostable(nm *nodeModel) bool {
	return nm.schedulable && w.in.Frozen[nm.node.Name] == ""
}

// movablePod is a running pod that a change of its GPUs evicts, as the model re-homes it.
type movablePod struct {
	key  types.NamespacedName
	home int     // position of its node
	need []int64 // everything it takes from a node: GPUs and other resources
	// nodes are the positions of the nodes it may run on again: its own, and every hostable
	// node its placement rules admit.
	nodes []int
}

// movable lists the pods on GPUs the plan may change, in node order.
func (w *world) movable() []movablePod {
	var out []movablePod
	for i, nm := range w.nodes {
		seen := map[types.NamespacedName]bool{}
		for pos, g := range nm.node.GPUs {
			if !nm.gpuChangeable[pos] {
				continue
			}
			for _, key := range g.Pods {
				p := nm.node.Pod(key)
				if seen[key] || p == nil {
					continue
				}
				seen[key] = true
				need, ok := w.sp.podVector(p.Requests)
				if !ok {
					continue
				}
				mp := movablePod{key: key, home: i, need: need}
				for j, other := range w.nodes {
					if j == i || (w.hostable(other) && mayRunOn(p, other.node.Object)) {
						mp.nodes = append(mp.nodes, j)
					}
				}
				out = append(out, mp)
			}
		}
	}
	return out
}

// mayRunOn applies a running pod's placement rules to a node, as for a pending pod.
func mayRunOn(p *inventory.Pod, node *corev1.Node) bool {
	ok, _ := demand.Request{NodeSelector: p.NodeSelector, RequiredAffinity: p.RequiredAffinity, Tolerations: p.Tolerations}.Matches(node)
	return ok
}

// freed is what the node offers once the GPUs in change take their targets and every pod those
// changes evict has left the node, with its CPU and memory: each evicted pod must then be
// placed again, on this node or another. ok is false when an evicted pod is not on the node.
func (w *world) freed(nm *nodeModel, change map[int]target) (capacity []int64, evicted []types.NamespacedName, ok bool) {
	if !modeChangeSpares(nm, change) {
		return nil, nil, false
	}
	capacity, evicted = w.gpuCapacity(nm, change, evictedBy(nm, change))
	if capacity == nil {
		return nil, nil, false
	}
	for i, name := range w.sp.res {
		capacity[w.sp.wholeDim()+1+i] = nm.node.Free(name)
	}
	for _, key := range evicted {
		p := nm.node.Pod(key)
		if p == nil {
			return nil, nil, false
		}
		for i, name := range w.sp.res {
			capacity[w.sp.wholeDim()+1+i] += demand.Quantity(p.Requests, name)
		}
	}
	return capacity, evicted, true
}

// maxDisruptedNodes resolves the policy's maxDisruptedNodes for a pool: a count, or a
// percentage of the pool's nodes rounded up; 1 when unset.
func maxDisruptedNodes(v *intstr.IntOrString, poolNodes int) int {
	if v == nil {
		return 1
	}
	if v.Type == intstr.Int {
		return v.IntValue()
	}
	pct, err := strconv.Atoi(strings.TrimSuffix(v.StrVal, "%"))
	if err != nil {
		return 0
	}
	return (pct*poolNodes + 99) / 100
}

// gpuMayChange applies the safety rule: a GPU changes only when nothing outside Kubernetes
// uses it and every pod on it may be evicted under the policy.
func (w *world) gpuMayChange(n *inventory.Node, g *inventory.GPU) bool {
	if g.Error != "" || g.Product == nil {
		return false
	}
	for _, in := range g.Instances {
		if in.Busy && in.Pod == nil {
			return false
		}
	}
	for _, key := range g.Pods {
		p := n.Pod(key)
		if p == nil || !p.Evictable {
			return false
		}
	}
	return len(g.Pods) == 0 || w.evictOK
}

// isCurrent reports whether a target is what the GPU has now, so choosing it changes nothing.
func isCurrent(g *inventory.GPU, t target) bool {
	if t.off {
		return !g.MIGEnabled
	}
	return g.MIGEnabled && t.layout.Equal(g.Layout())
}

// capacity is what the node offers pending pods once the GPUs in change (by position) take
// their targets and the pods those changes evict have taken their GPUs back: evicted pods
// return as pending and must fit on their node again, and their CPU and memory stay counted
// as requested. ok is false when they do not fit again.
func (w *world) capacity(nm *nodeModel, change map[int]target) (capacity []int64, evicted []types.NamespacedName, ok bool) {
	if !modeChangeSpares(nm, change) {
		return nil, nil, false
	}
	capacity, evicted = w.gpuCapacity(nm, change, evictedBy(nm, change))
	if capacity == nil {
		return nil, nil, false
	}
	for _, key := range evicted {
		p := nm.node.Pod(key)
		if p == nil {
			return nil, nil, false
		}
		need, known := w.sp.gpuVector(p.Requests)
		if !known || !covers(capacity, need) {
			return nil, nil, false
		}
		subtract(capacity, need)
	}
	for i, name := range w.sp.res {
		capacity[w.sp.wholeDim()+1+i] = nm.node.Free(name)
	}
	return capacity, evicted, true
}

// evictedBy is the set of pods held on the GPUs a change re-carves.
// modeChangeSpares reports whether a change leaves alone every pod it does not evict, read
// from NVIDIA's mig-parted rather than the planner: to change one GPU's MIG mode on Ampere,
// where the change waits for a reset, "apply --mode-only" resets every GPU of the node
// (cmd/nvidia-mig-parted/apply/mode.go), so every GPU a mode change keeps there must be unused.
// (Where mig-manager may also reboot the node, no pod without a GPU may stay either; generated
// pools hold none, so reboot_test.go's tables check that rule. The same apply also clears every
// MIG-enabled GPU, on any product; the planner does not enforce that yet, see toggleHurts.)
func modeChangeSpares(nm *nodeModel, change map[int]target) bool {
	toggles := false
	for pos, t := range change {
		toggles = toggles || t.off == nm.node.GPUs[pos].MIGEnabled
	}
	if !toggles {
		return true
	}
	gone := evictedBy(nm, change)
	ampere := false
	for _, g := range nm.node.GPUs {
		ampere = ampere || g.Product == nil || strings.HasPrefix(g.Product.Name, "A100") || strings.HasPrefix(g.Product.Name, "A30")
	}
	for pos, g := range nm.node.GPUs {
		if _, changed := change[pos]; changed {
			continue
		}
		if g.Error != "" {
			return false
		}
		if !ampere {
			continue
		}
		for _, key := range g.Pods {
			if !gone[key] {
				return false
			}
		}
		for _, in := range g.Instances {
			if in.Busy && (in.Pod == nil || !gone[*in.Pod]) {
				return false
			}
		}
	}
	return true
}

func evictedBy(nm *nodeModel, change map[int]target) map[types.NamespacedName]bool {
	gone := map[types.NamespacedName]bool{}
	for pos := range change {
		for _, key := range nm.node.GPUs[pos].Pods {
			gone[key] = true
		}
	}
	return gone
}

// gpuCapacity is the GPU part of what the node offers once the GPUs in change take their
// targets and the pods in gone have left; nil when a target names a profile the product lacks.
func (w *world) gpuCapacity(nm *nodeModel, change map[int]target, gone map[types.NamespacedName]bool) ([]int64, []types.NamespacedName) {
	sp := w.sp
	capacity := make([]int64, sp.size())
	evicted := make([]types.NamespacedName, 0, len(gone))
	for key := range gone {
		evicted = append(evicted, key)
	}
	slices.SortFunc(evicted, compareKeys)
	for pos, g := range nm.node.GPUs {
		if t, changed := change[pos]; changed {
			if t.off {
				capacity[sp.wholeDim()]++
				continue
			}
			for name, n := range t.layout {
				pr, found := sp.prod.Profile(name)
				if !found {
					return nil, nil
				}
				capacity[sp.profiles[pr.Name]] += int64(n)
			}
			continue
		}
		if !g.MIGEnabled {
			free := true
			for _, key := range g.Pods {
				free = free && gone[key]
			}
			if free {
				capacity[sp.wholeDim()]++
			}
			continue
		}
		for _, in := range g.Instances {
			free := in.Pod == nil && !in.Busy
			if in.Pod != nil && gone[*in.Pod] {
				free = true
			}
			if !free {
				continue
			}
			if pr, found := sp.prod.Profile(in.Profile); found {
				capacity[sp.profiles[pr.Name]]++
			}
		}
	}
	return capacity, evicted
}

// stepChange reads a step's GPU changes as targets by GPU position.
func stepChange(nm *nodeModel, s *planner.Step) map[int]target {
	change := map[int]target{}
	for _, c := range s.GPUs {
		pos := slices.IndexFunc(nm.node.GPUs, func(g *inventory.GPU) bool { return g.Index == c.Index })
		t := target{layout: c.To}
		for _, gt := range s.Target {
			if gt.Index == c.Index {
				t.off = !gt.MIGEnabled
			}
		}
		change[pos] = t
	}
	return change
}

// compareKeys orders pods by namespace, then name.
func compareKeys(a, b types.NamespacedName) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// pendingPod is a pending pod as the model places it.
type pendingPod struct {
	key  types.NamespacedName
	need []int64
	// slices is the GPU compute slices the pod asks for (a whole GPU counts 7): the measure
	// of served demand the planner maximises, per priority tier.
	slices int
	// nodes lists the positions (in world.nodes) of the nodes it may run on.
	nodes []int
}

// pendingPods models requests: a pod that no layout can hold gets no node.
func (w *world) pendingPods(reqs []demand.Request) []pendingPod {
	out := make([]pendingPod, 0, len(reqs))
	for _, r := range reqs {
		pp := pendingPod{key: r.Pod, slices: requestSlices(r)}
		need, ok := w.sp.podVector(r.Requests)
		if ok {
			pp.need = need
			for i, nm := range w.nodes {
				if match, _ := r.Matches(nm.node.Object); match && nm.schedulable {
					pp.nodes = append(pp.nodes, i)
				}
			}
		}
		out = append(out, pp)
	}
	return out
}

// requestSlices weighs a request in GPU compute slices: the number before "g" of each MIG
// profile, and 7 for a whole GPU.
func requestSlices(r demand.Request) int {
	total := 0
	for _, g := range r.GPUs {
		switch g.Kind {
		case demand.KindMIG:
			n := 0
			for _, ch := range g.Profile {
				if ch < '0' || ch > '9' {
					break
				}
				n = n*10 + int(ch-'0')
			}
			total += max(n, 1) * int(g.Count)
		case demand.KindGPU:
			total += 7 * int(g.Count)
		}
	}
	return total
}

// placeAll reports whether every pod fits some node it may run on, all at once, given each
// node's capacity (nil for a node that takes no pod). The search is exact but bounded by limit
// steps; decided is false when it ran out first.
func placeAll(pods []pendingPod, capacity [][]int64, limit int) (ok, decided bool) {
	order := slices.Clone(pods)
	// Larger profiles first (vectors start with the largest profile), identical pods next to
	// each other for the symmetry cut below.
	slices.SortStableFunc(order, func(a, b pendingPod) int {
		return cmp.Or(slices.Compare(b.need, a.need), slices.Compare(a.nodes, b.nodes))
	})
	left := make([][]int64, len(capacity))
	for i, c := range capacity {
		left[i] = slices.Clone(c)
	}
	steps := 0
	var dfs func(k, from int) bool
	dfs = func(k, from int) bool {
		if k == len(order) {
			return true
		}
		steps++
		if steps > limit {
			return false
		}
		p := order[k]
		for _, i := range p.nodes {
			// Identical consecutive pods take nodes in non-decreasing order.
			if i < from || left[i] == nil || !covers(left[i], p.need) {
				continue
			}
			subtract(left[i], p.need)
			next := 0
			if k+1 < len(order) && identical(order[k+1], p) {
				next = i
			}
			if dfs(k+1, next) {
				return true
			}
			add(left[i], p.need)
		}
		return false
	}
	for _, p := range order {
		if p.need == nil || len(p.nodes) == 0 {
			return false, true
		}
	}
	ok = dfs(0, 0)
	return ok, ok || steps <= limit
}

// identical reports whether two pods are interchangeable for placement.
func identical(a, b pendingPod) bool {
	return slices.Equal(a.need, b.need) && slices.Equal(a.nodes, b.nodes)
}
