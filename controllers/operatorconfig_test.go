package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/sim"
)

// TestManagerCreatesTheOperatorConfigMapsBeforeAnyPlan guards the order an install follows:
// the user points the ClusterPolicy at gpupool's ConfigMaps as soon as the manager runs, and
// the GPU Operator mounts them into mig-manager and the device plugin as volumes that must
// exist. So the manager creates both when it starts, before any policy, and again on a pass
// over a pool when one was deleted: the
// mig-parted config with all-disabled and the entries nodes' labels name taken from NVIDIA's
// default config, the device plugin's with the default key gpupool-none.
func TestManagerCreatesTheOperatorConfigMapsBeforeAnyPlan(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	ctx := context.Background()
	g.Expect(apiextensionsv1.AddToScheme(env.Scheme)).To(Succeed())
	g.Expect(env.Client.Create(ctx, sim.ClusterPolicyCRD())).To(Succeed())
	g.Eventually(func() error {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(sim.ClusterPolicyGVK.GroupVersion().WithKind("ClusterPolicyList"))
		return env.Client.List(ctx, list)
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(sim.InstallClusterPolicy(ctx, env.Client, sim.ClusterPolicySettings{Name: "cluster-policy", Namespace: "default",
		MIGStrategy: "mixed", MIGConfigMap: controllers.MIGPartedConfigMap,
		DevicePluginConfigMap: controllers.DevicePluginConfigMap, DevicePluginDefault: nvidia.DevicePluginNone})).To(Succeed())
	// NVIDIA's default config, which the nodes' labels were written against.
	g.Expect(env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: nvidia.DefaultMIGPartedConfigMap},
		Data: map[string]string{nvidia.ConfigMapKey: `version: v1
mig-configs:
  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.18gb": 2
        "2g.35gb": 1
        "3g.71gb": 1
  all-1g.18gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.18gb": 7
`}})).To(Succeed())
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", v1.LabelGPUProduct: "NVIDIA-H200", v1.LabelMIGConfig: "all-balanced"})
	startManager(t, env, clocktesting.NewFakeClock(time.Now()), true)

	mp, dp := &corev1.ConfigMap{}, &corev1.ConfigMap{}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: controllers.MIGPartedConfigMap}, mp)).To(Succeed())
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: controllers.DevicePluginConfigMap}, dp)).To(Succeed())
	}).WithTimeout(30*time.Second).Should(Succeed(), "both ConfigMaps exist from the manager's start, before any policy")
	cfg, err := nvidia.ParseMIGPartedConfig([]byte(mp.Data[nvidia.ConfigMapKey]))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.MIGConfigs).To(HaveKey("all-balanced"), "the entry the node's label names, from NVIDIA's default config")
	g.Expect(cfg.MIGConfigs).To(HaveKey(nvidia.AllDisabled))
	g.Expect(cfg.MIGConfigs).NotTo(HaveKey("all-1g.18gb"), "no node names it")
	g.Expect(dp.Data).To(HaveKey(nvidia.DevicePluginNone))

	// A ConfigMap deleted later is created again by the next pass over a pool.
	g.Expect(env.Client.Delete(ctx, dp)).To(Succeed())
	g.Expect(env.Client.Create(ctx, poolPolicy("pool-a", map[string]string{"pool": "a"}))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: controllers.DevicePluginConfigMap}, dp)).To(Succeed())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Eventually(func(g Gomega) {
		got := &v1.GPUPoolPolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "pool-a"}, got)).To(Succeed())
		g.Expect(condition(got, v1.ConditionGPUOperatorConfigured).Status).To(Equal(metav1.ConditionTrue))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// A ClusterPolicy pointed elsewhere makes the pool not Ready at once (the controller watches
	// it; the fake clock stands still, so no periodic pass could be what noticed).
	cp := &unstructured.Unstructured{}
	cp.SetGroupVersionKind(sim.ClusterPolicyGVK)
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "cluster-policy"}, cp)).To(Succeed())
	g.Expect(unstructured.SetNestedField(cp.Object, "someone-elses-config", "spec", "devicePlugin", "config", "name")).To(Succeed())
	g.Expect(env.Client.Update(ctx, cp)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &v1.GPUPoolPolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "pool-a"}, got)).To(Succeed())
		g.Expect(condition(got, v1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(condition(got, v1.ConditionReady).Reason).To(Equal("ClusterPolicyMisconfigured"))
		g.Expect(condition(got, v1.ConditionReady).Message).To(ContainSubstring("spec.devicePlugin.config.name"))
	}).WithTimeout(30*time.Second).Should(Succeed(), "a GPU Operator that will not apply gpupool's layouts is not Ready")

}
