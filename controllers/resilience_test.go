package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/rollout"
	"github.com/gpupool/gpupool/internal/testenv"
)

// toThreeG is a step that re-carves GPU 0 of node from 7x1g.18gb to 2x3g.71gb.
func toThreeG(node, config string, evict ...string) v1.NodeStep {
	step := v1.NodeStep{Node: node, MIGConfigName: config,
		GPUs: []v1.GPUChange{{Index: 0, From: v1.ProfileCounts{"1g.18gb": 7}, To: v1.ProfileCounts{"3g.71gb": 2}}}}
	for _, name := range evict {
		step.Evictions = append(step.Evictions, v1.Eviction{PodReference: v1.PodReference{Namespace: "default", Name: name}})
		step.Disruptive = true
	}
	return step
}

func makePlan(t *testing.T, env *testenv.Env, name, hash string, steps ...v1.NodeStep) *v1.RepartitionPlan {
	t.Helper()
	plan := &v1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.RepartitionPlanSpec{Policy: "pool-a", Hash: hash, Steps: steps}}
	return createPlan(t, env, plan)
}

func getPlan(g Gomega, env *testenv.Env, plan *v1.RepartitionPlan) *v1.RepartitionPlan {
	got := &v1.RepartitionPlan{}
	g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(plan), got)).To(Succeed())
	return got
}

func getNode(g Gomega, env *testenv.Env, name string) *corev1.Node {
	node := &corev1.Node{}
	g.Expect(env.Client.Get(context.Background(), client.ObjectKey{Name: name}, node)).To(Succeed())
	return node
}

// setMIGState plays mig-manager's state label.
func setMIGState(t *testing.T, env *testenv.Env, name, state string) {
	t.Helper()
	g := NewWithT(t)
	node := getNode(g, env, name)
	patch := client.MergeFrom(node.DeepCopy())
	node.Labels[nvidia.LabelMIGConfigState] = state
	g.Expect(env.Client.Patch(context.Background(), node, patch)).To(Succeed())
}

// poke makes the controllers look at a node again: their requeue timers run on real time,
// so after the fake clock jumps, any change to the node makes them read the new time.
func poke(t *testing.T, env *testenv.Env, name string) {
	t.Helper()
	g := NewWithT(t)
	node := getNode(g, env, name)
	patch := client.MergeFrom(node.DeepCopy())
	metav1.SetMetaDataAnnotation(&node.ObjectMeta, "test.gpupool.io/nudge", time.Now().Format(time.RFC3339Nano))
	g.Expect(env.Client.Patch(context.Background(), node, patch)).To(Succeed())
}

// reportGPU0 plays the agent: GPU 0 of the node now holds these instances.
func reportGPU0(t *testing.T, env *testenv.Env, name string, layout mig.Layout) {
	t.Helper()
	g := NewWithT(t)
	product, _ := mig.LookupProduct("H200")
	placed, err := product.Place(layout, nil)
	g.Expect(err).NotTo(HaveOccurred())
	report := &v1.GPUNode{}
	g.Expect(env.Client.Get(context.Background(), client.ObjectKey{Name: name}, report)).To(Succeed())
	report.Status.GPUs[0].Instances = nil
	for _, in := range placed {
		report.Status.GPUs[0].Instances = append(report.Status.GPUs[0].Instances, v1.MIGInstance{Profile: in.Profile,
			Placement: v1.SlicePlacement{Start: int32(in.Placement.Start), Size: int32(in.Placement.Size)}})
	}
	g.Expect(env.Client.Status().Update(context.Background(), report)).To(Succeed())
}

// runningPod creates a pod bound to node, Running and Ready, owned by a ReplicaSet.
func runningPod(t *testing.T, env *testenv.Env, name, node string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	res := corev1.ResourceList{corev1.ResourceName(mig.ResourceName("1g.18gb")): resource.MustParse("1")}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name,
				UID: "0b9c6d1e-0000-4000-8000-000000000002", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Limits: res, Requests: res}}}},
	}
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	g.Expect(env.Client.Status().Update(ctx, pod)).To(Succeed())
	return pod
}

// nodeEvents lists the reasons of the Events about a node.
func nodeEvents(g Gomega, env *testenv.Env, name string) []string {
	var list eventsv1.EventList
	g.Expect(env.Client.List(context.Background(), &list)).To(Succeed())
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Node" && e.Regarding.Name == name {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// sample sums the values of a metric's series whose labels include want.
func sample(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return total
}

func evicted(t *testing.T, reg *prometheus.Registry) float64 {
	return sample(t, reg, "gpupool_evictions_total", map[string]string{"outcome": "Evicted"})
}

func intstrOf(n int) intstr.IntOrString { return intstr.FromInt32(int32(n)) }

// TestBudgetOneWithThreeNodesChangesOneNodeAtATime guards the budgets: with a budget of 1 (here
// maxReconfiguringNodes, as the steps evict nobody), a plan over three nodes never has two of
// them out of service at once, and it finishes all three.
func TestBudgetOneWithThreeNodesChangesOneNodeAtATime(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPlanController(t)
	nodes := []string{"gpu-1", "gpu-2", "gpu-3"}
	for _, n := range nodes {
		gpuNode(t, env, n, 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	}
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	policy.Spec.Disruption.Approval = v1.ApprovalAuto
	policy.Spec.Disruption.MaxReconfiguringNodes = ptr.To(intstrOf(1))
	g.Expect(env.Client.Create(context.Background(), policy)).To(Succeed())
	plan := makePlan(t, env, "pool-a-20261129-b1b1b1b1", "b1b1b1b1b1b1b1b1",
		toThreeG("gpu-1", "gpupool-b100000001"), toThreeG("gpu-2", "gpupool-b100000002"), toThreeG("gpu-3", "gpupool-b100000003"))

	// Each node waits on the plan controller's own requeue timers (up to 10 s a look while
	// mig-manager works), three times over; a minute per wait leaves room on a loaded CI box.
	finished := map[string]bool{}
	for range nodes {
		var active string
		g.Eventually(func(g Gomega) {
			var out []string
			for _, n := range nodes {
				if getNode(g, env, n).Spec.Unschedulable {
					out = append(out, n)
				}
			}
			g.Expect(out).To(HaveLen(1), "exactly one node is out of service")
			active = out[0]
			g.Expect(finished).NotTo(HaveKey(active))
			g.Expect(getNode(g, env, active).Labels).To(HaveKey(nvidia.LabelMIGConfig))
		}).WithTimeout(time.Minute).Should(Succeed())
		g.Consistently(func(g Gomega) {
			for _, n := range nodes {
				g.Expect(getNode(g, env, n).Spec.Unschedulable).To(Equal(n == active), "node %s", n)
			}
		}).WithTimeout(time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "no second node starts while one is busy")
		reportGPU0(t, env, active, mig.Layout{"3g.71gb": 2})
		applyAsOperatorAndAgent(t, env, active)
		g.Eventually(func(g Gomega) {
			g.Expect(getNode(g, env, active).Spec.Unschedulable).To(BeFalse())
		}).WithTimeout(time.Minute).Should(Succeed())
		finished[active] = true
	}
	g.Eventually(func(g Gomega) {
		got := getPlan(g, env, plan)
		g.Expect(got.Status.Phase).To(Equal(v1.PlanSucceeded))
		g.Expect(got.Status.Progress).To(Equal("3/3"))
	}).WithTimeout(time.Minute).Should(Succeed())
}

// TestFailedNodeIsReopenedOnlyWhenNoGPUIsHalfConfigured guards the failure rule: when
// mig-manager reports failed, a node whose GPUs the agent shows whole (the old layout) goes
// back to work, while a node with a GPU in between stays cordoned, with a Warning Event on the
// node itself.
func TestFailedNodeIsReopenedOnlyWhenNoGPUIsHalfConfigured(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPlanController(t)
	for _, n := range []string{"whole", "half"} {
		gpuNode(t, env, n, 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200", nvidia.LabelMIGConfig: "all-1g.18gb"})
	}
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	policy.Spec.Disruption.Approval = v1.ApprovalAuto
	policy.Spec.Disruption.MaxDisruptedNodes = ptr.To(intstrOf(2))
	policy.Spec.Disruption.MaxReconfiguringNodes = ptr.To(intstrOf(2))
	g.Expect(env.Client.Create(context.Background(), policy)).To(Succeed())
	plan := makePlan(t, env, "pool-a-20261129-f0f0f0f0", "f0f0f0f0f0f0f0f0",
		toThreeG("whole", "gpupool-f000000001"), toThreeG("half", "gpupool-f000000002"))
	g.Eventually(func(g Gomega) {
		g.Expect(getNode(g, env, "whole").Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, entryOf(plan, "whole")))
		g.Expect(getNode(g, env, "half").Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, entryOf(plan, "half")))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// mig-manager destroyed the old instances on "half" and gave up after creating one.
	reportGPU0(t, env, "half", mig.Layout{"3g.71gb": 1})
	setMIGState(t, env, "half", "failed")
	setMIGState(t, env, "whole", "failed")

	// "whole" kept its old layout: its label is set back, then mig-manager applies it.
	g.Eventually(func(g Gomega) {
		g.Expect(getNode(g, env, "whole").Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, "all-1g.18gb"))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	setMIGState(t, env, "whole", "success")
	g.Eventually(func(g Gomega) {
		got := getPlan(g, env, plan)
		g.Expect(got.Status.Phase).To(Equal(v1.PlanFailed))
		whole, half := getNode(g, env, "whole"), getNode(g, env, "half")
		g.Expect(whole.Spec.Unschedulable).To(BeFalse(), "GPUs all whole: the node takes work again")
		g.Expect(whole.Annotations).NotTo(HaveKey(v1.AnnotationCordonedBy))
		g.Expect(half.Spec.Unschedulable).To(BeTrue(), "a half-configured GPU takes no new work")
		g.Expect(half.Annotations).To(HaveKeyWithValue(v1.AnnotationCordonedBy, plan.Name))
		for _, s := range got.Status.Nodes {
			if s.Node == "half" {
				g.Expect(s.Message).To(ContainSubstring("a GPU may be half-configured"))
				g.Expect(s.Message).To(ContainSubstring("kubectl uncordon half"))
			}
		}
		g.Expect(nodeEvents(g, env, "half")).To(ContainElement("NodeFailed"), "the node's own events say why")
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(getNode(g, env, "half").Spec.Unschedulable).To(BeTrue())
	}).WithTimeout(2*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(),
		"the cordon janitor leaves a deliberate cordon of a failed plan alone")
}

// relabelledUnderAuto runs a one-node plan under a policy with approval Auto and a 5 minute
// configureTimeout until the node's label names the plan's config, and returns the plan.
func relabelledUnderAuto(t *testing.T) (*testenv.Env, *clocktesting.FakeClock, *v1.RepartitionPlan) {
	t.Helper()
	g := NewWithT(t)
	env, clock := startPlanController(t)
	// The GPU Operator labels every MIG node with the entry it applied.
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200", nvidia.LabelMIGConfig: "all-1g.18gb"})
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	policy.Spec.Disruption.Approval = v1.ApprovalAuto
	policy.Spec.Disruption.ConfigureTimeout = &metav1.Duration{Duration: 5 * time.Minute}
	g.Expect(env.Client.Create(context.Background(), policy)).To(Succeed())
	plan := makePlan(t, env, "pool-a-20261129-a0a0a0a0", "a0a0a0a0a0a0a0a0", toThreeG("gpu-1", "gpupool-a0a0a0a0a0"))
	g.Eventually(func(g Gomega) {
		g.Expect(getNode(g, env, "gpu-1").Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, entryOf(plan, "gpu-1")))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	return env, clock, plan
}

// TestWedgedPendingFailsAfterConfigureTimeout guards the known mig-manager wedge: a state that
// stays pending past configureTimeout becomes a Failed step, not a silent cordon.
func TestWedgedPendingFailsAfterConfigureTimeout(t *testing.T) {
	g := NewWithT(t)
	env, clock, plan := relabelledUnderAuto(t)
	setMIGState(t, env, "gpu-1", "pending")
	g.Consistently(func(g Gomega) {
		g.Expect(getPlan(g, env, plan).Status.Nodes[0].State).To(Equal(v1.NodeConfiguring))
	}).WithTimeout(2*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "mig-manager gets its time")

	clock.Step(6 * time.Minute)
	poke(t, env, "gpu-1")
	// The agent still shows the old layout, whole; but the label names the new entry, which a
	// later mig-manager start would apply under running pods: it is set back first, and the
	// node stays cordoned meanwhile.
	g.Eventually(func(g Gomega) {
		got := getPlan(g, env, plan)
		g.Expect(got.Status.Nodes[0].State).To(Equal(v1.NodeRestoring))
		g.Expect(got.Status.Nodes[0].Message).To(ContainSubstring(`mig-manager stayed at "pending" past configureTimeout 5m0s`))
		node := getNode(g, env, "gpu-1")
		g.Expect(node.Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, "all-1g.18gb"))
		g.Expect(node.Spec.Unschedulable).To(BeTrue())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(getNode(g, env, "gpu-1").Spec.Unschedulable).To(BeTrue())
	}).WithTimeout(time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "not reopened before mig-manager applied the old entry")
	setMIGState(t, env, "gpu-1", "success")
	g.Eventually(func(g Gomega) {
		got := getPlan(g, env, plan)
		g.Expect(got.Status.Phase).To(Equal(v1.PlanFailed))
		g.Expect(got.Status.Nodes[0].Message).To(ContainSubstring("was set back to all-1g.18gb"))
		g.Expect(getNode(g, env, "gpu-1").Spec.Unschedulable).To(BeFalse())
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// TestLayoutVerifiedNeverArrivingFailsTheStep guards that mig-manager's success alone never
// reopens a node: without the agent's verification the step fails at configureTimeout, and a
// node whose GPU shows a layout that is neither the old nor the new stays cordoned.
func TestLayoutVerifiedNeverArrivingFailsTheStep(t *testing.T) {
	g := NewWithT(t)
	env, clock, plan := relabelledUnderAuto(t)
	reportGPU0(t, env, "gpu-1", mig.Layout{"3g.71gb": 1, "1g.18gb": 2})
	setMIGState(t, env, "gpu-1", "success")
	g.Eventually(func(g Gomega) {
		g.Expect(getPlan(g, env, plan).Status.Nodes[0].State).To(Equal(v1.NodeVerifying))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	clock.Step(6 * time.Minute)
	poke(t, env, "gpu-1")
	g.Eventually(func(g Gomega) {
		got := getPlan(g, env, plan)
		g.Expect(got.Status.Phase).To(Equal(v1.PlanFailed))
		g.Expect(got.Status.Nodes[0].Message).To(ContainSubstring("the agent did not verify the layout within configureTimeout"))
		g.Expect(getNode(g, env, "gpu-1").Spec.Unschedulable).To(BeTrue())
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// TestNewManagerResumesMidPlanWithoutRepeatingEvictionOrRelabel guards crash safety: the plan's
// state lives in its status, so replicas that take over after an eviction, and again after
// the relabel, finish the plan with exactly one eviction and one label change.
func TestNewManagerResumesMidPlanWithoutRepeatingEvictionOrRelabel(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env := startEnv(t)
	clock := clocktesting.NewFakeClock(time.Now())
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	pod := runningPod(t, env, "infer", "gpu-1", nil)
	autoPolicy(t, env)

	watcher, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	w, err := watcher.Watch(ctx, &corev1.NodeList{}, client.MatchingFieldsSelector{
		Selector: fields.OneTermEqualSelector("metadata.name", "gpu-1")})
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	relabels := make(chan string, 16)
	go func() {
		last := ""
		for ev := range w.ResultChan() {
			if ev.Type != watch.Modified && ev.Type != watch.Added {
				continue
			}
			if v := ev.Object.(*corev1.Node).Labels[nvidia.LabelMIGConfig]; v != last {
				last = v
				relabels <- v
			}
		}
	}()

	stopFirst, first := startManager(t, env, clock, false)
	plan := makePlan(t, env, "pool-a-20261129-d0d0d0d0", "d0d0d0d0d0d0d0d0", toThreeG("gpu-1", "gpupool-d0d0d0d0d0", "infer"))
	g.Eventually(func(g Gomega) {
		got := &corev1.Pod{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), got)).To(Succeed())
		g.Expect(got.DeletionTimestamp).NotTo(BeNil())
		// The API server marks the pod before the eviction call returns to the manager, which
		// counts it after: stopping on the pod alone raced with the count.
		g.Expect(evicted(t, first)).To(Equal(1.0))
	}).WithTimeout(30*time.Second).Should(Succeed(), "the first replica evicts, and counts it")
	stopFirst()
	g.Expect(evicted(t, first)).To(Equal(1.0), "once")

	// The pod is still terminating when the second replica starts; then the kubelet confirms.
	stopSecond, second := startManager(t, env, clock, false)
	g.Expect(env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())
	g.Eventually(relabels).WithTimeout(30 * time.Second).Should(Receive(Equal(entryOf(plan, "gpu-1"))))
	g.Eventually(func(g Gomega) {
		g.Expect(getPlan(g, env, plan).Status.Nodes[0].State).To(Equal(v1.NodeConfiguring))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	stopSecond()

	third, reg := startManager(t, env, clock, false)
	defer third()
	reportGPU0(t, env, "gpu-1", mig.Layout{"3g.71gb": 2})
	applyAsOperatorAndAgent(t, env, "gpu-1")
	g.Eventually(func(g Gomega) {
		g.Expect(getPlan(g, env, plan).Status.Phase).To(Equal(v1.PlanSucceeded))
		g.Expect(getNode(g, env, "gpu-1").Spec.Unschedulable).To(BeFalse())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(evicted(t, second)+evicted(t, reg)).To(BeZero(), "no replica evicts again")
	g.Consistently(relabels).WithTimeout(time.Second).ShouldNot(Receive(), "the label changed exactly once")
	g.Expect(sample(t, reg, "gpupool_plan_phase", map[string]string{"plan": plan.Name, "phase": "Succeeded"})).To(Equal(1.0))
}

// TestOrphanedCordonsAreReleasedOnStart guards startup hygiene: a node that gpupool cordoned
// for a plan that no longer exists is uncordoned, a node someone else had cordoned keeps its
// cordon and loses only gpupool's annotations, a deliberate cordon of a failed plan stays,
// and a node mig-manager is still working on waits until it is done.
func TestOrphanedCordonsAreReleasedOnStart(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env := startEnv(t)
	clock := clocktesting.NewFakeClock(time.Now())
	for _, n := range []string{"ours", "theirs", "failed", "busy", "forged", "left-pool", "policy-gone"} {
		gpuNode(t, env, n, 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	}
	autoPolicy(t, env)
	failed := makePlan(t, env, "pool-a-20261129-e1e1e1e1", "e1e1e1e1e1e1e1e1", toThreeG("failed", "gpupool-e1e1e1e1e1"))
	failed.Status = v1.RepartitionPlanStatus{Phase: v1.PlanFailed, Approved: true, Progress: "0/1",
		Nodes: []v1.NodeStepStatus{{Node: "failed", State: v1.NodeFailed, Message: "mig-manager reported failed"}}}
	g.Expect(env.Client.Status().Update(ctx, failed)).To(Succeed())
	cordon := func(name, plan string, extra map[string]string) {
		node := getNode(g, env, name)
		patch := client.MergeFrom(node.DeepCopy())
		node.Spec.Unschedulable = true
		metav1.SetMetaDataAnnotation(&node.ObjectMeta, v1.AnnotationCordonedBy, plan)
		for k, v := range extra {
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}
			node.Labels[k] = v
		}
		g.Expect(env.Client.Patch(ctx, node, patch)).To(Succeed())
	}
	// What a manager that cordoned these nodes and stopped left in its ledger.
	ledger := map[string]rollout.CordonRecord{"ours": {Plan: "pool-a-gone"}, "theirs": {Plan: "pool-a-gone", WasUnschedulable: true},
		"failed": {Plan: failed.Name, PlanUID: string(failed.UID)}, "busy": {Plan: "pool-a-gone"}, "left-pool": {Plan: "pool-a-gone", Policy: "pool-a"},
		"policy-gone": {Plan: "pool-z-gone", Policy: "pool-z"}}
	writeLedger(t, env, ledger)
	cordon("ours", "pool-a-gone", nil)
	cordon("theirs", "pool-a-gone", nil)
	node := getNode(g, env, "theirs")
	patch := client.MergeFrom(node.DeepCopy())
	metav1.SetMetaDataAnnotation(&node.ObjectMeta, v1.AnnotationWasUnschedulable, "true")
	g.Expect(env.Client.Patch(ctx, node, patch)).To(Succeed())
	cordon("failed", failed.Name, nil)
	cordon("busy", "pool-a-gone", map[string]string{nvidia.LabelMIGConfigState: "pending"})
	// An admin's cordon with a forged annotation naming a plan that never existed: the ledger
	// does not back it, so gpupool leaves the node as it is.
	cordon("forged", "pool-a-never-existed", nil)
	// gpupool's own cordon of a node that no policy selects any more: not reopened.
	cordon("left-pool", "pool-a-gone", map[string]string{"pool": "elsewhere"})
	// gpupool's own cordon for a policy since deleted: given back as it was taken.
	cordon("policy-gone", "pool-z-gone", map[string]string{"pool": "z"})

	startManager(t, env, clock, false)
	g.Eventually(func(g Gomega) {
		ours, theirs := getNode(g, env, "ours"), getNode(g, env, "theirs")
		g.Expect(ours.Spec.Unschedulable).To(BeFalse(), "gpupool's own orphaned cordon is undone")
		g.Expect(ours.Annotations).NotTo(HaveKey(v1.AnnotationCordonedBy))
		g.Expect(theirs.Spec.Unschedulable).To(BeTrue(), "someone else's cordon is never undone")
		g.Expect(theirs.Annotations).NotTo(HaveKey(v1.AnnotationCordonedBy))
		g.Expect(theirs.Annotations).NotTo(HaveKey(v1.AnnotationWasUnschedulable))
		g.Expect(nodeEvents(g, env, "ours")).To(ContainElement("OrphanedCordonReleased"))
		g.Expect(getNode(g, env, "policy-gone").Spec.Unschedulable).To(BeFalse(), "a deleted policy's cordon is given back")
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(getNode(g, env, "failed").Spec.Unschedulable).To(BeTrue(), "a failed plan's deliberate cordon stays")
		g.Expect(getNode(g, env, "busy").Spec.Unschedulable).To(BeTrue(), "mig-manager is still at work")
		forged := getNode(g, env, "forged")
		g.Expect(forged.Spec.Unschedulable).To(BeTrue(), "a cordon the ledger does not record is not gpupool's to undo")
		g.Expect(forged.Annotations).To(HaveKeyWithValue(v1.AnnotationCordonedBy, "pool-a-never-existed"), "nor is the node edited")
		g.Expect(getNode(g, env, "left-pool").Spec.Unschedulable).To(BeTrue(), "a node no policy selects is not reopened")
	}).WithTimeout(2 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
	g.Expect(nodeEvents(g, env, "left-pool")).To(ContainElement("OrphanedCordonKept"))

	setMIGState(t, env, "busy", "success")
	// The janitor looks again on its own timer (real time); a change to the node is quicker.
	poke(t, env, "busy")
	g.Eventually(func(g Gomega) {
		g.Expect(getNode(g, env, "busy").Spec.Unschedulable).To(BeFalse())
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// TestApprovedPlanIsCancelledWhenTheClusterMovedOn guards revalidation: an approved plan whose
// pending pod went away before the first disruptive step is cancelled, and no node is touched.
func TestApprovedPlanIsCancelledWhenTheClusterMovedOn(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPlanController(t)
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	runningPod(t, env, "infer", "gpu-1", nil)
	autoPolicy(t, env)
	plan := &v1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "pool-a-20261129-c1c1c1c1"},
		Spec: v1.RepartitionPlanSpec{Policy: "pool-a", Hash: "c1c1c1c1c1c1c1c1", Disruptive: true,
			Steps:    []v1.NodeStep{toThreeG("gpu-1", "gpupool-c1c1c1c1c1", "infer")},
			Expected: v1.PlanExpectation{Pods: []v1.PodReference{{Namespace: "default", Name: "long-gone"}}}}}
	createPlan(t, env, plan)
	g.Eventually(func(g Gomega) {
		got := getPlan(g, env, plan)
		g.Expect(got.Status.Phase).To(Equal(v1.PlanSuperseded))
		g.Expect(got.Status.Conditions).To(ContainElement(And(
			HaveField("Reason", "NoLongerValid"),
			HaveField("Message", ContainSubstring("none of the 1 pending pod(s) it was made for is still pending")))))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(getNode(g, env, "gpu-1").Spec.Unschedulable).To(BeFalse())
	}).WithTimeout(time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "nothing was disrupted")
}

// TestDoNotDisruptPodIsNeverPlannedForEviction guards gpupool.io/do-not-disrupt end to end
// through the policy controller: while the annotation is there no plan evicts the pod (the
// control, without it, shows that the same demand would otherwise evict it).
func TestDoNotDisruptPodIsNeverPlannedForEviction(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, _ := startPolicyController(t)
	// Each GPU holds one pod; "pinned" is do-not-disrupt throughout, so only GPU 0 could be
	// re-carved for a 7g pod, by evicting "keep" (which would fit again on GPU 1).
	gpuNode(t, env, "gpu-1", 2, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	keep := runningPod(t, env, "keep", "gpu-1", map[string]string{v1.AnnotationDoNotDisrupt: "true"})
	runningPod(t, env, "pinned", "gpu-1", map[string]string{v1.AnnotationDoNotDisrupt: "true"})
	report := &v1.GPUNode{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, report)).To(Succeed())
	for i, name := range []string{"keep", "pinned"} {
		report.Status.GPUs[i].Instances[0].Pod = &v1.PodReference{Namespace: "default", Name: name}
		report.Status.GPUs[i].Instances[0].Busy = true
	}
	g.Expect(env.Client.Status().Update(ctx, report)).To(Succeed())
	pendingPod(t, env, "big", "7g.141gb")
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())

	evictsKeep := func(g Gomega) bool {
		var plans v1.RepartitionPlanList
		g.Expect(env.Client.List(ctx, &plans)).To(Succeed())
		for _, p := range plans.Items {
			for _, s := range p.Spec.Steps {
				for _, e := range s.Evictions {
					if e.Name == "keep" {
						return true
					}
				}
			}
		}
		return false
	}
	g.Eventually(func(g Gomega) {
		got := &v1.GPUPoolPolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(policy), got)).To(Succeed())
		g.Expect(got.Status.PendingPods).To(Equal(int32(1)), "the controller has seen the demand")
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(evictsKeep).WithTimeout(3 * time.Second).WithPolling(250 * time.Millisecond).Should(BeFalse())

	patch := client.MergeFrom(keep.DeepCopy())
	delete(keep.Annotations, v1.AnnotationDoNotDisrupt)
	g.Expect(env.Client.Patch(ctx, keep, patch)).To(Succeed())
	g.Eventually(evictsKeep).WithTimeout(30*time.Second).Should(BeTrue(), "control: without the annotation it would be evicted")
}

// writeLedger writes gpupool's cordon ledger as a manager would have left it.
func writeLedger(t *testing.T, env *testenv.Env, recs map[string]rollout.CordonRecord) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: controllers.CordonLedgerConfigMap},
		Data: map[string]string{}}
	for node, rec := range recs {
		v, err := rollout.EncodeRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		cm.Data[node] = v
	}
	if err := env.Client.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
}

// TestARebootRiskyStepWaitsForNoPodItWouldKill guards MIG mode changes where mig-manager may
// reboot the node: the planner made the step while only its own evictions ran there, but a
// pod the scheduler placed since would die with the reboot, so the step is cancelled before
// the cordon and the node is never touched.
func TestARebootRiskyStepWaitsForNoPodItWouldKill(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPlanController(t)
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	runningPod(t, env, "arrived-since", "gpu-1", nil)
	autoPolicy(t, env)
	step := toThreeG("gpu-1", "gpupool-b0b0b0b0b0")
	step.RebootRisk = "the GPU Operator runs mig-manager with WITH_REBOOT (ClusterPolicy spec.migManager.env)"
	plan := makePlan(t, env, "pool-a-20261129-b0b0b0b0", "b0b0b0b0b0b0b0b0", step)
	g.Eventually(func(g Gomega) {
		got := getPlan(g, env, plan)
		g.Expect(got.Status.Nodes).To(ContainElement(SatisfyAll(HaveField("State", v1.NodeFailed),
			HaveField("Message", ContainSubstring("pod(s) default/arrived-since, which the step does not evict, run on gpu-1 now: a reboot would kill them")))))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(func(g Gomega) {
		node := getNode(g, env, "gpu-1")
		g.Expect(node.Spec.Unschedulable).To(BeFalse())
		g.Expect(node.Labels).NotTo(HaveKey(nvidia.LabelMIGConfig))
	}).WithTimeout(2 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
}
