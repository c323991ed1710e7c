package planner_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/planner"
)

func pod(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: "team", Name: name}
}

func TestPrefersIdleGPUOverEviction(t *testing.T) {
	g := NewWithT(t)
	res := newCluster(t).
		node("gpu-1", "NVIDIA-H200", "1g.18gb:7", "1g.18gb:7").
		running("infer-a", "gpu-1", 0, "1g.18gb").
		running("infer-b", "gpu-1", 0, "1g.18gb").
		pending("trainer", mig1("3g.71gb")).
		plan(policy())

	g.Expect(res.Served).To(ConsistOf(pod("trainer")))
	g.Expect(res.Unserved).To(BeEmpty())
	g.Expect(res.Steps).To(HaveLen(1))
	step := res.Steps[0]
	g.Expect(step.Evictions).To(BeEmpty(), "the idle GPU 1 serves the pod without disruption")
	g.Expect(step.GPUs).To(HaveLen(1))
	g.Expect(step.GPUs[0].Index).To(Equal(1))
	g.Expect(step.GPUs[0].From).To(Equal(mig.Layout{"1g.18gb": 7}))
	g.Expect(step.GPUs[0].To["3g.71gb"]).To(BeNumerically(">=", 1))
	g.Expect(res.Disruptive()).To(BeFalse())
}

func TestEvictsOnlyWhenNeededAndEvictedPodsFitAgain(t *testing.T) {
	g := NewWithT(t)
	res := newCluster(t).
		node("gpu-1", "NVIDIA-H200", "1g.18gb:7").
		running("infer-a", "gpu-1", 0, "1g.18gb").
		running("infer-b", "gpu-1", 0, "1g.18gb").
		pending("trainer", mig1("3g.71gb")).
		plan(policy())

	g.Expect(res.Served).To(ConsistOf(pod("trainer")))
	g.Expect(res.Steps).To(HaveLen(1))
	step := res.Steps[0]
	g.Expect(step.Evictions).To(HaveLen(2))
	g.Expect(step.Evictions[0].Reason).To(Equal("holds 1g.18gb on GPU 0"))
	to := step.GPUs[0].To
	g.Expect(to["3g.71gb"]).To(BeNumerically(">=", 1))
	g.Expect(to["1g.18gb"]).To(BeNumerically(">=", 2), "never a net loss: both evicted 1g pods fit again")
	p, _ := mig.LookupProduct("H200")
	g.Expect(p.Fits(to)).To(BeTrue())
	g.Expect(res.Disruptive()).To(BeTrue())
}

func TestDisruptionRulesBlockEvictions(t *testing.T) {
	cases := []struct {
		name    string
		opts    []podOpt
		pol     *v1alpha1.GPUPoolPolicy
		pdb     int32
		message string
	}{
		{name: "do-not-disrupt", opts: []podOpt{fixture.Annotated(v1alpha1.AnnotationDoNotDisrupt, "true")},
			pol: policy(), pdb: 1, message: "annotated gpupool.io/do-not-disrupt"},
		{name: "AutoIdle forbids evictions", pol: policy(approval(v1alpha1.ApprovalAutoIdle)), pdb: 1,
			message: "approval AutoIdle forbids evictions"},
		{name: "PDB exhausted", pol: policy(), pdb: 0, message: "PodDisruptionBudget team/infer allows no disruption now"},
		{name: "budget zero", pol: policy(budget(0)), pdb: 1, message: "the disruption budget allows 0 node(s)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := newCluster(t).
				node("gpu-1", "NVIDIA-H200", "1g.18gb:7").
				running("infer-a", "gpu-1", 0, "1g.18gb", append(tc.opts, fixture.Labelled("app", "infer"))...).
				pdb("infer", "infer", tc.pdb).
				pending("trainer", mig1("3g.71gb")).
				plan(tc.pol)
			g.Expect(res.Steps).To(BeEmpty())
			g.Expect(res.Unserved).To(HaveLen(1))
			g.Expect(res.Unserved[0].Reason).To(Equal(planner.ReasonDisruption))
			g.Expect(res.Unserved[0].Message).To(HavePrefix("needs 1 x 3g.71gb: "))
			g.Expect(res.Unserved[0].Message).To(ContainSubstring(tc.message))
		})
	}
}

func TestBudgetLimitsNodesTouched(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t)
	for _, n := range []string{"gpu-1", "gpu-2", "gpu-3"} {
		c.node(n, "NVIDIA-H200", "1g.18gb:7")
	}
	res := c.pending("t1", mig1("7g.141gb"), fixture.Priority(10)).
		pending("t2", mig1("7g.141gb")).
		pending("t3", mig1("7g.141gb")).
		plan(policy(budget(2)))
	g.Expect(res.Steps).To(HaveLen(2))
	g.Expect(res.Served).To(ConsistOf(pod("t1"), pod("t2")), "highest priority first, then oldest/name order")
	g.Expect(res.Unserved).To(HaveLen(1))
	g.Expect(res.Unserved[0].Reason).To(Equal(planner.ReasonDisruption))
	g.Expect(res.Unserved[0].Message).To(Equal(
		"needs 1 x 7g.141gb: 1 H200-141GB node(s) could host it by re-carving idle GPUs, but maxReconfiguringNodes allows 2 node(s) and this plan spends them on gpu-1 (serving 1 pod(s)), gpu-2 (serving 1 pod(s))"))
}

func TestPercentBudgetRoundsUp(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t)
	for i := range 5 {
		c.node("gpu-"+itoa(i), "NVIDIA-H200", "1g.18gb:7")
	}
	pol := policy()
	pol.Spec.Disruption.MaxDisruptedNodes = ptrIntOrString("25%")
	pol.Spec.Disruption.MaxReconfiguringNodes = ptrIntOrString("25%")
	for i := range 5 {
		c.pending("t"+itoa(i), mig1("7g.141gb"))
	}
	res := c.plan(pol)
	g.Expect(res.Budget).To(Equal(2), "25% of 5 nodes, rounded up")
	g.Expect(res.ReconfigureBudget).To(Equal(2), "25% of 5 nodes, rounded up")
	g.Expect(res.Steps).To(HaveLen(2), "the nodes are idle: they count against maxReconfiguringNodes")
}

func TestUnservedReasons(t *testing.T) {
	cases := []struct {
		name    string
		pending map[string]int64
		opts    []podOpt
		pol     *v1alpha1.GPUPoolPolicy
		reason  planner.Reason
		message string
	}{
		{name: "profile not in catalog", pending: mig1("4g.71gb"),
			pol:     policy(catalog("H200", false, "1g.18gb", "3g.71gb")),
			reason:  planner.ReasonPartitionShape,
			message: "needs 1 x 4g.71gb: the policy's catalog does not allow 4g.71gb on NVIDIA-H200 (it allows 1g.18gb, 3g.71gb)"},
		{name: "profile of another product", pending: mig1("3g.40gb"), pol: policy(),
			reason: planner.ReasonPartitionShape, message: "NVIDIA-H200 has no such MIG profile"},
		{name: "node selector matches no pool node", pending: mig1("3g.71gb"), opts: []podOpt{nodeSelector("zone", "b")},
			pol: policy(), reason: planner.ReasonNotInPool, message: "none of the pool's 1 nodes matches"},
		{name: "too much CPU", pending: mig1("3g.71gb"), opts: []podOpt{cpu("100")}, pol: policy(),
			reason: planner.ReasonNodePlacement, message: "node gpu-1 has 64 CPU free, the pod needs 100 CPU"},
		{name: "whole GPUs not allowed", pending: map[string]int64{"nvidia.com/gpu": 1}, pol: policy(),
			reason: planner.ReasonPartitionShape, message: "set allowWholeGPU: true in its catalog entry"},
		{name: "more instances than a node holds", pending: map[string]int64{mig.ResourceName("3g.71gb"): 5}, pol: policy(),
			reason: planner.ReasonPartitionShape, message: "5 x 3g.71gb exceed what the 2 GPU(s)"},
		{name: "shared replicas", pending: map[string]int64{"nvidia.com/gpu.shared": 1}, pol: policy(),
			reason: planner.ReasonPartitionShape, message: "allows neither time-slicing nor MPS"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := newCluster(t).
				node("gpu-1", "NVIDIA-H200", "1g.18gb:7", "1g.18gb:7").
				pending("p", tc.pending, tc.opts...).
				plan(tc.pol)
			g.Expect(res.Steps).To(BeEmpty())
			g.Expect(res.Unserved).To(HaveLen(1))
			g.Expect(res.Unserved[0].Reason).To(Equal(tc.reason))
			g.Expect(res.Unserved[0].Message).To(ContainSubstring(tc.message))
		})
	}
}

func TestCapacityWhenEverythingIsBusyWithOthersDemand(t *testing.T) {
	g := NewWithT(t)
	res := newCluster(t).
		node("gpu-1", "NVIDIA-H200", "7g.141gb:1").
		running("big", "gpu-1", 0, "7g.141gb", fixture.Annotated(v1alpha1.AnnotationDoNotDisrupt, "true")).
		node("gpu-2", "NVIDIA-H200", "1g.18gb:7").
		pending("a", mig1("7g.141gb"), fixture.Priority(5)).
		pending("b", mig1("7g.141gb")).
		plan(policy(budget(5)))
	g.Expect(res.Served).To(ConsistOf(pod("a")))
	g.Expect(res.Unserved).To(HaveLen(1))
	g.Expect(res.Unserved[0].Pod).To(Equal(pod("b")))
	g.Expect(res.Unserved[0].Reason).To(Equal(planner.ReasonDisruption))
}

func TestWholeGPUsOnOneNode(t *testing.T) {
	g := NewWithT(t)
	res := newCluster(t).
		node("gpu-1", "NVIDIA-H200", "1g.18gb:7", "1g.18gb:7", "1g.18gb:7").
		pending("multi", map[string]int64{"nvidia.com/gpu": 2}).
		plan(policy(catalog("H200", true, "1g.18gb")))
	g.Expect(res.Served).To(ConsistOf(pod("multi")))
	g.Expect(res.Steps).To(HaveLen(1))
	g.Expect(res.Steps[0].GPUs).To(HaveLen(2), "two GPUs turn MIG off, the third is untouched")
	for _, ch := range res.Steps[0].GPUs {
		g.Expect(ch.To).To(BeEmpty())
	}
}

func TestPodsThatFitNowNeedNoChange(t *testing.T) {
	g := NewWithT(t)
	res := newCluster(t).
		node("gpu-1", "NVIDIA-H200", "3g.71gb:2").
		running("x", "gpu-1", 0, "3g.71gb").
		pending("fits", mig1("3g.71gb")).
		pending("needs-1g", mig1("1g.18gb")).
		plan(policy())
	g.Expect(res.FitsNow).To(ConsistOf(pod("fits")))
	g.Expect(res.Unserved).To(HaveLen(1))
	g.Expect(res.Unserved[0].Pod).To(Equal(pod("needs-1g")))
	g.Expect(res.Steps).To(BeEmpty(), "re-carving the only GPU would destroy the instance 'fits' is about to use or evict x")
}

func TestPDBBudgetSpansTheWholePlan(t *testing.T) {
	g := NewWithT(t)
	res := newCluster(t).
		node("gpu-1", "NVIDIA-H200", "1g.18gb:7").
		node("gpu-2", "NVIDIA-H200", "1g.18gb:7").
		running("w1", "gpu-1", 0, "1g.18gb", fixture.Labelled("app", "web")).
		running("w2", "gpu-2", 0, "1g.18gb", fixture.Labelled("app", "web")).
		pdb("web", "web", 1).
		pending("t1", mig1("7g.141gb")).
		pending("t2", mig1("4g.71gb")).
		plan(policy(budget(2)))
	evicted := 0
	for _, s := range res.Steps {
		evicted += len(s.Evictions)
	}
	g.Expect(evicted).To(BeNumerically("<=", 1), "PDB web allows one disruption in total")
}

// A catalog may hold profiles that spend memory slices faster than compute ones (1g.20gb on
// an H100): among layouts that serve the same pods, the planner must not take one that leaves
// a compute slice uncarved, which nothing can use until the GPU is idle again.
func TestLeftoverCountsUncarvedComputeSlices(t *testing.T) {
	for _, pending := range []string{"4g.40gb", "3g.40gb", "2g.20gb"} {
		t.Run(pending, func(t *testing.T) {
			g := NewWithT(t)
			res := newCluster(t).
				node("gpu-1", "H100-80GB", "7g.80gb:1").
				pending("job", mig1(pending)).
				plan(policy(catalog("H100", false, "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")))
			g.Expect(res.Served).To(ConsistOf(pod("job")))
			g.Expect(res.Steps).To(HaveLen(1))
			to := res.Steps[0].GPUs[0].To
			p, _ := mig.LookupProduct("H100-80GB")
			carved := 0
			for name, n := range to {
				pr, ok := p.Profile(name)
				g.Expect(ok).To(BeTrue())
				carved += n * pr.ComputeSlices
			}
			g.Expect(carved).To(Equal(7), "target %s leaves compute slices uncarved", to)
		})
	}
}

// On a large pool whose budget covers every node that could serve, the pending pod goes to an
// idle GPU of a node that already runs work, and the idle nodes stay whole; when the budget
// binds, nodes are taken by what they serve (here all equal, so by name).
func TestPacksOntoBusyNodesWhenTheBudgetDoesNotBind(t *testing.T) {
	build := func() *cluster {
		c := newCluster(t)
		eight := []string{"7g.141gb:1", "7g.141gb:1", "7g.141gb:1", "7g.141gb:1", "7g.141gb:1", "7g.141gb:1", "7g.141gb:1", "7g.141gb:1"}
		// 9 nodes x 8 GPUs: above the size where every step compares all nodes by what they serve.
		for i := range 9 {
			c.node("node-"+itoa(i), "NVIDIA-H200", eight...)
		}
		return c.running("train", "node-8", 0, "7g.141gb").pending("infer", mig1("3g.71gb"))
	}
	for _, tc := range []struct {
		budget int
		node   string
	}{{budget: 9, node: "node-8"}, {budget: 1, node: "node-0"}} {
		g := NewWithT(t)
		res := build().plan(policy(budget(tc.budget)))
		g.Expect(res.Served).To(ConsistOf(pod("infer")))
		g.Expect(res.Steps).To(HaveLen(1))
		g.Expect(res.Steps[0].Node).To(Equal(tc.node), "budget %d", tc.budget)
		g.Expect(res.Steps[0].Evictions).To(BeEmpty())
	}
}

func TestStandbyShapesOnIdleGPUs(t *testing.T) {
	g := NewWithT(t)
	res := newCluster(t).
		node("gpu-1", "NVIDIA-H200", "7g.141gb:1", "7g.141gb:1").
		running("big", "gpu-1", 0, "7g.141gb").
		plan(policy(standby("nvidia.com/mig-1g.18gb", 3)))
	g.Expect(res.Steps).To(HaveLen(1))
	g.Expect(res.Steps[0].Evictions).To(BeEmpty(), "standby never evicts")
	g.Expect(res.Steps[0].GPUs).To(HaveLen(1))
	g.Expect(res.Steps[0].GPUs[0].Index).To(Equal(1))
	g.Expect(res.Steps[0].GPUs[0].To["1g.18gb"]).To(BeNumerically(">=", 3))
}

func TestPausedPolicyPlansNothing(t *testing.T) {
	g := NewWithT(t)
	pol := policy()
	pol.Spec.Planning.Paused = true
	res := newCluster(t).node("gpu-1", "NVIDIA-H200", "1g.18gb:7").pending("t", mig1("7g.141gb")).plan(pol)
	g.Expect(res.Steps).To(BeEmpty())
	g.Expect(res.Unserved[0].Message).To(ContainSubstring("planning is paused"))
}

func TestNodesWithoutAgentReportAreLeftAlone(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t).node("gpu-1", "NVIDIA-H200", "1g.18gb:7").pending("t", mig1("7g.141gb"))
	c.gpuNodes = nil
	res := c.plan(policy())
	g.Expect(res.Steps).To(BeEmpty())
	g.Expect(res.Unserved[0].Message).To(ContainSubstring("no GPUNode report"))
}

func TestRepartitionPlanObject(t *testing.T) {
	g := NewWithT(t)
	pol := policy()
	res := newCluster(t).
		node("gpu-1", "NVIDIA-H200", "1g.18gb:7").
		running("infer-a", "gpu-1", 0, "1g.18gb").
		pending("trainer", mig1("3g.71gb")).
		plan(pol)
	plan := res.RepartitionPlan(pol, now)
	g.Expect(plan).NotTo(BeNil())
	g.Expect(plan.Name).To(Equal("pool-a-20261129-" + plan.Spec.Hash[:8]))
	g.Expect(plan.Spec.Hash).To(MatchRegexp("^[0-9a-f]{16}$"))
	g.Expect(plan.Spec.Disruptive).To(BeTrue())
	g.Expect(plan.Spec.Steps).To(HaveLen(1))
	step := plan.Spec.Steps[0]
	g.Expect(step.MIGConfigName).To(Equal(nvidia.MIGConfigName(res.Steps[0].Target)))
	g.Expect(step.Evictions).To(HaveLen(1))
	g.Expect(step.GPUs[0].From).To(Equal(v1alpha1.ProfileCounts{"1g.18gb": 7}))
	g.Expect(plan.Spec.Expected.Pods).To(ConsistOf(v1alpha1.PodReference{Namespace: "team", Name: "trainer"}))
	g.Expect(plan.OwnerReferences[0].Kind).To(Equal("GPUPoolPolicy"))

	again := newCluster(t).
		node("gpu-1", "NVIDIA-H200", "1g.18gb:7").
		running("infer-a", "gpu-1", 0, "1g.18gb").
		pending("trainer", mig1("3g.71gb")).
		plan(pol).RepartitionPlan(pol, now)
	g.Expect(again.Spec).To(Equal(plan.Spec), "same input, same plan and hash")

	g.Expect((&planner.Result{}).RepartitionPlan(pol, now)).To(BeNil())
}

func TestRepartitionPlanNamesStayValidForLongPolicyNames(t *testing.T) {
	g := NewWithT(t)
	pol := policy()
	pol.Name = strings.Repeat("p", 15) + "-" + strings.Repeat("q", 234)
	plan := newCluster(t).node("gpu-1", "NVIDIA-H200", "1g.18gb:7").pending("t", mig1("7g.141gb")).
		plan(pol).RepartitionPlan(pol, now)
	g.Expect(plan).NotTo(BeNil())
	g.Expect(validation.IsDNS1123Subdomain(plan.Name)).To(BeEmpty(), plan.Name)
	g.Expect(plan.Labels).NotTo(HaveKey(planner.LabelPolicy), "a 250-character name is no label value")
	g.Expect(plan.OwnerReferences[0].Name).To(Equal(pol.Name))
}

func TestNodeWithoutCatalogEntryDoesNotHideTheProductFromOthers(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t).
		node("gpu-1", "NVIDIA-H200", "1g.18gb:7").
		node("gpu-2", "NVIDIA-H200", "1g.18gb:7").
		pending("t", mig1("7g.141gb"))
	// Both are H200s, but only gpu-2's board (SXM) has a catalog entry; gpu-1 (NVL) has none.
	c.nodes[0].Labels[nvidia.LabelGPUProduct] = "NVIDIA-H200-NVL"
	c.gpuNodes[0].Status.GPUs[0].Product = "NVIDIA H200 NVL"
	c.nodes[1].Labels[nvidia.LabelGPUProduct] = "NVIDIA-H200-SXM"
	c.gpuNodes[1].Status.GPUs[0].Product = "NVIDIA H200 SXM"
	pol := policy(catalog("H200-SXM", false, "7g.141gb", "1g.18gb"))
	res := c.plan(pol)
	g.Expect(res.Served).To(ConsistOf(pod("t")))
	g.Expect(res.Steps).To(HaveLen(1))
	g.Expect(res.Steps[0].Node).To(Equal("gpu-2"))
}

// TestLargePoolPlansAreDeterministic covers the parallel first pass (pools of 128 nodes and
// more spread it over the CPUs): two passes over the same input must agree exactly.
func TestLargePoolPlansAreDeterministic(t *testing.T) {
	g := NewWithT(t)
	c := benchCluster(t, 200)
	pol := policy(budget(20))
	first := c.plan(pol)
	second := c.plan(pol)
	g.Expect(second).To(Equal(first))
	g.Expect(first.Steps).NotTo(BeEmpty())
}

// The hourly bound is a cap on the plan, not a gate on whether it may evict: with n evicting
// steps left of maxDisruptiveStepsPerHour, a plan holds at most n, whatever maxDisruptedNodes
// allows, and says which bound stopped the rest.
func TestHourlyCapBoundsTheEvictingStepsOfOnePlan(t *testing.T) {
	build := func(t *testing.T, left *int) *planner.Result {
		c := newCluster(t)
		for _, n := range []string{"gpu-1", "gpu-2", "gpu-3", "gpu-4"} {
			c.node(n, "NVIDIA-H200", "1g.18gb:7").running("infer-"+n, n, 0, "1g.18gb")
		}
		c.pending("t1", mig1("7g.141gb")).pending("t2", mig1("7g.141gb")).pending("t3", mig1("7g.141gb"))
		in := c.input(policy(budget(4)))
		in.DisruptiveStepsLeft = left
		res, err := planner.Plan(in)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	evicting := func(res *planner.Result) int {
		n := 0
		for _, s := range res.Steps {
			if len(s.Evictions) > 0 {
				n++
			}
		}
		return n
	}
	uncapped := evicting(build(t, nil))
	if uncapped < 2 {
		t.Fatalf("the uncapped plan evicts on %d node(s); the case needs at least 2", uncapped)
	}
	for left := range uncapped + 1 {
		t.Run(itoa(left)+" left", func(t *testing.T) {
			g := NewWithT(t)
			res := build(t, &left)
			g.Expect(evicting(res)).To(Equal(left))
			g.Expect(res.Budget).To(Equal(left))
			if left > 0 && left < uncapped {
				g.Expect(res.Unserved).NotTo(BeEmpty())
				g.Expect(res.Unserved[0].Message).To(ContainSubstring("what is left of maxDisruptiveStepsPerHour allows"))
			}
		})
	}
}

// TestMixedPoolBlamesWhatThePolicyForbids guards issue 35's "why blames the A100": in a pool
// of A100s and H200s whose catalog forbids 3g.71gb on the H200, a pod asking for 3g.71gb is
// told what the policy forbids (which a user can change), not that the A100 has no such
// profile, and the GPU model is named as the catalog names it.
func TestMixedPoolBlamesWhatThePolicyForbids(t *testing.T) {
	g := NewWithT(t)
	res := newCluster(t).
		node("a100", "NVIDIA-A100-SXM4-80GB", "1g.10gb:7").
		node("h200", "NVIDIA-H200", "1g.18gb:7").
		pending("p", mig1("3g.71gb")).
		plan(policy(catalog("NVIDIA-A100-SXM4-80GB", false, "1g.10gb"), catalog("NVIDIA-H200", false, "1g.18gb")))
	g.Expect(res.Unserved).To(HaveLen(1))
	g.Expect(res.Unserved[0].Reason).To(Equal(planner.ReasonPartitionShape))
	g.Expect(res.Unserved[0].Message).To(ContainSubstring("the policy's catalog does not allow 3g.71gb on NVIDIA-H200"))
	g.Expect(res.Unserved[0].Message).NotTo(ContainSubstring("A100"))
}
