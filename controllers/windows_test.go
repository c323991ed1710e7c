package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/testenv"
)

// windowFrom is a daily maintenance window that opens at the first whole minute at least ahead
// after now (in UTC) and stays open for open.
func windowFrom(now time.Time, ahead, open time.Duration) (v1.MaintenanceWindow, time.Time) {
	start := now.UTC().Add(ahead).Truncate(time.Minute)
	if start.Before(now.Add(ahead)) {
		start = start.Add(time.Minute)
	}
	return v1.MaintenanceWindow{Schedule: fmt.Sprintf("%d %d * * *", start.Minute(), start.Hour()),
		Duration: metav1.Duration{Duration: open}}, start
}

// evictingPlan is a plan of policy pool-a whose step on gpu-1 evicts pod infer, and, when
// idle is true, whose step on gpu-2 only re-carves idle GPUs.
func evictingPlan(name string, idle bool) *v1.RepartitionPlan {
	plan := &v1.RepartitionPlan{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.RepartitionPlanSpec{Policy: "pool-a", Steps: []v1.NodeStep{{
			Node: "gpu-1", MIGConfigName: "gpupool-fedcba9876",
			GPUs:      []v1.GPUChange{{Index: 0, From: v1.ProfileCounts{"1g.18gb": 7}, To: v1.ProfileCounts{"7g.141gb": 1}}},
			Evictions: []v1.Eviction{{PodReference: v1.PodReference{Namespace: "default", Name: "infer"}}},
		}}},
	}
	if idle {
		plan.Spec.Steps = append(plan.Spec.Steps, v1.NodeStep{Node: "gpu-2", MIGConfigName: "gpupool-0123456789",
			GPUs: []v1.GPUChange{{Index: 0, From: v1.ProfileCounts{"1g.18gb": 7}, To: v1.ProfileCounts{"3g.71gb": 2}}}})
	}
	return plan
}

// windowEvents counts the plan's OutsideMaintenanceWindow Events, each repetition of a series
// included.
func windowEvents(g Gomega, env *testenv.Env, plan string) int {
	var list eventsv1.EventList
	g.Expect(env.Client.List(context.Background(), &list)).To(Succeed())
	n := 0
	for _, e := range list.Items {
		if e.Regarding.Kind == "RepartitionPlan" && e.Regarding.Name == plan && e.Reason == "OutsideMaintenanceWindow" {
			n++
			if e.Series != nil {
				n += int(e.Series.Count) - 1
			}
		}
	}
	return n
}

// TestEvictingStepWaitsForItsWindow guards spec.disruption.windows: outside its window an
// evicting step does not start (no cordon, no eviction) while a step that only re-carves idle
// GPUs goes ahead; the plan says when the window opens, with one Event; once the window is
// open the evicting step starts.
func TestEvictingStepWaitsForItsWindow(t *testing.T) {
	g := NewWithT(t)
	env, clock := startPlanController(t)
	ctx := context.Background()
	for _, n := range []string{"gpu-1", "gpu-2"} {
		gpuNode(t, env, n, 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	}
	pod, setAllowed := pdbGuardedPod(t, env, "infer", "gpu-1", nil)
	setAllowed(1)
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	policy.Spec.Disruption.Approval = v1.ApprovalAuto
	// Long enough for the fake clock's jump past the window's end.
	policy.Spec.Disruption.DrainTimeout = &metav1.Duration{Duration: 2 * time.Hour}
	window, start := windowFrom(clock.Now(), 2*time.Hour, 30*time.Minute)
	policy.Spec.Disruption.Windows = []v1.MaintenanceWindow{window}
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	plan := createPlan(t, env, evictingPlan("pool-a-20261129-0000aaaa", true))

	got := &v1.RepartitionPlan{}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		c := meta.FindStatusCondition(got.Status.Conditions, "WithinMaintenanceWindow")
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal("OutsideMaintenanceWindow"))
		g.Expect(c.Message).To(ContainSubstring("node gpu-1"))
		g.Expect(c.Message).To(ContainSubstring("may start at " + start.Format(time.RFC3339)))
		g.Expect(got.Status.Phase).To(Equal(v1.PlanExecuting))
	}).WithTimeout(30*time.Second).Should(Succeed(), "the plan says it waits for the window, and until when")

	node := &corev1.Node{}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-2"}, node)).To(Succeed())
		g.Expect(node.Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, entryOf(plan, "gpu-2")))
	}).WithTimeout(30*time.Second).Should(Succeed(), "a step that evicts nothing does not wait for a window")
	applyAsOperatorAndAgent(t, env, "gpu-2")

	g.Consistently(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, node)).To(Succeed())
		g.Expect(node.Spec.Unschedulable).To(BeFalse(), "not cordoned outside its window")
		p := &corev1.Pod{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), p)).To(Succeed())
		g.Expect(p.DeletionTimestamp).To(BeNil(), "not evicted outside its window")
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(v1.PlanExecuting), "waiting, not stopped")
		g.Expect(got.Status.Nodes).NotTo(ContainElement(HaveField("Node", "gpu-1")))
	}).WithTimeout(3 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		g.Expect(got.Status.Nodes).To(ContainElement(And(HaveField("Node", "gpu-2"), HaveField("State", v1.NodeDone))))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(windowEvents(g, env, plan.Name)).To(Equal(1), "one Event when the wait begins, not one per pass")

	clock.SetTime(start.Add(time.Minute))
	poke(t, env, "gpu-1")
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, node)).To(Succeed())
		g.Expect(node.Spec.Unschedulable).To(BeTrue(), "cordoned once the window is open")
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		g.Expect(got.Status.Nodes).To(ContainElement(HaveField("Node", "gpu-1")))
		g.Expect(meta.IsStatusConditionTrue(got.Status.Conditions, "WithinMaintenanceWindow")).To(BeTrue())
	}).WithTimeout(30*time.Second).Should(Succeed(), "the evicting step starts inside the window")

	g.Eventually(func(g Gomega) {
		p := &corev1.Pod{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), p)).To(Succeed())
		g.Expect(p.DeletionTimestamp).NotTo(BeNil())
	}).WithTimeout(30*time.Second).Should(Succeed(), "evicted inside the window")

	// A step already started runs to completion after its window closes: the drain ends and
	// the node is configured.
	// Off the whole second: the step's times are stored to the second, and the frozen clock
	// must read past the config's propagation delay.
	clock.SetTime(start.Add(45*time.Minute + 1500*time.Millisecond))
	g.Expect(env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, node)).To(Succeed())
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		g.Expect(node.Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, entryOf(plan, "gpu-1")), "plan status: %+v", got.Status)
	}).WithTimeout(30*time.Second).Should(Succeed(), "the started step goes on after its window closed")
}

// TestApprovedPlanWaitsForItsWindowPastPlanTTL guards the wait's interplay with approval: a
// plan approved by hand whose window is hours away stays Approved (planTTL bounds only the wait
// for approval), starts nothing until the window opens, and then starts.
func TestApprovedPlanWaitsForItsWindowPastPlanTTL(t *testing.T) {
	g := NewWithT(t)
	env, clock := startPlanController(t)
	ctx := context.Background()
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	_, setAllowed := pdbGuardedPod(t, env, "infer", "gpu-1", nil)
	setAllowed(1)
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	policy.Spec.Disruption.PlanTTL = &metav1.Duration{Duration: time.Minute}
	window, start := windowFrom(clock.Now(), 3*time.Hour, time.Hour)
	policy.Spec.Disruption.Windows = []v1.MaintenanceWindow{window}
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	plan := evictingPlan("pool-a-20261129-0000bbbb", false)
	signPlan(t, env, plan)
	plan.Annotations = map[string]string{v1.AnnotationApprove: plan.Spec.Hash}
	g.Expect(env.Client.Create(ctx, plan)).To(Succeed())

	got := &v1.RepartitionPlan{}
	waiting := func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(v1.PlanApproved), "approved, no node started")
		g.Expect(got.Status.Nodes).To(BeEmpty())
		g.Expect(meta.IsStatusConditionFalse(got.Status.Conditions, "WithinMaintenanceWindow")).To(BeTrue())
	}
	g.Eventually(waiting).WithTimeout(30 * time.Second).Should(Succeed())

	clock.SetTime(start.Add(-time.Hour)) // two hours on: far past planTTL
	poke(t, env, "gpu-1")
	g.Consistently(waiting).WithTimeout(3*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(),
		"an approved plan waiting for its window does not expire")

	clock.SetTime(start)
	poke(t, env, "gpu-1")
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(v1.PlanExecuting))
		g.Expect(got.Status.Nodes).To(ContainElement(HaveField("Node", "gpu-1")))
	}).WithTimeout(30*time.Second).Should(Succeed(), "the step starts when the window opens")
}
