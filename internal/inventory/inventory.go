// Package inventory turns Nodes, GPUNodes, Pods and PodDisruptionBudgets into a snapshot the
// planner can reason about: per node what is free for every resource, which GPUs it has with
// their current MIG layouts and instance placements, which pod holds which GPU, and whether
// each pod may be evicted. It makes no client calls; the controller and the offline CLI feed it
// the objects they read.
package inventory

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/podrecord"
)

// Options are the policy settings and clock that decide what Build reports.
type Options struct {
	// Now is the time the snapshot is taken at; it judges how stale an agent report is.
	Now time.Time
	// MaxReportAge is how old a GPUNode report may be before its node is not planned;
	// zero disables the check (offline what-if on a saved snapshot).
	MaxReportAge time.Duration
	// Heartbeats are, per node name, when its agent was last known alive: its heartbeat Lease's
	// last renewal, or its pod's readiness (ReadinessHeartbeats). An agent with either writes
	// its report only when the GPUs change, so the report is as old as the last change and the
	// heartbeat says whether the agent still stands by it: a report's age is judged from the
	// later of its observedTime and the node's heartbeat.
	Heartbeats map[string]time.Time
	// EvictEmptyDir allows evicting pods with emptyDir volumes.
	EvictEmptyDir bool
	// EvictUnmanaged allows evicting pods that no controller recreates.
	EvictUnmanaged bool
	// DrainTimeout is the policy's drainTimeout (EvictionRules.DrainTimeout); zero checks nothing.
	DrainTimeout time.Duration
	// DeviceHolders are the devices NVIDIA's DRA driver allocated, by UUID (DRAHolders): such
	// an instance or GPU is busy, held by its claim's pod, whatever the agent attributed.
	DeviceHolders map[string]DeviceHolder
	// DynamicMIGNodes are the nodes where NVIDIA's DRA driver carves MIG instances itself
	// (DynamicMIGNodes): the planner must leave them alone.
	DynamicMIGNodes map[string]bool
	// DRAPublished are, per node, the MIG devices NVIDIA's DRA driver publishes (DRAPublished);
	// a node whose slices disagree with its report gets Node.DRAStale.
	DRAPublished map[string]map[string]bool
}

// Snapshot is the state of the GPU nodes at one moment.
type Snapshot struct {
	// Nodes sorted by name.
	Nodes []*Node
	// DisruptionsAllowed is, per PodDisruptionBudget ("namespace/name"), how many of its pods
	// may be evicted now.
	DisruptionsAllowed map[string]int32
}

// Node is one node as the planner sees it.
type Node struct {
	// Name of the node.
	Name string
	// Object is the Node itself, for label, affinity and taint matching.
	Object *corev1.Node
	// Allocatable is what the scheduler may hand out on the node.
	Allocatable corev1.ResourceList
	// Requested is what the pods bound to the node request, counted as the scheduler does.
	Requested corev1.ResourceList
	// GPUs on the node, by index, from the agent's GPUNode report.
	GPUs []*GPU
	// Pods bound to the node and not finished, sorted by namespace/name.
	Pods []*Pod
	// Blocker says why the planner must leave the node alone; empty when it may plan it.
	Blocker string
	// DRAStale says how the MIG devices NVIDIA's DRA driver publishes for the node differ from
	// what NVML reports (its kubelet plugin has not restarted since a re-carve); "" when they
	// agree or the driver is not there.
	DRAStale string
	// DRA is true when NVIDIA's DRA driver publishes the node's GPUs (ResourceSlices of
	// gpu.nvidia.com for its pool): pods asking through claims can run there, pods asking the
	// device plugin cannot.
	DRA bool
	// Unreported is true when the Blocker is the agent's report: missing, NVML not ready, or
	// older than MaxReportAge. Such nodes are counted in the pool's status, so that a pool whose
	// agents fall silent says so instead of planning a shrinking set of nodes in silence.
	Unreported bool
}

// GPU is one GPU and what runs on it.
type GPU struct {
	// Index as NVML numbers it.
	Index int
	// Product is its MIG geometry; nil when neither the built-in table nor the agent's report
	// describes it.
	Product *mig.Product
	// ProductName as reported.
	ProductName string
	// MIGEnabled is the current MIG mode.
	MIGEnabled bool
	// Instances are the GPU instances, sorted by placement.
	Instances []Instance
	// Pods holding the whole GPU or any of its instances, sorted.
	Pods []types.NamespacedName
	// Error is set when the agent could not read this GPU; such a GPU is never changed.
	Error string
	// TableDiff says where the agent's NVML profile table disagrees with the built-in one for
	// the product (mig.TableDiff, joined); "" when they agree or the agent sent none. Product
	// is the agent's table either way: the device is the authority.
	TableDiff string
	// NoBuiltinTable is set when the agent reported a profile table for a product the
	// built-in table lacks, which is then planned from the report alone.
	NoBuiltinTable bool
	// DRAHeld says why a ResourceClaim holds the GPU although no instance or pod the agent
	// reports shows it: a whole GPU allocated to a claim whose pod has not started, or a
	// device allocated on the GPU that the report does not list (a slice of an older
	// generation, an instance since replaced). Such a GPU is busy and never changed; "" when
	// no claim holds it that way.
	DRAHeld string
}

// Instance is a GPU instance at its real placement.
type Instance struct {
	mig.Instance
	// Pod holding the instance, if any.
	Pod *types.NamespacedName
	// Busy is true when a pod or a process uses it.
	Busy bool
}

// Pod is a pod bound to a node.
type Pod struct {
	// Key is namespace/name.
	Key types.NamespacedName
	// UID of the pod, recorded in a plan's evictions.
	UID types.UID
	// Requests as the scheduler counts them.
	Requests corev1.ResourceList
	// Priority of the pod.
	Priority int32
	// Evictable is true when gpupool may evict the pod.
	Evictable bool
	// Blocker says why the pod may not be evicted; empty when it may.
	Blocker string
	// PDBs covering the pod ("namespace/name"); each eviction spends one of their budgets.
	PDBs []string
	// NodeLocal is true for DaemonSet and static (mirror) pods: they belong to the node, a
	// drain leaves them (kubectl drain ignores them too) and they come back with the node after
	// a reboot. Every other pod dies with the node if mig-manager reboots it (see the planner's
	// Input.MIGManagerReboot).
	NodeLocal bool
	// NodeSelector, RequiredAffinity and Tolerations are the pod's placement rules: the
	// replacement its controller makes from the same template lands only where they hold.
	NodeSelector     map[string]string
	RequiredAffinity *corev1.NodeSelector
	Tolerations      []corev1.Toleration
}

// MayRunOn says whether the pod's placement rules let its replacement run on node (resources
// aside), as demand.Request.Matches judges a pending pod.
func (p *Pod) MayRunOn(node *corev1.Node) bool {
	ok, _ := demand.Request{NodeSelector: p.NodeSelector, RequiredAffinity: p.RequiredAffinity, Tolerations: p.Tolerations}.Matches(node)
	return ok
}

// Layout is the GPU's current multiset of MIG profiles; empty when MIG is off.
func (g *GPU) Layout() mig.Layout {
	l := mig.Layout{}
	for _, in := range g.Instances {
		l[in.Profile]++
	}
	return l
}

// Busy reports whether any pod, process or DRA claim uses the GPU.
func (g *GPU) Busy() bool {
	if len(g.Pods) > 0 || g.DRAHeld != "" {
		return true
	}
	for _, in := range g.Instances {
		if in.Busy {
			return true
		}
	}
	return false
}

// FreeInstances counts, per profile, the instances no pod or process uses.
func (g *GPU) FreeInstances() map[string]int {
	free := map[string]int{}
	for _, in := range g.Instances {
		if !in.Busy && in.Pod == nil {
			free[in.Profile]++
		}
	}
	return free
}

// Pod returns the node's pod with that key, or nil.
func (n *Node) Pod(key types.NamespacedName) *Pod {
	i, found := slices.BinarySearchFunc(n.Pods, key, func(p *Pod, k types.NamespacedName) int {
		return cmp.Or(cmp.Compare(p.Key.Namespace, k.Namespace), cmp.Compare(p.Key.Name, k.Name))
	})
	if !found {
		return nil
	}
	return n.Pods[i]
}

// Free is allocatable minus requested for one resource, never negative.
func (n *Node) Free(name corev1.ResourceName) int64 {
	return max(0, demand.Quantity(n.Allocatable, name)-demand.Quantity(n.Requested, name))
}

// Build assembles a snapshot. Nodes without the agent's report, with a stale report, or with
// GPU pods the agent has not attributed to a device are included with a Blocker, so that the
// planner can say why it does not touch them.
func Build(nodes []corev1.Node, gpuNodes []v1alpha1.GPUNode, pods []*corev1.Pod,
	pdbs []policyv1.PodDisruptionBudget, opts Options) *Snapshot {
	return BuildFromRecords(nodes, gpuNodes, podrecord.FromPods(pods), pdbs, opts)
}

// BuildFromRecords is Build over pods as the manager's informer keeps them.
func BuildFromRecords(nodes []corev1.Node, gpuNodes []v1alpha1.GPUNode, pods []*podrecord.Record,
	pdbs []policyv1.PodDisruptionBudget, opts Options) *Snapshot {
	reports := make(map[string]*v1alpha1.GPUNode, len(gpuNodes))
	for i := range gpuNodes {
		reports[gpuNodes[i].Name] = &gpuNodes[i]
	}
	budgets := newBudgets(pdbs)
	podsByNode := map[string][]*podrecord.Record{}
	for _, p := range pods {
		if !p.Bound() {
			continue
		}
		podsByNode[p.NodeName] = append(podsByNode[p.NodeName], p)
	}
	products := productCache{}
	// Pods holding a device NVIDIA's DRA driver allocated: their claims, not their requests,
	// say what they need, so the planner could neither re-land them nor count them right.
	claimHolders := map[types.NamespacedName]bool{}
	// The devices claims hold, by the UUID of their GPU: one the agent does not report there
	// still makes the GPU busy.
	heldOn := map[string][]string{}
	for uuid, h := range opts.DeviceHolders {
		for _, p := range h.Pods {
			claimHolders[p] = true
		}
		if h.GPU != "" {
			heldOn[h.GPU] = append(heldOn[h.GPU], uuid)
		}
	}

	snap := &Snapshot{DisruptionsAllowed: budgets.allowed}
	for i := range nodes {
		obj := nodes[i].DeepCopy()
		n := &Node{
			Name:        obj.Name,
			Object:      obj,
			Allocatable: obj.Status.Allocatable.DeepCopy(),
			Requested:   corev1.ResourceList{},
		}
		for _, p := range podsByNode[n.Name] {
			pod := newPod(p, budgets, opts)
			if pod.Evictable && claimHolders[pod.Key] {
				pod.Blocker, pod.Evictable = draHolderBlocker, false
			}
			addTo(n.Requested, pod.Requests)
			n.Pods = append(n.Pods, pod)
		}
		slices.SortFunc(n.Pods, func(a, b *Pod) int {
			return cmp.Or(cmp.Compare(a.Key.Namespace, b.Key.Namespace), cmp.Compare(a.Key.Name, b.Key.Name))
		})
		n.GPUs, n.Blocker = gpusOf(obj, reports[n.Name], products, opts, heldOn)
		n.DRAStale = DRAStale(reports[n.Name], opts.DRAPublished[n.Name])
		_, n.DRA = opts.DRAPublished[n.Name]
		n.Unreported = n.Blocker != ""
		if n.Blocker == "" && opts.DynamicMIGNodes[n.Name] {
			n.Blocker = dynamicMIGBlocker
		}
		if n.Blocker == "" {
			n.Blocker = unattributedGPUPods(n)
		}
		snap.Nodes = append(snap.Nodes, n)
	}
	slices.SortFunc(snap.Nodes, func(a, b *Node) int { return cmp.Compare(a.Name, b.Name) })
	return snap
}

// gpusOf reads the agent's report of one node.
func gpusOf(node *corev1.Node, report *v1alpha1.GPUNode, products productCache, opts Options, heldOn map[string][]string) ([]*GPU, string) {
	if report == nil {
		return nil, "no GPUNode report: is the gpupool agent running on this node?"
	}
	if !meta.IsStatusConditionTrue(report.Status.Conditions, v1alpha1.ConditionNVMLReady) {
		msg := "the agent cannot read NVML"
		if c := meta.FindStatusCondition(report.Status.Conditions, v1alpha1.ConditionNVMLReady); c != nil && c.Message != "" {
			msg += ": " + c.Message
		}
		return nil, msg
	}
	if why := Stale(report, opts.Heartbeats, opts.Now, opts.MaxReportAge); why != "" {
		return nil, why
	}
	return readGPUs(node, report, products, opts.DeviceHolders, heldOn), ""
}

// MaxClockSkew is how far ahead of the manager's clock a report's or heartbeat's time may be
// and still be believed: nodes' clocks drift a little, never minutes when they are kept.
const MaxClockSkew = time.Minute

// Stale says why the report is too old to plan with at now: neither its observedTime nor its
// node's heartbeat (heartbeats, by node name) is within maxAge. "" when it is fresh, or when
// maxAge is zero (offline what-if on a saved snapshot keeps every report).
func Stale(report *v1alpha1.GPUNode, heartbeats map[string]time.Time, now time.Time, maxAge time.Duration) string {
	if maxAge <= 0 {
		return ""
	}
	if report.Status.ObservedTime == nil {
		return "the GPUNode report has no observedTime"
	}
	// A time ahead of the manager's clock by more than a node's clock may drift would keep a
	// report fresh for as long as it lies: such a time is not believed.
	credible := func(t time.Time) bool { return !t.After(now.Add(MaxClockSkew)) }
	seen, what := report.Status.ObservedTime.Time, "GPUNode report"
	if beat, ok := heartbeats[report.Name]; ok && credible(beat) && (beat.After(seen) || !credible(seen)) {
		seen, what = beat, "agent's last heartbeat"
	}
	if !credible(seen) {
		return fmt.Sprintf("the %s is dated %s in the future (more than %s ahead of the manager's clock): check the node's clock",
			what, seen.Sub(now).Round(time.Second), MaxClockSkew)
	}
	if age := now.Sub(seen); age > maxAge {
		return fmt.Sprintf("the %s is %s old (limit %s): is the agent healthy?", what, age.Round(time.Second), maxAge)
	}
	return ""
}

// NodeTarget is a node's complete target layout for a plan's step: the step's new layouts for
// the GPUs it changes, and for the others their layout as the agent reports it, read as the
// planner reads it (profile names as the product table spells them). The executor writes it as
// the node's mig-parted entry, and checks it against the name the step carries.
func NodeTarget(node *corev1.Node, report *v1alpha1.GPUNode, changes []v1alpha1.GPUChange) []mig.GPUTarget {
	var out []mig.GPUTarget
	for _, g := range readGPUs(node, report, productCache{}, nil, nil) {
		t := mig.GPUTarget{Index: g.Index, MIGEnabled: g.MIGEnabled, Layout: g.Layout()}
		if i := slices.IndexFunc(changes, func(c v1alpha1.GPUChange) bool { return int(c.Index) == g.Index }); i >= 0 {
			t.Layout = mig.LayoutOf(changes[i].To)
			t.MIGEnabled = len(changes[i].To) > 0
		}
		out = append(out, t)
	}
	return out
}

// readGPUs turns the agent's report of a node into GPUs, in index order. heldOn lists, by GPU
// UUID, the devices claims hold on it (holders' keys).
func readGPUs(node *corev1.Node, report *v1alpha1.GPUNode, products productCache, holders map[string]DeviceHolder,
	heldOn map[string][]string) []*GPU {
	gpus := make([]*GPU, 0, len(report.Status.GPUs))
	for _, s := range report.Status.GPUs {
		g := &GPU{Index: int(s.Index), ProductName: s.Product, Error: s.Error}
		if len(s.Instances) > 0 {
			g.Instances = make([]Instance, 0, len(s.Instances))
		}
		if g.ProductName == "" {
			g.ProductName = node.Labels[nvidia.LabelGPUProduct]
		}
		t := products.get(g.ProductName, s.Profiles)
		g.Product, g.TableDiff, g.NoBuiltinTable = t.product, t.diff, t.noBuiltin
		g.MIGEnabled = s.MIGMode != nil && s.MIGMode.Current == "Enabled"
		for _, in := range s.Instances {
			inst := Instance{
				Instance: mig.Instance{Profile: in.Profile, Placement: mig.Placement{
					Start: int(in.Placement.Start), Size: int(in.Placement.Size)}},
				Busy: in.Busy || in.Pod != nil,
			}
			if g.Product != nil {
				if pr, ok := g.Product.Profile(in.Profile); ok {
					inst.Profile = pr.Name
				}
			}
			if in.Pod != nil {
				key := types.NamespacedName{Namespace: in.Pod.Namespace, Name: in.Pod.Name}
				inst.Pod = &key
				g.Pods = append(g.Pods, key)
			} else if h, ok := holders[in.UUID]; ok {
				inst.Busy = true
				if len(h.Pods) > 0 {
					// A shared claim's first pod stands for the instance; every one of its
					// pods holds the GPU, so changing it would have to evict them all.
					inst.Pod = &h.Pods[0]
					g.Pods = append(g.Pods, h.Pods...)
				}
			}
			g.Instances = append(g.Instances, inst)
		}
		for _, p := range s.Pods {
			g.Pods = append(g.Pods, types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
		}
		if h, ok := holders[s.UUID]; ok {
			g.Pods = append(g.Pods, h.Pods...) // a whole GPU the DRA driver allocated
		}
		g.DRAHeld = draHeld(s, holders, heldOn[s.UUID])
		slices.SortFunc(g.Instances, func(a, b Instance) int {
			return cmp.Or(cmp.Compare(a.Placement.Start, b.Placement.Start), cmp.Compare(a.Profile, b.Profile))
		})
		slices.SortFunc(g.Pods, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
		g.Pods = slices.Compact(g.Pods)
		gpus = append(gpus, g)
	}
	slices.SortFunc(gpus, func(a, b *GPU) int { return cmp.Compare(a.Index, b.Index) })
	return gpus
}

// draHeld says why claims hold GPU s in ways its instances and pods do not show ("" when
// none does): the whole GPU allocated with no pod yet, or a device on it that the agent does
// not report.
func draHeld(s v1alpha1.GPUStatus, holders map[string]DeviceHolder, held []string) string {
	if s.UUID == "" || len(held) == 0 {
		return ""
	}
	reported := map[string]bool{}
	for _, in := range s.Instances {
		if in.UUID != "" {
			reported[in.UUID] = true
		}
	}
	var why []string
	for _, uuid := range held {
		h := holders[uuid]
		switch {
		case uuid == s.UUID && len(h.Pods) > 0:
			// The holder is among the GPU's pods.
		case uuid == s.UUID:
			why = append(why, fmt.Sprintf("ResourceClaim %s holds the whole GPU and its pod has not started", h.Claim))
		case !reported[uuid]:
			why = append(why, fmt.Sprintf("ResourceClaim %s holds device %s, which the agent does not report on it "+
				"(a ResourceSlice of an older generation, or an instance since replaced)", h.Claim, uuid))
		}
	}
	slices.Sort(why)
	return strings.Join(slices.Compact(why), "; ")
}

// unattributedGPUPods blocks a node whose pods hold GPU resources the agent has not tied to a
// device: the planner cannot know which GPU they would lose, so it changes none.
func unattributedGPUPods(n *Node) string {
	attributed := map[types.NamespacedName]bool{}
	for _, g := range n.GPUs {
		for _, p := range g.Pods {
			attributed[p] = true
		}
	}
	var missing []string
	for _, p := range n.Pods {
		if attributed[p.Key] {
			continue
		}
		for name, q := range p.Requests {
			// A pod asking for zero devices holds none, so the agent never attributes it.
			if _, _, ok := demand.Classify(name); ok && q.Sign() > 0 {
				missing = append(missing, p.Key.String())
				break
			}
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("the agent has not yet reported which GPU %s uses", strings.Join(missing, ", "))
}

func newPod(p *podrecord.Record, budgets *budgets, opts Options) *Pod {
	pod := &Pod{
		Key:              types.NamespacedName{Namespace: p.Namespace, Name: p.Name},
		UID:              p.UID,
		Requests:         p.Requests,
		Priority:         p.Priority,
		NodeLocal:        p.Mirror || p.Controller == "DaemonSet",
		NodeSelector:     p.NodeSelector,
		RequiredAffinity: p.RequiredAffinity,
		Tolerations:      p.Tolerations,
	}
	pod.PDBs = budgets.covering(p)
	pod.Blocker = evictionBlocker(p, pod.PDBs, budgets, opts)
	pod.Evictable = pod.Blocker == ""
	return pod
}

// evictionBlocker says why gpupool must not evict the pod, following kubectl drain's defaults
// and gpupool's do-not-disrupt annotation.
func evictionBlocker(p *podrecord.Record, pdbs []string, budgets *budgets, opts Options) string {
	// In kubectl drain's order: do-not-disrupt and mirror pods are named as such even while
	// they terminate.
	if p.DeletionTimestamp != nil && !p.Mirror && !p.DoNotDisrupt {
		return "already terminating"
	}
	if why := SafetyBlocker(p, EvictionRules{EvictEmptyDir: opts.EvictEmptyDir, EvictUnmanaged: opts.EvictUnmanaged,
		DrainTimeout: opts.DrainTimeout}); why != "" {
		return why
	}
	// The Eviction API refuses a pod that more than one budget covers, whatever they allow.
	if len(pdbs) > 1 {
		return "covered by more than one PodDisruptionBudget (" + strings.Join(pdbs, ", ") + "), which the Eviction API refuses"
	}
	for _, key := range pdbs {
		if budgets.allowed[key] <= 0 {
			return "PodDisruptionBudget " + key + " allows no disruption now"
		}
	}
	return ""
}

// budgets indexes PodDisruptionBudgets by namespace.
type budgets struct {
	allowed     map[string]int32
	byNamespace map[string][]pdbSelector
}

type pdbSelector struct {
	key      string
	selector labels.Selector
}

func newBudgets(pdbs []policyv1.PodDisruptionBudget) *budgets {
	b := &budgets{allowed: map[string]int32{}, byNamespace: map[string][]pdbSelector{}}
	for i := range pdbs {
		pdb := &pdbs[i]
		key := pdb.Namespace + "/" + pdb.Name
		// A nil selector selects no pod in policy/v1; an unreadable one protects nothing in the
		// API server either.
		if pdb.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			continue
		}
		// A PDB whose status the disruption controller has not computed yet allows nothing.
		allowed := pdb.Status.DisruptionsAllowed
		if pdb.Status.ObservedGeneration < pdb.Generation {
			allowed = 0
		}
		b.allowed[key] = allowed
		b.byNamespace[pdb.Namespace] = append(b.byNamespace[pdb.Namespace], pdbSelector{key: key, selector: sel})
	}
	return b
}

func (b *budgets) covering(p *podrecord.Record) []string {
	var keys []string
	set := labels.Set(p.Labels)
	for _, s := range b.byNamespace[p.Namespace] {
		if s.selector.Matches(set) {
			keys = append(keys, s.key)
		}
	}
	slices.Sort(keys)
	return keys
}

// productCache shares one compiled Product among GPUs that report the same profile table, so
// a 5,000-node snapshot compiles a handful of products, not 40,000; GPUs of one table also
// share its comparison with the built-in table.
type productCache map[string]table

// table is one product's geometry as gpupool plans with it, and how it compares with the
// built-in table.
type table struct {
	product   *mig.Product
	diff      string
	noBuiltin bool
}

func (c productCache) get(name string, reported []v1alpha1.GPUInstanceProfile) table {
	builtin, _ := mig.LookupProduct(name)
	if len(reported) == 0 {
		return table{product: builtin}
	}
	var b strings.Builder
	b.WriteString(name)
	for _, p := range reported {
		fmt.Fprintf(&b, "|%d:%s:%d:%d:%d", p.ID, p.Name, p.MemoryMiB, p.Slices, p.MaxCount)
		for _, pl := range p.Placements {
			fmt.Fprintf(&b, ",%d+%d", pl.Start, pl.Size)
		}
	}
	key := b.String()
	if t, ok := c[key]; ok {
		return t
	}
	t := table{product: fromReport(name, builtin, reported)}
	t.noBuiltin = builtin == nil && t.product != nil
	if t.product != builtin {
		t.diff = strings.Join(mig.TableDiff(builtin, t.product), "; ")
	}
	c[key] = t
	return t
}

// fromReport builds the geometry the agent read through NVML; it overrides the built-in table
// because drivers rename profiles and NVML is the authority on placements. A report the
// geometry code rejects falls back to the built-in table.
func fromReport(name string, builtin *mig.Product, reported []v1alpha1.GPUInstanceProfile) *mig.Product {
	memSlices, computeSlices := 0, 0
	profiles := make([]mig.Profile, 0, len(reported))
	for _, r := range reported {
		pr := mig.Profile{ID: int(r.ID), Name: r.Name, ComputeSlices: int(r.Slices),
			MemoryMiB: int(r.MemoryMiB), MaxCount: int(r.MaxCount)}
		for _, pl := range r.Placements {
			pr.Placements = append(pr.Placements, mig.Placement{Start: int(pl.Start), Size: int(pl.Size)})
			memSlices = max(memSlices, int(pl.Start+pl.Size))
		}
		computeSlices = max(computeSlices, int(r.Slices))
		if builtin != nil {
			if b, ok := builtin.ProfileByID(pr.ID, memSlicesOf(pr)); ok {
				pr.Aliases = append([]string{b.Name}, b.Aliases...)
			}
		}
		profiles = append(profiles, pr)
	}
	productName := name
	if builtin != nil {
		productName = builtin.Name
		memSlices, computeSlices = builtin.MemorySlices, builtin.ComputeSlices
	}
	p, err := mig.NewProductFromProfiles(productName, memSlices, computeSlices, profiles)
	if err != nil {
		return builtin
	}
	return p
}

func memSlicesOf(p mig.Profile) int {
	if len(p.Placements) == 0 {
		return 0
	}
	return p.Placements[0].Size
}

func addTo(sum, add corev1.ResourceList) {
	for name, q := range add {
		cur := sum[name]
		cur.Add(q)
		sum[name] = cur
	}
}

// EvictionRules are a policy's choices about which pods may be evicted at all.
type EvictionRules struct {
	// EvictEmptyDir allows evicting pods with emptyDir or generic ephemeral volumes (their data
	// is lost).
	EvictEmptyDir bool
	// EvictUnmanaged allows evicting pods that no controller recreates (they are lost).
	EvictUnmanaged bool
	// DrainTimeout is the policy's drainTimeout, defaults applied; zero checks nothing (an
	// offline what-if). A pod whose grace period is not shorter is never evicted: the step
	// would time out with the pod still terminating, its GPUs neither free nor given back.
	DrainTimeout time.Duration
}

// recreatingControllers are the controllers known to replace a pod of theirs that is evicted,
// by API group and kind. A controller ownerReference says who owns a pod, not that the owner
// makes another: any object may be a pod's controller (a ConfigMap, a Node, a custom
// resource), and some custom controllers never replace a pod (Spark's executors are
// controlled by their driver pod; a workflow's step pods are retried only by its own policy).
// kubectl drain counts any controller ownerReference as managed (k8s.io/kubectl
// pkg/drain/filters.go, unreplicatedFilter), and the Eviction API looks at no owner at all,
// only at PodDisruptionBudgets. gpupool is stricter, because a pod lost to an eviction is lost
// for good: only these built-in kinds count as managed, and a pod of any other controller is
// evicted only under evictUnmanaged, whose user vouches for it. Each replaces a pod deleted
// before it is done (kubernetes pkg/controller/replicaset, statefulset and job); a Job's
// replacement counts against its backoffLimit, or ends the Job where its podFailurePolicy says
// so for a disruption, which is the Job's author's choice. DaemonSet pods are never evicted.
var recreatingControllers = map[schema.GroupKind]bool{
	{Group: "apps", Kind: "ReplicaSet"}:        true,
	{Group: "apps", Kind: "StatefulSet"}:       true,
	{Group: "batch", Kind: "Job"}:              true,
	{Group: "", Kind: "ReplicationController"}: true,
}

// RecreatesPods reports whether a pod's controller, by API group and kind, is known to replace
// a pod of its that is evicted (recreatingControllers).
func RecreatesPods(group, kind string) bool {
	return recreatingControllers[schema.GroupKind{Group: group, Kind: kind}]
}

// SafetyBlocker says why evicting the pod is never safe under the rules, whatever its
// PodDisruptionBudgets allow; "" when it may be evicted. The planner uses it to choose pods and
// the plan controller uses it again just before evicting, so a pod that became unsafe since
// planning (or that a forged plan names) is never evicted. The rules follow kubectl drain's
// defaults (mirror and DaemonSet pods, unmanaged pods, emptyDir data), stricter where a pod
// would be lost (only controllers known to recreate pods manage them; generic ephemeral
// volumes lose their data as emptyDir does), and gpupool's do-not-disrupt annotation. PodSafetyBlocker is the same for a whole Pod.
func SafetyBlocker(p *podrecord.Record, rules EvictionRules) string {
	switch {
	case p.DoNotDisrupt:
		return "annotated " + v1alpha1.AnnotationDoNotDisrupt
	case p.Mirror:
		return "a static (mirror) pod"
	case p.Controller == "DaemonSet":
		return "a DaemonSet pod"
	case p.Controller == "" && !rules.EvictUnmanaged:
		return "not managed by a controller, so nothing would recreate it (policy evictUnmanaged is false)"
	case !RecreatesPods(p.ControllerGroup, p.Controller) && !rules.EvictUnmanaged:
		return fmt.Sprintf("controlled by %s, which gpupool does not know to recreate its pods, so eviction may lose it "+
			"(policy evictUnmanaged is false; set it if that controller recreates them)", schema.GroupKind{Group: p.ControllerGroup, Kind: p.Controller})
	case p.EmptyDirVolume != "" && !rules.EvictEmptyDir:
		return fmt.Sprintf("uses emptyDir volume %q whose data eviction would lose (policy evictEmptyDir is false)", p.EmptyDirVolume)
	case p.EphemeralVolume != "" && !rules.EvictEmptyDir:
		// kubectl drain checks emptyDir only (k8s.io/kubectl pkg/drain/filters.go
		// hasLocalStorage), but a generic ephemeral volume's claim is deleted with its pod
		// (podrecord.Record.EphemeralVolume): the data is as lost as an emptyDir's.
		return fmt.Sprintf("uses generic ephemeral volume %q, whose PersistentVolumeClaim is deleted with the pod, so eviction "+
			"would lose its data (policy evictEmptyDir is false)", p.EphemeralVolume)
	case rules.DrainTimeout > 0 && p.GracePeriod >= rules.DrainTimeout:
		// Refused rather than evicted with a shorter grace period: the pod asked for that
		// long to shut down (a checkpoint, a drained connection), and cutting it short could
		// lose what eviction promises to keep. The kubelet may use the whole grace period, so
		// the step, whose drain must end within drainTimeout, would time out after evicting.
		return fmt.Sprintf("its terminationGracePeriodSeconds (%s) is not shorter than the policy's drainTimeout (%s), so the "+
			"step would time out with the pod still terminating (raise spec.disruption.drainTimeout above it)", p.GracePeriod, rules.DrainTimeout)
	}
	return ""
}

// PodSafetyBlocker is SafetyBlocker for a pod read whole, as the drain reads it before evicting.
func PodSafetyBlocker(p *corev1.Pod, rules EvictionRules) string {
	return SafetyBlocker(podrecord.New(p, nil), rules)
}
