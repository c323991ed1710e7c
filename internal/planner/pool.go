package planner

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// productInfo is one GPU product with the policy's catalog applied.
type productInfo struct {
	id      int // position in the catalog's cache, for slice-indexed lookups
	product *mig.Product
	index   map[string]int // canonical profile name -> position in names
	names   []string
	compute []int // compute slices per profile position
	allowed []string
	wholeOK bool
	entry   *v1alpha1.CatalogEntry // the catalog entry applied; its sharing choices
	options []option               // target layouts the catalog allows, in a fixed order
}

// option is one target layout for a GPU.
type option struct {
	layout   mig.Layout
	counts   []int // instances per profile position
	disabled bool  // MIG off: the GPU serves one whole-GPU pod
}

// gpuInfo is one GPU of a plannable node.
type gpuInfo struct {
	gpu        *inventory.GPU
	current    []int // current instances per profile position
	changeable bool
	blocker    string           // why it may not change, when it may not
	pods       []*inventory.Pod // pods that a change evicts
	idle       bool             // no pod and no process
	currentOpt int              // index in options equal to the current layout, or -1
	freeNow    []int            // free instances per profile position, unchanged
	wholeNow   int              // 1 when MIG is off and no pod holds the GPU
	sig        string           // what makes two GPUs of a node interchangeable for planning
}

// podNeed is what a running pod needs from the node's GPUs if it is evicted and comes back.
type podNeed struct {
	perProfile []int
	whole      int
}

// nodeInfo is one node of the pool.
type nodeInfo struct {
	node    *inventory.Node
	prod    *productInfo
	free    []int64 // non-GPU resources free now, in dims order
	gpus    []*gpuInfo
	blocker string // why the planner may not change it; empty when it may
	// schedulable is false when nothing can land on the node (cordoned, no report).
	schedulable bool
	eligible    []int8 // per class: 0 unknown, 1 matches, -1 does not
	// reserved counts, per class, the pending pods that fit the node as it is now; their
	// capacity is spoken for.
	reserved []int
	// idleGPUs counts the GPUs no pod or process uses; greedy packs by it.
	idleGPUs int
	// podNeeds holds, for every pod on a changeable GPU, what it needs to come back; a pod
	// missing here could not come back, so no change may evict it.
	podNeeds map[types.NamespacedName]podNeed
	// podVec holds the non-GPU requests, in dims order, of every pod on a changeable GPU: what
	// the node gets back when the pod moves away, and what its landing must have free.
	podVec map[types.NamespacedName][]int64
	// pos is the node's position in planState.nodes.
	pos int
	// landed are the pods the plan moves here from other nodes; every state of this node
	// keeps room for them.
	landed []landing
	// accepted is the node's accepted proposal while the greedy runs; nil when it has none.
	accepted *proposal
	// rebootRisk says why toggling a GPU's MIG mode on the node may make mig-manager reboot
	// it; "" when it may not (see MIGManagerReboot).
	rebootRisk string
	// stayers are the pods such a reboot would kill that no change of the node's GPUs evicts:
	// every pod holding no GPU but DaemonSet and static pods; set only with rebootRisk.
	stayers []types.NamespacedName
	// resetAll is true when a MIG mode toggle on the node may reset every GPU of it: one of
	// its GPUs needs a reset to toggle (toggleReset), or a reboot may follow a failure.
	resetAll bool
}

// catalog resolves the policy's catalog against GPU products.
type catalog struct {
	entries  []v1alpha1.CatalogEntry
	products map[catalogKey]*productInfo
}

// catalogKey caches per product and entry: two entries may name one built-in product (SXM and
// PCIe boards) with different profile lists, and a node matching no entry must not poison
// the product's cache for the nodes that do.
type catalogKey struct {
	product *mig.Product
	entry   *v1alpha1.CatalogEntry
}

// entryFor finds the catalog entry for a GPU: a case-insensitive substring match of the entry's
// product on the agent's product name, the node's GPU Feature Discovery label or the built-in
// product's canonical name.
func (c *catalog) entryFor(names ...string) *v1alpha1.CatalogEntry {
	for i := range c.entries {
		want := strings.ToLower(c.entries[i].Product)
		for _, n := range names {
			if n != "" && strings.Contains(strings.ToLower(n), want) {
				return &c.entries[i]
			}
		}
	}
	return nil
}

func (c *catalog) info(p *mig.Product, entry *v1alpha1.CatalogEntry) *productInfo {
	key := catalogKey{p, entry}
	if pi, ok := c.products[key]; ok {
		return pi
	}
	pi := &productInfo{id: len(c.products), product: p, index: map[string]int{}, entry: entry}
	for _, pr := range p.Profiles {
		pi.index[pr.Name] = len(pi.names)
		pi.names = append(pi.names, pr.Name)
		pi.compute = append(pi.compute, pr.ComputeSlices)
	}
	for _, name := range entry.MIGProfiles {
		if pr, ok := p.Profile(string(name)); ok && !slices.Contains(pi.allowed, pr.Name) {
			pi.allowed = append(pi.allowed, pr.Name)
		}
	}
	pi.wholeOK = entry.AllowWholeGPU
	if len(pi.allowed) > 0 {
		for _, l := range p.MaximalLayoutsOf(pi.allowed) {
			pi.options = append(pi.options, option{layout: l, counts: pi.counts(l)})
		}
	}
	if pi.wholeOK {
		pi.options = append(pi.options, option{layout: mig.Layout{}, counts: make([]int, len(pi.names)), disabled: true})
	}
	c.products[key] = pi
	return pi
}

func (pi *productInfo) counts(l mig.Layout) []int {
	v := make([]int, len(pi.names))
	for name, n := range l {
		if pr, ok := pi.product.Profile(name); ok {
			v[pi.index[pr.Name]] += n
		}
	}
	return v
}

// DefaultMaxReconfiguringNodes is maxReconfiguringNodes when a policy leaves it unset: the
// API server defaults it to the same on every stored policy.
const DefaultMaxReconfiguringNodes = "50%"

// DefaultMaxDisruptedNodes is maxDisruptedNodes when a policy leaves it unset (the CRD's
// default marker says the same; internal/pool's TestCRDDefaultsAreTheCodes holds them equal).
const DefaultMaxDisruptedNodes = 1

// Budget resolves maxDisruptedNodes (a count or a percentage of the pool, rounded up).
func Budget(v *intstr.IntOrString, poolNodes int) int {
	if v == nil {
		return DefaultMaxDisruptedNodes
	}
	return resolveBudget(v, poolNodes)
}

// ReconfigureBudget resolves maxReconfiguringNodes like Budget.
func ReconfigureBudget(v *intstr.IntOrString, poolNodes int) int {
	if v == nil {
		def := intstr.FromString(DefaultMaxReconfiguringNodes)
		v = &def
	}
	return resolveBudget(v, poolNodes)
}

func resolveBudget(v *intstr.IntOrString, poolNodes int) int {
	if v.Type == intstr.Int {
		return max(0, v.IntValue())
	}
	pct, err := intstr.GetScaledValueFromIntOrPercent(v, poolNodes, true)
	if err != nil {
		return 0
	}
	return max(0, pct)
}

// poolNodes picks the policy's nodes, sorted by name.
func poolNodes(snap *inventory.Snapshot, policy *v1alpha1.GPUPoolPolicy) ([]*inventory.Node, error) {
	if policy.Spec.NodeSelector.IsEmpty() {
		// The API server refuses an empty selector; a hand-written snapshot might not. Its pool
		// is empty (PoolSelector.Selector): say so rather than plan for no node in silence.
		return nil, fmt.Errorf("policy %s: spec.nodeSelector is empty, so the pool holds no node; name the pool's nodes with matchLabels or matchExpressions", policy.Name)
	}
	sel, err := policy.Spec.NodeSelector.Selector()
	if err != nil {
		return nil, fmt.Errorf("policy %s: spec.nodeSelector: %w", policy.Name, err)
	}
	var out []*inventory.Node
	for _, n := range snap.Nodes {
		if sel.Matches(labels.Set(n.Object.Labels)) {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b *inventory.Node) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// noEntry stands for "the catalog has nothing for this product": nothing may be configured.
var noEntry = v1alpha1.CatalogEntry{}

// newNodeInfo decides what the planner may do on one pool node.
func newNodeInfo(n *inventory.Node, cat *catalog, d *dims, in *Input, classes int, evictOK bool) *nodeInfo {
	ni := &nodeInfo{node: n, free: d.free(n), eligible: make([]int8, classes)}
	ni.schedulable = n.Blocker == "" && !n.Object.Spec.Unschedulable
	switch {
	case n.Blocker != "":
		ni.blocker = n.Blocker
	case in.Frozen[n.Name] != "":
		ni.blocker = in.Frozen[n.Name]
	case n.Object.Spec.Unschedulable:
		ni.blocker = "the node is cordoned"
	case len(n.GPUs) == 0:
		ni.blocker = "the agent reports no GPU"
	}
	var product *mig.Product
	for _, g := range n.GPUs {
		if g.Product == nil {
			if ni.blocker == "" {
				ni.blocker = fmt.Sprintf("GPU %d (%s) has no known MIG geometry", g.Index, g.ProductName)
			}
			continue
		}
		if product != nil && product != g.Product && ni.blocker == "" {
			ni.blocker = "the node mixes GPU products"
		}
		product = g.Product
	}
	if product == nil {
		if ni.blocker == "" {
			ni.blocker = "no GPU with known MIG geometry"
		}
		return ni
	}
	entry := cat.entryFor(n.GPUs[0].ProductName, n.Object.Labels[nvidia.LabelGPUProduct], product.Name)
	if entry == nil {
		if ni.blocker == "" {
			ni.blocker = fmt.Sprintf("the policy's catalog has no entry for %s", product.Name)
		}
		// Pods may still land in its current free instances.
		entry = &noEntry
	}
	ni.prod = cat.info(product, entry)
	ni.podNeeds = map[types.NamespacedName]podNeed{}
	ni.podVec = map[types.NamespacedName][]int64{}
	for _, g := range n.GPUs {
		layout := g.Layout()
		gi := &gpuInfo{gpu: g, current: ni.prod.counts(layout), idle: !g.Busy(), currentOpt: -1,
			freeNow: make([]int, len(ni.prod.names))}
		if !g.MIGEnabled && len(g.Pods) == 0 && g.DRAHeld == "" {
			gi.wholeNow = 1
		}
		for _, in := range g.Instances {
			if k, ok := ni.prod.index[in.Profile]; ok && !in.Busy && in.Pod == nil {
				gi.freeNow[k]++
			}
		}
		for i, o := range ni.prod.options {
			if o.disabled == !g.MIGEnabled && o.layout.Equal(layout) {
				gi.currentOpt = i
			}
		}
		gi.changeable, gi.blocker = changeable(gi, n, evictOK, in.EvictionsPaused)
		sig := fmt.Sprintf("%t|%d|%s|%v", g.MIGEnabled, gi.currentOpt, layout, gi.changeable)
		for _, p := range gi.pods {
			per, whole, ok := gpuNeeds(p, ni.prod)
			if ok {
				ni.podNeeds[p.Key] = podNeed{perProfile: per, whole: whole}
				ni.podVec[p.Key] = d.vector(p.Requests)
			}
			sig += fmt.Sprintf("|%v,%d,%t,%v", per, whole, ok, p.PDBs)
		}
		gi.sig = sig
		ni.gpus = append(ni.gpus, gi)
		if gi.idle {
			ni.idleGPUs++
		}
	}
	ni.resetAll = slices.ContainsFunc(n.GPUs, func(g *inventory.GPU) bool { return toggleReset(g) != "" })
	if ni.rebootRisk = rebootRisk(n, in.MIGManagerReboot); ni.rebootRisk != "" {
		ni.resetAll = true
		onGPU := map[types.NamespacedName]bool{}
		for _, g := range n.GPUs {
			for _, key := range g.Pods {
				onGPU[key] = true
			}
		}
		for _, p := range n.Pods {
			if !p.NodeLocal && !onGPU[p.Key] {
				ni.stayers = append(ni.stayers, p.Key)
			}
		}
	}
	return ni
}

// ampere are the products whose MIG mode change NVML leaves pending until a GPU reset
// (nvmlDeviceSetMigMode; from Hopper on, the mode changes without one), so mig-parted resets
// every GPU of the node to apply it (cmd/nvidia-mig-parted/apply/mode.go ApplyMigMode).
var ampere = []string{"A30-24GB", "A100-40GB", "A100-80GB"}

// rebootRisk says why a MIG mode toggle on the node may make mig-manager reboot it, or ""
// (see MIGManagerReboot for mig-manager's rule).
func rebootRisk(n *inventory.Node, r MIGManagerReboot) string {
	switch r {
	case RebootNever:
		return ""
	case RebootOnFailure:
		return "the GPU Operator runs mig-manager with WITH_REBOOT (ClusterPolicy spec.migManager.env), which reboots the node when a MIG mode change fails"
	}
	for _, g := range n.GPUs {
		if why := toggleReset(g); why != "" {
			return why + ", which mig-manager turns into a reboot of the node if it fails and WITH_REBOOT is set, " +
				"and gpupool could not read the GPU Operator's ClusterPolicy to know it is not"
		}
	}
	return ""
}

// toggleReset says why toggling the GPU's MIG mode needs a GPU reset, or "" when it is known
// not to (bare metal from Hopper on; in a VM the reset may still be needed, which mig-parted
// then attempts and fails while a GPU is in use, failing the step).
func toggleReset(g *inventory.GPU) string {
	switch {
	case g.Product == nil || g.NoBuiltinTable:
		return fmt.Sprintf("GPU %d (%s) is not known to change MIG mode without a GPU reset", g.Index, g.ProductName)
	case slices.Contains(ampere, g.Product.Name):
		return fmt.Sprintf("GPU %d (%s) changes MIG mode only at a GPU reset", g.Index, g.Product.Name)
	}
	return ""
}

// changeable decides whether a GPU may be re-carved, and if so which pods that evicts.
func changeable(gi *gpuInfo, n *inventory.Node, evictOK bool, paused string) (bool, string) {
	g := gi.gpu
	if g.Error != "" {
		return false, fmt.Sprintf("the agent could not read GPU %d: %s", g.Index, g.Error)
	}
	if g.DRAHeld != "" {
		return false, fmt.Sprintf("GPU %d is held through NVIDIA's DRA driver: %s", g.Index, g.DRAHeld)
	}
	for _, in := range g.Instances {
		if in.Busy && in.Pod == nil {
			return false, fmt.Sprintf("a process outside Kubernetes uses %s on GPU %d", in.Profile, g.Index)
		}
	}
	for _, key := range g.Pods {
		p := n.Pod(key)
		if p == nil {
			return false, fmt.Sprintf("GPU %d is held by %s, which is not bound to the node", g.Index, key)
		}
		if !p.Evictable {
			return false, fmt.Sprintf("%s on GPU %d may not be evicted: %s", key, g.Index, p.Blocker)
		}
		gi.pods = append(gi.pods, p)
	}
	if len(gi.pods) > 0 && !evictOK {
		if paused != "" {
			return false, fmt.Sprintf("GPU %d has running pods and %s", g.Index, paused)
		}
		return false, fmt.Sprintf("GPU %d has running pods and approval %s forbids evictions", g.Index, v1alpha1.ApprovalAutoIdle)
	}
	return true, ""
}

// gpuNeeds is what an evicted pod needs again after the change, per profile position and whole GPUs.
func gpuNeeds(p *inventory.Pod, pi *productInfo) (perProfile []int, whole int, ok bool) {
	perProfile = make([]int, len(pi.names))
	for name, q := range p.Requests {
		kind, profile, isGPU := demand.Classify(name)
		if !isGPU {
			continue
		}
		switch kind {
		case demand.KindMIG:
			pr, found := pi.product.Profile(profile)
			if !found {
				return nil, 0, false
			}
			perProfile[pi.index[pr.Name]] += int(q.Value())
		case demand.KindGPU:
			whole += int(q.Value())
		default:
			return nil, 0, false
		}
	}
	return perProfile, whole, true
}

// saturate keeps bulk arithmetic on pod counts inside int.
func saturate(v int64) int {
	if v > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(v)
}
