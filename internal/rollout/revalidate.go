package rollout

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
)

// ReasonStale is the reason of a plan cancelled because the cluster moved on before it started.
const ReasonStale = "NoLongerValid"

// PodFact is what revalidation needs to know of a pod that exists now.
type PodFact struct {
	// Node is spec.nodeName; empty while the pod is pending.
	Node string
	// DoNotDisrupt is true when the pod carries gpupool.io/do-not-disrupt: "true".
	DoNotDisrupt bool
	// MIG is what the pod asks for of MIG instances, per profile, and WholeGPUs how many whole
	// GPUs: the room its replacement needs where the plan moves it.
	MIG       map[string]int64
	WholeGPUs int64
}

// Facts are a fresh look at the cluster, taken just before a plan's first disruptive step.
type Facts struct {
	// GPUs are the agent's reports per node; a node without a report is missing.
	GPUs map[string][]v1alpha1.GPUStatus
	// Pods that exist now, by "namespace/name".
	Pods map[string]PodFact
	// Cordoned names the nodes with spec.unschedulable set, among the nodes reported.
	Cordoned map[string]bool
	// Unavailable says, per node, why it cannot take new pods now although it is not cordoned
	// (NodeUnavailable): not Ready, or tainted by the node lifecycle controller.
	Unavailable map[string]string
	// Claimed are the devices NVIDIA's DRA driver allocated to ResourceClaims on the nodes of
	// the plan's steps, by device UUID (a MIG instance's or a whole GPU's). The agent's report
	// attributes only the device plugin's devices, so a claim allocated after planning shows
	// nowhere else.
	Claimed map[string]ClaimFact
}

// ClaimFact is a ResourceClaim holding a device of NVIDIA's DRA driver.
type ClaimFact struct {
	// Claim is the ResourceClaim, "namespace/name".
	Claim string
	// Pods are every pod it is reserved for, "namespace/name"; none while its pod has not
	// started.
	Pods []string
	// GPU is the UUID of the GPU the device is on; "" when its ResourceSlice does not say.
	GPU string
}

// ClaimOnStep says why a ResourceClaim forbids changing the step's GPUs now ("" when none
// does): a claim holds a device on one of them (an instance, the whole GPU, or a device the
// agent does not report there) and the step does not evict every pod it is reserved for. The
// planner never changes a GPU a claim holds (inventory.DRAHolders), so such a claim was
// allocated after planning; carving the GPU would pull its device from under the claim's pods.
// A claim reserved for no pod yet has one about to start, and forbids the change as well.
func ClaimOnStep(step v1alpha1.NodeStep, gpus []v1alpha1.GPUStatus, claimed map[string]ClaimFact) string {
	if len(claimed) == 0 {
		return ""
	}
	evicted := map[string]bool{}
	for _, e := range step.Evictions {
		evicted[e.Namespace+"/"+e.Name] = true
	}
	for _, change := range step.GPUs {
		i := slices.IndexFunc(gpus, func(g v1alpha1.GPUStatus) bool { return g.Index == change.Index })
		if i < 0 {
			continue // Revalidate and the step's own checks say so
		}
		g := gpus[i]
		on := func(uuid string, c ClaimFact) bool {
			if g.UUID != "" && (uuid == g.UUID || c.GPU == g.UUID) {
				return true
			}
			return uuid != "" && slices.ContainsFunc(g.Instances, func(in v1alpha1.MIGInstance) bool { return in.UUID == uuid })
		}
		for _, uuid := range slices.Sorted(maps.Keys(claimed)) {
			c := claimed[uuid]
			if !on(uuid, c) {
				continue
			}
			var stay []string
			for _, p := range c.Pods {
				if !evicted[p] {
					stay = append(stay, p)
				}
			}
			switch {
			case len(c.Pods) == 0:
				return fmt.Sprintf("ResourceClaim %s was allocated device %s on GPU %d of node %s, which the plan changes, and its pod is about to start",
					c.Claim, uuid, change.Index, step.Node)
			case len(stay) > 0:
				return fmt.Sprintf("ResourceClaim %s was allocated device %s on GPU %d of node %s, which the plan changes without evicting %s",
					c.Claim, uuid, change.Index, step.Node, strings.Join(stay, ", "))
			}
		}
	}
	return ""
}

// conditionTaints are the taints the node lifecycle controller and the kubelet put on a node
// that should take no new pods (k8s.io/api/core/v1 well_known_taints.go). A pod may tolerate
// some of them, but a pod moved for a plan is not one to bet on that.
var conditionTaints = []string{
	corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable, corev1.TaintNodeMemoryPressure,
	corev1.TaintNodeDiskPressure, corev1.TaintNodePIDPressure, corev1.TaintNodeNetworkUnavailable,
	corev1.TaintNodeOutOfService,
}

// NodeUnavailable says why a node cannot be a landing for moved pods now ("" when it can):
// its Ready condition is not True, or it carries a taint that keeps new pods off an unhealthy
// node. Cordons are checked on their own (Facts.Cordoned).
func NodeUnavailable(node *corev1.Node) string {
	ready := slices.IndexFunc(node.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == corev1.NodeReady })
	if ready < 0 || node.Status.Conditions[ready].Status != corev1.ConditionTrue {
		return "is not Ready"
	}
	for _, t := range node.Spec.Taints {
		if (t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute) && slices.Contains(conditionTaints, t.Key) {
			return "is tainted " + t.Key + ":" + string(t.Effect)
		}
	}
	return ""
}

// Revalidate checks an approved plan against a fresh look at the cluster before its first
// disruptive step, and says why it must be cancelled ("" when it still holds). A plan computed
// minutes or hours ago (approval is human) may no longer be safe or useful:
//   - a GPU it changes no longer has the layout the plan was made for (someone else changed it);
//   - a pod the plan does not evict now runs on a GPU it changes: mig-manager would refuse the
//     GPU as in use, or worse, the pod would lose its device;
//   - a ResourceClaim of NVIDIA's DRA driver was allocated a device on a GPU it changes
//     (ClaimOnStep);
//   - a pod it evicts was marked do-not-disrupt since;
//   - a node the plan moves evicted pods to, and does not change itself, no longer has room
//     for them (the scheduler or another workload took it, or it was cordoned): evicting
//     them now would leave them pending, so the plan is made again instead;
//   - none of the pending pods it was made for is still pending: evicting for nobody is pure
//     disruption.
func Revalidate(plan *v1alpha1.RepartitionPlan, f Facts) string {
	for _, step := range plan.Spec.Steps {
		if len(step.GPUs) == 0 || step.Placement != nil {
			// A placement step carves nothing: its GPU keeps its other instances and their pods,
			// and the Placement protocol checks it against the driver's devices and claims
			// (CheckPlacement) before it touches anything.
			continue
		}
		gpus, ok := f.GPUs[step.Node]
		if !ok {
			return fmt.Sprintf("node %s has no GPU report any more", step.Node)
		}
		evicted := map[string]bool{}
		for _, e := range step.Evictions {
			evicted[e.Namespace+"/"+e.Name] = true
		}
		for _, change := range step.GPUs {
			i := slices.IndexFunc(gpus, func(g v1alpha1.GPUStatus) bool { return g.Index == change.Index })
			if i < 0 {
				return fmt.Sprintf("GPU %d of node %s is no longer reported", change.Index, step.Node)
			}
			if now := gpus[i].ProfileCounts(); !mig.LayoutOf(now).Equal(mig.LayoutOf(change.From)) {
				return fmt.Sprintf("GPU %d of node %s is now %s; the plan was made for %s",
					change.Index, step.Node, countsString(now), countsString(change.From))
			}
			for _, ref := range podsOn(gpus[i]) {
				key := ref.Namespace + "/" + ref.Name
				if !evicted[key] {
					return fmt.Sprintf("pod %s started on GPU %d of node %s, which the plan changes without evicting it",
						key, change.Index, step.Node)
				}
			}
		}
		if why := ClaimOnStep(step, gpus, f.Claimed); why != "" {
			return why
		}
		for _, e := range step.Evictions {
			key := e.Namespace + "/" + e.Name
			if p, ok := f.Pods[key]; ok && p.Node == step.Node && p.DoNotDisrupt {
				return fmt.Sprintf("pod %s, which the plan evicts, is now annotated %s", key, v1alpha1.AnnotationDoNotDisrupt)
			}
		}
		if why := LandingGone(plan, step, f); why != "" {
			return why
		}
	}
	if want := plan.Spec.Expected.Pods; len(want) > 0 && plan.Spec.Disruptive {
		for _, ref := range want {
			if p, ok := f.Pods[ref.Namespace+"/"+ref.Name]; ok && p.Node == "" {
				return ""
			}
		}
		return fmt.Sprintf("none of the %d pending pod(s) it was made for is still pending", len(want))
	}
	return ""
}

// LandingGone checks the room a step's moved pods need on other nodes ("" when they have it).
// Revalidate calls it before the step starts, with the whole plan: a landing on a node the
// plan changes is then that node's own step's business, and the step waits for it. The
// executor calls it again before each drain pass, with a plan of the step alone, so every
// landing counts by then, and one the scheduler or another workload took mid-drain stops the
// evictions instead of leaving pods pending. Pods already evicted are not counted: their
// replacements have taken, or will take, their share of the landing.
func LandingGone(plan *v1alpha1.RepartitionPlan, step v1alpha1.NodeStep, f Facts) string {
	changes := map[string]bool{}
	for _, s := range plan.Spec.Steps {
		changes[s.Node] = true
	}
	type need struct {
		mig   map[string]int64
		whole int64
		pods  []string
	}
	needs := map[string]*need{}
	var order []string
	for _, e := range step.Evictions {
		if e.LandingNode == "" || e.LandingNode == step.Node || changes[e.LandingNode] {
			continue
		}
		key := e.Namespace + "/" + e.Name
		p, ok := f.Pods[key]
		if !ok || p.Node != step.Node {
			// Gone or moved already: nothing of it to land.
			continue
		}
		n := needs[e.LandingNode]
		if n == nil {
			n = &need{mig: map[string]int64{}}
			needs[e.LandingNode] = n
			order = append(order, e.LandingNode)
		}
		for profile, c := range p.MIG {
			n.mig[profile] += c
		}
		n.whole += p.WholeGPUs
		n.pods = append(n.pods, key)
	}
	for _, node := range order {
		n := needs[node]
		gpus, ok := f.GPUs[node]
		switch {
		case !ok:
			return fmt.Sprintf("node %s, where the plan moves %s, has no GPU report any more", node, strings.Join(n.pods, ", "))
		case f.Cordoned[node]:
			return fmt.Sprintf("node %s, where the plan moves %s, is cordoned now", node, strings.Join(n.pods, ", "))
		case f.Unavailable[node] != "":
			return fmt.Sprintf("node %s, where the plan moves %s, %s now", node, strings.Join(n.pods, ", "), f.Unavailable[node])
		}
		free, whole := map[string]int64{}, int64(0)
		for _, g := range gpus {
			if g.MIGMode == nil || g.MIGMode.Current != "Enabled" {
				if len(g.Pods) == 0 {
					whole++
				}
				continue
			}
			for _, in := range g.Instances {
				if in.Pod == nil && !in.Busy {
					free[in.Profile]++
				}
			}
		}
		for _, profile := range slices.Sorted(maps.Keys(n.mig)) {
			if free[profile] < n.mig[profile] {
				return fmt.Sprintf("node %s has %d free %s now and the plan moves %s there needing %d: the landing was taken, so the plan is made again",
					node, free[profile], profile, strings.Join(n.pods, ", "), n.mig[profile])
			}
		}
		if whole < n.whole {
			return fmt.Sprintf("node %s has %d free whole GPU(s) now and the plan moves %s there needing %d: the landing was taken, so the plan is made again",
				node, whole, strings.Join(n.pods, ", "), n.whole)
		}
	}
	return ""
}

func podsOn(g v1alpha1.GPUStatus) []v1alpha1.PodReference {
	out := slices.Clone(g.Pods)
	for _, in := range g.Instances {
		if in.Pod != nil {
			out = append(out, *in.Pod)
		}
	}
	return out
}

func countsString(c v1alpha1.ProfileCounts) string {
	if len(c) == 0 {
		return "MIG disabled"
	}
	parts := make([]string, 0, len(c))
	for _, p := range slices.Sorted(maps.Keys(c)) {
		parts = append(parts, fmt.Sprintf("%dx%s", c[p], p))
	}
	return strings.Join(parts, "+")
}
