package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/rollout"
	"github.com/gpupool/gpupool/internal/testenv"
)

// draServedGPU gives the instances of GPU 0 of node the UUIDs MIG-<i>, as NVML names them,
// and publishes them in the node's ResourceSlice as NVIDIA's DRA driver does (draSlice:
// device gpu-0-mig-<i> is MIG-<i>).
func draServedGPU(t *testing.T, env *testenv.Env, node string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	report := &v1.GPUNode{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: node}, report)).To(Succeed())
	var uuids []string
	for i := range report.Status.GPUs[0].Instances {
		report.Status.GPUs[0].Instances[i].UUID = fmt.Sprintf("MIG-%d", i)
		uuids = append(uuids, fmt.Sprintf("MIG-%d", i))
	}
	g.Expect(env.Client.Status().Update(ctx, report)).To(Succeed())
	draSlice(t, env, node, uuids...)
}

// allocateClaim plays the scheduler: ResourceClaim default/<name> is allocated device of
// node's pool and reserved for pod.
func allocateClaim(t *testing.T, env *testenv.Env, name, node, device, pod string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "mig.nvidia.com"}}}}}}
	g.Expect(env.Client.Create(ctx, claim)).To(Succeed())
	claim.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
		Results: []resourcev1.DeviceRequestAllocationResult{{Request: "gpu", Driver: "gpu.nvidia.com", Pool: node, Device: device}}}}
	claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pod, UID: types.UID("uid-" + pod)}}
	g.Expect(env.Client.Status().Update(ctx, claim)).To(Succeed())
}

// A ResourceClaim allocated on a GPU a plan changes after the plan was made cancels it before
// its first step: the agent's report does not show DRA devices, so revalidation reads the
// claims, and the node is never cordoned.
func TestAClaimAllocatedAfterPlanningCancelsTheStep(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPlanController(t)
	ctx := context.Background()
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	draServedGPU(t, env, "gpu-1")
	allocateClaim(t, env, "late", "gpu-1", "gpu-0-mig-1", "late-user")
	autoPolicy(t, env)
	plan := carve3gPlan("pool-a-20261203-aaaabbbb")
	createPlan(t, env, plan)

	g.Eventually(func(g Gomega) {
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(v1.PlanSuperseded))
		ready := meta.FindStatusCondition(got.Status.Conditions, "Ready")
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(rollout.ReasonStale))
		g.Expect(ready.Message).To(Equal("cancelled before any disruption: ResourceClaim default/late was allocated " +
			"device MIG-1 on GPU 0 of node gpu-1, which the plan changes without evicting default/late-user"))
	}).WithTimeout(30*time.Second).Should(Succeed(), "the plan is cancelled before its first step")
	node := &corev1.Node{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, node)).To(Succeed())
	g.Expect(node.Spec.Unschedulable).To(BeFalse(), "never cordoned")
	g.Expect(node.Labels).NotTo(HaveKey(nvidia.LabelMIGConfig), "never relabelled")
}

// A claim allocated while the step drains (the scheduler may place a pod that tolerates the
// cordon) is seen on the next drain pass: the step is cancelled and the node reopened before
// the GPU is touched, and the pod the drain waited on is left where it runs.
func TestAClaimAllocatedWhileDrainingCancelsTheStep(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPlanController(t)
	ctx := context.Background()
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	draServedGPU(t, env, "gpu-1")
	pod, _ := pdbGuardedPod(t, env, "infer", "gpu-1", nil)
	autoPolicy(t, env)
	plan := &v1.RepartitionPlan{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-a-20261203-ccccdddd"},
		Spec: v1.RepartitionPlanSpec{Policy: "pool-a", Disruptive: true, Steps: []v1.NodeStep{{
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
	}).WithTimeout(30*time.Second).Should(Succeed(), "the PodDisruptionBudget holds the drain")

	allocateClaim(t, env, "tolerant", "gpu-1", "gpu-0-mig-3", "tolerant-user")
	g.Eventually(func(g Gomega) {
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		g.Expect(got.Status.Nodes).To(HaveLen(1))
		g.Expect(got.Status.Nodes[0].State).To(Equal(v1.NodeFailed))
		g.Expect(got.Status.Nodes[0].Message).To(ContainSubstring("cancelled: ResourceClaim default/tolerant was allocated device MIG-3 on GPU 0"))
		node := &corev1.Node{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, node)).To(Succeed())
		g.Expect(node.Spec.Unschedulable).To(BeFalse(), "reopened")
		g.Expect(node.Labels).NotTo(HaveKey(nvidia.LabelMIGConfig), "never relabelled")
	}).WithTimeout(60*time.Second).Should(Succeed(), "cancelled on a later drain pass")
	got := &corev1.Pod{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pod), got)).To(Succeed())
	g.Expect(got.DeletionTimestamp).To(BeNil(), "the pod the drain waited on stays")
}
