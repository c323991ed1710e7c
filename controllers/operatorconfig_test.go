package controllers_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/metrics"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/rollout"
	"github.com/gpupool/gpupool/internal/sim"
	"github.com/gpupool/gpupool/internal/testenv"
)

// TestManagerCreatesTheOperatorConfigMapsBeforeAnyPlan guards the order an install follows:
// the user points the ClusterPolicy at gpupool's ConfigMaps as soon as the manager runs, and
// the GPU Operator mounts them into mig-manager and the device plugin as volumes that must
// exist. So the manager's ConfigMap writer creates both when it starts, before any policy, and
// again at once when one is deleted: the mig-parted config with all-disabled and the entries
// nodes' labels name taken from NVIDIA's default config, the device plugin's with the default
// key gpupool-none.
func TestManagerCreatesTheOperatorConfigMapsBeforeAnyPlan(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	ctx := context.Background()
	installClusterPolicy(t, env)
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
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200", nvidia.LabelMIGConfig: "all-balanced"})
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

	// A ConfigMap deleted later is created again, and the pool's pass finds it.
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

// installClusterPolicy serves NVIDIA's ClusterPolicy kind and creates one that points
// mig-manager and the device plugin at gpupool's ConfigMaps in namespace default.
func installClusterPolicy(t *testing.T, env *testenv.Env) {
	t.Helper()
	g := NewWithT(t)
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
}

// startConfigWriter runs the ConfigMap writer alone in a manager: no plan controller writes an
// entry, so whatever the ConfigMaps hold is the writer's doing.
func startConfigWriter(t *testing.T, env *testenv.Env) {
	t.Helper()
	mgr := newTestManager(t, env)
	NewWithT(t).Expect((&controllers.OperatorConfigReconciler{Client: mgr.GetClient(), Namespace: "default"}).SetupWithManager(mgr)).To(Succeed())
	runManager(t, mgr)
}

// migEntries reads gpupool's mig-parted ConfigMap: each entry as compact JSON.
func migEntries(g Gomega, env *testenv.Env) map[string]string {
	cm := &corev1.ConfigMap{}
	g.Expect(env.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: controllers.MIGPartedConfigMap}, cm)).To(Succeed())
	js, err := yaml.YAMLToJSON([]byte(cm.Data[nvidia.ConfigMapKey]))
	g.Expect(err).NotTo(HaveOccurred())
	var top struct {
		MIGConfigs map[string]json.RawMessage `json:"mig-configs"`
	}
	g.Expect(json.Unmarshal(js, &top)).To(Succeed())
	out := map[string]string{}
	for name, raw := range top.MIGConfigs {
		out[name] = string(raw)
	}
	return out
}

// TestOperatorConfigWriterWritesWhatPlansAndNodesNeed guards the one writer of the ConfigMaps:
// it creates a missing one, keeps the user's entries and every entry a node's label names,
// drops gpupool's orphans, adds a running step's entry only once the step is past its drain
// under its own plan's cordon (a step state alone is status anyone may forge), writes a
// hand-edited entry back to what its name means, and drops a finished plan's entry once no
// node names it.
func TestOperatorConfigWriterWritesWhatPlansAndNodesNeed(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	ctx := context.Background()
	g.Expect(env.Client.Create(ctx, poolPolicy("pool-a", map[string]string{"pool": "a"}))).To(Succeed())
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	gpuNode(t, env, "gpu-2", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200", nvidia.LabelMIGConfig: "gpupool-bbbbbbbbbb"})
	g.Expect(env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: controllers.MIGPartedConfigMap},
		Data: map[string]string{nvidia.ConfigMapKey: `version: v1
mig-configs:
  all-1g.18gb: [{devices: all, mig-enabled: true, mig-devices: {"1g.18gb": 7}}]
  gpupool-aaaaaaaaaa: [{devices: all, mig-enabled: false}]
  gpupool-bbbbbbbbbb: [{devices: [0], mig-enabled: true, mig-devices: {"7g.141gb": 1}}]
`, "notes": "kept"}})).To(Succeed())
	plan := createPlan(t, env, carve3gPlan("pool-a-20261205-0c0c0c0c"))
	entry := entryOf(plan, "gpu-1")
	startConfigWriter(t, env)

	g.Eventually(func(g Gomega) {
		dp := &corev1.ConfigMap{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: controllers.DevicePluginConfigMap}, dp)).To(Succeed())
		g.Expect(dp.Data).To(HaveKey(nvidia.DevicePluginNone))
		entries := migEntries(g, env)
		g.Expect(entries).To(HaveKey("all-1g.18gb"), "the user's")
		g.Expect(entries).To(HaveKey(nvidia.AllDisabled))
		g.Expect(entries).To(HaveKey("gpupool-bbbbbbbbbb"), "a node's label names it")
		g.Expect(entries).NotTo(HaveKey("gpupool-aaaaaaaaaa"), "nothing names it")
		g.Expect(entries).NotTo(HaveKey(entry), "the plan does not run")
	}).WithTimeout(30 * time.Second).Should(Succeed())
	cm := &corev1.ConfigMap{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: controllers.MIGPartedConfigMap}, cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("notes", "kept"), "other keys of the ConfigMap are not gpupool's")

	// The plan runs and its status says the step is configuring, but the node carries no cordon
	// of the plan's: the step's progress is not taken from status alone.
	got := getPlan(g, env, plan)
	got.Status.Phase = v1.PlanExecuting
	got.Status.Nodes = []v1.NodeStepStatus{{Node: "gpu-1", State: v1.NodeConfiguring}}
	g.Expect(env.Client.Status().Update(ctx, got)).To(Succeed())
	g.Consistently(func(g Gomega) map[string]string { return migEntries(g, env) }).
		WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).ShouldNot(HaveKey(entry))

	// The plan's cordon, as the plan controller records it: the entry is written, with the
	// node's whole target.
	record, err := rollout.EncodeRecord(rollout.CordonRecord{Plan: plan.Name, PlanUID: string(plan.UID), Policy: "pool-a"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: controllers.CordonLedgerConfigMap},
		Data: map[string]string{"gpu-1": record}})).To(Succeed())
	node := getNode(g, env, "gpu-1")
	patch := client.MergeFrom(node.DeepCopy())
	node.Spec.Unschedulable = true
	metav1.SetMetaDataAnnotation(&node.ObjectMeta, v1.AnnotationCordonedBy, plan.Name)
	g.Expect(env.Client.Patch(ctx, node, patch)).To(Succeed())
	want := `[{"devices":[0],"mig-devices":{"3g.71gb":2},"mig-enabled":true}]`
	g.Eventually(func(g Gomega) string { return migEntries(g, env)[entry] }).WithTimeout(30 * time.Second).Should(MatchJSON(want))

	// A hand edit of the entry is written back: the name is the plan's approved layout, and
	// mig-manager would apply the edit under it (see nvidia.DesiredOperatorConfig).
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: controllers.MIGPartedConfigMap}, cm)).To(Succeed())
	cm.Data[nvidia.ConfigMapKey] = strings.Replace(cm.Data[nvidia.ConfigMapKey], `"3g.71gb": 2`, `"3g.71gb": 1`, 1)
	g.Expect(cm.Data[nvidia.ConfigMapKey]).To(ContainSubstring(`"3g.71gb": 1`))
	g.Expect(env.Client.Update(ctx, cm)).To(Succeed())
	g.Eventually(func(g Gomega) string { return migEntries(g, env)[entry] }).WithTimeout(30 * time.Second).Should(MatchJSON(want))

	// The plan ends with the node wearing its entry, and gpu-2 is relabelled: the entry stays
	// while gpu-1 names it, gpu-2's old one goes.
	node = getNode(g, env, "gpu-1")
	patch = client.MergeFrom(node.DeepCopy())
	node.Labels[nvidia.LabelMIGConfig] = entry
	g.Expect(env.Client.Patch(ctx, node, patch)).To(Succeed())
	got = getPlan(g, env, plan)
	got.Status.Phase = v1.PlanSucceeded
	got.Status.Nodes = []v1.NodeStepStatus{{Node: "gpu-1", State: v1.NodeDone}}
	g.Expect(env.Client.Status().Update(ctx, got)).To(Succeed())
	other := getNode(g, env, "gpu-2")
	patch = client.MergeFrom(other.DeepCopy())
	delete(other.Labels, nvidia.LabelMIGConfig)
	g.Expect(env.Client.Patch(ctx, other, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		entries := migEntries(g, env)
		g.Expect(entries).NotTo(HaveKey("gpupool-bbbbbbbbbb"))
		g.Expect(entries).To(HaveKey(entry), "gpu-1's label names it")
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// Once no node names it, the finished plan's entry goes too.
	node = getNode(g, env, "gpu-1")
	patch = client.MergeFrom(node.DeepCopy())
	node.Labels[nvidia.LabelMIGConfig] = nvidia.AllDisabled
	g.Expect(env.Client.Patch(ctx, node, patch)).To(Succeed())
	g.Eventually(func(g Gomega) map[string]string { return migEntries(g, env) }).WithTimeout(30 * time.Second).ShouldNot(HaveKey(entry))
}

// TestPolicyReportsConfigMapsNobodyWrote guards GPUOperatorConfigured's honesty now that the
// policy pass only reads the ConfigMaps: while no writer could create them (here: none runs, as
// when the manager's Role forbids it), the pool says so; once they exist it reports configured
// without waiting for another change to the pool.
func TestPolicyReportsConfigMapsNobodyWrote(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	ctx := context.Background()
	installClusterPolicy(t, env)
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	mgr := newTestManager(t, env)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect((&controllers.PolicyReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: clocktesting.NewFakeClock(time.Now()),
		Recorder: mgr.GetEventRecorder("gpupool-policy-controller"), Metrics: m, ConfigNamespace: "default"}).SetupWithManager(mgr)).To(Succeed())
	runManager(t, mgr)
	g.Expect(env.Client.Create(ctx, poolPolicy("pool-a", map[string]string{"pool": "a"}))).To(Succeed())

	configured := func(g Gomega) metav1.Condition {
		got := &v1.GPUPoolPolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "pool-a"}, got)).To(Succeed())
		return condition(got, v1.ConditionGPUOperatorConfigured)
	}
	g.Eventually(func(g Gomega) {
		c := configured(g)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal("ConfigMapsNotWritten"))
		g.Expect(c.Message).To(ContainSubstring(controllers.MIGPartedConfigMap + ", " + controllers.DevicePluginConfigMap + " in default"))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	startConfigWriter(t, env)
	g.Eventually(func(g Gomega) metav1.ConditionStatus { return configured(g).Status }).
		WithTimeout(30 * time.Second).Should(Equal(metav1.ConditionTrue))
}
