package workloads

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
)

// Packing is how many of a pool's GPUs and nodes a set of devices needs when packed onto them
// afresh: every GPU re-carved to whatever holds its share, whole GPUs for pods that ask for
// one.
type Packing struct {
	GPUs, Nodes int
	// Unplaced counts devices that no GPU of the pool can hold.
	Unplaced int
}

// Gain is what applying the recommendations frees in one pool.
type Gain struct {
	// Policy is the GPUPoolPolicy whose nodes make the pool.
	Policy string
	// Pods is how many GPU pods run in the pool; NowGPUs and NowNodes what they hold now (the
	// GPUs whose instances, or the whole GPU, a pod holds, as the agents report them).
	Pods              int
	NowGPUs, NowNodes int
	// Before packs the devices the pods ask for; After the same with every confident
	// recommendation applied. Before minus After is what right-sizing frees, apart from
	// what repacking alone would.
	Before, After Packing
	// Applied are the workloads whose recommendation changed a device in this pool.
	Applied []Result
}

// FreedGPUs and FreedNodes are what right-sizing frees: GPUs and nodes the packing leaves
// empty once the recommendations are applied.
func (g Gain) FreedGPUs() int  { return g.Before.GPUs - g.After.GPUs }
func (g Gain) FreedNodes() int { return g.Before.Nodes - g.After.Nodes }

// Gains says, per policy, how many GPUs and nodes the pods running in its pool would need if
// each confident recommendation of results (Result.Confident: Shrink or Grow) were applied,
// against what they need as they ask now. Both are first-fit-decreasing packings onto the
// pool's GPUs, filling a node before opening the next, so that the difference is the
// recommendations' and not a better packing's. A node several policies select is counted in
// none, as the planner leaves it alone.
func Gains(in Input, results []Result) []Gain {
	recommended := map[types.NamespacedName]*Result{}
	for i := range results {
		if results[i].Confident() {
			for _, p := range results[i].Pods {
				recommended[p] = &results[i]
			}
		}
	}
	inv := inventory.Build(in.Nodes, in.GPUNodes, nil, nil, inventory.Options{})
	owner := map[string]string{} // node -> the one policy that selects it, "" for several
	for i := range in.Policies {
		sel, err := in.Policies[i].Spec.NodeSelector.Selector()
		if err != nil {
			continue
		}
		for _, n := range inv.Nodes {
			if n.Object == nil || !sel.Matches(labels.Set(n.Object.Labels)) {
				continue
			}
			if _, taken := owner[n.Name]; taken {
				owner[n.Name] = ""
			} else {
				owner[n.Name] = in.Policies[i].Name
			}
		}
	}
	gains := map[string]*Gain{}
	gpus := map[string][]poolGPU{}
	for _, n := range inv.Nodes {
		policy := owner[n.Name]
		if policy == "" {
			continue
		}
		g := gains[policy]
		if g == nil {
			g = &Gain{Policy: policy}
			gains[policy] = g
		}
		held := 0
		for _, gpu := range n.GPUs {
			if gpu.Product == nil {
				continue
			}
			gpus[policy] = append(gpus[policy], poolGPU{node: n.Name, product: gpu.Product})
			if heldByPod(gpu) {
				held++
			}
		}
		g.NowGPUs += held
		if held > 0 {
			g.NowNodes++
		}
	}
	before, after := map[string][]string{}, map[string][]string{}
	applied := map[string]map[Key]*Result{}
	for _, p := range in.Pods {
		policy := owner[p.NodeName]
		if policy == "" || p.Phase == corev1.PodSucceeded || p.Phase == corev1.PodFailed {
			continue
		}
		devices := devicesOf(p.Requests)
		if len(devices) == 0 {
			continue
		}
		gains[policy].Pods++
		before[policy] = append(before[policy], devices...)
		r := recommended[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}]
		if r == nil {
			after[policy] = append(after[policy], devices...)
			continue
		}
		requested := r.Requested
		if requested == WholeGPU {
			requested = ""
		}
		for _, d := range devices {
			if d == requested {
				d = r.Profile
			}
			after[policy] = append(after[policy], d)
		}
		if applied[policy] == nil {
			applied[policy] = map[Key]*Result{}
		}
		applied[policy][r.Key] = r
	}
	out := make([]Gain, 0, len(gains))
	for _, policy := range slices.Sorted(maps.Keys(gains)) {
		g := gains[policy]
		g.Before = pack(gpus[policy], before[policy])
		g.After = pack(gpus[policy], after[policy])
		for _, k := range slices.SortedFunc(maps.Keys(applied[policy]), func(a, b Key) int {
			return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Kind, b.Kind), strings.Compare(a.Name, b.Name))
		}) {
			g.Applied = append(g.Applied, *applied[policy][k])
		}
		out = append(out, *g)
	}
	return out
}

// heldByPod reports whether a pod holds the GPU or one of its instances, as its agent reports.
func heldByPod(g *inventory.GPU) bool {
	if len(g.Pods) > 0 {
		return true
	}
	return slices.ContainsFunc(g.Instances, func(in inventory.Instance) bool { return in.Pod != nil })
}

// devicesOf lists the devices requests ask for: a MIG profile per instance, "" per whole GPU.
// Shared devices are left out: their pods hold a share, not a device.
func devicesOf(requests corev1.ResourceList) []string {
	var out []string
	for _, r := range slices.Sorted(maps.Keys(requests)) {
		device, ok := deviceOf(r)
		if !ok {
			continue
		}
		q := requests[r]
		for range q.Value() {
			out = append(out, device)
		}
	}
	return out
}

// poolGPU is one GPU a packing may use.
type poolGPU struct {
	node    string
	product *mig.Product
}

// pack places devices ("" a whole GPU) first-fit decreasing onto gpus: largest first, each on
// the first open GPU whose re-carved layout still fits, else on a new GPU, taken from a node
// already in use before a new node is opened.
func pack(gpus []poolGPU, devices []string) Packing {
	slices.SortStableFunc(gpus, func(a, b poolGPU) int { return strings.Compare(a.node, b.node) })
	size := func(d string) int {
		if d == "" {
			return mig.MaxMemorySlices + 1
		}
		for _, g := range gpus {
			if p, ok := g.product.Profile(d); ok {
				return p.MemorySlices
			}
		}
		return 0
	}
	devices = slices.Clone(devices)
	slices.SortStableFunc(devices, func(a, b string) int { return cmp.Compare(size(b), size(a)) })
	type open struct {
		layout mig.Layout
		whole  bool
	}
	opened := make([]*open, len(gpus))
	nodes := map[string]bool{}
	var out Packing
	fits := func(i int, d string) bool {
		o := opened[i]
		if d == "" {
			return o == nil
		}
		if o != nil && o.whole {
			return false
		}
		want := mig.Layout{d: 1}
		if o != nil {
			want = maps.Clone(o.layout)
			want[d]++
		}
		return gpus[i].product.Fits(want)
	}
	for _, d := range devices {
		// An open GPU first, then an unopened one on a node in use, then any.
		choice := -1
		for pass := 0; pass < 3 && choice < 0; pass++ {
			for i := range gpus {
				isOpen := opened[i] != nil
				if (pass == 0) != isOpen || (pass == 1 && !nodes[gpus[i].node]) {
					continue
				}
				if fits(i, d) {
					choice = i
					break
				}
			}
		}
		if choice < 0 {
			out.Unplaced++
			continue
		}
		if opened[choice] == nil {
			opened[choice] = &open{layout: mig.Layout{}, whole: d == ""}
			out.GPUs++
			if !nodes[gpus[choice].node] {
				nodes[gpus[choice].node] = true
				out.Nodes++
			}
		}
		if d != "" {
			opened[choice].layout[d]++
		}
	}
	return out
}

// UsageReported reports whether any GPUNode carries usage: without any, no workload can be
// recommended (a snapshot taken before the agents published usage, or agents that do not).
func UsageReported(gpuNodes []v1alpha1.GPUNode) bool {
	return slices.ContainsFunc(gpuNodes, func(g v1alpha1.GPUNode) bool { return len(g.Status.Usage) > 0 })
}
