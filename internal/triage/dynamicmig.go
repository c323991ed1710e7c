// Claim pods on DynamicMIG nodes: free memory slices at no placement the profile allows.

package triage

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/planner/placement"
	"github.com/gpupool/gpupool/internal/snapshot"
)

// SliceMap is one GPU of a DynamicMIG node as the allocator sees it: which claim holds each
// memory slice, and whether the pod's profile fits.
type SliceMap struct {
	Node string `json:"node"`
	GPU  int    `json:"gpu"`
	// Map has one cell per memory slice: the letter of its holder in Legend, "." when free,
	// e.g. "[A A . . . B . .]".
	Map string `json:"map"`
	// Legend says who each letter is: "A = 1g.18gb at slice 0: pod team/small-0 (claim team/small-0-gpu)".
	Legend []string `json:"legend,omitempty"`
	// Fit is the profile's fit on this GPU (Fits, StrandedByPlacement, NoRoom, Engines,
	// NoProfile) and Reason the sentence behind it.
	Fit    inventory.FitKind `json:"fit"`
	Reason string            `json:"reason"`
	// Notes are where the claims, the driver's slices and NVML disagree on this GPU.
	Notes []string `json:"notes,omitempty"`
}

// explainDynamicMIG answers for a pod whose claims ask NVIDIA's DRA driver for one MIG profile
// when nodes the pod may use run the driver's DynamicMIG mode: the allocator places claims
// first fit and never moves them, so free memory slices may sit at no placement the profile
// allows. It sets the Placement layer with each GPU's slice map when no GPU fits the profile
// and one has enough free slices in count, Scheduling when a GPU fits it now, and returns false
// (leaving v alone) otherwise.
func explainDynamicMIG(s *snapshot.Snapshot, pod *corev1.Pod, v *Verdict) bool {
	dynamic := inventory.DynamicMIGNodes(s.Slices)
	if len(dynamic) == 0 {
		return false
	}
	req, viaClaims, _ := requestsOf(s, pod)
	if !viaClaims || claimReserved(s, pod) {
		return false
	}
	profile, count := "", int64(0)
	for _, name := range sortedNames(req) {
		if kind, p, ok := demand.Classify(name); ok {
			if kind != demand.KindMIG || profile != "" {
				return false // whole GPUs, sharing or several profiles: not this model's question
			}
			profile, count = p, demand.Quantity(req, name)
		}
	}
	if profile == "" {
		return false
	}
	mayRun := map[string]bool{}
	for _, row := range v.Nodes {
		mayRun[row.Node] = row.Placement == "ok"
	}
	var maps []SliceMap
	var stranded, fits []SliceMap
	var fix []string
	for i := range s.Nodes {
		node := &s.Nodes[i]
		if !dynamic[node.Name] || !mayRun[node.Name] {
			continue
		}
		supply := inventory.DynamicMIGSupply(node, reportOf(s, node.Name), s.Claims, s.Slices)
		supply.ApplyDeviceTaints(s.TaintRules)
		for k, f := range supply.Fit(profile) {
			m := sliceMap(node.Name, supply.GPUs[k], f)
			maps = append(maps, m)
			switch f.Kind {
			case inventory.FitFree:
				fits = append(fits, m)
			case inventory.FitStranded:
				stranded = append(stranded, m)
				fix = append(fix, fmt.Sprintf("on %s GPU %d, moving %s frees %s",
					node.Name, f.GPU, holderNames(f.InTheWay), slicesText(f.Cheapest)))
			}
		}
	}
	if len(fits) == 0 {
		// The reserve taints only partitions of smaller profiles over a held placement; a claim
		// that would fit but for it waits by the policy's choice, and no plan moves a claim for it.
		for i := range s.Nodes {
			node := &s.Nodes[i]
			if !dynamic[node.Name] || !mayRun[node.Name] {
				continue
			}
			if g, f, ok := heldByReserve(s, node, profile); ok {
				explainReserve(s, node.Name, g, f, maps, v)
				return true
			}
		}
	}
	switch {
	case len(fits) > 0 && count == 1:
		v.Layer, v.Blocking, v.SliceMaps = LayerScheduling, "none", maps
		v.Reason = fmt.Sprintf("on DynamicMIG node %s, %s", fits[0].Node, fits[0].Reason)
		v.Next = "the scheduler's DRA allocator should allocate it shortly; if it stays pending, read the pod's FailedScheduling events"
		return true
	case len(fits) > 0 || len(stranded) == 0:
		return false
	}
	v.Layer, v.Blocking, v.SliceMaps = LayerPlacement, "memory-slice placement", maps
	v.Reason = fmt.Sprintf("NVIDIA's DRA driver (DynamicMIG) places each claim first fit and never moves it: on %s, %s",
		stranded[0].Node, stranded[0].Reason)
	if len(stranded) > 1 {
		v.Reason += fmt.Sprintf(" (and so on %d more GPUs)", len(stranded)-1)
	}
	v.Next = planStory(s, pod, profile, v.Plan) + "; by hand: " + fix[0] +
		" (delete or move that pod, or wait for it to finish, and the scheduler allocates the claim there)"
	return true
}

// claimReserved says whether a claim is already allocated and reserved for the pod: the
// allocator found it a device, and its own slices would read as taken.
func claimReserved(s *snapshot.Snapshot, pod *corev1.Pod) bool {
	for i := range s.Claims {
		c := &s.Claims[i]
		if c.Namespace != pod.Namespace || c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.ReservedFor {
			if r.Resource == "pods" && r.Name == pod.Name && (r.UID == "" || pod.UID == "" || r.UID == pod.UID) {
				return true
			}
		}
	}
	return false
}

// reportOf is the agent's report for node, or nil.
func reportOf(s *snapshot.Snapshot, node string) *v1alpha1.GPUNode {
	i := slices.IndexFunc(s.GPUNodes, func(g v1alpha1.GPUNode) bool { return g.Name == node })
	if i < 0 {
		return nil
	}
	return &s.GPUNodes[i]
}

// sliceMap draws one GPU: a letter per holder, in placement order.
func sliceMap(node string, g *inventory.DynamicMIGGPU, f inventory.PlacementFit) SliceMap {
	m := SliceMap{Node: node, GPU: g.Index, Fit: f.Kind, Reason: f.Reason, Notes: g.Notes}
	cells := make([]string, len(g.Slices))
	for s, k := range g.Slices {
		cells[s] = "."
		if k >= 0 {
			cells[s] = string(rune('A' + k))
		}
	}
	m.Map = "[" + strings.Join(cells, " ") + "]"
	for k, h := range g.Holders {
		what := h.Profile
		if what == "" {
			what = "whole GPU"
		}
		at := fmt.Sprintf("%s at slice %d", what, h.Placement.Start)
		if h.Placement.Size > 1 {
			at = fmt.Sprintf("%s at slices %d-%d", what, h.Placement.Start, h.Placement.Start+h.Placement.Size-1)
		}
		var who []string
		for _, p := range h.Pods {
			who = append(who, "pod "+p.String())
		}
		switch {
		case h.Claim != "" && len(who) > 0:
			who = append(who[:1], append([]string{"(claim " + h.Claim + ")"}, who[1:]...)...)
		case h.Claim != "":
			who = append(who, "claim "+h.Claim+", no pod yet")
		default:
			who = append(who, "(no claim holds it)")
		}
		m.Legend = append(m.Legend, fmt.Sprintf("%c = %s: %s", 'A'+k, at, strings.Join(who, " ")))
	}
	return m
}

// holderNames names what must move: pods where known, else claims.
func holderNames(hs []inventory.SliceHolder) string {
	var names []string
	for _, h := range hs {
		switch {
		case len(h.Pods) > 0:
			for _, p := range h.Pods {
				names = append(names, "pod "+p.String())
			}
		case h.Claim != "":
			names = append(names, "claim "+h.Claim)
		default:
			names = append(names, "the unclaimed "+h.Profile+" instance")
		}
	}
	return strings.Join(names, " and ")
}

// planStory says which plan opens a placement for the pod, or why none does. A live plan that
// lists the pod and holds a placement step for its claim is named with the claim pods it
// moves; otherwise the placement planner (internal/planner/placement) is asked, over the
// DynamicMIG nodes of the policies' pools, what it would move or why it moves nothing, as the
// policy controller asks it (controllers/policy_placement.go).
func planStory(s *snapshot.Snapshot, pod *corev1.Pod, profile string, live *PlanRef) string {
	claim := podClaim(pod)
	if live != nil {
		for i := range s.Plans {
			if s.Plans[i].Name != live.Name {
				continue
			}
			for _, step := range s.Plans[i].Spec.Steps {
				if o := step.Placement; o != nil && o.Claim.Namespace == pod.Namespace && o.Claim.Name == claim {
					var moved []string
					for _, e := range step.Evictions {
						moved = append(moved, "pod "+e.Namespace+"/"+e.Name)
					}
					what := fmt.Sprintf("plan %s opens memory slices %d-%d of node %s GPU %d for it by moving %s",
						live.Name, o.Start, o.Start+o.Size-1, step.Node, o.GPU, strings.Join(moved, " and "))
					if live.Phase == v1alpha1.PlanAwaitingApproval {
						return fmt.Sprintf("%s, and waits for approval: kubectl gpupool plan %s, then kubectl gpupool approve %s", what, live.Name, live.Name)
					}
					return fmt.Sprintf("%s, and is %s", what, live.Phase)
				}
			}
		}
	}
	in, policy := placementInput(s, pod, profile, claim)
	if policy == "" {
		return "no gpupool plan moves claims for it: no GPUPoolPolicy's pool holds a DynamicMIG node the pod may use"
	}
	res := placement.Plan(in)
	if len(res.Openings) == 1 {
		o := res.Openings[0]
		var moved []string
		for _, m := range o.Moves {
			for _, p := range m.Holder.Pods {
				moved = append(moved, "pod "+p.Name.String())
			}
		}
		return fmt.Sprintf("no plan proposes this yet: policy %s's next plan would open memory slices %d-%d of node %s GPU %d by moving %s "+
			"(plans wait for the policy's minPendingAge, stabilization window and disruption budget)",
			policy, o.Placement.Start, o.Placement.Start+o.Placement.Size-1, o.Node, o.GPU, strings.Join(moved, " and "))
	}
	if len(res.Unplanned) == 1 {
		return "no gpupool plan can open a placement for it: " + res.Unplanned[0].Message
	}
	return "no gpupool plan proposes this"
}

// podClaim is the name of the pod's one ResourceClaim, "" when it has none or several.
func podClaim(pod *corev1.Pod) string {
	if len(pod.Spec.ResourceClaims) != 1 {
		return ""
	}
	pc := pod.Spec.ResourceClaims[0]
	name := ptr.Deref(pc.ResourceClaimName, "")
	for _, st := range pod.Status.ResourceClaimStatuses {
		if name == "" && st.Name == pc.Name {
			name = ptr.Deref(st.ResourceClaimName, "")
		}
	}
	return name
}

// placementInput is the placement planner's question for the pod over the DynamicMIG nodes of
// the first policy whose pool holds one the pod may use, with that policy's eviction rules
// and the PodDisruptionBudgets' allowances; policy is "" when no pool holds such a node.
func placementInput(s *snapshot.Snapshot, pod *corev1.Pod, profile, claim string) (placement.Input, string) {
	in := placement.Input{Budget: placement.Budget{MaxNodes: placement.Unlimited, MaxEvictions: placement.Unlimited, PDBAllowed: map[string]int{}}}
	dynamic := inventory.DynamicMIGNodes(s.Slices)
	pools := poolOf(s)
	var nodes []*corev1.Node
	policy := ""
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if !dynamic[n.Name] || len(pools[n.Name]) == 0 || (policy != "" && !slices.Contains(pools[n.Name], policy)) {
			continue
		}
		policy = cmp.Or(policy, pools[n.Name][0])
		nodes = append(nodes, n)
	}
	if policy == "" {
		return in, ""
	}
	var rules inventory.EvictionRules
	for i := range s.Policies {
		if p := &s.Policies[i]; p.Name == policy {
			rules = inventory.EvictionRules{EvictEmptyDir: p.Spec.Disruption.EvictEmptyDir, EvictUnmanaged: p.Spec.Disruption.EvictUnmanaged}
		}
	}
	inv := inventory.Build(s.Nodes, s.GPUNodes, s.PodPointers(), s.PDBs, inventory.Options{})
	for k, v := range inv.DisruptionsAllowed {
		in.Budget.PDBAllowed[k] = int(v)
	}
	claims := map[string]*resourcev1.ResourceClaim{}
	for i := range s.Claims {
		claims[s.Claims[i].Namespace+"/"+s.Claims[i].Name] = &s.Claims[i]
	}
	pods := map[types.NamespacedName]*corev1.Pod{}
	for i := range s.Pods {
		pods[types.NamespacedName{Namespace: s.Pods[i].Namespace, Name: s.Pods[i].Name}] = &s.Pods[i]
	}
	want := placement.Claim{Claim: pod.Namespace + "/" + claim, Pod: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name},
		Profile: profile, Nodes: []string{}}
	for _, n := range nodes {
		if ok, _ := (demand.Request{NodeSelector: pod.Spec.NodeSelector, Tolerations: pod.Spec.Tolerations,
			RequiredAffinity: requiredAffinity(pod)}).Matches(n); ok {
			want.Nodes = append(want.Nodes, n.Name)
		}
		supply := inventory.DynamicMIGSupply(n, reportOf(s, n.Name), s.Claims, s.Slices)
		// A tainted partition is no opening or landing, as the policy controller plans
		// (controllers/policy_placement.go, planPlacements).
		supply.ApplyDeviceTaints(s.TaintRules)
		for _, g := range supply.GPUs {
			pg := placement.GPU{Node: n.Name, Index: g.Index, Product: g.Product, FreeCounters: g.FreeCounters}
			if parts := g.Partitions(); parts != nil {
				pg.Partitions = []placement.Partition{} // every one tainted still says where the driver allows none
				for _, p := range parts {
					if p.Taint == "" {
						pg.Partitions = append(pg.Partitions, placement.Partition{Profile: p.Profile, Placement: p.Placement, Device: p.Name, Counters: p.Counters})
					}
				}
			}
			for _, h := range g.Holders {
				ph := placement.Holder{Claim: h.Claim, Profile: h.Profile, Placement: h.Placement, Device: h.Device}
				c := claims[h.Claim]
				for _, key := range h.Pods {
					pp := placement.Pod{Name: key, Controlled: true}
					running := pods[key]
					switch {
					case running == nil:
						pp.Blocker = "it does not run on node " + n.Name + " yet"
					case c != nil && !ownedBy(c, running):
						pp.Blocker = fmt.Sprintf("its ResourceClaim %s is not generated for it from a template, so evicting it frees no device", h.Claim)
					default:
						pp.UID, pp.Priority = running.UID, ptr.Deref(running.Spec.Priority, 0)
						pp.DoNotDisrupt = running.Annotations[v1alpha1.AnnotationDoNotDisrupt] == "true"
						if why := inventory.PodSafetyBlocker(running, rules); why != "" && !pp.DoNotDisrupt {
							pp.Blocker = why
						}
						for _, inode := range inv.Nodes {
							if ip := inode.Pod(key); inode.Name == n.Name && ip != nil {
								pp.PDBs = ip.PDBs
							}
						}
					}
					ph.Pods = append(ph.Pods, pp)
				}
				pg.Holders = append(pg.Holders, ph)
			}
			in.GPUs = append(in.GPUs, pg)
		}
	}
	in.Pending = []placement.Claim{want}
	return in, policy
}

// ownedBy says whether the claim was generated for the pod (the resourceclaim controller owns
// such a claim by the pod, and deletes it with the pod).
func ownedBy(c *resourcev1.ResourceClaim, pod *corev1.Pod) bool {
	ref := metav1.GetControllerOf(c)
	return ref != nil && ref.Kind == "Pod" && ref.Name == pod.Name && (ref.UID == "" || pod.UID == "" || ref.UID == pod.UID)
}

// requiredAffinity is the pod's required node affinity, nil when it has none.
func requiredAffinity(pod *corev1.Pod) *corev1.NodeSelector {
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		return a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	return nil
}
