package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/testenv"
)

// applyAsOperatorAndAgent plays NVIDIA's mig-manager (state success) and gpupool's agent
// (LayoutVerified for the current spec) on a node whose label the plan has flipped.
func applyAsOperatorAndAgent(t *testing.T, env *testenv.Env, name string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	node := &corev1.Node{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
	patch := client.MergeFrom(node.DeepCopy())
	node.Labels[nvidia.LabelMIGConfigState] = "success"
	g.Expect(env.Client.Patch(ctx, node, patch)).To(Succeed())
	verify(t, env, name)
}

// verify plays the agent, LayoutVerified True for the GPUNode's current generation, and the
// device plugin, advertising the expected layout's MIG devices (mixed strategy) in the node's
// allocatable.
func verify(t *testing.T, env *testenv.Env, name string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	report := &v1.GPUNode{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: name}, report)).To(Succeed())
	report.Status.Conditions = append(report.Status.Conditions, metav1.Condition{Type: v1.ConditionLayoutVerified,
		Status: metav1.ConditionTrue, Reason: "Matches", LastTransitionTime: metav1.Now(), ObservedGeneration: report.Generation})
	g.Expect(env.Client.Status().Update(ctx, report)).To(Succeed())
	advertiseLayout(t, env, name, report.Spec.ExpectedLayout)
}

// advertiseLayout plays the device plugin: the node's allocatable and capacity show one
// nvidia.com/mig-<profile> per instance of the layout and one nvidia.com/gpu per MIG-disabled
// GPU, and nothing else of NVIDIA's.
func advertiseLayout(t *testing.T, env *testenv.Env, name string, layout []v1.GPULayout) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	// The manager patches the node too (cordon, labels): retry on a conflict.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error { return advertiseOnce(ctx, env, name, layout) })).To(Succeed())
}

func advertiseOnce(ctx context.Context, env *testenv.Env, name string, layout []v1.GPULayout) error {
	node := &corev1.Node{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return err
	}
	for _, list := range []corev1.ResourceList{node.Status.Allocatable, node.Status.Capacity} {
		for r := range list {
			if strings.HasPrefix(string(r), "nvidia.com/") && r != "nvidia.com/gpu.shared" && !strings.HasSuffix(string(r), ".shared") {
				delete(list, r)
			}
		}
	}
	want := map[corev1.ResourceName]int64{}
	for _, l := range layout {
		if len(l.Profiles) == 0 {
			want["nvidia.com/gpu"]++
		}
		for p, n := range l.Profiles {
			want[corev1.ResourceName(mig.ResourceName(p))] += int64(n)
		}
	}
	if node.Status.Allocatable == nil {
		node.Status.Allocatable = corev1.ResourceList{}
	}
	if node.Status.Capacity == nil {
		node.Status.Capacity = corev1.ResourceList{}
	}
	for r, n := range want {
		node.Status.Allocatable[r] = *resource.NewQuantity(n, resource.DecimalSI)
		node.Status.Capacity[r] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return env.Client.Status().Update(ctx, node)
}

// autoPolicy creates policy pool-a over nodes labelled pool=a, approving plans by itself.
func autoPolicy(t *testing.T, env *testenv.Env) {
	t.Helper()
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	policy.Spec.Disruption.Approval = v1.ApprovalAuto
	NewWithT(t).Expect(env.Client.Create(context.Background(), policy)).To(Succeed())
}

// carve3gPlan is a plan of policy pool-a that carves GPU 0 of gpu-1 from all-1g into two 3g.71gb.
func carve3gPlan(name string) *v1.RepartitionPlan {
	return &v1.RepartitionPlan{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.RepartitionPlanSpec{Policy: "pool-a", Hash: "aaaabbbbccccdddd", Steps: []v1.NodeStep{{
			Node: "gpu-1", MIGConfigName: "gpupool-0123456789",
			GPUs: []v1.GPUChange{{Index: 0, From: v1.ProfileCounts{"1g.18gb": 7}, To: v1.ProfileCounts{"3g.71gb": 2}}},
		}}},
	}
}

// TestApprovedPlanRunsToCompletion guards the execution order on one node: cordon, config
// entry and expected layout, relabel, then wait for mig-manager's success AND the agent's
// verification before uncordoning. The test plays mig-manager and the agent.
func TestApprovedPlanRunsToCompletion(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPlanController(t)
	ctx := context.Background()
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	autoPolicy(t, env)
	plan := carve3gPlan("pool-a-20261129-aaaabbbb")
	createPlan(t, env, plan)

	node := &corev1.Node{}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, node)).To(Succeed())
		g.Expect(node.Spec.Unschedulable).To(BeTrue())
		g.Expect(node.Annotations).To(HaveKeyWithValue(v1.AnnotationCordonedBy, plan.Name))
		g.Expect(node.Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, entryOf(plan, "gpu-1")))
	}).WithTimeout(30*time.Second).Should(Succeed(), "cordoned, then relabelled")

	cm := &corev1.ConfigMap{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: controllers.MIGPartedConfigMap}, cm)).To(Succeed())
	cfg, err := nvidia.ParseMIGPartedConfig([]byte(cm.Data[nvidia.ConfigMapKey]))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.MIGConfigs).To(HaveKey(entryOf(plan, "gpu-1")))
	g.Expect(cfg.MIGConfigs).To(HaveKey(nvidia.AllDisabled), "mig-manager's fallback entry is always there")
	report := &v1.GPUNode{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, report)).To(Succeed())
	g.Expect(report.Spec.ExpectedLayout).To(ConsistOf(v1.GPULayout{Index: 0, Profiles: v1.ProfileCounts{"3g.71gb": 2}}))

	// mig-manager reports success; the node must stay cordoned until the agent verifies.
	patch := client.MergeFrom(node.DeepCopy())
	node.Labels[nvidia.LabelMIGConfigState] = "success"
	g.Expect(env.Client.Patch(ctx, node, patch)).To(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, node)).To(Succeed())
		g.Expect(node.Spec.Unschedulable).To(BeTrue())
	}).WithTimeout(2*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "a success label is never trusted alone")

	verify(t, env, "gpu-1")

	g.Eventually(func(g Gomega) {
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(v1.PlanSucceeded))
		g.Expect(got.Status.Progress).To(Equal("1/1"))
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, node)).To(Succeed())
		g.Expect(node.Spec.Unschedulable).To(BeFalse())
		g.Expect(node.Annotations).NotTo(HaveKey(v1.AnnotationCordonedBy))
	}).WithTimeout(30*time.Second).Should(Succeed(), "verified, then uncordoned")
}

// TestNodeCordonedBeforehandStaysCordoned guards that gpupool never uncordons a node someone
// else cordoned.
func TestNodeCordonedBeforehandStaysCordoned(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPlanController(t)
	ctx := context.Background()
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	node := &corev1.Node{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, node)).To(Succeed())
	node.Spec.Unschedulable = true
	g.Expect(env.Client.Update(ctx, node)).To(Succeed())
	autoPolicy(t, env)
	plan := &v1.RepartitionPlan{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-a-20261129-ccccdddd"},
		Spec: v1.RepartitionPlanSpec{Policy: "pool-a", Hash: "ccccddddeeeeffff", Steps: []v1.NodeStep{{
			Node: "gpu-1", MIGConfigName: "gpupool-abcdef0123",
			GPUs: []v1.GPUChange{{Index: 0, From: v1.ProfileCounts{"1g.18gb": 7}, To: v1.ProfileCounts{"7g.141gb": 1}}},
		}}},
	}
	createPlan(t, env, plan)
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, node)).To(Succeed())
		g.Expect(node.Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, entryOf(plan, "gpu-1")))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	applyAsOperatorAndAgent(t, env, "gpu-1")

	g.Eventually(func(g Gomega) {
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(v1.PlanSucceeded))
		g.Expect(got.Status.Nodes[0].WasUnschedulable).To(BeTrue())
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, node)).To(Succeed())
		g.Expect(node.Spec.Unschedulable).To(BeTrue(), "someone else's cordon stays")
		g.Expect(node.Annotations).NotTo(HaveKey(v1.AnnotationCordonedBy))
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// pdbGuardedPod creates a running pod on node, managed by a ReplicaSet and guarded by a
// PodDisruptionBudget that allows no disruption; setAllowed changes what the budget allows
// (envtest runs no disruption controller, so the fixture writes its status).
func pdbGuardedPod(t *testing.T, env *testenv.Env, name, node string, limits corev1.ResourceList) (*corev1.Pod, func(int32)) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name,
				UID: types.UID("replicaset-" + name), Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Limits: limits}}}},
	}
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	// The Eviction API ignores budgets for pods that are not running: play the kubelet.
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.Now()}}
	g.Expect(env.Client.Status().Update(ctx, pod)).To(Succeed())
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
	}
	g.Expect(env.Client.Create(ctx, pdb)).To(Succeed())
	setAllowed := func(n int32) {
		got := &policyv1.PodDisruptionBudget{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pdb), got)).To(Succeed())
		got.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: got.Generation, DisruptionsAllowed: n,
			CurrentHealthy: 1, DesiredHealthy: 1 - n, ExpectedPods: 1}
		g.Expect(env.Client.Status().Update(ctx, got)).To(Succeed())
	}
	setAllowed(0)
	return pod, setAllowed
}

// TestDrainWaitsForPDBThenProceeds guards the drain: evictions go through the Eviction API, a
// PodDisruptionBudget that allows nothing holds the step in Draining with the blocking pod
// named, and once it allows one the pod is evicted and the step moves on to configuring.
func TestDrainWaitsForPDBThenProceeds(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPlanController(t)
	ctx := context.Background()
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})

	pod, setAllowed := pdbGuardedPod(t, env, "infer", "gpu-1", nil)

	autoPolicy(t, env)
	plan := &v1.RepartitionPlan{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-a-20261129-eeeeffff"},
		Spec: v1.RepartitionPlanSpec{Policy: "pool-a", Hash: "eeeeffff00001111", Disruptive: true, Steps: []v1.NodeStep{{
			Node: "gpu-1", MIGConfigName: "gpupool-fedcba9876", Disruptive: true,
			GPUs:      []v1.GPUChange{{Index: 0, From: v1.ProfileCounts{"1g.18gb": 7}, To: v1.ProfileCounts{"7g.141gb": 1}}},
			Evictions: []v1.Eviction{{PodReference: v1.PodReference{Namespace: "default", Name: "infer"}}},
		}}},
	}
	createPlan(t, env, plan)

	g.Eventually(func(g Gomega) {
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		g.Expect(got.Status.Nodes).To(HaveLen(1))
		g.Expect(got.Status.Nodes[0].State).To(Equal(v1.NodeDraining))
		g.Expect(got.Status.Nodes[0].Message).To(ContainSubstring("default/infer"))
		g.Expect(got.Status.Nodes[0].Message).To(ContainSubstring("blocked"))
	}).WithTimeout(30*time.Second).Should(Succeed(), "the PDB holds the drain and the status names the pod")
	g.Consistently(func(g Gomega) {
		got := &corev1.Pod{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), got)).To(Succeed())
		g.Expect(got.DeletionTimestamp).To(BeNil())
	}).WithTimeout(2*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "never deleted behind the PDB's back")

	setAllowed(1)
	// The fixture plays the kubelet: a pod on a node is only gone once the kubelet confirms.
	g.Eventually(func(g Gomega) {
		got := &corev1.Pod{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), got)).To(Succeed())
		g.Expect(got.DeletionTimestamp).NotTo(BeNil())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())

	g.Eventually(func(g Gomega) {
		node := &corev1.Node{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, node)).To(Succeed())
		g.Expect(node.Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, entryOf(plan, "gpu-1")))
	}).WithTimeout(30*time.Second).Should(Succeed(), "drained, then configured")
}

// draSlice plays NVIDIA's DRA driver: the node's one ResourceSlice lists a MIG device per uuid
// (the driver publishes what it found when its kubelet plugin last started).
func draSlice(t *testing.T, env *testenv.Env, node string, uuids ...string) {
	t.Helper()
	ctx := context.Background()
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu.nvidia.com"}}
	_, err := controllerutil.CreateOrUpdate(ctx, env.Client, s, func() error {
		s.Spec = resourcev1.ResourceSliceSpec{Driver: "gpu.nvidia.com", NodeName: ptr.To(node),
			Pool: resourcev1.ResourcePool{Name: node, Generation: s.Spec.Pool.Generation + 1, ResourceSliceCount: 1}}
		for i, u := range uuids {
			s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-0-mig-%d", i),
				Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
					"type": {StringValue: ptr.To("mig")}, "uuid": {StringValue: ptr.To(u)}}})
		}
		return nil
	})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
}

// TestStepOnADRANodeWaitsForItsSlices: on a node whose GPUs NVIDIA's DRA driver serves, the
// device plugin advertises nothing and the step does not wait for it; it waits until the
// driver's slices list the instances NVML reports, because claims can be allocated only
// those, and keeps the node cordoned until then.
func TestStepOnADRANodeWaitsForItsSlices(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPlanController(t)
	ctx := context.Background()
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	draSlice(t, env, "gpu-1", "MIG-old-0", "MIG-old-1", "MIG-old-2", "MIG-old-3", "MIG-old-4", "MIG-old-5", "MIG-old-6")
	autoPolicy(t, env)
	plan := carve3gPlan("pool-a-20261202-aaaabbbb")
	createPlan(t, env, plan)
	node := &corev1.Node{}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, node)).To(Succeed())
		g.Expect(node.Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, entryOf(plan, "gpu-1")))
	}).WithTimeout(30*time.Second).Should(Succeed(), "relabelled")

	// mig-manager succeeds and the agent reads the new instances from NVML.
	patch := client.MergeFrom(node.DeepCopy())
	node.Labels[nvidia.LabelMIGConfigState] = "success"
	g.Expect(env.Client.Patch(ctx, node, patch)).To(Succeed())
	report := &v1.GPUNode{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, report)).To(Succeed())
	report.Status.GPUs[0].Instances = []v1.MIGInstance{
		{Profile: "3g.71gb", Placement: v1.SlicePlacement{Start: 0, Size: 4}, UUID: "MIG-new-0"},
		{Profile: "3g.71gb", Placement: v1.SlicePlacement{Start: 4, Size: 4}, UUID: "MIG-new-4"}}
	report.Status.Conditions = append(report.Status.Conditions, metav1.Condition{Type: v1.ConditionLayoutVerified,
		Status: metav1.ConditionTrue, Reason: "Matches", LastTransitionTime: metav1.Now(), ObservedGeneration: report.Generation})
	g.Expect(env.Client.Status().Update(ctx, report)).To(Succeed())

	g.Eventually(func(g Gomega) {
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		g.Expect(got.Status.Nodes).To(HaveLen(1))
		g.Expect(got.Status.Nodes[0].Message).To(ContainSubstring("waiting for NVIDIA's DRA driver to publish the new MIG devices"))
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, node)).To(Succeed())
		g.Expect(node.Spec.Unschedulable).To(BeTrue(), "claims cannot use the new instances yet")
	}).WithTimeout(30*time.Second).Should(Succeed(), "stale slices hold the step")

	// The kubelet plugin restarts (mig-manager bounced it) and republishes.
	draSlice(t, env, "gpu-1", "MIG-new-0", "MIG-new-4")
	g.Eventually(func(g Gomega) {
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(v1.PlanSucceeded))
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, node)).To(Succeed())
		g.Expect(node.Spec.Unschedulable).To(BeFalse())
	}).WithTimeout(30*time.Second).Should(Succeed(), "slices current, then uncordoned, with no device plugin advertising anything")
}

// TestDrainStopsWhenTheLandingIsTaken guards make before break during a long drain: a step
// that moves a pod to another node checks that landing again before each drain pass, and when
// the landing can no longer take the pod (here its node went NotReady while a
// PodDisruptionBudget held the drain) it stops without evicting and gives the node back.
func TestDrainStopsWhenTheLandingIsTaken(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPlanController(t)
	ctx := context.Background()
	labels := map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"}
	gpuNode(t, env, "gpu-1", 1, labels)
	gpuNode(t, env, "gpu-2", 1, labels)
	setReady := func(status corev1.ConditionStatus) {
		node := &corev1.Node{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-2"}, node)).To(Succeed())
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status,
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		g.Expect(env.Client.Status().Update(ctx, node)).To(Succeed())
	}
	setReady(corev1.ConditionTrue)

	pod, setAllowed := pdbGuardedPod(t, env, "small", "gpu-1", corev1.ResourceList{"nvidia.com/mig-1g.18gb": resource.MustParse("1")})

	autoPolicy(t, env)
	plan := &v1.RepartitionPlan{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-a-20261203-11112222"},
		Spec: v1.RepartitionPlanSpec{Policy: "pool-a", Hash: "1111222233334444", Steps: []v1.NodeStep{{
			Node: "gpu-1", MIGConfigName: "gpupool-1111222233",
			GPUs:      []v1.GPUChange{{Index: 0, From: v1.ProfileCounts{"1g.18gb": 7}, To: v1.ProfileCounts{"7g.141gb": 1}}},
			Evictions: []v1.Eviction{{PodReference: v1.PodReference{Namespace: "default", Name: "small"}, LandingNode: "gpu-2"}},
		}}},
	}
	createPlan(t, env, plan)
	g.Eventually(func(g Gomega) {
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		g.Expect(got.Status.Nodes).To(HaveLen(1))
		g.Expect(got.Status.Nodes[0].State).To(Equal(v1.NodeDraining))
		g.Expect(got.Status.Nodes[0].Message).To(ContainSubstring("blocked"))
	}).WithTimeout(30*time.Second).Should(Succeed(), "the landing has room: the drain starts and the PDB holds it")

	setReady(corev1.ConditionFalse)
	g.Eventually(func(g Gomega) {
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		g.Expect(got.Status.Nodes[0].State).To(Equal(v1.NodeFailed))
		g.Expect(got.Status.Nodes[0].Message).To(ContainSubstring("stopped draining with 1 pod(s) left: node gpu-2, where the plan moves default/small, is not Ready now"))
		node := &corev1.Node{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, node)).To(Succeed())
		g.Expect(node.Spec.Unschedulable).To(BeFalse(), "nothing on the GPUs changed: the node is given back")
		g.Expect(node.Labels).NotTo(HaveKey(nvidia.LabelMIGConfig))
	}).WithTimeout(30*time.Second).Should(Succeed(), "the landing went away mid-drain: the step stops")

	// The PDB now allows the eviction: a stopped step must not evict after all.
	setAllowed(1)
	g.Consistently(func(g Gomega) {
		p := &corev1.Pod{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), p)).To(Succeed())
		g.Expect(p.DeletionTimestamp).To(BeNil())
	}).WithTimeout(3*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "the pod whose landing is gone is never evicted")
}
