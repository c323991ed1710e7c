package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/testenv"
)

// dmPartition names a partition as NVIDIA's driver does (gpu-<minor>-mig-<profile>-<start>,
// cmd/gpu-kubelet-plugin/mig.go, the profile ID left out here); gpupool never parses it.
func dmPartition(profile string, start int) string {
	return fmt.Sprintf("gpu-0-mig-%s-%d", strings.ReplaceAll(profile, ".", ""), start)
}

// dynamicMIGNode creates an H200 node whose one GPU NVIDIA's DRA driver serves in DynamicMIG
// mode: the agent's report with the given 1g.18gb instances carved, and the driver's slices
// (a counter set, then every 1g.18gb and 3g.71gb placement as a device consuming its memory
// slices and multiprocessors: driver.go generateSplitResourceSlices, partitions.go).
func dynamicMIGNode(t *testing.T, env *testenv.Env, name string, carved []int) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110")}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"}},
		Status: corev1.NodeStatus{Capacity: alloc, Allocatable: alloc}}
	g.Expect(env.Client.Create(ctx, node)).To(Succeed())
	node.Spec.Taints = nil
	g.Expect(env.Client.Update(ctx, node)).To(Succeed())
	uuid := "GPU-" + name + "-0"
	report := &v1.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	g.Expect(env.Client.Create(ctx, report)).To(Succeed())
	gs := v1.GPUStatus{Index: 0, UUID: uuid, Product: "NVIDIA H200", MIGMode: &v1.MIGModeStatus{Current: "Enabled"}}
	for _, s := range carved {
		gs.Instances = append(gs.Instances, v1.MIGInstance{Profile: "1g.18gb", Placement: v1.SlicePlacement{Start: int32(s), Size: 1}})
	}
	report.Status.GPUs = []v1.GPUStatus{gs}
	report.Status.ObservedTime = ptr.To(metav1.Now())
	report.Status.Conditions = []metav1.Condition{{Type: v1.ConditionNVMLReady, Status: metav1.ConditionTrue,
		Reason: "Read", LastTransitionTime: metav1.Now()}}
	g.Expect(env.Client.Status().Update(ctx, report)).To(Succeed())

	product, _ := mig.LookupProduct("H200")
	q := func(v int64) resourcev1.Counter {
		return resourcev1.Counter{Value: *resource.NewQuantity(v, resource.DecimalSI)}
	}
	set := "gpu-0-counter-set"
	capacity := map[string]resourcev1.Counter{"multiprocessors": q(7)}
	for s := range 8 {
		capacity[fmt.Sprintf("memory-slice-%d", s)] = q(1)
	}
	pool := resourcev1.ResourcePool{Name: name, ResourceSliceCount: 2}
	g.Expect(env.Client.Create(ctx, &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-counters"},
		Spec: resourcev1.ResourceSliceSpec{Driver: nvidia.DRADriver, NodeName: ptr.To(name), Pool: pool,
			SharedCounters: []resourcev1.CounterSet{{Name: set, Counters: capacity}}}})).To(Succeed())
	devices := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-gpu-0"},
		Spec: resourcev1.ResourceSliceSpec{Driver: nvidia.DRADriver, NodeName: ptr.To(name), Pool: pool}}
	for _, profile := range []string{"1g.18gb", "3g.71gb"} {
		pr, _ := product.Profile(profile)
		for _, pl := range pr.Placements {
			c := map[string]resourcev1.Counter{"multiprocessors": q(int64(pr.ComputeSlices))}
			for s := pl.Start; s < pl.Start+pl.Size; s++ {
				c[fmt.Sprintf("memory-slice-%d", s)] = q(1)
			}
			devices.Spec.Devices = append(devices.Spec.Devices, resourcev1.Device{Name: dmPartition(profile, pl.Start),
				Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
					"type": {StringValue: ptr.To("mig")}, "parentUUID": {StringValue: ptr.To(uuid)}, "profile": {StringValue: ptr.To(profile)}},
				ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: set, Counters: c}}})
		}
	}
	g.Expect(env.Client.Create(ctx, devices)).To(Succeed())
}

// claimPodOn plays a ReplicaSet's pod running on node with a claim generated for it from a
// template, which the scheduler allocated device (as the resourceclaim controller names and
// owns such claims: <pod>-<request>, controlled by the pod).
func claimPodOn(t *testing.T, env *testenv.Env, name, node, device string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations, Labels: map[string]string{"app": name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "small", UID: "rs-uid", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node,
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("mig-1g")}},
			Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}},
	}
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To(name + "-gpu")}}
	g.Expect(env.Client.Status().Update(ctx, pod)).To(Succeed())
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name + "-gpu",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: name, UID: pod.UID, Controller: ptr.To(true)}}},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "mig.nvidia.com"}}}}}}
	g.Expect(env.Client.Create(ctx, claim)).To(Succeed())
	claim.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
		Results: []resourcev1.DeviceRequestAllocationResult{{Request: "gpu", Driver: nvidia.DRADriver, Pool: node, Device: device}}}}
	claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: pod.UID}}
	g.Expect(env.Client.Status().Update(ctx, claim)).To(Succeed())
	return pod
}

// the933Pattern creates the dra-driver-nvidia-gpu#933 pattern on DynamicMIG node dm-1: 1g
// claim pods at memory slices 0 (do-not-disrupt), 1 and 5, and pod big pending for a 3g claim
// with five slices free; it returns the pod at 5.
func the933Pattern(t *testing.T, env *testenv.Env) *corev1.Pod {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	dynamicMIGNode(t, env, "dm-1", []int{0, 1, 5})
	claimPodOn(t, env, "small-0", "dm-1", dmPartition("1g.18gb", 0), map[string]string{v1.AnnotationDoNotDisrupt: "true"})
	claimPodOn(t, env, "small-1", "dm-1", dmPartition("1g.18gb", 1), nil)
	moved := claimPodOn(t, env, "small-5", "dm-1", dmPartition("1g.18gb", 5), nil)
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "big-gpu", Namespace: "default"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "mig.nvidia.com",
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
					Expression: "device.attributes['gpu.nvidia.com'].profile == '3g.71gb'"}}}}}}}}}
	g.Expect(env.Client.Create(ctx, claim)).To(Succeed())
	big := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "default"},
		Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("big-gpu")}},
			Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}}}
	g.Expect(env.Client.Create(ctx, big)).To(Succeed())
	big.Status.Phase = corev1.PodPending
	big.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.NewTime(time.Now().Add(-10 * time.Minute))}}
	g.Expect(env.Client.Status().Update(ctx, big)).To(Succeed())
	return moved
}

// TestAPlacementPlanMovesOneClaimPod: the dra-driver-nvidia-gpu#933 pattern on a DynamicMIG
// node (1g claims at memory slices 0, 1 and 5, a 3g claim pending with five slices free) gets
// a plan with one placement step that moves the one claim pod in the way of slices 4-7 to a
// free slice outside them, keeps the partitions over 4-7 free but the 3g's own, writes no MIG
// config, and waits for approval. The claim pod at 0 is do-not-disrupt, so 0-3 (which would
// move two pods) is out either way.
func TestAPlacementPlanMovesOneClaimPod(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPolicyController(t)
	ctx := context.Background()
	moved := the933Pattern(t, env)
	g.Expect(env.Client.Create(ctx, poolPolicy("pool-a", map[string]string{"pool": "a"}))).To(Succeed())
	plan := onlyPlan(t, env)
	g.Expect(plan.Spec.Steps).To(HaveLen(1))
	step := plan.Spec.Steps[0]
	g.Expect(step.Node).To(Equal("dm-1"))
	g.Expect(step.MIGConfigName).To(BeEmpty(), "a placement step writes no MIG config")
	g.Expect(step.Placement).NotTo(BeNil())
	g.Expect(*step.Placement).To(MatchFields(IgnoreExtras, Fields{
		"Driver": Equal(nvidia.DRADriver), "GPU": BeEquivalentTo(0), "Profile": BeEquivalentTo("3g.71gb"),
		"Start": BeEquivalentTo(4), "Size": BeEquivalentTo(4), "Device": Equal(dmPartition("3g.71gb", 4)),
		"Claim": Equal(v1.PodReference{Namespace: "default", Name: "big-gpu"}),
	}))
	g.Expect(step.Placement.KeepFree).To(ConsistOf(dmPartition("1g.18gb", 4), dmPartition("1g.18gb", 5), dmPartition("1g.18gb", 6)))
	g.Expect(step.Evictions).To(HaveLen(1))
	g.Expect(step.Evictions[0].PodReference).To(Equal(v1.PodReference{Namespace: "default", Name: "small-5"}))
	g.Expect(step.Evictions[0].UID).To(Equal(string(moved.UID)))
	g.Expect(step.Evictions[0].LandingNode).To(Equal("dm-1"))
	g.Expect(step.Evictions[0].Reason).To(ContainSubstring("in the way of 3g.71gb"))
	g.Expect(step.Disruptive).To(BeTrue())
	g.Expect(plan.Spec.Disruptive).To(BeTrue())
	g.Expect(step.GPUs).To(Equal([]v1.GPUChange{{Index: 0, From: v1.ProfileCounts{"1g.18gb": 3}, To: v1.ProfileCounts{"1g.18gb": 3, "3g.71gb": 1}}}))
	g.Expect(plan.Spec.Expected.Pods).To(ConsistOf(v1.PodReference{Namespace: "default", Name: "big"}))
	g.Expect(plan.Spec.Approval).To(Equal(v1.ApprovalManual))

	// Created under its name, the plan hashes as the planner's would (pool.HashAs): the next
	// passes see the same change and leave it standing instead of superseding it.
	g.Expect(pool.HashAs(&plan, plan.Name)).To(Equal(plan.Spec.Hash))
}

// TestAPlacementPlanHonoursPodDisruptionBudgets: with the pod at slice 5 guarded by a
// PodDisruptionBudget that allows no disruption, and the one at 0 do-not-disrupt, no claim pod
// may move: no plan is proposed, and the pending pod is told why.
func TestAPlacementPlanHonoursPodDisruptionBudgets(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPolicyController(t)
	ctx := context.Background()
	the933Pattern(t, env)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "small-5", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "small-5"}}}}
	g.Expect(env.Client.Create(ctx, pdb)).To(Succeed())
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0,
		CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	g.Expect(env.Client.Status().Update(ctx, pdb)).To(Succeed())
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &v1.GPUPoolPolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(policy), got)).To(Succeed())
		g.Expect(got.Status.PendingPods).To(Equal(int32(1)))
	}).WithTimeout(30*time.Second).Should(Succeed(), "the pass has seen the pending pod")
	g.Consistently(func(g Gomega) {
		var plans v1.RepartitionPlanList
		g.Expect(env.Client.List(ctx, &plans)).To(Succeed())
		g.Expect(plans.Items).To(BeEmpty())
	}).WithTimeout(3 * time.Second).Should(Succeed())
}
