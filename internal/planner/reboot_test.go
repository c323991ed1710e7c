package planner_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/planner"
)

// onNode binds a pod that holds no GPU (one CPU and 1Gi) to a node.
func (c *cluster) onNode(name, node string, opts ...podOpt) *cluster {
	p := newPod(name, nil, append([]podOpt{fixture.Running(node)}, opts...)...)
	c.pods = append(c.pods, p)
	return c
}

func planWith(t *testing.T, c *cluster, pol *v1alpha1.GPUPoolPolicy, reboot planner.MIGManagerReboot) *planner.Result {
	t.Helper()
	in := c.input(pol)
	in.MIGManagerReboot = reboot
	res, err := planner.Plan(in)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A MIG mode toggle where mig-manager may reboot the node (a GPU that needs a reset to toggle,
// such as an A100, with nothing known of WITH_REBOOT; or WITH_REBOOT set) would kill every pod
// on the node, so it is planned only while no pod but the step's evictions and DaemonSet or
// static pods runs there.
func TestModeToggleThatMayRebootWaitsForTheNodesPods(t *testing.T) {
	const a100, h200 = "NVIDIA-A100-SXM4-80GB", "NVIDIA-H200"
	daemon := fixture.OwnedBy("apps/v1", "DaemonSet", "node-exporter")
	static := func(p *corev1.Pod) {
		fixture.OwnedBy("v1", "Node", "gpu-1")(p)
		fixture.Annotated(corev1.MirrorPodAnnotationKey, "x")(p)
	}
	cases := []struct {
		name    string
		product string
		reboot  planner.MIGManagerReboot
		others  func(*cluster)
		planned bool
		// risky says that the planned step carries its reboot risk, for execution to check
		// again before the cordon.
		risky   bool
		message []string
	}{
		{name: "A100, WITH_REBOOT unknown, a web pod runs", product: a100,
			others:  func(c *cluster) { c.onNode("web", "gpu-1") },
			message: []string{"GPU 0 (A100-80GB) changes MIG mode only at a GPU reset", "the reboot would kill team/web"}},
		{name: "A100, WITH_REBOOT unknown, empty node", product: a100, others: func(*cluster) {}, planned: true, risky: true},
		{name: "A100, WITH_REBOOT unknown, only DaemonSet and static pods", product: a100,
			others: func(c *cluster) {
				c.onNode("exporter", "gpu-1", daemon).onNode("kube-proxy", "gpu-1", static)
			}, planned: true, risky: true},
		{name: "A100, WITH_REBOOT off, a web pod runs", product: a100, reboot: planner.RebootNever,
			others: func(c *cluster) { c.onNode("web", "gpu-1") }, planned: true},
		{name: "H200 toggles without a reset, a web pod runs", product: h200,
			others: func(c *cluster) { c.onNode("web", "gpu-1") }, planned: true},
		{name: "H200, WITH_REBOOT on, a web pod runs", product: h200, reboot: planner.RebootOnFailure,
			others:  func(c *cluster) { c.onNode("web", "gpu-1") },
			message: []string{"runs mig-manager with WITH_REBOOT", "the reboot would kill team/web"}},
		{name: "H200, WITH_REBOOT on, do-not-disrupt web pod and a bare pod", product: h200, reboot: planner.RebootOnFailure,
			others: func(c *cluster) {
				c.onNode("web", "gpu-1", fixture.Annotated(v1alpha1.AnnotationDoNotDisrupt, "true")).onNode("bare", "gpu-1", fixture.Unowned())
			},
			message: []string{"the reboot would kill team/bare, team/web"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			profile := "1g.10gb"
			cat := catalog("A100-80GB", true, profile)
			if tc.product == h200 {
				profile = "1g.18gb"
				cat = catalog("H200", true, profile)
			}
			// Both GPUs are whole and idle: serving a MIG pod means turning MIG on.
			c := newCluster(t).node("gpu-1", tc.product, "off", "off").pending("small", mig1(profile))
			tc.others(c)
			res := planWith(t, c, policy(cat, approval(v1alpha1.ApprovalAuto)), tc.reboot)
			if tc.planned {
				g.Expect(res.Served).To(ConsistOf(pod("small")))
				g.Expect(res.Steps).To(HaveLen(1))
				g.Expect(res.Steps[0].Evictions).To(BeEmpty())
				if tc.risky {
					g.Expect(res.Steps[0].RebootRisk).To(ContainSubstring("reboot"))
				} else {
					g.Expect(res.Steps[0].RebootRisk).To(BeEmpty())
				}
				plan := res.RepartitionPlan(policy(cat), time.Now())
				g.Expect(plan.Spec.Steps[0].RebootRisk).To(Equal(res.Steps[0].RebootRisk), "the plan carries it, under its hash")
				return
			}
			g.Expect(res.Steps).To(BeEmpty(), "no toggle while pods a reboot would kill run on the node")
			g.Expect(res.Unserved).To(HaveLen(1))
			g.Expect(res.Unserved[0].Reason).To(Equal(planner.ReasonDisruption))
			for _, m := range tc.message {
				g.Expect(res.Unserved[0].Message).To(ContainSubstring(m))
			}
		})
	}
}

// A toggle that evicts the pods of the GPU it changes still may not reboot the node under a
// pod that holds no GPU: the evictions do not cover it.
func TestModeToggleWithEvictionsStillWaitsForNonGPUPods(t *testing.T) {
	g := NewWithT(t)
	// The pending pod may run on gpu-1 only; the whole-GPU pod there may move to gpu-2.
	c := newCluster(t).node("gpu-1", "NVIDIA-A100-SXM4-80GB", "off").node("gpu-2", "NVIDIA-A100-SXM4-80GB", "off").
		running("whole", "gpu-1", 0, "gpu").
		pending("small", mig1("1g.10gb"), nodeSelector("kubernetes.io/hostname", "gpu-1"))
	pol := policy(catalog("A100-80GB", true, "1g.10gb"), approval(v1alpha1.ApprovalAuto), budget(2))

	res := planWith(t, c, pol, planner.RebootUnknown)
	g.Expect(res.Served).To(ConsistOf(pod("small")))
	g.Expect(res.Steps).To(HaveLen(1), "alone on gpu-1, the whole-GPU pod moves to gpu-2 and the GPU is carved")
	g.Expect(res.Steps[0].Evictions).To(HaveLen(1))
	g.Expect(res.Steps[0].Evictions[0].Landing).To(Equal("gpu-2"))

	res = planWith(t, c.onNode("web", "gpu-1"), pol, planner.RebootUnknown)
	g.Expect(res.Steps).To(BeEmpty())
	g.Expect(res.Unserved[0].Message).To(ContainSubstring("the reboot would kill team/web"))
}

// On an A100, toggling one GPU's MIG mode makes mig-parted reset every GPU of the node, so a
// GPU in use that the step keeps forbids the toggle, even under mig-manager without
// WITH_REBOOT; a Hopper GPU toggles without the reset.
func TestModeToggleKeepsNoGPUInUseWhereItResetsEveryGPU(t *testing.T) {
	g := NewWithT(t)
	held := fixture.Annotated(v1alpha1.AnnotationDoNotDisrupt, "true")
	c := newCluster(t).node("gpu-1", "NVIDIA-A100-SXM4-80GB", "off", "off").
		running("held", "gpu-1", 1, "gpu", held).
		pending("small", mig1("1g.10gb"))
	pol := policy(catalog("A100-80GB", true, "1g.10gb"), approval(v1alpha1.ApprovalAuto))

	res := planWith(t, c, pol, planner.RebootNever)
	g.Expect(res.Steps).To(BeEmpty(), "turning MIG on for GPU 0 resets GPU 1 under team/held")
	g.Expect(res.Unserved).To(HaveLen(1))
	g.Expect(res.Unserved[0].Reason).To(Equal(planner.ReasonDisruption))
	g.Expect(res.Unserved[0].Message).To(ContainSubstring("resets every GPU of the node"))

	c = newCluster(t).node("gpu-1", "NVIDIA-H200", "off", "off").
		running("held", "gpu-1", 1, "gpu", held).
		pending("small", mig1("1g.18gb"))
	res = planWith(t, c, policy(catalog("H200", true, "1g.18gb"), approval(v1alpha1.ApprovalAuto)), planner.RebootNever)
	g.Expect(res.Served).To(ConsistOf(pod("small")), "Hopper changes MIG mode without a reset")
}

// Sharing turns MIG off on an idle node; where that may reboot the node, a pod that holds no
// GPU there keeps the node from being converted.
func TestSharingToggleWaitsForTheNodesPods(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t).node("gpu-1", "NVIDIA-H200", "1g.18gb:7").pending("a", oneShare)
	pol := policy(sharing([]int32{2}, nil))
	g.Expect(planWith(t, c, pol, planner.RebootOnFailure).Served).To(ConsistOf(pod("a")))

	res := planWith(t, c.onNode("web", "gpu-1"), pol, planner.RebootOnFailure)
	g.Expect(res.Steps).To(BeEmpty())
	g.Expect(planWith(t, c, pol, planner.RebootNever).Served).To(ConsistOf(pod("a")), "no reboot, no risk to team/web")
}
