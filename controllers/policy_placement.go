package controllers

// The policy controller's plans for DynamicMIG nodes: NVIDIA's DRA driver carves there on
// allocation, places first-fit and never moves a claim, so a pending claim can strand by
// placement (dra-driver-nvidia-gpu#933). Beside the static planner, each pass builds the
// DynamicMIG supply of the pool's such nodes, asks internal/planner/placement which claim pods
// to move, and renders one placement step per opening into the same RepartitionPlan, under the
// same approval, budgets, PodDisruptionBudgets and do-not-disrupt rules.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/planner/placement"
	"github.com/gpupool/gpupool/internal/podrecord"
	"github.com/gpupool/gpupool/internal/pool"
)

// placementPlan is the DynamicMIG side of one pass: the openings and the steps they render to.
type placementPlan struct {
	Result placement.Result
	Steps  []v1alpha1.NodeStep
	// Served are the pending claim pods the openings serve.
	Served []types.NamespacedName
}

// planPlacements plans openings on the pool's DynamicMIG nodes for pending claim pods that
// no free placement takes, within what the static plan res leaves of the budget. Nil when the
// pool has no DynamicMIG node or no such pod.
// Partitions tainted NoSchedule or NoExecute (rules, by anyone, or the slices themselves) are
// not free for an opening or a landing.
func planPlacements(pass *pool.Pass, cluster *pool.Cluster, res *planner.Result, taints []resourcev1.DeviceTaintRule) *placementPlan {
	// Every placement step evicts: none while planning is paused or the approval mode forbids
	// evictions (the static planner's evictOK, internal/planner/plan.go).
	if cluster.Slices == nil || pass.Policy.Spec.Planning.Paused || pass.Policy.Spec.Disruption.Approval == v1alpha1.ApprovalAutoIdle {
		return nil
	}
	dynamic := inventory.DynamicMIGNodes(cluster.Slices)
	var nodes []*inventory.Node
	for _, n := range pass.Snapshot.Nodes {
		if dynamic[n.Name] && !n.Unreported && n.Object != nil && !n.Object.Spec.Unschedulable &&
			pass.Selector.Matches(labels.Set(n.Object.Labels)) && pass.Conflicts[n.Name] == "" && pass.Frozen[n.Name] == "" {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		return nil
	}
	in := placement.Input{Budget: placementBudget(pass, res)}
	in.Pending = pendingClaims(pass, cluster, nodes, res)
	if len(in.Pending) == 0 {
		return nil
	}
	reports := map[string]*v1alpha1.GPUNode{}
	for i := range cluster.GPUNodes {
		reports[cluster.GPUNodes[i].Name] = &cluster.GPUNodes[i]
	}
	records := map[types.NamespacedName]*podrecord.Record{}
	for _, r := range cluster.Pods {
		records[types.NamespacedName{Namespace: r.Namespace, Name: r.Name}] = r
	}
	claims := map[string]*resourcev1.ResourceClaim{}
	for i := range cluster.Claims {
		claims[cluster.Claims[i].Namespace+"/"+cluster.Claims[i].Name] = &cluster.Claims[i]
	}
	rules := evictionRules(pass.Policy)
	// unreserved is the pool as it would be without the policy's own reserve taints.
	var unreserved []placement.GPU
	var others []resourcev1.DeviceTaintRule
	for _, rule := range taints {
		if !ownReserveRule(&rule, pass.Policy.UID) {
			others = append(others, rule)
		}
	}
	for _, n := range nodes {
		supply := inventory.DynamicMIGSupply(n.Object, reports[n.Name], cluster.Claims, cluster.Slices)
		supply.ApplyDeviceTaints(others)
		open := make([][]placement.Partition, len(supply.GPUs))
		for k, g := range supply.GPUs {
			open[k] = placementPartitions(g, true)
		}
		supply.ApplyDeviceTaints(taints) // adds the reserve's own taints to the others'
		for k, g := range supply.GPUs {
			pg := placement.GPU{Node: n.Name, Index: g.Index, Product: g.Product, FreeCounters: g.FreeCounters,
				Partitions: placementPartitions(g, true)}
			for _, h := range g.Holders {
				pg.Holders = append(pg.Holders, holderOf(h, n, nodes, records, claims[h.Claim], rules))
			}
			in.GPUs = append(in.GPUs, pg)
			pg.Partitions = open[k]
			unreserved = append(unreserved, pg)
		}
	}
	in.Pending = heldBackByReserve(in.Pending, unreserved)
	if len(in.Pending) == 0 {
		return nil
	}
	out := &placementPlan{Result: placement.Plan(in)}
	for _, o := range out.Result.Openings {
		out.Steps = append(out.Steps, placementStep(o))
		out.Served = append(out.Served, o.Claim.Pod)
	}
	return out
}

// heldBackByReserve drops the claims that would fit as the pool is but for the policy's own
// reserve taints: waiting while a held placement stays free is the price of the headroom the
// policy asked for (docs/design/dra.md), and evicting another claim to make room for one would
// turn prevention into disruption. The probe has no budget, so it costs no landing search: a
// claim either fits a free partition (FitsNow) or is answered at once.
func heldBackByReserve(pending []placement.Claim, unreserved []placement.GPU) []placement.Claim {
	if len(pending) == 0 || len(unreserved) == 0 {
		return pending
	}
	probe := placement.Plan(placement.Input{GPUs: unreserved, Pending: pending, Budget: placement.Budget{}})
	held := map[string]bool{}
	for _, u := range probe.Unplanned {
		if u.Why == placement.WhyFitsNow {
			held[u.Claim.Claim] = true
		}
	}
	return slices.DeleteFunc(slices.Clone(pending), func(c placement.Claim) bool { return held[c.Claim] })
}

// placementBudget is what the static plan leaves: the nodes with evictions it may still
// change, nothing while evictions are paused, and each PodDisruptionBudget's allowance less
// the static plan's evictions of its pods.
func placementBudget(pass *pool.Pass, res *planner.Result) placement.Budget {
	b := placement.Budget{MaxEvictions: placement.Unlimited, PDBAllowed: map[string]int{}}
	for k, v := range pass.Snapshot.DisruptionsAllowed {
		b.PDBAllowed[k] = int(v)
	}
	if pass.Input().EvictionsPaused != "" {
		return b // MaxNodes 0: every placement step evicts
	}
	b.MaxNodes = res.Budget
	for _, s := range res.Steps {
		if len(s.Evictions) == 0 {
			continue
		}
		b.MaxNodes--
		for _, e := range s.Evictions {
			for _, n := range pass.Snapshot.Nodes {
				if p := n.Pod(e.Pod); p != nil && n.Name == s.Node {
					for _, pdb := range p.PDBs {
						b.PDBAllowed[pdb]--
					}
				}
			}
		}
	}
	b.MaxNodes = max(b.MaxNodes, 0)
	return b
}

// pendingClaims are the pool's pending pods asking, through one ResourceClaim the scheduler has
// not allocated, for one MIG instance, that some DynamicMIG node of the pool may host and that
// the static plan does not serve.
func pendingClaims(pass *pool.Pass, cluster *pool.Cluster, nodes []*inventory.Node, res *planner.Result) []placement.Claim {
	unbound := map[types.NamespacedName]*corev1.Pod{}
	for _, r := range cluster.Pods {
		if r.Unbound != nil {
			unbound[types.NamespacedName{Namespace: r.Unbound.Namespace, Name: r.Unbound.Name}] = r.Unbound
		}
	}
	lookup := cluster.ClaimLookup()
	var out []placement.Claim
	for _, req := range pass.Pending {
		if !req.ViaClaims || len(req.GPUs) != 1 || req.GPUs[0].Kind != demand.KindMIG || req.GPUs[0].Count != 1 ||
			slices.Contains(res.Served, req.Pod) {
			continue
		}
		pod := unbound[req.Pod]
		if pod == nil || lookup == nil {
			continue
		}
		claim := onlyClaim(pod, lookup)
		if claim == nil || claim.Status.Allocation != nil {
			continue
		}
		c := placement.Claim{Claim: claim.Namespace + "/" + claim.Name, Pod: req.Pod, Profile: req.GPUs[0].Profile,
			Priority: req.Priority, Nodes: []string{}}
		for _, n := range nodes {
			if ok, _ := req.Matches(n.Object); ok {
				c.Nodes = append(c.Nodes, n.Name)
			}
		}
		if len(c.Nodes) > 0 {
			out = append(out, c)
		}
	}
	return out
}

// onlyClaim is the pod's one ResourceClaim (named, or generated from a template and recorded
// in its status), nil when it has none or several.
func onlyClaim(pod *corev1.Pod, lookup demand.ClaimLookup) *resourcev1.ResourceClaim {
	if len(pod.Spec.ResourceClaims) != 1 {
		return nil
	}
	pc := pod.Spec.ResourceClaims[0]
	name := ptr.Deref(pc.ResourceClaimName, "")
	for _, st := range pod.Status.ResourceClaimStatuses {
		if name == "" && st.Name == pc.Name {
			name = ptr.Deref(st.ResourceClaimName, "")
		}
	}
	if name == "" {
		return nil
	}
	return lookup(pod.Namespace, name)
}

// holderOf is one claim's device as the placement planner weighs moving it: its pods, what
// forbids evicting each, and where their replacements may run.
func holderOf(h inventory.SliceHolder, node *inventory.Node, nodes []*inventory.Node, records map[types.NamespacedName]*podrecord.Record,
	claim *resourcev1.ResourceClaim, rules inventory.EvictionRules) placement.Holder {
	out := placement.Holder{Claim: h.Claim, Profile: h.Profile, Placement: h.Placement, Device: h.Device}
	shared := ""
	if claim != nil && !ownedByPod(claim) {
		// Only a claim generated for its pod is deleted with it, so that the replacement's new
		// claim is allocated afresh; a named claim stays allocated where it is.
		shared = fmt.Sprintf("its ResourceClaim %s is not generated for it from a template, so evicting it frees no device", h.Claim)
	}
	for _, key := range h.Pods {
		p := placement.Pod{Name: key, Blocker: shared}
		ip, rec := node.Pod(key), records[key]
		switch {
		case ip == nil || rec == nil:
			p.Blocker = cmp.Or(p.Blocker, "it does not run on node "+node.Name+" yet")
		default:
			p.UID, p.Priority, p.PDBs, p.Controlled, p.DoNotDisrupt = ip.UID, ip.Priority, ip.PDBs, true, rec.DoNotDisrupt
			if why := inventory.SafetyBlocker(rec, rules); why != "" && !rec.DoNotDisrupt {
				p.Blocker = cmp.Or(p.Blocker, why)
			}
			if out.Nodes == nil {
				out.Nodes = []string{}
				for _, n := range nodes {
					if ip.MayRunOn(n.Object) {
						out.Nodes = append(out.Nodes, n.Name)
					}
				}
			}
		}
		out.Pods = append(out.Pods, p)
	}
	return out
}

func ownedByPod(claim *resourcev1.ResourceClaim) bool {
	ref := metav1.GetControllerOf(claim)
	return ref != nil && ref.Kind == "Pod" && ref.APIVersion == "v1"
}

// maxEvictionReason is the API's bound on an eviction's reason.
const maxEvictionReason = 256

// placementStep renders one opening as a plan's step.
func placementStep(o placement.Opening) v1alpha1.NodeStep {
	step := v1alpha1.NodeStep{Node: o.Node, GPUs: []v1alpha1.GPUChange{},
		Placement: &v1alpha1.PlacementOpening{Driver: nvidia.DRADriver, GPU: int32(o.GPU), Profile: v1alpha1.MIGProfileName(o.Profile),
			Start: int32(o.Placement.Start), Size: int32(o.Placement.Size), Device: o.Device,
			Claim: podRef(o.Claim.Claim)}}
	for _, g := range o.GPUs {
		step.GPUs = append(step.GPUs, v1alpha1.GPUChange{Index: int32(g.Index), From: g.From.Counts(), To: g.To.Counts()})
	}
	for _, k := range o.KeepFree {
		if k.Device != "" && k.Device != o.Device && !slices.Contains(step.Placement.KeepFree, k.Device) {
			step.Placement.KeepFree = append(step.Placement.KeepFree, k.Device)
		}
	}
	slices.Sort(step.Placement.KeepFree)
	for _, m := range o.Moves {
		for _, p := range m.Holder.Pods {
			reason := m.Reason
			if len(reason) > maxEvictionReason {
				reason = reason[:maxEvictionReason-3] + "..."
			}
			step.Evictions = append(step.Evictions, v1alpha1.Eviction{
				PodReference: v1alpha1.PodReference{Namespace: p.Name.Namespace, Name: p.Name.Name},
				UID:          string(p.UID), Reason: reason, LandingNode: m.Landing.Node})
		}
	}
	step.Disruptive = len(step.Evictions) > 0
	return step
}

// podRef reads "namespace/name".
func podRef(key string) v1alpha1.PodReference {
	ns, name, _ := strings.Cut(key, "/")
	return v1alpha1.PodReference{Namespace: ns, Name: name}
}

// withPlacements is the pass's plan as the policy controller proposes it: the static plan
// with the placement steps beside its own, or a plan of placement steps alone; nil when
// neither changes anything.
func withPlacements(res *planner.Result, pp *placementPlan, policy *v1alpha1.GPUPoolPolicy, now time.Time) *v1alpha1.RepartitionPlan {
	plan := res.RepartitionPlan(policy, now)
	if pp == nil || len(pp.Steps) == 0 {
		return plan
	}
	if plan == nil {
		plan = emptyPlan(policy)
	}
	plan.Spec.Steps = append(plan.Spec.Steps, pp.Steps...)
	slices.SortFunc(plan.Spec.Steps, func(a, b v1alpha1.NodeStep) int { return strings.Compare(a.Node, b.Node) })
	for _, p := range pp.Served {
		plan.Spec.Expected.Pods = append(plan.Spec.Expected.Pods, v1alpha1.PodReference{Namespace: p.Namespace, Name: p.Name})
	}
	plan.Spec.Disruptive = slices.ContainsFunc(plan.Spec.Steps, func(s v1alpha1.NodeStep) bool { return len(s.Evictions) > 0 })
	plan.Spec.Hash = v1alpha1.HashSteps(plan.Spec.Steps)
	return plan
}

// emptyPlan is the policy's plan without steps, owned and labelled as the planner's
// (planner.Result.RepartitionPlan); create names it.
func emptyPlan(policy *v1alpha1.GPUPoolPolicy) *v1alpha1.RepartitionPlan {
	labels := map[string]string{}
	if len(validation.IsValidLabelValue(policy.Name)) == 0 {
		labels[planner.LabelPolicy] = policy.Name
	}
	return &v1alpha1.RepartitionPlan{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RepartitionPlan"},
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "GPUPoolPolicy",
				Name: policy.Name, UID: policy.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: v1alpha1.RepartitionPlanSpec{Policy: policy.Name,
			Approval: cmp.Or(policy.Spec.Disruption.Approval, v1alpha1.ApprovalManual)},
	}
}

// servedWith is res as the pending pods' notes and the policy's status read it: the pods the
// placement steps serve count as served, not as what the static planner could not do.
func servedWith(res *planner.Result, pp *placementPlan) *planner.Result {
	if pp == nil || len(pp.Served) == 0 {
		return res
	}
	out := *res
	out.Served = append(slices.Clone(res.Served), pp.Served...)
	out.Unserved = slices.DeleteFunc(slices.Clone(res.Unserved), func(u planner.Unserved) bool { return slices.Contains(pp.Served, u.Pod) })
	out.FitsNow = slices.DeleteFunc(slices.Clone(res.FitsNow), func(p types.NamespacedName) bool { return slices.Contains(pp.Served, p) })
	return &out
}
