package planner_test

import (
	"testing"

	. "github.com/onsi/gomega"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/planner"
)

// changedIndexes lists the GPUs a step changes.
func changedIndexes(s planner.Step) []int {
	var out []int
	for _, g := range s.GPUs {
		out = append(out, g.Index)
	}
	return out
}

// TestSameLayoutOnSeveralGPUsSkipsGPUsThatHaveItAlready: a pod that needs two whole GPUs is
// served by turning MIG off on the two idle MIG GPUs; GPU 1, already MIG off but held by x,
// must not be "changed" to MIG off again, which would evict x for nothing.
func TestSameLayoutOnSeveralGPUsSkipsGPUsThatHaveItAlready(t *testing.T) {
	g := NewWithT(t)
	res := newCluster(t).
		node("gpu-1", "NVIDIA-H200", "1g.18gb:7", "off", "1g.18gb:7", "1g.18gb:7").
		running("x", "gpu-1", 1, "gpu").
		running("y", "gpu-1", 2, "1g.18gb").
		running("z1", "gpu-1", 3, "1g.18gb").
		running("z2", "gpu-1", 3, "1g.18gb").
		pending("p", map[string]int64{"nvidia.com/gpu": 2}).
		plan(policy(catalog("H200", true)))
	g.Expect(res.Served).To(ConsistOf(pod("p")))
	g.Expect(res.Steps).To(HaveLen(1))
	g.Expect(changedIndexes(res.Steps[0])).To(Equal([]int{0, 2}), "GPU 1 is MIG off already")
	g.Expect(res.Steps[0].Evictions).To(HaveLen(1))
	g.Expect(res.Steps[0].Evictions[0].Pod).To(Equal(pod("y")))
}

// TestPodOnTwoChangedGPUsSpendsItsPDBOnce: x holds an instance on GPU 0 and one on GPU 1, and
// its PodDisruptionBudget allows one disruption. Re-carving both GPUs evicts x once (it comes
// back on GPU 2's free instances), so the plan is within the budget.
func TestPodOnTwoChangedGPUsSpendsItsPDBOnce(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t).node("gpu-1", "NVIDIA-H200", "1g.18gb:7", "1g.18gb:7", "1g.18gb:7")
	c.bind("x", "gpu-1", []hold{{gpu: 0, inst: 0}, {gpu: 1, inst: 0}}, fixture.Labelled("app", "web")).
		running("y", "gpu-1", 2, "1g.18gb", fixture.Annotated(v1alpha1.AnnotationDoNotDisrupt, "true")).
		pdb("web", "web", 1).
		pending("p", map[string]int64{mig.ResourceName("7g.141gb"): 2})
	res := c.plan(policy(catalog("H200", false, "7g.141gb", "1g.18gb")))
	g.Expect(res.Served).To(ConsistOf(pod("p")))
	g.Expect(res.Steps).To(HaveLen(1))
	g.Expect(changedIndexes(res.Steps[0])).To(Equal([]int{0, 1}))
	g.Expect(res.Steps[0].Evictions).To(HaveLen(1))
}

// TestPDBBudgetLeftCountsEachEvictedPodOnce: on gpu-1, serving p evicts x, which holds
// instances on both GPUs it re-carves; on gpu-2, serving q evicts w. PodDisruptionBudget web
// covers x and w and allows two disruptions, so both nodes may change.
func TestPDBBudgetLeftCountsEachEvictedPodOnce(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t).
		node("gpu-1", "NVIDIA-H200", "1g.18gb:7", "1g.18gb:7", "1g.18gb:7").
		node("gpu-2", "NVIDIA-H200", "1g.18gb:7")
	c.bind("x", "gpu-1", []hold{{gpu: 0, inst: 0}, {gpu: 1, inst: 0}}, fixture.Labelled("app", "web")).
		running("y", "gpu-1", 2, "1g.18gb", fixture.Annotated(v1alpha1.AnnotationDoNotDisrupt, "true")).
		running("w", "gpu-2", 0, "1g.18gb", fixture.Labelled("app", "web")).
		pdb("web", "web", 2).
		pending("p", map[string]int64{mig.ResourceName("7g.141gb"): 2}, fixture.Priority(10)).
		pending("q", mig1("4g.71gb"))
	res := c.plan(policy(budget(2), catalog("H200", false, "7g.141gb", "4g.71gb", "1g.18gb")))
	g.Expect(res.Served).To(ConsistOf(pod("p"), pod("q")))
	g.Expect(res.Steps).To(HaveLen(2))
}

// The tests below are the smallest cases the exhaustive-optimum test found where an
// earlier planner served less demand than some plan under its own rules, one per cause.

// TestSameLayoutOnBothGPUsServesTheOptimum: one node, two idle GPUs. MIG off on both serves a
// (two whole GPUs); MIG off on one and 7g.141gb on the other serves b and c. Both serve 14
// compute slices, the optimum; larger requests go first, so a is served.
func TestSameLayoutOnBothGPUsServesTheOptimum(t *testing.T) {
	g := NewWithT(t)
	res := newCluster(t).
		node("gpu-1", "NVIDIA-H200", "1g.18gb:7", "1g.18gb:7").
		pending("a", map[string]int64{"nvidia.com/gpu": 2}).
		pending("b", map[string]int64{"nvidia.com/gpu": 1}).
		pending("c", mig1("7g.141gb")).
		plan(policy(catalog("H200", true, "7g.141gb")))
	g.Expect(res.Served).To(ConsistOf(pod("a")))
	g.Expect(res.Unserved).To(HaveLen(2))
}

// TestLargerRequestsFirstWithinAPriority: one idle GPU re-carved as 3g.71gb:2 holds either a
// (two 3g.71gb) or b and c (one each): the same demand. The larger request goes first, so a
// stream of small pods cannot starve it.
func TestLargerRequestsFirstWithinAPriority(t *testing.T) {
	g := NewWithT(t)
	res := newCluster(t).
		node("gpu-1", "NVIDIA-H200", "1g.18gb:7").
		pending("b", mig1("3g.71gb")).
		pending("c", mig1("3g.71gb")).
		pending("a", map[string]int64{mig.ResourceName("3g.71gb"): 2}).
		plan(policy(catalog("H200", false, "3g.71gb")))
	g.Expect(res.Served).To(ConsistOf(pod("a")))
}

// TestNodeChoiceLeavesRoomForPodsOnlyOneNodeCanHost: a (one 7g.141gb) fits either node, b
// (two 7g.141gb) only the node with two GPUs. With a budget of two nodes, both are served by
// giving a the one-GPU node.
func TestNodeChoiceLeavesRoomForPodsOnlyOneNodeCanHost(t *testing.T) {
	g := NewWithT(t)
	res := newCluster(t).
		node("gpu-1", "NVIDIA-H200", "1g.18gb:7", "1g.18gb:7").
		node("gpu-2", "NVIDIA-H200", "1g.18gb:7").
		pending("a", mig1("7g.141gb")).
		pending("b", map[string]int64{mig.ResourceName("7g.141gb"): 2}).
		plan(policy(budget(2), catalog("H200", false, "7g.141gb")))
	g.Expect(res.Served).To(ConsistOf(pod("a"), pod("b")))
}
