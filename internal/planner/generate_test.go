package planner_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/planner"
)

// genConfig sizes the random scenarios of one test.
type genConfig struct {
	maxNodes, maxGPUs, maxPending int
	// minCatalog and maxCatalog bound how many MIG profiles the policy's catalog allows.
	minCatalog, maxCatalog int
	minBudget, maxBudget   int
	// priorities pending pods draw from.
	priorities []int32
	// extras adds what the optimum search does not model: standby shapes, frozen and
	// cordoned nodes, in-flight plans, shared-replica requests and +me profiles.
	extras bool
	// The fields below are zero in the older configs, which then draw exactly the scenarios
	// (and random numbers) they drew before the fields existed.
	// minNodes, minGPUs and minPending raise the lower bounds (1 when zero).
	minNodes, minGPUs, minPending int
	// products are the gpu.product labels to draw from; gpuProducts when nil.
	products []string
	// minBusy and maxBusy bound the share of free instances and MIG-off GPUs that running
	// pods take; any share when maxBusy is zero.
	minBusy, maxBusy float64
}

// propertyConfig is the full variety the property tests and the fuzz target draw from.
var propertyConfig = genConfig{
	maxNodes: 6, maxGPUs: 4, maxPending: 12,
	minCatalog: 0, maxCatalog: 6, minBudget: 0, maxBudget: 3,
	priorities: []int32{0, 10}, extras: true,
}

// gpuProducts are nvidia.com/gpu.product label values of the products scenarios use.
var gpuProducts = []string{"NVIDIA-H200", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-A30"}

// scenario is one random pool: the cluster objects, the policy and the planner's extra inputs.
type scenario struct {
	// origin says how to make the scenario again: its seed, or the fuzz input.
	origin   string
	prod     *mig.Product
	c        *cluster
	pol      *v1alpha1.GPUPoolPolicy
	frozen   map[string]string
	inFlight int
}

// input builds the planner's input from the scenario's objects, as the controller would.
func (s *scenario) input() planner.Input {
	in := s.c.input(s.pol)
	in.Frozen, in.InFlightDisrupting = s.frozen, s.inFlight
	return in
}

// shuffledInput is input with every object list in a random order (pending pods included), to
// check that the plan does not depend on the order the informers return objects in.
func (s *scenario) shuffledInput(r *rand.Rand) planner.Input {
	nodes, gpuNodes := slices.Clone(s.c.nodes), slices.Clone(s.c.gpuNodes)
	pods, pdbs := slices.Clone(s.c.pods), slices.Clone(s.c.pdbs)
	r.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	r.Shuffle(len(gpuNodes), func(i, j int) { gpuNodes[i], gpuNodes[j] = gpuNodes[j], gpuNodes[i] })
	r.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
	r.Shuffle(len(pdbs), func(i, j int) { pdbs[i], pdbs[j] = pdbs[j], pdbs[i] })
	snap := inventory.Build(nodes, gpuNodes, fixture.Pointers(pods), pdbs, inventory.Options{Now: now})
	pending, _ := demand.Pending(fixture.Pointers(pods), now, 30*time.Second)
	return planner.Input{Snapshot: snap, Pending: pending, Policy: s.pol, Frozen: s.frozen, InFlightDisrupting: s.inFlight, Now: now}
}

// newRand is the generator of one seed; the second PCG word tells the tests' streams apart.
func newRand(seed, stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }

// byteSource replays fuzzer bytes as random draws, one byte per draw repeated over all eight
// bytes so that both the low bits (IntN of a power of two) and the high bits (other IntN) follow
// it; once the bytes run out it continues with a PCG stream, so that every draw terminates.
type byteSource struct {
	data []byte
	tail *rand.PCG
}

func newByteSource(data []byte) *byteSource {
	var seed [8]byte
	copy(seed[:], data)
	return &byteSource{data: data, tail: rand.NewPCG(binary.LittleEndian.Uint64(seed[:]), uint64(len(data)))}
}

func (b *byteSource) Uint64() uint64 {
	if len(b.data) == 0 {
		return b.tail.Uint64()
	}
	v := uint64(b.data[0]) * 0x0101010101010101
	b.data = b.data[1:]
	return v
}

// hold is one GPU resource a running pod holds: instance inst of GPU gpu, or the whole GPU
// when inst is -1.
type hold struct{ gpu, inst int }

// bind adds a running pod on node that holds exactly the listed instances or whole GPUs and
// requests them, so that a pod may hold several instances, on several GPUs.
func (c *cluster) bind(name, node string, holds []hold, opts ...podOpt) *cluster {
	gn := &c.gpuNodes[slices.IndexFunc(c.gpuNodes, func(g v1alpha1.GPUNode) bool { return g.Name == node })]
	res := map[string]int64{}
	for _, h := range holds {
		if h.inst < 0 {
			res["nvidia.com/gpu"]++
		} else {
			res[mig.ResourceName(gn.Status.GPUs[h.gpu].Instances[h.inst].Profile)]++
		}
	}
	p := newPod(name, res, opts...)
	p.Spec.NodeName = node
	p.Status.Phase = corev1.PodRunning
	c.pods = append(c.pods, p)
	ref := v1alpha1.PodReference{Namespace: p.Namespace, Name: p.Name}
	for _, h := range holds {
		g := &gn.Status.GPUs[h.gpu]
		if h.inst < 0 {
			g.Pods = append(g.Pods, ref)
			continue
		}
		in := &g.Instances[h.inst]
		if in.Pod != nil || in.Busy {
			c.t.Fatalf("%s: instance %d of GPU %d on %s is taken", name, h.inst, h.gpu, node)
		}
		in.Pod, in.Busy = ptr.To(ref), true
	}
	return c
}

// unmanaged makes a pod that no controller recreates, which gpupool never evicts by default.

// plainProfiles are the product's profiles without media extensions, larger first.
func plainProfiles(p *mig.Product) []string {
	var out []string
	for _, pr := range p.Profiles {
		if !pr.Special() {
			out = append(out, pr.Name)
		}
	}
	return out
}

// mediaProfiles are the product's +me profiles.
func mediaProfiles(p *mig.Product) []string {
	var out []string
	for _, pr := range p.Profiles {
		if pr.Media == mig.MediaExtensions {
			out = append(out, pr.Name)
		}
	}
	return out
}

// randomLayout is a GPU's current layout as the fixture's node() takes it: "off", one of the
// product's maximal layouts, or a random part of one (possibly MIG on with no instance).
func randomLayout(r *rand.Rand, p *mig.Product) string {
	layouts := p.MaximalLayouts()
	l := layouts[r.IntN(len(layouts))]
	switch r.IntN(8) {
	case 0:
		return "off"
	case 1, 2:
		part := mig.Layout{}
		for _, name := range l.Names() {
			for range l[name] {
				if r.IntN(2) == 0 {
					part[name]++
				}
			}
		}
		return part.String()
	}
	return l.String()
}

// pick returns a random element.
func pick[T any](r *rand.Rand, list []T) T { return list[r.IntN(len(list))] }

// genScenario draws a random pool of one product: nodes with random layouts, running pods
// holding some instances (some of which may not be evicted), pending pods and a policy.
func genScenario(t testing.TB, r *rand.Rand, origin string, cfg genConfig) *scenario {
	products := gpuProducts
	if cfg.products != nil {
		products = cfg.products
	}
	label := pick(r, products)
	prod, ok := mig.LookupProduct(label)
	if !ok {
		t.Fatalf("unknown product %s", label)
	}
	s := &scenario{origin: origin, prod: prod, c: newCluster(t), frozen: map[string]string{}}
	c := s.c
	nodes := atLeast(r, cfg.minNodes, cfg.maxNodes)
	for i := range nodes {
		layouts := make([]string, atLeast(r, cfg.minGPUs, cfg.maxGPUs))
		for g := range layouts {
			layouts[g] = randomLayout(r, prod)
		}
		c.node(fmt.Sprintf("node-%d", i), label, layouts...)
	}
	genRunning(r, c, cfg.minBusy, cfg.maxBusy)
	c.pdb("pdb-a", "pdb-a", int32(r.IntN(3))).pdb("pdb-b", "pdb-b", int32(r.IntN(3)))

	profiles := plainProfiles(prod)
	if cfg.extras && r.IntN(4) == 0 {
		profiles = append(profiles, mediaProfiles(prod)...)
	}
	catalogProfiles := slices.Clone(profiles)
	r.Shuffle(len(catalogProfiles), func(i, j int) {
		catalogProfiles[i], catalogProfiles[j] = catalogProfiles[j], catalogProfiles[i]
	})
	hi := min(cfg.maxCatalog, len(catalogProfiles))
	lo := min(cfg.minCatalog, hi)
	catalogProfiles = catalogProfiles[:lo+r.IntN(hi-lo+1)]
	for i := range atLeast(r, cfg.minPending, cfg.maxPending) {
		res := map[string]int64{}
		switch k := r.IntN(10); {
		case k < 2:
			res["nvidia.com/gpu"] = 1 + int64(r.IntN(2))
		case k == 2 && cfg.extras && r.IntN(4) == 0:
			res["nvidia.com/gpu.shared"] = 1
		default:
			n := int64(1)
			if r.IntN(4) == 0 {
				n = 2
			}
			// Mostly what the catalog allows, so that serving needs a change, not a new policy.
			wanted := profiles
			if len(catalogProfiles) > 0 && r.IntN(4) > 0 {
				wanted = catalogProfiles
			}
			res[mig.ResourceName(pick(r, wanted))] = n
		}
		opts := []podOpt{fixture.Priority(pick(r, cfg.priorities))}
		switch r.IntN(12) {
		case 0:
			opts = append(opts, nodeSelector("zone", "nowhere"))
		case 1:
			opts = append(opts, nodeSelector("kubernetes.io/hostname", fmt.Sprintf("node-%d", r.IntN(nodes))))
		}
		switch r.IntN(10) {
		case 0:
			opts = append(opts, cpu("100"))
		case 1:
			opts = append(opts, cpu("40"))
		case 2:
			opts = append(opts, cpu("24"))
		}
		c.pending(fmt.Sprintf("pend-%02d", i), res, opts...)
	}

	opts := []policyOpt{
		catalog(prod.Name, r.IntN(3) == 0, catalogProfiles...),
		budget(cfg.minBudget + r.IntN(cfg.maxBudget-cfg.minBudget+1)),
		approval(pick(r, []v1alpha1.ApprovalMode{v1alpha1.ApprovalManual, v1alpha1.ApprovalAuto, v1alpha1.ApprovalAutoIdle})),
	}
	if cfg.extras {
		if r.IntN(4) == 0 {
			shape := "nvidia.com/gpu"
			if len(catalogProfiles) > 0 && r.IntN(3) > 0 {
				shape = mig.ResourceName(pick(r, catalogProfiles))
			}
			opts = append(opts, standby(shape, 1+int32(r.IntN(3))))
		}
		if r.IntN(6) == 0 {
			s.frozen[fmt.Sprintf("node-%d", r.IntN(nodes))] = "another policy also selects the node"
		}
		if r.IntN(6) == 0 {
			s.inFlight = 1
		}
		if r.IntN(10) == 0 {
			c.nodes[r.IntN(nodes)].Spec.Unschedulable = true
		}
		if r.IntN(5) == 0 {
			pct := pick(r, []string{"25%", "50%", "100%"})
			opts = append(opts, func(p *v1alpha1.GPUPoolPolicy) { p.Spec.Disruption.MaxDisruptedNodes = ptrIntOrString(pct) })
		}
	}
	s.pol = policy(opts...)
	return s
}

// atLeast draws a count from max(lo, 1) to hi, with the one draw 1 + r.IntN(hi) makes when lo
// is at most 1, so that configs without lower bounds keep their scenarios.
func atLeast(r *rand.Rand, lo, hi int) int {
	lo = max(lo, 1)
	return lo + r.IntN(hi-lo+1)
}

// genRunning puts running pods on a share of the free instances and MIG-off GPUs (a share
// between minBusy and maxBusy when maxBusy is set, any share otherwise). A pod
// sometimes holds a second instance of the same profile or a second whole GPU elsewhere on the
// node; some instances are used by processes outside Kubernetes. Pods draw their eviction
// rules at random: do-not-disrupt, unmanaged, covered by a PodDisruptionBudget, or plain.
func genRunning(r *rand.Rand, c *cluster, minBusy, maxBusy float64) {
	share := r.Float64()
	if maxBusy > 0 {
		share = minBusy + share*(maxBusy-minBusy)
	}
	pods := 0
	for ni := range c.gpuNodes {
		gn := &c.gpuNodes[ni]
		free := func(h hold) bool {
			g := &gn.Status.GPUs[h.gpu]
			if h.inst < 0 {
				return g.MIGMode.Current == "Disabled" && len(g.Pods) == 0
			}
			return g.Instances[h.inst].Pod == nil && !g.Instances[h.inst].Busy
		}
		var all []hold
		for gi, g := range gn.Status.GPUs {
			if g.MIGMode.Current == "Disabled" {
				all = append(all, hold{gi, -1})
			}
			for k := range g.Instances {
				all = append(all, hold{gi, k})
			}
		}
		for _, h := range all {
			if !free(h) {
				continue
			}
			if h.inst >= 0 && r.IntN(25) == 0 {
				gn.Status.GPUs[h.gpu].Instances[h.inst].Busy = true
				continue
			}
			if r.Float64() >= share {
				continue
			}
			holds := []hold{h}
			if r.IntN(6) == 0 {
				same := func(o hold) bool {
					if o == h || !free(o) || (o.inst < 0) != (h.inst < 0) {
						return false
					}
					return h.inst < 0 || gn.Status.GPUs[o.gpu].Instances[o.inst].Profile == gn.Status.GPUs[h.gpu].Instances[h.inst].Profile
				}
				if i := slices.IndexFunc(all, same); i >= 0 {
					holds = append(holds, all[i])
				}
			}
			var opts []podOpt
			switch k := r.IntN(20); {
			case k < 2:
				opts = append(opts, fixture.Annotated(v1alpha1.AnnotationDoNotDisrupt, "true"))
			case k < 3:
				opts = append(opts, fixture.Unowned())
			case k < 9:
				opts = append(opts, fixture.Labelled("app", "pdb-a"))
			case k < 12:
				opts = append(opts, fixture.Labelled("app", "pdb-b"))
			}
			c.bind(fmt.Sprintf("run-%02d", pods), gn.Name, holds, opts...)
			pods++
		}
	}
}

// describe renders a scenario for a failure message: enough to rebuild it by hand.
func (s *scenario) describe() string {
	var b strings.Builder
	spec := &s.pol.Spec
	fmt.Fprintf(&b, "%s: product %s, budget %s, approval %s, in-flight %d, frozen %v\n",
		s.origin, s.prod.Name, describeBudget(spec.Disruption.MaxDisruptedNodes), spec.Disruption.Approval, s.inFlight, s.frozen)
	for _, e := range spec.Catalog {
		fmt.Fprintf(&b, "  catalog %s: %v allowWholeGPU=%t\n", e.Product, e.MIGProfiles, e.AllowWholeGPU)
	}
	for _, sh := range spec.Shapes {
		fmt.Fprintf(&b, "  standby %s x%d\n", sh.Resource, sh.MinFree)
	}
	for i, gn := range s.c.gpuNodes {
		cordoned := ""
		if s.c.nodes[i].Spec.Unschedulable {
			cordoned = " (cordoned)"
		}
		fmt.Fprintf(&b, "  %s%s\n", gn.Name, cordoned)
		for _, g := range gn.Status.GPUs {
			if g.MIGMode.Current == "Disabled" {
				fmt.Fprintf(&b, "    gpu %d: MIG off, pods %v\n", g.Index, g.Pods)
				continue
			}
			var parts []string
			for _, in := range g.Instances {
				who := "free"
				switch {
				case in.Pod != nil:
					who = in.Pod.Name
				case in.Busy:
					who = "process"
				}
				parts = append(parts, fmt.Sprintf("%s@%d=%s", in.Profile, in.Placement.Start, who))
			}
			fmt.Fprintf(&b, "    gpu %d: %s\n", g.Index, strings.Join(parts, " "))
		}
	}
	for _, p := range s.c.pods {
		var rules []string
		if p.Annotations[v1alpha1.AnnotationDoNotDisrupt] == "true" {
			rules = append(rules, "do-not-disrupt")
		}
		if len(p.OwnerReferences) == 0 {
			rules = append(rules, "unmanaged")
		}
		if app := p.Labels["app"]; app != "" {
			rules = append(rules, app)
		}
		if len(p.Spec.NodeSelector) > 0 {
			rules = append(rules, fmt.Sprintf("selector %v", p.Spec.NodeSelector))
		}
		if p.Spec.Priority != nil && *p.Spec.Priority != 0 {
			rules = append(rules, fmt.Sprintf("priority %d", *p.Spec.Priority))
		}
		var res []string
		for name, q := range p.Spec.Containers[0].Resources.Requests {
			if name != corev1.ResourceMemory {
				res = append(res, fmt.Sprintf("%s=%s", name, q.String()))
			}
		}
		slices.Sort(res)
		where := "pending"
		if p.Spec.NodeName != "" {
			where = "on " + p.Spec.NodeName
		}
		fmt.Fprintf(&b, "  pod %s %s: %s %s\n", p.Name, where, strings.Join(res, ","), strings.Join(rules, ","))
	}
	for _, p := range s.c.pdbs {
		fmt.Fprintf(&b, "  pdb %s allows %d\n", p.Name, p.Status.DisruptionsAllowed)
	}
	return b.String()
}

// describeBudget renders maxDisruptedNodes.
func describeBudget(v *intstr.IntOrString) string {
	if v == nil {
		return "default"
	}
	return v.String()
}

// describeResult renders what a plan does, for failure messages.
func describeResult(res *planner.Result) string {
	var b strings.Builder
	for _, s := range res.Steps {
		fmt.Fprintf(&b, "  step %s:", s.Node)
		for _, g := range s.GPUs {
			fmt.Fprintf(&b, " gpu %d %q->%q", g.Index, g.From.String(), g.To.String())
		}
		for _, e := range s.Evictions {
			fmt.Fprintf(&b, " evict %s", e.Pod.Name)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "  served %v\n  fits now %v\n", res.Served, res.FitsNow)
	for _, u := range res.Unserved {
		fmt.Fprintf(&b, "  unserved %s: %s %s\n", u.Pod.Name, u.Reason, u.Message)
	}
	return b.String()
}
