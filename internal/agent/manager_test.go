package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
	"github.com/gpupool/gpupool/internal/testenv"
)

// The agent's manager, as the binary runs it: it publishes on start, reacts
// to a spec.expectedLayout change at once (no clock step: the watch triggers
// it), picks up a layout change in NVML on its next refresh (the fake clock's
// step fires the requeue), and recreates a deleted GPUNode.
func TestManagerPublishesAndFollowsSpec(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	s, _ := h200Node(t)
	d0, d1 := mockDevice(t, s, 0), mockDevice(t, s, 1)
	enableMIG(t, d0)
	enableMIG(t, d1)
	for _, start := range []uint32{0, 1, 2, 3, 4, 5, 6} {
		createInstance(t, d0, nvml.GPU_INSTANCE_PROFILE_1_SLICE, start, true)
	}
	createInstance(t, d1, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 0, true)

	clk := clocktesting.NewFakeClock(testenv.Epoch)
	mgr, err := agent.NewManager(env.Config, agent.ManagerOptions{
		NodeName:               "node-mgr",
		Read:                   agent.NVMLReader(s),
		RefreshPeriod:          period,
		Clock:                  clk,
		HealthProbeBindAddress: "0",
		MetricsBindAddress:     "0",
	})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	deleteNodeAtCleanup(t, env.Client, "node-mgr") // runs after the manager stopped
	t.Cleanup(func() {
		cancel()
		g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(BeNil()))
	})

	key := types.NamespacedName{Name: "node-mgr"}
	verified := func(g Gomega) metav1.Condition {
		n := &v1alpha1.GPUNode{}
		g.Expect(env.Client.Get(ctx, key, n)).To(Succeed())
		g.Expect(condition(n, v1alpha1.ConditionNVMLReady).Status).To(Equal(metav1.ConditionTrue))
		c := condition(n, v1alpha1.ConditionLayoutVerified)
		g.Expect(c.ObservedGeneration).To(Equal(n.Generation), "the condition answers the current spec")
		return c
	}
	g.Eventually(verified).WithTimeout(30 * time.Second).Should(HaveField("Reason", agent.ReasonNoExpectation))

	setExpectedLayout(t, env.Client, "node-mgr", []v1alpha1.GPULayout{
		{Index: 0, Profiles: v1alpha1.ProfileCounts{"3g.71gb": 2}},
		{Index: 1, Profiles: v1alpha1.ProfileCounts{"3g.71gb": 2}},
	})
	g.Eventually(verified).WithTimeout(30 * time.Second).Should(And(
		HaveField("Status", metav1.ConditionFalse),
		HaveField("Message", "GPU 0: want 3g.71gb:2, have 1g.18gb:7; GPU 1: want 3g.71gb:2, have 3g.71gb:1"),
	))

	// GPU 1 gets its second 3g instance; GPU 0 still differs.
	createInstance(t, d1, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 4, true)
	g.Eventually(func(g Gomega) metav1.Condition {
		clk.Step(period) // fires whichever refresh is pending
		return verified(g)
	}).WithTimeout(30 * time.Second).Should(HaveField("Message", "GPU 0: want 3g.71gb:2, have 1g.18gb:7"))

	// The controller changes its mind to what GPU 0 has: verified at once.
	setExpectedLayout(t, env.Client, "node-mgr", []v1alpha1.GPULayout{
		{Index: 0, Profiles: v1alpha1.ProfileCounts{"1g.18gb": 7}},
		{Index: 1, Profiles: v1alpha1.ProfileCounts{"3g.71gb": 2}},
	})
	g.Eventually(verified).WithTimeout(30 * time.Second).Should(And(
		HaveField("Status", metav1.ConditionTrue), HaveField("Reason", agent.ReasonLayoutMatches)))

	// Someone deletes the GPUNode: the agent recreates it, spec empty.
	n := &v1alpha1.GPUNode{}
	g.Expect(env.Client.Get(ctx, key, n)).To(Succeed())
	g.Expect(env.Client.Delete(ctx, n)).To(Succeed())
	g.Eventually(func(g Gomega) {
		again := &v1alpha1.GPUNode{}
		err := env.Client.Get(ctx, key, again)
		g.Expect(apierrors.IsNotFound(err)).To(BeFalse())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(again.UID).NotTo(Equal(n.UID))
		g.Expect(again.Status.GPUs).To(HaveLen(2))
		g.Expect(condition(again, v1alpha1.ConditionLayoutVerified).Reason).To(Equal(agent.ReasonNoExpectation))
	}).WithTimeout(30 * time.Second).Should(Succeed())
}
