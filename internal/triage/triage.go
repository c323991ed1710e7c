// Package triage answers "why is this GPU pod not running, and what would fix it?" for one pod,
// from a cluster snapshot and the planner's report on it. It names the layer that holds the pod
// (placement, partition shape, capacity, disruption budget, not in a pool; or, for a running
// pod, the allocator), the dimension that blocks it, and a node matrix with the free capacity
// per dimension, so that a user sees the evidence and not only the verdict.
//
// It makes no client calls: the kubectl plugin reads the cluster (or a saved snapshot) and
// prints what Explain returns.
package triage

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/gpupool/gpupool/internal/pool"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/snapshot"
)

// Layer is where a pod is held.
type Layer string

// The layers, in the order a user should check them.
const (
	// LayerNotInPool: no GPUPoolPolicy's pool has a node the pod may run on; gpupool cannot help.
	LayerNotInPool Layer = "NotInPool"
	// LayerPlacement: nodes whose GPUs could host the pod lack its CPU, memory or other
	// resources; repartitioning does not fix it. On GPUs NVIDIA's DRA driver serves in
	// DynamicMIG mode, also: enough memory slices are free, but at no placement the pod's
	// profile allows (blocking "memory-slice placement", with each GPU's SliceMap).
	LayerPlacement Layer = "Placement"
	// LayerPartitionShape: capacity exists, but carved into other profiles; a plan re-carving a
	// GPU serves the pod (or, when no layout the catalog allows can, the catalog must change).
	LayerPartitionShape Layer = "PartitionShape"
	// LayerCapacity: every suitable GPU is taken by running pods or demand served first.
	LayerCapacity Layer = "Capacity"
	// LayerDisruptionBudget: serving the pod needs evictions or changes that a
	// PodDisruptionBudget, do-not-disrupt or the policy's budgets forbid now.
	LayerDisruptionBudget Layer = "DisruptionBudget"
	// LayerScheduling: the pod fits the current layouts; the scheduler or the device plugin
	// has yet to catch up.
	LayerScheduling Layer = "Scheduling"
	// LayerNotYetDemand: the planner does not count the pod yet (younger than the policy's
	// minPendingAge, scheduling gates, ...).
	LayerNotYetDemand Layer = "NotYetDemand"
	// LayerRunning: the pod runs on the device it asked for.
	LayerRunning Layer = "Running"
	// LayerAllocator: the pod runs but its containers report CUDA out-of-memory: the framework's
	// allocator, not the partitioning, is what to look at.
	LayerAllocator Layer = "Allocator"
)

// Verdict is the triage of one pod.
type Verdict struct {
	Pod   types.NamespacedName `json:"pod"`
	Phase corev1.PodPhase      `json:"phase"`
	// Asks is the pod's GPU request, e.g. "1 x nvidia.com/mig-3g.71gb".
	Asks  string `json:"asks,omitempty"`
	Layer Layer  `json:"layer"`
	// Blocking is the dimension that fails: a resource (cpu, memory, nvidia.com/mig-3g.71gb),
	// a placement rule (nodeSelector, node affinity, taint), a budget (PodDisruptionBudget
	// ml/train, maxDisruptedNodes, maxReconfiguringNodes), or the catalog.
	Blocking string `json:"blocking,omitempty"`
	// Policy is the GPUPoolPolicy whose pool the explanation comes from.
	Policy string `json:"policy,omitempty"`
	// Reason is the planner's explanation, or the triage's own for layers the planner does not see.
	Reason string `json:"reason"`
	// Plan is the live RepartitionPlan that serves the pod, if any.
	Plan *PlanRef `json:"plan,omitempty"`
	// Next says what happens next or what a user can do.
	Next string `json:"next"`
	// Nodes is the node matrix: the nodes the pod could be placed on, with each dimension.
	Nodes []NodeRow `json:"nodes,omitempty"`
	// Evidence lists what to collect, for the allocator layer.
	Evidence []string `json:"evidence,omitempty"`
	// SliceMaps are, for a claim pod on nodes NVIDIA's DRA driver serves in DynamicMIG mode,
	// each GPU's memory slices and who holds them.
	SliceMaps []SliceMap `json:"sliceMaps,omitempty"`
}

// PlanRef names a plan and where it is.
type PlanRef struct {
	Name     string             `json:"name"`
	Phase    v1alpha1.PlanPhase `json:"phase"`
	Progress string             `json:"progress,omitempty"`
	Hash     string             `json:"hash"`
}

// NodeRow is one node of the matrix: free amount and the pod's need per dimension.
type NodeRow struct {
	Node   string `json:"node"`
	Policy string `json:"policy,omitempty"`
	// Placement is "ok", or the rule the node fails (nodeSelector, affinity, taint).
	Placement string `json:"placement"`
	// Resources are the dimensions the pod asks for, GPU first.
	Resources []Dimension `json:"resources"`
	// Fits is true when every dimension has room and placement passes.
	Fits bool `json:"fits"`
}

// Dimension is one resource on one node.
type Dimension struct {
	Name string `json:"name"`
	Free string `json:"free"`
	Need string `json:"need"`
	OK   bool   `json:"ok"`
}

// Explain triages the pod named key. s is the cluster as read, rep the planner's report on it
// (s.Plan), plans the RepartitionPlans that exist.
func Explain(s *snapshot.Snapshot, rep *snapshot.Report, plans []v1alpha1.RepartitionPlan, key types.NamespacedName) (*Verdict, error) {
	i := slices.IndexFunc(s.Pods, func(p corev1.Pod) bool { return p.Namespace == key.Namespace && p.Name == key.Name })
	if i < 0 {
		return nil, fmt.Errorf("pod %s not found: check the name and namespace (-n)", key)
	}
	pod := &s.Pods[i]
	v := &Verdict{Pod: key, Phase: pod.Status.Phase, Asks: asks(s, pod)}
	if v.Asks == "" {
		return nil, fmt.Errorf("pod %s asks for no NVIDIA GPU resource (nvidia.com/gpu, nvidia.com/mig-*), so gpupool has nothing to say about it", key)
	}
	if pod.Spec.NodeName != "" {
		explainRunning(s, pod, v)
		return v, nil
	}
	explainPending(s, rep, plans, pod, v)
	return v, nil
}

// asks writes the pod's GPU requests, e.g. "1 x nvidia.com/mig-3g.71gb".
func asks(s *snapshot.Snapshot, pod *corev1.Pod) string {
	var out []string
	req, viaClaims, problem := requestsOf(s, pod)
	for _, name := range sortedNames(req) {
		if _, _, ok := demand.Classify(name); ok {
			out = append(out, fmt.Sprintf("%d x %s", demand.Quantity(req, name), name))
		}
	}
	switch {
	case len(out) > 0 && viaClaims:
		return strings.Join(out, ", ") + " (through ResourceClaims of NVIDIA's DRA driver)"
	case len(out) == 0 && problem != "":
		return "GPUs through a ResourceClaim gpupool cannot map (" + problem + ")"
	}
	return strings.Join(out, ", ")
}

// requestsOf is everything the pod needs on one node, the GPUs its ResourceClaims ask NVIDIA's
// DRA driver for included (in the device plugin's names, as the planner counts them), with
// whether any came through claims and why a claim cannot be mapped.
func requestsOf(s *snapshot.Snapshot, pod *corev1.Pod) (req corev1.ResourceList, viaClaims bool, problem string) {
	req = demand.PodRequests(pod)
	claimed, problem := demand.ClaimGPUs(pod, (&pool.Cluster{Claims: s.Claims}).ClaimLookup())
	if len(claimed) == 0 {
		return req, false, problem
	}
	req = req.DeepCopy()
	for name, q := range claimed {
		sum := req[name]
		sum.Add(q)
		req[name] = sum
	}
	return req, true, problem
}

func sortedNames(l corev1.ResourceList) []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func explainPending(s *snapshot.Snapshot, rep *snapshot.Report, plans []v1alpha1.RepartitionPlan, pod *corev1.Pod, v *Verdict) {
	key := v.Pod
	if live := servingPlan(plans, key); live != nil {
		v.Plan = live
	}
	pools := poolOf(s)
	inv := inventory.Build(s.Nodes, s.GPUNodes, s.PodPointers(), s.PDBs, inventory.Options{
		DeviceHolders: inventory.DRAHolders(s.Claims, s.Slices), DRAPublished: inventory.DRAPublished(s.Slices)})
	v.Nodes = matrix(s, inv, pod, pools)
	// DynamicMIG nodes are no pool's to plan (inventory.DynamicMIGNodes), so whether the pod
	// waits on their placements is answered from the slices whatever the policies say.
	dynamicMIG := func() bool { return explainDynamicMIG(s, pod, v) }
	if len(s.Policies) == 0 {
		if dynamicMIG() {
			return
		}
		v.Layer, v.Blocking = LayerNotInPool, "no GPUPoolPolicy"
		v.Reason = "no GPUPoolPolicy exists, so no pool plans for this pod"
		v.Next = "create a GPUPoolPolicy whose nodeSelector picks the GPU nodes this pod may use"
		return
	}
	for _, pr := range rep.Policies {
		if slices.Contains(pr.Result.FitsNow, key) {
			v.Layer, v.Policy = LayerScheduling, pr.Policy.Name
			v.Blocking = "none"
			v.Reason = "the pod fits the current layouts of pool " + pr.Policy.Name + "; nothing needs to be repartitioned"
			v.Next = "the scheduler should bind it shortly; if it stays pending, check the device plugin advertises the resources " +
				"(kubectl describe node) and the pod's FailedScheduling events"
			return
		}
		if slices.Contains(pr.Result.Served, key) {
			v.Layer, v.Policy = LayerPartitionShape, pr.Policy.Name
			v.Blocking = gpuDimension(v.Nodes)
			v.Reason = "no node of pool " + pr.Policy.Name + " has a free " + v.Blocking + " now, but re-carving MIG layouts creates one"
			v.Next = nextForServed(v.Plan, pr)
			return
		}
		for _, w := range pr.Waiting {
			if w.Pod == key {
				v.Layer, v.Policy, v.Blocking = LayerNotYetDemand, pr.Policy.Name, "minPendingAge or scheduling gates"
				v.Reason = w.Reason
				v.Next = "the planner counts the pod once the scheduler has found it unschedulable for the policy's minPendingAge"
				return
			}
		}
	}
	if dynamicMIG() {
		return
	}
	j := slices.IndexFunc(rep.Unserved, func(u snapshot.UnservedPod) bool { return u.Pod == key })
	if j < 0 {
		v.Layer, v.Blocking = LayerNotYetDemand, "not yet seen as unschedulable"
		v.Reason = "the scheduler has not reported the pod unschedulable yet, so the planner does not count it"
		v.Next = "wait for the scheduler's FailedScheduling event, then ask again"
		return
	}
	u := rep.Unserved[j]
	v.Policy, v.Reason = u.Policy, u.Message
	req, _, _ := requestsOf(s, pod)
	switch u.Reason {
	case planner.ReasonNotInPool:
		v.Layer, v.Policy = LayerNotInPool, ""
		v.Blocking = placementRule(v.Nodes)
		v.Reason = "no pool has a node this pod may run on: " + u.Message
		v.Next = "fix the pod's nodeSelector, affinity or tolerations, or extend a GPUPoolPolicy's nodeSelector to nodes it may use"
	case planner.ReasonNodePlacement:
		v.Layer = LayerPlacement
		v.Blocking = failingResource(v.Nodes, u.Policy)
		v.Next = "repartitioning cannot help: lower the pod's " + v.Blocking + " request or free " + v.Blocking + " on the nodes below"
	case planner.ReasonPartitionShape:
		v.Layer, v.Blocking = LayerPartitionShape, "catalog"
		v.Next = "no layout the policy's catalog allows serves this shape: add the profile to spec.catalog, or change the pod's request"
		// The planner names the first node's obstacle, which may be a GPU model that lacks the
		// profile altogether; the catalog entry that forbids it where it exists is the answer.
		if reason, next, ok := catalogObstacle(s, inv, v.Nodes, u.Policy, req, false); ok {
			v.Reason, v.Next = reason, next
		}
	case planner.ReasonCapacity:
		v.Layer = LayerCapacity
		v.Blocking = gpuDimension(v.Nodes)
		v.Next = "the pool is full for this shape: add nodes to the pool, or wait for running pods to finish"
		// Full only because the catalog lets no other GPU take the shape (allowWholeGPU unset,
		// a profile left out): that is the catalog's doing, and the field that changes it.
		if reason, next, ok := catalogObstacle(s, inv, v.Nodes, u.Policy, req, true); ok {
			v.Layer, v.Blocking, v.Reason, v.Next = LayerPartitionShape, "catalog", reason, next
		}
	case planner.ReasonDisruption:
		v.Layer = LayerDisruptionBudget
		v.Blocking = budgetIn(u.Message)
		v.Next = "the plan needs a disruption that " + v.Blocking + " forbids now; it is planned once that allows it"
	default:
		v.Layer = Layer(u.Reason)
	}
}

func nextForServed(live *PlanRef, pr snapshot.PolicyReport) string {
	switch {
	case live == nil:
		return "the next plan of policy " + pr.Policy.Name + " serves it (plans wait for the policy's minPendingAge and stabilization window)"
	case live.Phase == v1alpha1.PlanAwaitingApproval:
		return fmt.Sprintf("plan %s serves it and waits for approval: kubectl gpupool plan %s, then kubectl gpupool approve %s", live.Name, live.Name, live.Name)
	}
	return fmt.Sprintf("plan %s serves it and is %s (%s nodes done); the pod is scheduled once its node is uncordoned", live.Name, live.Phase, live.Progress)
}

// servingPlan is the live plan that names the pod among its expected pods.
func servingPlan(plans []v1alpha1.RepartitionPlan, key types.NamespacedName) *PlanRef {
	for i := range plans {
		p := &plans[i]
		if p.Status.Phase.Finished() {
			continue
		}
		for _, e := range p.Spec.Expected.Pods {
			if e.Namespace == key.Namespace && e.Name == key.Name {
				phase := p.Status.Phase
				if phase == "" {
					phase = v1alpha1.PlanAwaitingApproval
				}
				return &PlanRef{Name: p.Name, Phase: phase, Progress: p.Status.Progress, Hash: p.Spec.Hash}
			}
		}
	}
	return nil
}

// poolOf maps each node to the policies whose pool holds it (PoolSelector.Selector: an empty
// selector holds no node).
func poolOf(s *snapshot.Snapshot) map[string][]string {
	out := map[string][]string{}
	for i := range s.Policies {
		p := &s.Policies[i]
		sel, err := p.Spec.NodeSelector.Selector()
		if err != nil {
			continue
		}
		for j := range s.Nodes {
			if sel.Matches(labels.Set(s.Nodes[j].Labels)) {
				out[s.Nodes[j].Name] = append(out[s.Nodes[j].Name], p.Name)
			}
		}
	}
	return out
}

// matrix is one row per GPU node (a node of a pool, or one with a GPU report): placement
// and, per resource the pod asks for, free against needed.
func matrix(s *snapshot.Snapshot, inv *inventory.Snapshot, pod *corev1.Pod, pools map[string][]string) []NodeRow {
	req, _, _ := requestsOf(s, pod)
	probe := demand.Request{NodeSelector: pod.Spec.NodeSelector, Tolerations: pod.Spec.Tolerations}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		probe.RequiredAffinity = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	var rows []NodeRow
	for _, n := range inv.Nodes {
		if len(pools[n.Name]) == 0 && len(n.GPUs) == 0 {
			continue
		}
		row := NodeRow{Node: n.Name, Policy: strings.Join(pools[n.Name], ","), Placement: "ok", Fits: true}
		if ok, why := probe.Matches(n.Object); !ok {
			row.Placement, row.Fits = why, false
		}
		names := sortedNames(req)
		// GPU resources first: they are what the pod is about.
		slices.SortStableFunc(names, func(a, b corev1.ResourceName) int {
			_, _, ga := demand.Classify(a)
			_, _, gb := demand.Classify(b)
			switch {
			case ga && !gb:
				return -1
			case gb && !ga:
				return 1
			}
			return 0
		})
		for _, name := range names {
			need := demand.Quantity(req, name)
			// Every pod needs one of the node's pod slots; a full node shows in the
			// scheduler's own message, and the column would only repeat "1".
			if need <= 0 || name == corev1.ResourcePods {
				continue
			}
			free := n.Free(name)
			d := Dimension{Name: string(name), Free: amount(name, free), Need: amount(name, need), OK: free >= need}
			row.Fits = row.Fits && d.OK
			row.Resources = append(row.Resources, d)
		}
		rows = append(rows, row)
	}
	return rows
}

// amount writes a quantity in the unit a user reads: CPU in cores or millicores, memory in
// binary units, counts as they are.
func amount(name corev1.ResourceName, v int64) string {
	switch name {
	case corev1.ResourceCPU:
		return resource.NewMilliQuantity(v, resource.DecimalSI).String()
	case corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return resource.NewQuantity(v, resource.BinarySI).String()
	}
	return fmt.Sprint(v)
}

// gpuDimension is the pod's GPU resource, which no node has free (the partition shape or
// capacity dimension).
func gpuDimension(rows []NodeRow) string {
	for _, r := range rows {
		for _, d := range r.Resources {
			if _, _, ok := demand.Classify(corev1.ResourceName(d.Name)); ok {
				return d.Name
			}
		}
	}
	return "GPU resource"
}

// failingResource is the non-GPU resource that fails on the most of the policy's nodes that
// pass placement.
func failingResource(rows []NodeRow, policy string) string {
	count := map[string]int{}
	for _, r := range rows {
		if r.Placement != "ok" || (policy != "" && !slices.Contains(strings.Split(r.Policy, ","), policy)) {
			continue
		}
		for _, d := range r.Resources {
			if _, _, gpu := demand.Classify(corev1.ResourceName(d.Name)); !gpu && !d.OK {
				count[d.Name]++
			}
		}
	}
	best, most := "", 0
	for _, name := range []string{string(corev1.ResourceCPU), string(corev1.ResourceMemory)} {
		if count[name] > most {
			best, most = name, count[name]
		}
	}
	for name, n := range count {
		if n > most {
			best, most = name, n
		}
	}
	if best == "" {
		return "node resources"
	}
	return best
}

// placementRule names the kind of rule that keeps the pod off the pool nodes: the first
// failure of the first pool node, as the planner reports it.
func placementRule(rows []NodeRow) string {
	for _, r := range rows {
		if r.Policy == "" || r.Placement == "ok" {
			continue
		}
		switch {
		case strings.Contains(r.Placement, "nodeSelector"):
			return "nodeSelector"
		case strings.Contains(r.Placement, "affinity"):
			return "node affinity"
		case strings.Contains(r.Placement, "taint"):
			return "taints"
		}
		return "placement rules"
	}
	return "placement rules"
}

// budgetPatterns recognise, in the planner's disruption explanations, the rule that forbids.
var budgetPatterns = []struct {
	re   *regexp.Regexp
	name func(m []string) string
}{
	{regexp.MustCompile(`PodDisruptionBudget (\S+) allows no disruption`), func(m []string) string { return "PodDisruptionBudget " + m[1] }},
	{regexp.MustCompile(`more than one PodDisruptionBudget \(([^)]*)\)`), func(m []string) string { return "PodDisruptionBudgets " + m[1] }},
	{regexp.MustCompile(`disruption budget allows`), func([]string) string { return "maxDisruptedNodes" }},
	{regexp.MustCompile(`maxReconfiguringNodes`), func([]string) string { return "maxReconfiguringNodes" }},
	{regexp.MustCompile(`planning is paused`), func([]string) string { return "spec.planning.paused" }},
	{regexp.MustCompile(regexp.QuoteMeta(v1alpha1.AnnotationDoNotDisrupt)), func([]string) string { return v1alpha1.AnnotationDoNotDisrupt }},
}

// budgetIn names the budget a planner disruption message blames.
func budgetIn(message string) string {
	for _, p := range budgetPatterns {
		if m := p.re.FindStringSubmatch(message); m != nil {
			return p.name(m)
		}
	}
	return "the policy's disruption rules"
}
