package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/testenv"
)

// TestSharingStepFlipsTheDevicePluginLabelAfterTheLayoutAndWaitsForReplicas guards the sharing
// path of a step: the device-plugin key is written with the mig-parted entry, the
// nvidia.com/device-plugin.config label flips only after the agent verified the MIG-disabled
// layout, and the node reopens only once the device plugin advertises the replicas. The test
// plays mig-manager, the agent and the device plugin.
func TestSharingStepFlipsTheDevicePluginLabelAfterTheLayoutAndWaitsForReplicas(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, _ := startPlanController(t)
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	autoPolicy(t, env)
	setting := v1.SharingConfig{Mode: v1.SharingTimeSlicing, Replicas: 4}
	plan := makePlan(t, env, "pool-a-20261129-5a5a5a5a", "5a5a5a5a5a5a5a5a", v1.NodeStep{Node: "gpu-1",
		MIGConfigName: "gpupool-5a5a5a5a5a", SharingConfig: &setting, SharingConfigName: "gpupool-ts-4",
		GPUs: []v1.GPUChange{{Index: 0, From: v1.ProfileCounts{"1g.18gb": 7}}}})

	g.Eventually(func(g Gomega) {
		g.Expect(getNode(g, env, "gpu-1").Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, entryOf(plan, "gpu-1")))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	dp := &corev1.ConfigMap{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: controllers.DevicePluginConfigMap}, dp)).To(Succeed())
	g.Expect(dp.Data).To(HaveKey(nvidia.DevicePluginNone))
	written, err := nvidia.ParseDevicePluginConfig([]byte(dp.Data["gpupool-ts-4"]))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(written).To(Equal(setting))
	g.Expect(getNode(g, env, "gpu-1").Labels).NotTo(HaveKey(nvidia.LabelDevicePluginConfig),
		"sharing waits for the layout")

	// mig-manager turns MIG off; the agent reports the GPU whole and verifies.
	report := &v1.GPUNode{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-1"}, report)).To(Succeed())
	report.Status.GPUs[0].Instances = nil
	report.Status.GPUs[0].MIGMode = &v1.MIGModeStatus{Current: "Disabled"}
	g.Expect(env.Client.Status().Update(ctx, report)).To(Succeed())
	applyAsOperatorAndAgent(t, env, "gpu-1")

	g.Eventually(func(g Gomega) {
		g.Expect(getNode(g, env, "gpu-1").Labels).To(HaveKeyWithValue(nvidia.LabelDevicePluginConfig, "gpupool-ts-4"))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(getNode(g, env, "gpu-1").Spec.Unschedulable).To(BeTrue())
	}).WithTimeout(2*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "no reopening before the replicas show")

	// The device plugin advertises 4 replicas of the one GPU.
	advertise(t, env, "gpu-1", "nvidia.com/gpu.shared", "4")
	g.Eventually(func(g Gomega) {
		got := getPlan(g, env, plan)
		g.Expect(got.Status.Phase).To(Equal(v1.PlanSucceeded))
		g.Expect(got.Status.Nodes[0].Message).To(ContainSubstring("layout and sharing (gpupool-ts-4) verified"))
		g.Expect(getNode(g, env, "gpu-1").Spec.Unschedulable).To(BeFalse())
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// TestPendingSharedPodsBecomeASharingPlan guards the policy controller's part: pending
// nvidia.com/gpu.shared pods on a pool whose catalog allows time-slicing yield a plan whose step
// names the immutable device-plugin key.
func TestPendingSharedPodsBecomeASharingPlan(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, _ := startPolicyController(t)
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	for _, name := range []string{"share-a", "share-b", "share-c"} {
		pendingPodAsking(t, env, name, "nvidia.com/gpu.shared")
	}
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	policy.Spec.Catalog[0].Sharing = &v1.SharingCatalog{TimeSlicing: &v1.ReplicaChoices{Replicas: []int32{2, 4}}}
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())

	plan := onlyPlan(t, env)
	g.Expect(plan.Spec.Steps).To(HaveLen(1))
	g.Expect(plan.Spec.Steps[0].SharingConfigName).To(Equal("gpupool-ts-4"), "2 replicas serve 2 of 3; 4 serve all")
	g.Expect(plan.Spec.Steps[0].SharingConfig).To(Equal(&v1.SharingConfig{Mode: v1.SharingTimeSlicing, Replicas: 4}))
	g.Expect(plan.Spec.Expected.Pods).To(HaveLen(3))
	g.Eventually(func(g Gomega) {
		got := &v1.GPUPoolPolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(policy), got)).To(Succeed())
		g.Expect(got.Status.Demand).To(ConsistOf(v1.ShapeDemand{Resource: "nvidia.com/gpu.shared",
			PendingPods: 3, EligibleNodes: 1, FeasibleNodes: 1}), "the node may share its GPUs")
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// TestSharingOfMIGDevicesWaitsForTheInstancesReplicas guards the MIG side of a sharing step:
// after the layout is verified the node reopens only when the device plugin advertises
// replicas x instances of nvidia.com/mig-<profile>.shared.
func TestSharingOfMIGDevicesWaitsForTheInstancesReplicas(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPlanController(t)
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	autoPolicy(t, env)
	setting := v1.SharingConfig{Mode: v1.SharingTimeSlicing, Replicas: 2}
	plan := makePlan(t, env, "pool-a-20261129-6b6b6b6b", "6b6b6b6b6b6b6b6b", v1.NodeStep{Node: "gpu-1",
		MIGConfigName: "gpupool-6b6b6b6b6b", SharingConfig: &setting, SharingConfigName: "gpupool-ts-2",
		GPUs: []v1.GPUChange{{Index: 0, From: v1.ProfileCounts{"1g.18gb": 7}, To: v1.ProfileCounts{"3g.71gb": 2}}}})
	g.Eventually(func(g Gomega) {
		g.Expect(getNode(g, env, "gpu-1").Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, entryOf(plan, "gpu-1")))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	reportGPU0(t, env, "gpu-1", mig.Layout{"3g.71gb": 2})
	applyAsOperatorAndAgent(t, env, "gpu-1")
	g.Eventually(func(g Gomega) {
		g.Expect(getNode(g, env, "gpu-1").Labels).To(HaveKeyWithValue(nvidia.LabelDevicePluginConfig, "gpupool-ts-2"))
		g.Expect(getPlan(g, env, plan).Status.Nodes[0].Message).To(ContainSubstring("nvidia.com/mig-3g.71gb.shared=4"))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(getNode(g, env, "gpu-1").Spec.Unschedulable).To(BeTrue())

	advertise(t, env, "gpu-1", "nvidia.com/mig-3g.71gb.shared", "4")
	g.Eventually(func(g Gomega) {
		g.Expect(getPlan(g, env, plan).Status.Phase).To(Equal(v1.PlanSucceeded))
		g.Expect(getNode(g, env, "gpu-1").Spec.Unschedulable).To(BeFalse())
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// advertise plays the device plugin: the node's capacity and allocatable show quantity of resource.
func advertise(t *testing.T, env *testenv.Env, name, resourceName, quantity string) {
	t.Helper()
	g := NewWithT(t)
	// The manager patches the node too (cordon, labels): retry on a conflict.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := getNode(g, env, name)
		node.Status.Allocatable[corev1.ResourceName(resourceName)] = resource.MustParse(quantity)
		node.Status.Capacity[corev1.ResourceName(resourceName)] = resource.MustParse(quantity)
		return env.Client.Status().Update(context.Background(), node)
	})).To(Succeed())
}
