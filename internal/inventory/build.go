// Building a Snapshot: each node's pods, free resources and GPUs, and whether its agent's report can be planned with.

package inventory

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/podrecord"
)

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

func addTo(sum, add corev1.ResourceList) {
	for name, q := range add {
		cur := sum[name]
		cur.Add(q)
		sum[name] = cur
	}
}
