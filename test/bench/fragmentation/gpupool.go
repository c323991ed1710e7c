package fragmentation

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/planner"
)

// namespace is where every simulated pod lives.
const namespace = "trace"

// epoch anchors trace seconds to the planner's clock.
var epoch = time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)

// gpupoolPlanner feeds the simulated cluster to planner.Plan, building the snapshot as
// inventory.Build would from the API objects but straight from the sim's state, because a
// replay makes thousands of calls.
type gpupoolPlanner struct {
	s      *sim
	policy *v1alpha1.GPUPoolPolicy
	objs   []*corev1.Node
	alloc  []corev1.ResourceList
	keys   []types.NamespacedName
	reqs   []corev1.ResourceList
	gpuReq [][]demand.GPURequest
	byName map[string]int32
}

// Policy is the policy the benchmark gives gpupool: the MIG profiles the trace's pods are
// mapped to (those the counts-only planner carves too), whole GPUs allowed, the given approval,
// maxDisruptedNodes budget (nodes with evictions) and maxReconfiguringNodes (nodes that only
// re-carve idle GPUs; "" leaves it unset, so the API default applies, as on a policy that does
// not name it), no minimum pending age. Both planners choose among the same profiles; with
// 1g.20gb also listed the results are the same (checked when the planner's leftover count
// learned about uncarved compute slices).
func Policy(product *mig.Product, profiles []string, approval v1alpha1.ApprovalMode, budget, reconfigure string) *v1alpha1.GPUPoolPolicy {
	entry := v1alpha1.CatalogEntry{Product: product.Name, AllowWholeGPU: true}
	for _, pr := range product.Profiles {
		if slices.Contains(profiles, pr.Name) {
			entry.MIGProfiles = append(entry.MIGProfiles, v1alpha1.MIGProfileName(pr.Name))
		}
	}
	b := intstr.Parse(budget)
	var reconf *intstr.IntOrString
	if reconfigure != "" {
		r := intstr.Parse(reconfigure)
		reconf = &r
	}
	return &v1alpha1.GPUPoolPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: v1alpha1.GPUPoolPolicySpec{
			NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{"pool": "bench"}},
			Catalog:      []v1alpha1.CatalogEntry{entry},
			Disruption:   v1alpha1.DisruptionPolicy{Approval: approval, MaxDisruptedNodes: &b, MaxReconfiguringNodes: reconf},
			Planning:     v1alpha1.PlanningPolicy{MinPendingAge: &metav1.Duration{}},
		},
	}
}

func newGpupoolPlanner(s *sim) *gpupoolPlanner {
	approval := v1alpha1.ApprovalAuto
	if s.cfg.Strategy.autoIdle() {
		approval = v1alpha1.ApprovalAutoIdle
	}
	gp := &gpupoolPlanner{s: s, policy: Policy(s.cfg.Product, slices.Collect(maps.Values(s.profile)), approval,
		s.cfg.Strategy.BudgetFor(s.cfg.Budget), s.cfg.Strategy.ReconfigureFor(s.cfg.Reconfigure)), byName: map[string]int32{}}
	if s.cfg.Strategy == GpupoolShare {
		gp.policy.Spec.Catalog[0].Sharing = &v1alpha1.SharingCatalog{
			MPS: &v1alpha1.MPSReplicaChoices{Replicas: []int32{sharedReplicas}}}
	}
	for _, n := range s.nodes {
		alloc := corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(n.spec.CPU, resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(n.spec.MemMiB<<20, resource.BinarySI),
			corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
		}
		gp.alloc = append(gp.alloc, alloc)
		gp.objs = append(gp.objs, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.spec.Name, Labels: map[string]string{
				"pool": "bench", nvidia.LabelGPUProduct: s.cfg.Product.Name, "kubernetes.io/hostname": n.spec.Name}},
			Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc},
		})
	}
	for i, p := range s.pods {
		key := types.NamespacedName{Namespace: namespace, Name: p.Name}
		gp.keys = append(gp.keys, key)
		gp.byName[p.Name] = int32(i)
		var g demand.GPURequest
		switch {
		case s.sharedShape(p.Shape):
			g = demand.GPURequest{Resource: demand.ResourceSharedGPU, Kind: demand.KindShared, Count: 1}
		case s.cfg.Strategy == GpupoolShare && p.Shape.Whole == 0:
			g = demand.GPURequest{Resource: demand.ResourceGPU, Kind: demand.KindGPU, Count: 1}
		case p.Shape.Whole > 0:
			g = demand.GPURequest{Resource: demand.ResourceGPU, Kind: demand.KindGPU, Count: int64(p.Shape.Whole)}
		default:
			prof := s.profile[p.Shape.Slices]
			g = demand.GPURequest{Resource: corev1.ResourceName(mig.ResourceName(prof)), Kind: demand.KindMIG, Profile: prof, Count: 1}
		}
		gp.gpuReq = append(gp.gpuReq, []demand.GPURequest{g})
		gp.reqs = append(gp.reqs, corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(p.CPU, resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(p.MemMiB<<20, resource.BinarySI),
			corev1.ResourcePods:   *resource.NewQuantity(1, resource.DecimalSI),
			g.Resource:            *resource.NewQuantity(g.Count, resource.DecimalSI),
		})
	}
	return gp
}

func compareKeys(a, b types.NamespacedName) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// snapshot builds what inventory.Build would report for the sim's cluster now.
func (gp *gpupoolPlanner) snapshot() *inventory.Snapshot {
	s := gp.s
	snap := &inventory.Snapshot{DisruptionsAllowed: map[string]int32{}}
	for ni, n := range s.nodes {
		node := &inventory.Node{Name: n.spec.Name, Object: gp.objs[ni], Allocatable: gp.alloc[ni]}
		if shared := n.sharedReplicas(); shared > 0 {
			// The device plugin advertises the replicas of a shared node.
			node.Allocatable = gp.alloc[ni].DeepCopy()
			node.Allocatable[demand.ResourceSharedGPU] = *resource.NewQuantity(int64(shared), resource.DecimalSI)
		}
		var cpu, mem int64
		reqGPU := map[corev1.ResourceName]int64{}
		for _, p := range n.running {
			cpu += s.pods[p].CPU
			mem += s.pods[p].MemMiB
			g := gp.gpuReq[p][0]
			reqGPU[g.Resource] += g.Count
			node.Pods = append(node.Pods, &inventory.Pod{Key: gp.keys[p], Requests: gp.reqs[p], Evictable: true})
		}
		node.Requested = corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(cpu, resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(mem<<20, resource.BinarySI),
			corev1.ResourcePods:   *resource.NewQuantity(int64(len(n.running)), resource.DecimalSI),
		}
		for r, c := range reqGPU {
			node.Requested[r] = *resource.NewQuantity(c, resource.DecimalSI)
		}
		slices.SortFunc(node.Pods, func(a, b *inventory.Pod) int { return compareKeys(a.Key, b.Key) })
		for g := range n.gpus {
			sg := &n.gpus[g]
			ig := &inventory.GPU{Index: g, Product: s.cfg.Product, ProductName: s.cfg.Product.Name, MIGEnabled: sg.mig}
			for _, in := range sg.insts {
				inst := inventory.Instance{Instance: mig.Instance{Profile: in.profile,
					Placement: mig.Placement{Start: in.start, Size: in.size}}}
				if in.pod >= 0 {
					k := gp.keys[in.pod]
					inst.Pod, inst.Busy = &k, true
					ig.Pods = append(ig.Pods, k)
				}
				ig.Instances = append(ig.Instances, inst)
			}
			if sg.wholePod >= 0 {
				ig.Pods = append(ig.Pods, gp.keys[sg.wholePod])
			}
			if sg.replicas > 0 {
				for _, p := range n.running {
					if slices.Contains(s.st[p].gpus, int32(g)) {
						ig.Pods = append(ig.Pods, gp.keys[p])
					}
				}
			}
			slices.SortFunc(ig.Instances, func(a, b inventory.Instance) int {
				return cmp.Or(cmp.Compare(a.Placement.Start, b.Placement.Start), cmp.Compare(a.Profile, b.Profile))
			})
			slices.SortFunc(ig.Pods, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
			ig.Pods = slices.Compact(ig.Pods)
			node.GPUs = append(node.GPUs, ig)
		}
		snap.Nodes = append(snap.Nodes, node)
	}
	slices.SortFunc(snap.Nodes, func(a, b *inventory.Node) int { return cmp.Compare(a.Name, b.Name) })
	return snap
}

// pending lists the queue as demand.Pending would, sorted the same way.
func (gp *gpupoolPlanner) pending() []demand.Request {
	s := gp.s
	reqs := make([]demand.Request, 0, len(s.queue))
	for _, p := range s.queue {
		reqs = append(reqs, demand.Request{Pod: gp.keys[p], PendingSince: epoch.Add(time.Duration(s.st[p].since) * time.Second),
			GPUs: gp.gpuReq[p], Requests: gp.reqs[p]})
	}
	slices.SortFunc(reqs, func(a, b demand.Request) int {
		return cmp.Or(a.PendingSince.Compare(b.PendingSince), compareKeys(a.Pod, b.Pod))
	})
	return reqs
}

// plan calls the planner once and applies its result.
func (gp *gpupoolPlanner) plan() (bool, error) {
	s := gp.s
	// The sharing run measures MPS sharing as it works where NVIDIA's device plugin can run it
	// (a GPU Operator without the mixed MIG strategy); under mixed, as gpupool needs for MIG,
	// the product never plans MPS (planner.Input.AllowMPS).
	in := planner.Input{Snapshot: gp.snapshot(), Pending: gp.pending(), Policy: gp.policy,
		AllowMPS: s.cfg.Strategy == GpupoolShare, NoMoves: s.cfg.Strategy == GpupoolEvictAllNoMoves, Now: epoch.Add(time.Duration(s.now) * time.Second)}
	start := time.Now()
	res, err := planner.Plan(in)
	s.plannerDur = append(s.plannerDur, time.Since(start))
	if err != nil {
		return false, fmt.Errorf("plan at t=%ds: %w", s.now, err)
	}
	return gp.apply(res)
}

// apply carries out a plan's steps at once, in two passes: every eviction of every step first,
// then every changed GPU is destroyed and recreated at the placements mig.Product.Place gives
// its target, as mig-parted does. The controller orders steps in time (steps that only carve,
// which may be where evicted pods land, before the steps that evict), but here nothing is
// scheduled between steps, so the passes make the outcome independent of the steps' order. An
// evicted pod goes back to the pending queue with no tie to its node: the scheduler places it
// wherever it fits once the plan is applied, on another node if that is where the planner
// expects it to land. apply reports whether anything changed.
func (gp *gpupoolPlanner) apply(res *planner.Result) (bool, error) {
	s := gp.s
	nodeIdx := map[string]int{}
	for i, n := range s.nodes {
		nodeIdx[n.spec.Name] = i
	}
	var steps []planner.Step
	var at []int
	for _, step := range res.Steps {
		if s.cfg.Strategy.autoIdle() && len(step.Evictions) > 0 {
			s.skipped++
			continue
		}
		ni, ok := nodeIdx[step.Node]
		if !ok {
			return false, fmt.Errorf("plan at t=%ds names unknown node %s", s.now, step.Node)
		}
		steps, at = append(steps, step), append(at, ni)
	}
	evicted := map[int32]bool{}
	for i, step := range steps {
		for _, e := range step.Evictions {
			p, ok := gp.byName[e.Pod.Name]
			if ok && evicted[p] {
				// Two steps naming one pod evict it once.
				continue
			}
			if !ok || s.st[p].node != int32(at[i]) {
				return false, fmt.Errorf("plan at t=%ds evicts %s, not running on %s", s.now, e.Pod, step.Node)
			}
			s.evict(p)
			evicted[p] = true
		}
	}
	changed := false
	for i, step := range steps {
		n := s.nodes[at[i]]
		for _, ch := range step.GPUs {
			if ch.Index < 0 || ch.Index >= len(n.gpus) {
				return false, fmt.Errorf("plan at t=%ds changes GPU %d of %s", s.now, ch.Index, step.Node)
			}
			s.proposed++
			enabled := len(ch.To) > 0
			for _, t := range step.Target {
				if t.Index == ch.Index {
					enabled = t.MIGEnabled
				}
			}
			var insts []instance
			if enabled {
				placed, err := s.cfg.Product.Place(ch.To, nil)
				if err != nil {
					s.invalid++
					continue
				}
				insts = s.instances(placed)
			}
			sg := &n.gpus[ch.Index]
			if !sg.idle() {
				// Recreating the GPU's instances kills whatever still runs on it.
				s.violations++
				for _, p := range slices.Clone(n.running) {
					if slices.Contains(s.st[p].gpus, int32(ch.Index)) {
						s.evict(p)
					}
				}
			}
			sg.mig, sg.insts = enabled, insts
			changed = true
		}
		n.recount()
		if step.Sharing != nil {
			// The step also left MIG on every GPU of the node; the device plugin now shares them.
			for g := range n.gpus {
				if n.gpus[g].mig || !n.gpus[g].idle() {
					return false, fmt.Errorf("plan at t=%ds shares node %s, whose GPU %d is not an idle MIG-disabled GPU", s.now, step.Node, g)
				}
				n.gpus[g].replicas = int(step.Sharing.Replicas)
			}
			changed = true
		}
	}
	return changed || len(evicted) > 0, nil
}
