package planner_test

import (
	"math/rand/v2"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/planner"
)

// sharing sets the H200 catalog entry's sharing choices (nil leaves a mode out).
func sharing(ts, mps []int32) policyOpt {
	return func(p *v1alpha1.GPUPoolPolicy) {
		if len(p.Spec.Catalog) == 0 {
			catalog("H200", false, "1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")(p)
		}
		sc := &v1alpha1.SharingCatalog{}
		if ts != nil {
			sc.TimeSlicing = &v1alpha1.ReplicaChoices{Replicas: ts}
		}
		if mps != nil {
			sc.MPS = &v1alpha1.MPSReplicaChoices{Replicas: mps}
		}
		p.Spec.Catalog[0].Sharing = sc
	}
}

var oneShare = map[string]int64{"nvidia.com/gpu.shared": 1}

// TestSharingConvertsAnIdleNodeWithTheFewestReplicasThatServeTheDemand guards the sharing
// decision: an idle node becomes MIG-disabled GPUs shared by time-slicing, with the smallest
// allowed replica count that serves every pending pod (each pod gets the largest share).
func TestSharingConvertsAnIdleNodeWithTheFewestReplicasThatServeTheDemand(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t).node("gpu-1", "NVIDIA-H200", "1g.18gb:7", "1g.18gb:7")
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		c.pending(name, oneShare)
	}
	res := c.plan(policy(sharing([]int32{8, 2, 4}, nil)))
	g.Expect(res.Unserved).To(BeEmpty())
	g.Expect(res.Served).To(HaveLen(5))
	g.Expect(res.Steps).To(HaveLen(1))
	step := res.Steps[0]
	g.Expect(step.Sharing).To(Equal(&v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: 4}),
		"2 replicas x 2 GPUs serve 4 of 5; 4 serve all")
	g.Expect(step.GPUs).To(HaveLen(2), "both GPUs leave MIG")
	for _, tg := range step.Target {
		g.Expect(tg.MIGEnabled).To(BeFalse())
	}
	g.Expect(step.Evictions).To(BeEmpty())

	plan := res.RepartitionPlan(policy(), now)
	g.Expect(plan.Spec.Steps[0].SharingConfigName).To(Equal("gpupool-ts-4"))
	g.Expect(plan.Spec.Steps[0].SharingConfig).To(Equal(step.Sharing))
}

// TestSharingPrefersMPSWhenAllowed guards the mode choice: MPS gives each client its own share
// of memory and compute, so it wins when the catalog allows it and the device plugin can run
// it; it is only ever on MIG-disabled GPUs.
func TestSharingPrefersMPSWhenAllowed(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t).node("gpu-1", "NVIDIA-H200", "1g.18gb:7").
		pending("a", oneShare).pending("b", oneShare).pending("c", oneShare)
	in := c.input(policy(sharing([]int32{4}, []int32{2, 8})))
	in.AllowMPS = true
	res, err := planner.Plan(in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Steps).To(HaveLen(1))
	g.Expect(res.Steps[0].Sharing).To(Equal(&v1alpha1.SharingConfig{Mode: v1alpha1.SharingMPS, Replicas: 8}))
	g.Expect(res.Steps[0].Target[0].MIGEnabled).To(BeFalse())
}

// TestSharingNeverTouchesANodeWithRunningPods guards that sharing never evicts: a node with a
// pod on any GPU is left alone and the shared pods are told why.
func TestSharingNeverTouchesANodeWithRunningPods(t *testing.T) {
	g := NewWithT(t)
	res := newCluster(t).node("gpu-1", "NVIDIA-H200", "1g.18gb:7", "1g.18gb:7").
		running("busy", "gpu-1", 1, "1g.18gb").
		pending("a", oneShare).
		plan(policy(sharing([]int32{2}, nil)))
	g.Expect(res.Steps).To(BeEmpty())
	g.Expect(res.Unserved).To(HaveLen(1))
	g.Expect(res.Unserved[0].Reason).To(Equal(planner.ReasonCapacity))
	g.Expect(res.Unserved[0].Message).To(ContainSubstring("sharing converts only idle nodes"))
}

// TestSharingIsExplainedWhenItCannotBePlanned guards the reasons of shared pods the planner
// cannot serve: no sharing in the catalog, and replicas of MIG devices.
func TestSharingIsExplainedWhenItCannotBePlanned(t *testing.T) {
	g := NewWithT(t)
	res := newCluster(t).node("gpu-1", "NVIDIA-H200", "1g.18gb:7").pending("a", oneShare).plan(policy())
	g.Expect(res.Unserved).To(HaveLen(1))
	g.Expect(res.Unserved[0].Reason).To(Equal(planner.ReasonPartitionShape))
	g.Expect(res.Unserved[0].Message).To(ContainSubstring("set spec.catalog[].sharing"))

	res = newCluster(t).node("gpu-1", "NVIDIA-H200", "1g.18gb:7").
		pending("a", map[string]int64{"nvidia.com/mig-1g.18gb.shared": 1}).plan(policy(sharing(nil, []int32{2})))
	g.Expect(res.Unserved).To(HaveLen(1))
	g.Expect(res.Unserved[0].Reason).To(Equal(planner.ReasonPartitionShape))
	g.Expect(res.Unserved[0].Message).To(ContainSubstring("MPS does not share MIG devices"))
}

// TestSharingOfMIGDevicesCarvesTheProfileAndTimeSlicesIt guards sharing MIG devices: an idle
// node is carved into as many instances of the requested profile as fit and time-sliced with
// the fewest replicas that serve the demand; MPS is never chosen for MIG devices.
func TestSharingOfMIGDevicesCarvesTheProfileAndTimeSlicesIt(t *testing.T) {
	g := NewWithT(t)
	res := newCluster(t).node("gpu-1", "NVIDIA-H200", "1g.18gb:7").
		pending("a", map[string]int64{"nvidia.com/mig-3g.71gb.shared": 1}).
		pending("b", map[string]int64{"nvidia.com/mig-3g.71gb.shared": 1}).
		pending("c", map[string]int64{"nvidia.com/mig-3g.71gb.shared": 1}).
		plan(policy(sharing([]int32{2, 4}, []int32{2})))
	g.Expect(res.Unserved).To(BeEmpty())
	g.Expect(res.Served).To(HaveLen(3))
	g.Expect(res.Steps).To(HaveLen(1))
	step := res.Steps[0]
	g.Expect(step.Sharing).To(Equal(&v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: 2}),
		"two 3g instances x 2 replicas serve 3 pods")
	g.Expect(step.Target).To(ConsistOf(mig.GPUTarget{Index: 0, MIGEnabled: true, Layout: mig.Layout{"3g.71gb": 2}}))
	g.Expect(step.GPUs).To(HaveLen(1))
}

// TestSharingProperties guards, on random pools, the rules the device plugin imposes and the
// planner's own: sharing only on MIG-disabled GPUs (never MPS on MIG), one setting per node,
// never on a node with running pods, never more shared pods served on a node than replicas,
// and never more nodes changed than the budget.
func TestSharingProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	sharedSteps := 0
	for iter := range 300 {
		c := newCluster(t)
		nodes := 1 + rng.IntN(5)
		busy := map[string]bool{}
		gpus := map[string]int{}
		for n := range nodes {
			name := "gpu-" + itoa(n)
			layouts := []string{"1g.18gb:7", "3g.71gb:2", "off"}
			k := 1 + rng.IntN(2)
			var ls []string
			for range k {
				ls = append(ls, layouts[rng.IntN(len(layouts))])
			}
			c.node(name, "NVIDIA-H200", ls...)
			gpus[name] = k
			if ls[0] == "1g.18gb:7" && rng.IntN(3) == 0 {
				c.running("r"+itoa(n), name, 0, "1g.18gb")
				busy[name] = true
			}
		}
		for p := range rng.IntN(12) {
			switch rng.IntN(3) {
			case 0:
				c.pending("s"+itoa(p), map[string]int64{"nvidia.com/gpu.shared": int64(1 + rng.IntN(2))})
			case 1:
				c.pending("t"+itoa(p), map[string]int64{"nvidia.com/mig-3g.71gb.shared": 1})
			default:
				c.pending("m"+itoa(p), mig1("3g.71gb"))
			}
		}
		var ts, mps []int32
		if rng.IntN(2) == 0 {
			ts = []int32{2, 4}
		}
		if rng.IntN(2) == 0 {
			mps = []int32{3}
		}
		b := 1 + rng.IntN(3)
		res := c.plan(policy(sharing(ts, mps), budget(b)))
		g := NewWithT(t)
		g.Expect(len(res.Steps)).To(BeNumerically("<=", b), "iteration %d: budget", iter)
		seen := map[string]bool{}
		for _, s := range res.Steps {
			g.Expect(seen).NotTo(HaveKey(s.Node), "iteration %d: one step, so one sharing setting, per node", iter)
			seen[s.Node] = true
			if s.Sharing == nil {
				continue
			}
			sharedSteps++
			g.Expect(busy[s.Node]).To(BeFalse(), "iteration %d: sharing changed %s, which runs a pod", iter, s.Node)
			g.Expect(s.Evictions).To(BeEmpty())
			g.Expect(s.Target).To(HaveLen(gpus[s.Node]))
			for _, tg := range s.Target {
				if s.Sharing.Mode == v1alpha1.SharingMPS {
					g.Expect(tg.MIGEnabled).To(BeFalse(), "iteration %d: MPS on a MIG GPU", iter)
				}
				g.Expect(len(tg.Layout)).To(BeNumerically("<=", 1), "iteration %d: a shared node carves one profile", iter)
				g.Expect(tg.Layout).To(Equal(s.Target[0].Layout), "iteration %d: one layout, one setting per node", iter)
			}
			if s.Sharing.Mode == v1alpha1.SharingMPS {
				g.Expect(mps).NotTo(BeNil())
			} else {
				g.Expect(ts).NotTo(BeNil())
			}
		}
		// Every served shared pod has a replica: count replicas asked by served shared pods
		// against the capacity the sharing steps create.
		capacity := 0
		for _, s := range res.Steps {
			if s.Sharing != nil {
				devices := gpus[s.Node]
				if n := s.Target[0].Layout["3g.71gb"]; n > 0 {
					devices *= n
				}
				capacity += int(s.Sharing.Replicas) * devices
			}
		}
		asked := 0
		for _, key := range res.Served {
			if key.Name[0] == 's' || key.Name[0] == 't' {
				for _, p := range c.pods {
					if p.Name == key.Name {
						q := p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu.shared"]
						r := p.Spec.Containers[0].Resources.Requests["nvidia.com/mig-3g.71gb.shared"]
						asked += int(q.Value() + r.Value())
					}
				}
			}
		}
		g.Expect(asked).To(BeNumerically("<=", capacity), "iteration %d: shared pods served beyond the replicas", iter)
	}
	NewWithT(t).Expect(sharedSteps).To(BeNumerically(">", 30), "the random pools exercise sharing")
}

// TestRecarvingASharedNodeStopsSharing guards the way back: a shared node whose idle GPUs the
// MIG pass re-carves for exclusive demand gets sharing None in the same step, so its new MIG
// devices are not advertised as replicas the pending pods cannot use.
func TestRecarvingASharedNodeStopsSharing(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t).node("gpu-1", "NVIDIA-H200", "off", "off")
	c.nodes[0].Status.Allocatable["nvidia.com/gpu.shared"] = resource.MustParse("8")
	res := c.pending("a", mig1("3g.71gb")).plan(policy(sharing([]int32{4}, nil)))
	g.Expect(res.Steps).To(HaveLen(1))
	g.Expect(res.Steps[0].Sharing).To(Equal(&v1alpha1.SharingConfig{Mode: v1alpha1.SharingNone}))
	g.Expect(res.RepartitionPlan(policy(), now).Spec.Steps[0].SharingConfigName).To(Equal("gpupool-none"))
}

// TestSharingNeverPlansMPSTheDevicePluginRefuses guards the GPU Operator contract: under the
// mixed MIG strategy (the default input) the device plugin refuses MPS and the node would
// advertise nothing, so the planner shares with time-slicing where the catalog allows it, and
// says why when the catalog allows only MPS.
func TestSharingNeverPlansMPSTheDevicePluginRefuses(t *testing.T) {
	g := NewWithT(t)
	cluster := func() *cluster {
		return newCluster(t).node("gpu-1", "NVIDIA-H200", "1g.18gb:7").
			pending("a", oneShare).pending("b", oneShare).pending("c", oneShare)
	}
	res := cluster().plan(policy(sharing([]int32{4}, []int32{2, 8})))
	g.Expect(res.Steps).To(HaveLen(1))
	g.Expect(res.Steps[0].Sharing).To(Equal(&v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: 4}))

	res = cluster().plan(policy(sharing(nil, []int32{8})))
	g.Expect(res.Steps).To(BeEmpty())
	g.Expect(res.Unserved).To(HaveLen(3))
	g.Expect(res.Unserved[0].Message).To(ContainSubstring("refuses MPS under the mixed MIG strategy"))
}

// TestStrandedLeavesOutSharedNodes guards the plan's expected stranded instances around
// sharing: a node the plan turns into time-sliced GPUs advertises no exclusive MIG instance
// afterwards, so its old free instances are not stranded after the plan, and a node that shares
// now and stays so holds none before or after (its devices are replicas of the shared
// resource). Counting them made the demo's plan expect 22 stranded instances where 8 remained.
func TestStrandedLeavesOutSharedNodes(t *testing.T) {
	shared := func(c *cluster, node, name string, n int64) {
		for i := range c.nodes {
			if c.nodes[i].Name == node {
				c.nodes[i].Status.Allocatable[corev1.ResourceName(name)] = *resource.NewQuantity(n, resource.DecimalSI)
			}
		}
	}
	for _, tc := range []struct {
		name          string
		build         func() *cluster
		before, after map[string]int
	}{{
		name: "an idle node turned into time-sliced whole GPUs strands nothing after the plan",
		build: func() *cluster {
			c := newCluster(t).node("gpu-1", "NVIDIA-H200", "1g.18gb:7", "1g.18gb:7").
				node("gpu-2", "NVIDIA-H200", "1g.18gb:7").running("busy", "gpu-2", 0, "1g.18gb")
			for _, name := range []string{"a", "b", "c"} {
				c.pending(name, oneShare)
			}
			return c
		},
		// gpu-2's 6 free 1g instances stay stranded; gpu-1's 14 leave MIG.
		before: map[string]int{"1g.18gb": 20}, after: map[string]int{"1g.18gb": 6},
	}, {
		name: "an idle node carved into shared 3g devices strands none of its instances",
		build: func() *cluster {
			return newCluster(t).node("gpu-1", "NVIDIA-H200", "1g.18gb:7").
				pending("a", map[string]int64{"nvidia.com/mig-3g.71gb.shared": 1})
		},
		before: map[string]int{"1g.18gb": 7}, after: map[string]int{},
	}, {
		name: "a node that shares its MIG devices now holds no stranded exclusive instance",
		build: func() *cluster {
			c := newCluster(t).node("gpu-1", "NVIDIA-H200", "1g.18gb:7").node("gpu-2", "NVIDIA-H200", "1g.18gb:7")
			shared(c, "gpu-1", "nvidia.com/mig-1g.18gb.shared", 14)
			return c
		},
		before: map[string]int{"1g.18gb": 7}, after: map[string]int{"1g.18gb": 7},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := tc.build().plan(policy(sharing([]int32{2, 4}, nil)))
			g.Expect(res.StrandedBefore).To(Equal(tc.before))
			g.Expect(res.StrandedAfter).To(Equal(tc.after))
			if len(res.Steps) == 0 {
				return
			}
			plan := res.RepartitionPlan(policy(), now)
			g.Expect(plan.Spec.Expected.StrandedAfter).To(HaveLen(len(tc.after)))
			for k, v := range tc.after {
				g.Expect(plan.Spec.Expected.StrandedAfter[k]).To(Equal(int32(v)))
			}
		})
	}
}
