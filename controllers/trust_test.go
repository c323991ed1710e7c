package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/testenv"
)

// expectRefused waits until the plan is refused with reason, then checks that the node was
// never cordoned and the pods are all still there, unevicted.
func expectRefused(t *testing.T, env *testenv.Env, plan *v1.RepartitionPlan, reason, message string, node string, pods ...string) {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func(g Gomega) {
		got := getPlan(g, env, plan)
		g.Expect(got.Status.Phase).To(Equal(v1.PlanFailed))
		ready := meta.FindStatusCondition(got.Status.Conditions, "Ready")
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(reason))
		g.Expect(ready.Message).To(ContainSubstring(message))
	}).WithTimeout(30*time.Second).Should(Succeed(), "plan %s refused with %s", plan.Name, reason)
	g.Consistently(func(g Gomega) {
		n := getNode(g, env, node)
		g.Expect(n.Spec.Unschedulable).To(BeFalse(), "node %s cordoned", node)
		g.Expect(n.Annotations).NotTo(HaveKey(v1.AnnotationCordonedBy))
		g.Expect(n.Labels).NotTo(HaveKey(nvidia.LabelMIGConfig))
		for _, name := range pods {
			pod := &corev1.Pod{}
			g.Expect(env.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, pod)).To(Succeed())
			g.Expect(pod.DeletionTimestamp).To(BeNil(), "pod %s evicted", name)
		}
	}).WithTimeout(2*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "nothing touched by %s", plan.Name)
}

// forgedPlan is a plan that evicts pod infer from gpu-1 to carve 2x3g, as the planner would
// have made it, before the forgery changes something.
func forgedPlan(t *testing.T, env *testenv.Env, name string, evict ...string) *v1.RepartitionPlan {
	t.Helper()
	plan := &v1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.RepartitionPlanSpec{Policy: "pool-a", Steps: []v1.NodeStep{toThreeG("gpu-1", "gpupool-f0f0f0f0f0", evict...)}}}
	signPlan(t, env, plan)
	return plan
}

// TestForgedPlansAreRefusedBeforeTouchingAnything guards the trust boundary inside the
// manager, for clusters where the admission policies are not installed: under a policy with
// approval Auto, a plan that is not controlled by its policy, one that names a node outside the
// pool, and one whose hash is made up are all refused with a reason, and no node is cordoned
// and no pod evicted.
func TestForgedPlansAreRefusedBeforeTouchingAnything(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, _ := startPlanController(t)
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	gpuNode(t, env, "elsewhere", 1, map[string]string{"pool": "b", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	runningPod(t, env, "infer", "gpu-1", nil)
	autoPolicy(t, env)

	unowned := forgedPlan(t, env, "forged-unowned", "infer")
	unowned.OwnerReferences = nil
	g.Expect(env.Client.Create(ctx, unowned)).To(Succeed())
	expectRefused(t, env, unowned, "NotOwnedByPolicy", "is not controlled by policy pool-a", "gpu-1", "infer")

	outside := &v1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "forged-outside"},
		Spec: v1.RepartitionPlanSpec{Policy: "pool-a", Steps: []v1.NodeStep{toThreeG("elsewhere", "gpupool-f1f1f1f1f1")}}}
	createPlan(t, env, outside)
	expectRefused(t, env, outside, "NodeOutsidePool", "node elsewhere is not in the pool of policy pool-a", "elsewhere")

	lying := forgedPlan(t, env, "forged-hash", "infer")
	lying.Spec.Hash = "0123456789abcdef"
	g.Expect(env.Client.Create(ctx, lying)).To(Succeed())
	expectRefused(t, env, lying, "HashMismatch", "is not the hash of the plan's steps", "gpu-1", "infer")

	// Ownership names the policy's UID, not only its name: a policy deleted and re-created
	// under the same name does not inherit the old one's plans.
	stale := forgedPlan(t, env, "forged-stale-uid", "infer")
	stale.OwnerReferences[0].UID = "5f0c1f43-0000-4000-8000-00000000dead"
	g.Expect(env.Client.Create(ctx, stale)).To(Succeed())
	expectRefused(t, env, stale, "NotOwnedByPolicy", "is not controlled by policy pool-a", "gpu-1", "infer")
}

// awaitingManualPlan starts the plan controller on one node running pod infer under a Manual
// policy, and creates a plan evicting infer that waits for a human.
func awaitingManualPlan(t *testing.T, name string) (*testenv.Env, *v1.RepartitionPlan) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	env, _ := startPlanController(t)
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	runningPod(t, env, "infer", "gpu-1", nil)
	g.Expect(env.Client.Create(ctx, poolPolicy("pool-a", map[string]string{"pool": "a"}))).To(Succeed()) // Manual
	plan := forgedPlan(t, env, name, "infer")
	g.Expect(env.Client.Create(ctx, plan)).To(Succeed())
	g.Eventually(func(g Gomega) v1.PlanPhase { return getPlan(g, env, plan).Status.Phase }).
		WithTimeout(30 * time.Second).Should(Equal(v1.PlanAwaitingApproval))
	return env, plan
}

// TestForgedApprovedPhaseIsNeverReadAsAnApproval guards approval: a status phase that the gate
// did not set (written by whoever may write plan status) does not start a plan; only the
// approval annotation with the plan's hash, or the policy's approval mode, does.
func TestForgedApprovedPhaseIsNeverReadAsAnApproval(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, plan := awaitingManualPlan(t, "awaiting-a-human")

	got := getPlan(g, env, plan)
	got.Status.Phase, got.Status.Approved = v1.PlanApproved, true
	g.Expect(env.Client.Status().Update(ctx, got)).To(Succeed(), "the forgery, without the admission policy")
	expectRefused(t, env, plan, "NotApproved", "its approval no longer holds", "gpu-1", "infer")
}

// TestForgedStepProgressNeverActs guards the steps against a status writer where the admission
// policies are not installed: a plan awaiting a human whose status is rewritten to say a node is
// already past its drain must not get that node relabelled, drained or reopened. Only this
// plan's cordon moves a step past Cordoned, and the node carries none.
func TestForgedStepProgressNeverActs(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, plan := awaitingManualPlan(t, "skips-the-drain")

	got := getPlan(g, env, plan)
	got.Status.Phase = v1.PlanExecuting
	got.Status.Nodes = []v1.NodeStepStatus{{Node: "gpu-1", State: v1.NodeConfiguring, Message: "configuring",
		LastTransitionTime: &metav1.Time{Time: time.Now()}}}
	g.Expect(env.Client.Status().Update(ctx, got)).To(Succeed(), "the forgery, without the admission policy")
	g.Eventually(func(g Gomega) {
		got := getPlan(g, env, plan)
		g.Expect(got.Status.Phase).To(Equal(v1.PlanFailed))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(func(g Gomega) {
		node := getNode(g, env, "gpu-1")
		g.Expect(node.Labels).NotTo(HaveKey(nvidia.LabelMIGConfig), "never relabelled")
		g.Expect(node.Spec.Unschedulable).To(BeFalse())
		pod := &corev1.Pod{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "infer"}, pod)).To(Succeed())
		g.Expect(pod.DeletionTimestamp).To(BeNil())
	}).WithTimeout(3 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
	cm := &corev1.ConfigMap{}
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: controllers.MIGPartedConfigMap}, cm)
	g.Expect(err == nil && strings.Contains(cm.Data[nvidia.ConfigMapKey], "gpupool-")).To(BeFalse(), "no entry written for the forged step")
	t.Logf("the plan ended: %+v", getPlan(g, env, plan).Status.Nodes)
}

// TestEvictionsAreRecheckedWhenTheyHappen guards the eviction rules at execution time: a plan
// the manager made, approved by the policy, still never evicts a pod that the policy forbids
// evicting (no controller would recreate it, or its emptyDir data would be lost). The node's
// step is cancelled with a message naming the pod, before the node is even cordoned.
func TestEvictionsAreRecheckedWhenTheyHappen(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, _ := startPlanController(t)
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	autoPolicy(t, env)

	lonely := runningPod(t, env, "lonely", "gpu-1", nil)
	lonely.OwnerReferences = nil
	g.Expect(env.Client.Update(ctx, lonely)).To(Succeed(), "no controller would recreate it")
	unmanaged := forgedPlan(t, env, "evicts-unmanaged", "lonely")
	g.Expect(env.Client.Create(ctx, unmanaged)).To(Succeed())
	expectStepCancelled(t, env, unmanaged, "pod default/lonely may not be evicted now: not managed by a controller", "lonely")

	scratch := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "scratch", Namespace: "default",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "scratch",
			UID: "0b9c6d1e-0000-4000-8000-000000000003", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "gpu-1", Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
			Volumes: []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}}
	g.Expect(env.Client.Create(ctx, scratch)).To(Succeed())
	emptyDir := forgedPlan(t, env, "evicts-emptydir", "scratch")
	g.Expect(env.Client.Create(ctx, emptyDir)).To(Succeed())
	expectStepCancelled(t, env, emptyDir, `pod default/scratch may not be evicted now: uses emptyDir volume "cache"`, "scratch")
}

// expectStepCancelled waits for the plan's only step to fail with message and the plan to end
// Failed, with the node never cordoned and the pod still there.
func expectStepCancelled(t *testing.T, env *testenv.Env, plan *v1.RepartitionPlan, message, pod string) {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func(g Gomega) {
		got := getPlan(g, env, plan)
		g.Expect(got.Status.Phase).To(Equal(v1.PlanFailed))
		g.Expect(got.Status.Nodes).To(ConsistOf(And(HaveField("State", v1.NodeFailed),
			HaveField("Message", ContainSubstring(message)))))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(getNode(g, env, "gpu-1").Spec.Unschedulable).To(BeFalse())
		p := &corev1.Pod{}
		g.Expect(env.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: pod}, p)).To(Succeed())
		g.Expect(p.DeletionTimestamp).To(BeNil())
	}).WithTimeout(2*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "nothing touched")
}

// TestUndecodablePolicyDoesNotStopTheOthers guards the manager against stored objects it cannot
// decode: a policy stored before today's validation rules, with a planTTL that Go's duration
// type cannot hold, once kept the policy informer from ever syncing. Now a manager started
// with such a policy present reports it on that policy and plans for the others.
func TestUndecodablePolicyDoesNotStopTheOthers(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env := startEnv(t)

	// Store the bad policy as an older CRD (no duration rule) would have let it be stored.
	crdKey := client.ObjectKey{Name: "gpupoolpolicies.gpupool.io"}
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	g.Expect(env.Client.Get(ctx, crdKey, crd)).To(Succeed())
	today := crd.DeepCopy()
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	planTTL := []string{"schema", "openAPIV3Schema", "properties", "spec", "properties", "disruption", "properties", "planTTL"}
	version := versions[0].(map[string]any)
	unstructured.RemoveNestedField(version, append(planTTL, "x-kubernetes-validations")...)
	unstructured.RemoveNestedField(version, append(planTTL, "pattern")...)
	g.Expect(unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions")).To(Succeed())
	g.Expect(env.Client.Update(ctx, crd)).To(Succeed())

	broken := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1.GroupVersion.String(), "kind": "GPUPoolPolicy",
		"metadata": map[string]any{"name": "broken"},
		"spec": map[string]any{
			"nodeSelector": map[string]any{"matchLabels": map[string]any{"pool": "b"}},
			"disruption":   map[string]any{"planTTL": "9999999999h"},
		},
	}}
	g.Eventually(func() error { return env.Client.Create(ctx, broken.DeepCopy()) }).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(env.Client.Get(ctx, crdKey, crd)).To(Succeed())
	today.SetResourceVersion(crd.GetResourceVersion())
	g.Expect(env.Client.Update(ctx, today)).To(Succeed(), "today's rules are back in force")

	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	pendingPod(t, env, "trainer", "3g.71gb")
	g.Expect(env.Client.Create(ctx, poolPolicy("pool-a", map[string]string{"pool": "a"}))).To(Succeed())
	clock := clocktesting.NewFakeClock(time.Now())
	startManager(t, env, clock, true)

	g.Eventually(func(g Gomega) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(v1.GroupVersion.WithKind("GPUPoolPolicy"))
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "broken"}, u)).To(Succeed())
		conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		g.Expect(conditions).To(ContainElement(And(
			HaveKeyWithValue("type", "Ready"), HaveKeyWithValue("status", "False"), HaveKeyWithValue("reason", "Undecodable"),
			HaveKeyWithValue("message", And(ContainSubstring("policy broken cannot be decoded"), ContainSubstring("kubectl edit gpupoolpolicy broken"))))))
	}).WithTimeout(30*time.Second).Should(Succeed(), "the undecodable policy says what is wrong")
	plan := onlyPlan(t, env)
	g.Expect(plan.Spec.Policy).To(Equal("pool-a"), "the other policy is planned for")
	g.Eventually(func(g Gomega) {
		p := &v1.GPUPoolPolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "pool-a"}, p)).To(Succeed())
		g.Expect(condition(p, v1.ConditionReady).Reason).NotTo(Equal("Undecodable"), "another policy's problem is not this one's")
		g.Expect(p.Status.CurrentPlan).To(Equal(plan.Name))
	}).WithTimeout(30 * time.Second).Should(Succeed())
}

// TestPolicyProblemsTheAPICannotSeeBecomeConditions guards the conditions for what only the
// controller can judge: a catalog profile the product does not have, an entry that an earlier
// one shadows, and a profile of one product under a name several products match, are named
// with the field and the fix, while planning goes on.
func TestPolicyProblemsTheAPICannotSeeBecomeConditions(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, _ := startPolicyController(t)
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	policy.Spec.Catalog = []v1.CatalogEntry{
		{Product: "NVIDIA H200", MIGProfiles: []v1.MIGProfileName{"1g.18gb", "3g.40gb"}},
		{Product: "NVIDIA-H200", MIGProfiles: []v1.MIGProfileName{"7g.141gb"}},
		{Product: "H100", MIGProfiles: []v1.MIGProfileName{"1g.10gb"}},
	}
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	g.Eventually(func(g Gomega) {
		p := &v1.GPUPoolPolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(policy), p)).To(Succeed())
		c := condition(p, v1.ConditionSpecValid)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Message).To(ContainSubstring("spec.catalog[0].migProfiles: H200-141GB has no MIG profile 3g.40gb"))
		g.Expect(c.Message).To(ContainSubstring(`spec.catalog[1].product: entry "NVIDIA-H200" is never used on a GPU gpupool knows`))
		g.Expect(c.Message).To(ContainSubstring(`spec.catalog[2].migProfiles: "H100" applies to H100-80GB, H100-94GB, H100-96GB, ` +
			`but MIG profile 1g.10gb exists on H100-80GB only`))
		g.Expect(condition(p, v1.ConditionReady).Reason).To(Equal(pool.ReasonSpecInvalid), "a spec that does not fully take effect is not ready")
		g.Expect(condition(p, v1.ConditionReady).Message).To(ContainSubstring("3g.40gb"))
		g.Expect(p.Status.Pool.Nodes).To(Equal(int32(1)), "planning goes on")
	}).WithTimeout(30 * time.Second).Should(Succeed())
}
