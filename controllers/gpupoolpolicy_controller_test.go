package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/testenv"
)

// gpuNode creates an H200 node and the agent's report of it with every GPU carved 1g.18gb:7.
func gpuNode(t *testing.T, env *testenv.Env, name string, gpus int, labels map[string]string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110")}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{Capacity: alloc, Allocatable: alloc}}
	g.Expect(env.Client.Create(ctx, node)).To(Succeed())
	// The API server taints new nodes not-ready (TaintNodesByCondition); with no kubelet and no
	// node-lifecycle controller in envtest, the fixture plays them and clears it.
	node.Spec.Taints = nil
	g.Expect(env.Client.Update(ctx, node)).To(Succeed())

	product, _ := mig.LookupProduct("H200")
	placed, err := product.Place(mig.Layout{"1g.18gb": 7}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	report := &v1.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	g.Expect(env.Client.Create(ctx, report)).To(Succeed())
	for i := range gpus {
		gs := v1.GPUStatus{Index: int32(i), Product: "NVIDIA H200", MIGMode: &v1.MIGModeStatus{Current: "Enabled"}}
		for _, in := range placed {
			gs.Instances = append(gs.Instances, v1.MIGInstance{Profile: in.Profile,
				Placement: v1.SlicePlacement{Start: int32(in.Placement.Start), Size: int32(in.Placement.Size)}})
		}
		report.Status.GPUs = append(report.Status.GPUs, gs)
	}
	report.Status.ObservedTime = ptr.To(metav1.Now())
	report.Status.Conditions = []metav1.Condition{{Type: v1.ConditionNVMLReady, Status: metav1.ConditionTrue,
		Reason: "Read", LastTransitionTime: metav1.Now()}}
	g.Expect(env.Client.Status().Update(ctx, report)).To(Succeed())
}

// heartbeat plays the agent's periodic report: the GPUNode was observed at the given time.
func heartbeat(t *testing.T, env *testenv.Env, name string, at time.Time) {
	t.Helper()
	g := NewWithT(t)
	report := &v1.GPUNode{}
	g.Expect(env.Client.Get(context.Background(), client.ObjectKey{Name: name}, report)).To(Succeed())
	report.Status.ObservedTime = ptr.To(metav1.NewTime(at))
	g.Expect(env.Client.Status().Update(context.Background(), report)).To(Succeed())
}

// pendingPod creates a pod asking for one instance of a MIG profile that the scheduler has
// marked unschedulable ten minutes ago.
func pendingPod(t *testing.T, env *testenv.Env, name, profile string) *corev1.Pod {
	t.Helper()
	return pendingPodAsking(t, env, name, corev1.ResourceName(mig.ResourceName(profile)))
}

// pendingPodAsking creates a pod asking for one unit of a GPU resource that the scheduler has
// marked unschedulable ten minutes ago.
func pendingPodAsking(t *testing.T, env *testenv.Env, name string, resourceName corev1.ResourceName) *corev1.Pod {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	res := corev1.ResourceList{resourceName: resource.MustParse("1")}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Limits: res, Requests: res}}}},
	}
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	pod.Status.Phase = corev1.PodPending
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.NewTime(time.Now().Add(-10 * time.Minute))}}
	g.Expect(env.Client.Status().Update(ctx, pod)).To(Succeed())
	return pod
}

// onlyPlan waits until exactly one RepartitionPlan exists and returns it.
func onlyPlan(t *testing.T, env *testenv.Env) v1.RepartitionPlan {
	t.Helper()
	var plan v1.RepartitionPlan
	NewWithT(t).Eventually(func(g Gomega) {
		var plans v1.RepartitionPlanList
		g.Expect(env.Client.List(context.Background(), &plans)).To(Succeed())
		g.Expect(plans.Items).To(HaveLen(1))
		plan = plans.Items[0]
	}).WithTimeout(30 * time.Second).Should(Succeed())
	return plan
}

func poolPolicy(name string, selector map[string]string) *v1.GPUPoolPolicy {
	return &v1.GPUPoolPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.GPUPoolPolicySpec{
			NodeSelector: v1.PoolSelector{MatchLabels: selector},
			Catalog: []v1.CatalogEntry{{Product: "NVIDIA-H200",
				MIGProfiles: []v1.MIGProfileName{"1g.18gb", "3g.71gb", "7g.141gb"}}},
		},
	}
}

func condition(p *v1.GPUPoolPolicy, t string) metav1.Condition {
	if c := meta.FindStatusCondition(p.Status.Conditions, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// TestPendingDemandBecomesAPlanAndStaleDemandRetiresIt guards the observe-and-propose loop: a
// pod waiting for a profile no GPU offers yields exactly one plan, owned by its policy, that
// waits for a human; when the demand goes away the unapproved plan is superseded.
func TestPendingDemandBecomesAPlanAndStaleDemandRetiresIt(t *testing.T) {
	g := NewWithT(t)
	env, clock := startPolicyController(t)
	ctx := context.Background()
	gpuNode(t, env, "gpu-1", 2, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	pod := pendingPod(t, env, "trainer", "3g.71gb")
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())

	plan := onlyPlan(t, env)
	g.Expect(plan.Spec.Policy).To(Equal("pool-a"))
	g.Expect(plan.OwnerReferences).To(HaveLen(1))
	g.Expect(plan.OwnerReferences[0].Name).To(Equal("pool-a"))
	g.Expect(plan.Spec.Disruptive).To(BeFalse(), "idle GPUs serve the pod")
	g.Expect(plan.Spec.Steps).To(HaveLen(1))
	g.Expect(plan.Spec.Steps[0].Node).To(Equal("gpu-1"))
	g.Expect(plan.Spec.Expected.Pods).To(ConsistOf(v1.PodReference{Namespace: "default", Name: "trainer"}))

	g.Eventually(func(g Gomega) {
		got := &v1.GPUPoolPolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(policy), got)).To(Succeed())
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		g.Expect(got.Status.Pool.Nodes).To(Equal(int32(1)))
		g.Expect(got.Status.Pool.GPUs).To(Equal(int32(2)))
		g.Expect(got.Status.PendingPods).To(Equal(int32(1)))
		g.Expect(got.Status.CurrentPlan).To(Equal(plan.Name))
		g.Expect(got.Status.Demand).To(ConsistOf(v1.ShapeDemand{Resource: "nvidia.com/mig-3g.71gb",
			PendingPods: 1, EligibleNodes: 1, FeasibleNodes: 1}))
		// No GPU Operator in this test: plans are proposed, but the pool cannot work, and says so.
		g.Expect(condition(got, v1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(condition(got, v1.ConditionReady).Reason).To(Equal("GPUOperatorNotFound"), condition(got, v1.ConditionReady).Message)
		g.Expect(condition(got, v1.ConditionPaused).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(condition(got, v1.ConditionAwaitingApproval).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(condition(got, v1.ConditionAwaitingApproval).Message).To(ContainSubstring(
			"kubectl annotate repartitionplan " + plan.Name + " gpupool.io/approve=" + plan.Spec.Hash))
		g.Expect(condition(got, v1.ConditionConflict).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(condition(got, v1.ConditionDegraded).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(condition(got, v1.ConditionMIGTablesMatch).Reason).To(Equal(v1.ReasonTablesMatch), "no agent reports a table that differs")
		g.Expect(condition(got, v1.ConditionDRASlicesCurrent).Reason).To(Equal(pool.ReasonSlicesCurrent), "no DRA driver in the pool")
		g.Expect(condition(got, v1.ConditionGPUOperatorConfigured).Reason).To(Equal("GPUOperatorNotFound"))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// Inside the stabilisation window the plan stands; past it, the planner looks again.
	clock.Step(3 * time.Minute)
	heartbeat(t, env, "gpu-1", clock.Now())
	g.Expect(env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(&plan), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(v1.PlanSuperseded))
	}).WithTimeout(30*time.Second).Should(Succeed(), "a plan nobody needs any more is retired, not left to be approved")
}

// TestAPlanAwaitingApprovalStandsThroughTheStabilizationWindow guards the window: while a plan
// waits for a human and is younger than stabilizationWindow, new demand that no plan can serve
// neither replaces it nor adds a second plan, and DemandSatisfied names that pod's reason;
// new demand that the planner can serve replaces it at once, without waiting out the window
// (issue 21: the pending -> plan bound holds while a plan is under review).
func TestAPlanAwaitingApprovalStandsThroughTheStabilizationWindow(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, _ := startPolicyController(t)
	gpuNode(t, env, "gpu-1", 2, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	pendingPod(t, env, "trainer", "3g.71gb")
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	first := onlyPlan(t, env)

	// 2g.35gb is not in the pool's catalog: no plan serves it.
	pendingPod(t, env, "odd", "2g.35gb")
	g.Eventually(func(g Gomega) {
		got := &v1.GPUPoolPolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(policy), got)).To(Succeed())
		g.Expect(got.Status.PendingPods).To(Equal(int32(2)), "the controller has seen the new demand")
		c := condition(got, v1.ConditionDemandSatisfied)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal("PartitionShape"))
		g.Expect(c.Message).To(HavePrefix("2 pod(s) pending, 1 not served; e.g. default/odd"))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(func(g Gomega) {
		var plans v1.RepartitionPlanList
		g.Expect(env.Client.List(ctx, &plans)).To(Succeed())
		g.Expect(plans.Items).To(HaveLen(1))
		g.Expect(plans.Items[0].Name).To(Equal(first.Name))
		g.Expect(plans.Items[0].Status.Phase).To(Equal(v1.PlanAwaitingApproval))
	}).WithTimeout(2*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "the plan under review stands")

	// A pod the planner can serve: the plan under review is replaced inside the window (the
	// fake clock does not move), by one that serves both servable pods.
	pendingPod(t, env, "big", "7g.141gb")
	g.Eventually(func(g Gomega) {
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(&first), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(v1.PlanSuperseded))
		var plans v1.RepartitionPlanList
		g.Expect(env.Client.List(ctx, &plans)).To(Succeed())
		g.Expect(plans.Items).To(ContainElement(HaveField("Spec.Expected.Pods", ConsistOf(
			v1.PodReference{Namespace: "default", Name: "big"}, v1.PodReference{Namespace: "default", Name: "trainer"}))))
	}).WithTimeout(30*time.Second).Should(Succeed(), "new servable demand replaces the plan under review without waiting out the window")
}

// TestSilentAgentsAreCountedAndDegradeThePool guards issue 21's silent staleness: a pool node
// whose agent report has aged past the limit is left out of planning, counted in
// status.pool.unreportedNodes and named in Degraded, and a fresh report brings it back.
func TestSilentAgentsAreCountedAndDegradeThePool(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, clock := startPolicyController(t)
	labels := map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"}
	gpuNode(t, env, "gpu-1", 2, labels)
	gpuNode(t, env, "gpu-2", 2, labels)
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	poolStatus := func(g Gomega) *v1.GPUPoolPolicy {
		got := &v1.GPUPoolPolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(policy), got)).To(Succeed())
		return got
	}
	g.Eventually(func(g Gomega) {
		got := poolStatus(g)
		g.Expect(got.Status.Pool.GPUs).To(Equal(int32(4)))
		g.Expect(got.Status.Pool.UnreportedNodes).To(BeZero())
		g.Expect(condition(got, v1.ConditionDegraded).Status).To(Equal(metav1.ConditionFalse))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// Three minutes pass; only gpu-1's agent reports.
	clock.Step(3 * time.Minute)
	heartbeat(t, env, "gpu-1", clock.Now())
	g.Eventually(func(g Gomega) {
		got := poolStatus(g)
		g.Expect(got.Status.Pool.Nodes).To(Equal(int32(2)))
		g.Expect(got.Status.Pool.UnreportedNodes).To(Equal(int32(1)))
		g.Expect(got.Status.Pool.GPUs).To(Equal(int32(2)), "the silent node's GPUs are unseen")
		c := condition(got, v1.ConditionDegraded)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(Equal("NodesNotPlannable"))
		g.Expect(c.Message).To(And(
			HavePrefix("1 of 2 pool node(s) are left out of planning, their GPUs unseen: gpu-2 (the GPUNode report is "),
			HaveSuffix(" old (limit 2m0s): is the agent healthy?)")))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	heartbeat(t, env, "gpu-2", clock.Now())
	g.Eventually(func(g Gomega) {
		got := poolStatus(g)
		g.Expect(got.Status.Pool.UnreportedNodes).To(BeZero())
		g.Expect(condition(got, v1.ConditionDegraded).Status).To(Equal(metav1.ConditionFalse))
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// expectLeftOut waits until policy's status counts unreported nodes left out of planning and
// its Degraded condition's message says message.
func expectLeftOut(t *testing.T, env *testenv.Env, policy *v1.GPUPoolPolicy, unreported int32, message string) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		got := &v1.GPUPoolPolicy{}
		g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(policy), got)).To(Succeed())
		g.Expect(got.Status.Pool.UnreportedNodes).To(Equal(unreported))
		g.Expect(condition(got, v1.ConditionDegraded).Message).To(ContainSubstring(message))
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// TestAgentLeaseKeepsAnUnchangedReportFresh guards the Lease heartbeat (issue 21): an agent
// that writes its report only on change stays planned while it renews its Lease, however old
// the report; when the Lease lapses the node is left out and counted, named by the Lease's age.
func TestAgentLeaseKeepsAnUnchangedReportFresh(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, clock := startPolicyController(t)
	gpuNode(t, env, "gpu-1", 2, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}})).To(Succeed())
	renew := metav1.NewMicroTime(clock.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: "gpu-1", Labels: map[string]string{v1.LabelAgentLease: "true"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("gpupool-agent/gpu-1"), RenewTime: &renew},
	}
	g.Expect(env.Client.Create(ctx, lease)).To(Succeed())
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	expectLeftOut(t, env, policy, 0, "every pool node's agent reports its GPUs")

	// Ten minutes on, the report is ten minutes old; the agent renewed its Lease a moment ago,
	// which (after a silence longer than the report-age limit) wakes the policy by itself.
	clock.Step(10 * time.Minute)
	lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(clock.Now()))
	g.Expect(env.Client.Update(ctx, lease)).To(Succeed())
	expectLeftOut(t, env, policy, 0, "every pool node's agent reports its GPUs")

	// The agent falls silent: three minutes later the node is left out, by the Lease's age.
	clock.Step(3 * time.Minute)
	patch := client.MergeFrom(policy.DeepCopy())
	policy.Annotations = map[string]string{"example.com/poke": "1"}
	g.Expect(env.Client.Patch(ctx, policy, patch)).To(Succeed(), "any event runs a pass")
	expectLeftOut(t, env, policy, 1, "gpu-1 (the agent's last heartbeat is 3m0s old (limit 2m0s)")
}

// TestAgentReadinessKeepsAnUnchangedReportFresh guards the readiness heartbeat: an agent that
// writes its report only on change and renews no Lease stays planned while its pod is Ready on
// a Ready node, however old the report; once the pod stops being ready the report stays usable
// for the report-age limit (as after a Lease's last renewal), then the node is left out and
// counted; and the pod's readiness coming back brings the node back by itself.
func TestAgentReadinessKeepsAnUnchangedReportFresh(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, clock := startPolicyController(t)
	gpuNode(t, env, "gpu-1", 2, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	readyNode(t, env, "gpu-1", clock.Now().Add(-time.Hour))
	g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}})).To(Succeed())
	agentPod := daemonSetAgentPod("agent-x7k2p", "gpu-1")
	g.Expect(env.Client.Create(ctx, agentPod)).To(Succeed())
	setReady := func(status corev1.ConditionStatus) {
		t.Helper()
		setPodReady(t, env, agentPod, status, clock.Now())
	}
	setReady(corev1.ConditionTrue)
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	poke := func(n string) {
		t.Helper()
		patch := client.MergeFrom(policy.DeepCopy())
		policy.Annotations = map[string]string{"example.com/poke": n}
		g.Expect(env.Client.Patch(ctx, policy, patch)).To(Succeed(), "any event runs a pass")
	}
	expectLeftOut(t, env, policy, 0, "every pool node's agent reports its GPUs")

	// Ten minutes on, nothing written: the ready pod vouches for the ten-minute-old report.
	clock.Step(10 * time.Minute)
	poke("1")
	expectLeftOut(t, env, policy, 0, "every pool node's agent reports its GPUs")

	// The agent stops being ready: its report is still used within the limit, then not.
	setReady(corev1.ConditionFalse)
	expectLeftOut(t, env, policy, 0, "every pool node's agent reports its GPUs")
	clock.Step(3 * time.Minute)
	poke("2")
	// (The condition's time is stored to the second, so the age may read 3m1s.)
	expectLeftOut(t, env, policy, 1, "gpu-1 (the agent's last heartbeat is 3m")

	// Ready again: the pod's own event brings the node back.
	setReady(corev1.ConditionTrue)
	expectLeftOut(t, env, policy, 0, "every pool node's agent reports its GPUs")
}

// readyNode gives node a Ready condition, as its kubelet would, True since since.
func readyNode(t *testing.T, env *testenv.Env, name string, since time.Time) {
	t.Helper()
	g := NewWithT(t)
	node := &corev1.Node{}
	g.Expect(env.Client.Get(context.Background(), client.ObjectKey{Name: name}, node)).To(Succeed())
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(since)}}
	g.Expect(env.Client.Status().Update(context.Background(), node)).To(Succeed())
}

// daemonSetAgentPod is node's agent pod as the agent DaemonSet's controller makes it: the
// selector's labels, a controller reference to the DaemonSet, run as the agent's
// ServiceAccount. Not created.
func daemonSetAgentPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: name, Labels: agentPodLabels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: agentDaemonSet,
				UID: "agent-daemonset-uid", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: agentServiceAccount,
			Containers: []corev1.Container{{Name: "agent", Image: "gpupool/agent"}}},
	}
}

// setPodReady writes pod's status Running with the Ready condition status, changed at since,
// as its kubelet would.
func setPodReady(t *testing.T, env *testenv.Env, pod *corev1.Pod, status corev1.ConditionStatus, since time.Time) {
	t.Helper()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.NewTime(since)}}
	NewWithT(t).Expect(env.Client.Status().Update(context.Background(), pod)).To(Succeed())
}

// TestImpostorAgentPodsKeepNoSilentNodeInPlanning guards issue 34's attack on the readiness
// heartbeat: ready pods that wear the agent DaemonSet's labels on a node whose agent is down
// kept that node in planning, so the planner cordoned and drained on a stale report. A pod the
// DaemonSet does not control, or that runs as another ServiceAccount, vouches for nothing:
// the node is left out once its own agent has been unready past the report-age limit.
func TestImpostorAgentPodsKeepNoSilentNodeInPlanning(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, clock := startPolicyController(t)
	gpuNode(t, env, "gpu-1", 2, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	readyNode(t, env, "gpu-1", clock.Now().Add(-time.Hour))
	g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}})).To(Succeed())

	// The node's own agent is down: its pod is not ready.
	agentPod := daemonSetAgentPod("agent-x7k2p", "gpu-1")
	g.Expect(env.Client.Create(ctx, agentPod)).To(Succeed())
	setPodReady(t, env, agentPod, corev1.ConditionFalse, clock.Now())

	// Impostors on the same node, ready, with the DaemonSet's labels.
	bare := daemonSetAgentPod("agent-bare", "gpu-1")
	bare.OwnerReferences = nil
	ofAReplicaSet := daemonSetAgentPod("agent-of-a-replicaset", "gpu-1")
	ofAReplicaSet.OwnerReferences[0].Kind = "ReplicaSet"
	ofAnotherDaemonSet := daemonSetAgentPod("agent-of-another-daemonset", "gpu-1")
	ofAnotherDaemonSet.OwnerReferences[0].Name = "lookalike"
	asAnotherAccount := daemonSetAgentPod("agent-as-default", "gpu-1")
	asAnotherAccount.Spec.ServiceAccountName = "default"
	for _, p := range []*corev1.Pod{bare, ofAReplicaSet, ofAnotherDaemonSet, asAnotherAccount} {
		g.Expect(env.Client.Create(ctx, p)).To(Succeed())
		setPodReady(t, env, p, corev1.ConditionTrue, clock.Now())
	}

	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	expectLeftOut(t, env, policy, 0, "every pool node's agent reports its GPUs")

	// Three minutes on, the impostors are still ready; the agent is not, nor is its report new:
	// the node is left out (named by its report's age, a moment newer than the agent's last
	// sign of life). Had an impostor counted, its readiness would have vouched for now.
	clock.Step(3 * time.Minute)
	patch := client.MergeFrom(policy.DeepCopy())
	policy.Annotations = map[string]string{"example.com/poke": "1"}
	g.Expect(env.Client.Patch(ctx, policy, patch)).To(Succeed(), "any event runs a pass")
	expectLeftOut(t, env, policy, 1, "are left out of planning, their GPUs unseen: gpu-1 (")
}

// TestApprovedPlanIsNeverSuperseded guards that a human's approval cannot be pulled from under
// them by new demand before the plan controller acts on it.
func TestApprovedPlanIsNeverSuperseded(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPolicyController(t)
	ctx := context.Background()
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	pod := pendingPod(t, env, "trainer", "3g.71gb")
	g.Expect(env.Client.Create(ctx, poolPolicy("pool-a", map[string]string{"pool": "a"}))).To(Succeed())

	plan := onlyPlan(t, env)
	patch := client.MergeFrom(plan.DeepCopy())
	plan.Annotations = map[string]string{v1.AnnotationApprove: plan.Spec.Hash}
	g.Expect(env.Client.Patch(ctx, &plan, patch)).To(Succeed())
	g.Expect(env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())
	pendingPod(t, env, "other", "7g.141gb")

	g.Consistently(func(g Gomega) {
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(&plan), got)).To(Succeed())
		g.Expect(got.Status.Phase).NotTo(Equal(v1.PlanSuperseded))
		var plans v1.RepartitionPlanList
		g.Expect(env.Client.List(ctx, &plans)).To(Succeed())
		g.Expect(plans.Items).To(HaveLen(1), "no second plan while one is approved")
	}).WithTimeout(5 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
}

// TestTwoPoliciesSelectingOneNodeConflictAndLeaveItAlone guards docs/operate.md (the Conflict condition): both
// policies report Conflict and neither plans a change on the shared node.
func TestTwoPoliciesSelectingOneNodeConflictAndLeaveItAlone(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPolicyController(t)
	ctx := context.Background()
	gpuNode(t, env, "shared", 1, map[string]string{"pool": "a", "team": "b", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	pendingPod(t, env, "trainer", "3g.71gb")
	a := poolPolicy("pool-a", map[string]string{"pool": "a"})
	b := poolPolicy("team-b", map[string]string{"team": "b"})
	g.Expect(env.Client.Create(ctx, a)).To(Succeed())
	g.Expect(env.Client.Create(ctx, b)).To(Succeed())

	for _, p := range []*v1.GPUPoolPolicy{a, b} {
		g.Eventually(func(g Gomega) {
			got := &v1.GPUPoolPolicy{}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), got)).To(Succeed())
			c := condition(got, v1.ConditionConflict)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Message).To(ContainSubstring("shared (also policy"))
		}).WithTimeout(30*time.Second).Should(Succeed(), p.Name)
	}
	// pool-a may have proposed a plan in the moment before team-b existed; once the conflict
	// is seen, no live plan may target the shared node.
	noLivePlan := func(g Gomega) {
		var plans v1.RepartitionPlanList
		g.Expect(env.Client.List(ctx, &plans)).To(Succeed())
		for _, p := range plans.Items {
			g.Expect(p.Status.Phase).To(Equal(v1.PlanSuperseded), "plan %s still live", p.Name)
		}
	}
	g.Eventually(noLivePlan).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(noLivePlan).WithTimeout(3*time.Second).WithPolling(500*time.Millisecond).Should(Succeed(),
		"neither policy touches the shared node")
}

// TestClaimPodsAreDemand: a pod that asks NVIDIA's DRA driver for a MIG device through a
// ResourceClaim (device class mig.nvidia.com, the profile pinned in CEL) is demand exactly as a
// pod asking the device plugin is, beside one, and both are served by one plan; a claim that
// selects in a way gpupool does not model leaves its pod out of the plan.
func TestClaimPodsAreDemand(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPolicyController(t)
	ctx := context.Background()
	// gpu-1's GPUs are the device plugin's; NVIDIA's DRA driver serves gpu-2's (it publishes a
	// slice for its pool), and the two never share a GPU.
	gpuNode(t, env, "gpu-1", 2, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	gpuNode(t, env, "gpu-2", 2, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	g.Expect(env.Client.Create(ctx, &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-2-gpu.nvidia.com-x7k2q"},
		Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.nvidia.com", NodeName: ptr.To("gpu-2"),
			Pool: resourcev1.ResourcePool{Name: "gpu-2", ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: "gpu-0-mig-1g18gb-19-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"type": {StringValue: ptr.To("mig")}, "uuid": {StringValue: ptr.To("MIG-gpu-2-0-0")}, "profile": {StringValue: ptr.To("1g.18gb")}}}}},
	})).To(Succeed())
	claimPod := func(name, selector string) {
		claim := &resourcev1.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-gpu", Namespace: "default"},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
				Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "mig.nvidia.com",
					Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: selector}}}},
			}}}},
		}
		g.Expect(env.Client.Create(ctx, claim)).To(Succeed())
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{
				ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim.Name)}},
				Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
			},
		}
		g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
		pod.Status.Phase = corev1.PodPending
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.NewTime(time.Now().Add(-10 * time.Minute))}}
		g.Expect(env.Client.Status().Update(ctx, pod)).To(Succeed())
	}
	claimPod("dra-trainer", "device.attributes['gpu.nvidia.com'].profile == '3g.71gb'")
	claimPod("dra-sweep", "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('30Gi'))")
	pendingPod(t, env, "plugin-trainer", "3g.71gb")
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	policy.Spec.Disruption.MaxReconfiguringNodes = ptr.To(intstr.FromString("100%")) // both nodes in one plan
	// Paused until the pass sees both pods pending: the cache may show a pod's Unschedulable
	// status a moment after the pod, and a plan made in between would serve one pod only.
	policy.Spec.Planning.Paused = true
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &v1.GPUPoolPolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(policy), got)).To(Succeed())
		g.Expect(got.Status.PendingPods).To(Equal(int32(2)))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	editPolicy(t, env, policy.Name, func(p *v1.GPUPoolPolicy) { p.Spec.Planning.Paused = false })

	plan := onlyPlan(t, env)
	g.Expect(plan.Spec.Expected.Pods).To(ConsistOf(
		v1.PodReference{Namespace: "default", Name: "dra-trainer"},
		v1.PodReference{Namespace: "default", Name: "plugin-trainer"}))
	// Each on its own kind of node: a 3g carved on gpu-1 serves no claim.
	g.Expect(plan.Spec.Steps).To(HaveLen(2))
}

// TestGPUNodeSaysWhetherDRASlicesAreCurrent: on a node NVIDIA's DRA driver serves, the
// manager says on its GPUNode whether the driver publishes the instances NVML reports, beside
// the agent's own conditions, which it never touches.
func TestGPUNodeSaysWhetherDRASlicesAreCurrent(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPolicyController(t)
	ctx := context.Background()
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	slice := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-1-gpu.nvidia.com"},
		Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.nvidia.com", NodeName: ptr.To("gpu-1"),
			Pool: resourcev1.ResourcePool{Name: "gpu-1", ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: "gpu-0-mig-1g18gb-19-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"type": {StringValue: ptr.To("mig")}, "uuid": {StringValue: ptr.To("MIG-gone")}}}}},
	}
	g.Expect(env.Client.Create(ctx, slice)).To(Succeed())
	g.Expect(env.Client.Create(ctx, poolPolicy("pool-a", map[string]string{"pool": "a"}))).To(Succeed())

	conditionOf := func(g Gomega, t string) *metav1.Condition {
		report := &v1.GPUNode{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, report)).To(Succeed())
		return meta.FindStatusCondition(report.Status.Conditions, t)
	}
	g.Eventually(func(g Gomega) {
		c := conditionOf(g, v1.ConditionDRASlicesCurrent)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Message).To(ContainSubstring("list 1 it does not"))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(conditionOf(g, v1.ConditionNVMLReady)).NotTo(BeNil(), "the agent's conditions stay")

	// The driver's plugin restarts and publishes what NVML reports (here: no instance has a UUID).
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(slice), slice)).To(Succeed())
	slice.Spec.Devices = nil
	g.Expect(env.Client.Update(ctx, slice)).To(Succeed())
	g.Eventually(func(g Gomega) {
		c := conditionOf(g, v1.ConditionDRASlicesCurrent)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(conditionOf(g, v1.ConditionNVMLReady)).NotTo(BeNil(), "the agent's conditions stay")
}

// TestAPoolAtRestIsNotPassedAgain guards the manager's cost at rest (issue 21): with no event
// and nothing that time changes, the policy's periodic recheck makes no pass; a report growing
// stale with no event, and then a new pod, each make one.
func TestAPoolAtRestIsNotPassedAgain(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	clock := clocktesting.NewFakeClock(time.Now())
	_, reg := startManager(t, env, clock, true)
	ctx := context.Background()
	gpuNode(t, env, "gpu-1", 2, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	pendingPod(t, env, "trainer", "3g.71gb")
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	// Rechecked every second (minPendingAge 0), so that the test sees several.
	policy.Spec.Planning.MinPendingAge = &metav1.Duration{}
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	onlyPlan(t, env)

	passes := func(kind string) float64 {
		return sample(t, reg, "gpupool_policy_passes_total", map[string]string{"policy": "pool-a", "pass": kind})
	}
	// At rest once a recheck finds nothing changed.
	g.Eventually(func() float64 { return passes("unchanged") }).WithTimeout(30 * time.Second).Should(BeNumerically(">=", 1))
	complete, unchanged := passes("complete"), passes("unchanged")
	g.Eventually(func() float64 { return passes("unchanged") }).WithTimeout(30*time.Second).Should(BeNumerically(">=", unchanged+3),
		"the recheck keeps coming")
	g.Expect(passes("complete")).To(Equal(complete), "a recheck with nothing changed made a pass")

	// Time alone: the report grows older than maxReportAge, and the node leaves planning.
	clock.Step(3 * time.Minute) // the manager's default maxReportAge is 2 minutes
	g.Eventually(func(g Gomega) {
		g.Expect(passes("complete")).To(BeNumerically(">", complete))
		got := &v1.GPUPoolPolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(policy), got)).To(Succeed())
		g.Expect(got.Status.Pool.UnreportedNodes).To(Equal(int32(1)))
	}).WithTimeout(30*time.Second).Should(Succeed(), "a report that went stale with no event was not noticed")

	// An event: new demand.
	g.Eventually(func() float64 { return passes("unchanged") }).WithTimeout(30 * time.Second).Should(BeNumerically(">", unchanged+3))
	complete = passes("complete")
	pendingPod(t, env, "second", "3g.71gb")
	g.Eventually(func() float64 { return passes("complete") }).WithTimeout(30*time.Second).Should(BeNumerically(">", complete),
		"a new pending pod made no pass")
}
