package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/testenv"
)

// startPoliciesOnly runs the policy controller alone: no plan controller ever records a plan's
// phase, which is the widest form of the race between a human's decision and the next pass.
func startPoliciesOnly(t *testing.T, env *testenv.Env) {
	t.Helper()
	mgr := newTestManager(t, env)
	NewWithT(t).Expect((&controllers.PolicyReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Clock: clocktesting.NewFakeClock(time.Now()), Recorder: mgr.GetEventRecorder("gpupool-policy-controller"),
		AgentNamespace: agentNamespace, ConfigNamespace: "default"}).SetupWithManager(mgr)).To(Succeed())
	runManager(t, mgr)
}

// TestARejectionSticksBeforeItIsRecorded guards issue 35's first point: a rejection
// suppresses the same change from the moment the API server stores it. The plan controller
// does not run here, so the plan's status never says Rejected; a pass that read the recorded
// phase proposed the identical change again under a new name within a second.
func TestARejectionSticksBeforeItIsRecorded(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env := startEnv(t)
	startPoliciesOnly(t, env)
	gpuNode(t, env, "gpu-1", 2, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	pendingPod(t, env, "trainer", "3g.71gb")
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	plan := onlyPlan(t, env)
	g.Expect(plan.Status.Phase).To(BeEmpty(), "no plan controller records phases in this test")

	rejected := plan.DeepCopy()
	metav1.SetMetaDataAnnotation(&rejected.ObjectMeta, v1.AnnotationReject, "not during the training run")
	g.Expect(env.Client.Patch(ctx, rejected, client.MergeFrom(&plan))).To(Succeed())
	// The pass that saw the rejection no longer reports the plan as the policy's current one;
	// a pass that proposed again would have created the new plan before writing this status.
	g.Eventually(func(g Gomega) {
		got := &v1.GPUPoolPolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(policy), got)).To(Succeed())
		g.Expect(got.Status.CurrentPlan).To(BeEmpty())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	// New demand of the same shape makes the planner run again and want the same change.
	pendingPod(t, env, "trainer-2", "3g.71gb")
	g.Eventually(func(g Gomega) {
		got := &v1.GPUPoolPolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(policy), got)).To(Succeed())
		g.Expect(got.Status.PendingPods).To(Equal(int32(2)), "the controller has passed over the new pod")
	}).WithTimeout(30 * time.Second).Should(Succeed())
	var plans v1.RepartitionPlanList
	g.Expect(env.Client.List(ctx, &plans)).To(Succeed())
	for _, p := range plans.Items {
		if p.Name != plan.Name {
			g.Expect(pool.SameChange(&p, &plan)).To(BeFalse(), "plan %s proposes the change a human rejected in plan %s", p.Name, plan.Name)
		}
	}
}

// TestAPlanWhosePodsWentAwayIsWithdrawn guards issue 35's second half of point 1: inside the
// stabilization window a plan waiting for approval is kept against churn, but not once every
// pod it was made for has gone: it is withdrawn, and says why.
func TestAPlanWhosePodsWentAwayIsWithdrawn(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, _ := startPolicyController(t)
	gpuNode(t, env, "gpu-1", 2, map[string]string{"pool": "a", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	pod := pendingPod(t, env, "trainer", "3g.71gb")
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	policy.Spec.Planning.StabilizationWindow = &metav1.Duration{Duration: time.Hour}
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	plan := onlyPlan(t, env)
	// The pod's owner sees, on the pod, which plan serves it and that it waits for approval.
	g.Eventually(func(g Gomega) {
		var list eventsv1.EventList
		g.Expect(env.Client.List(ctx, &list, client.InNamespace("default"))).To(Succeed())
		g.Expect(list.Items).To(ContainElement(SatisfyAll(
			HaveField("Regarding.Kind", "Pod"), HaveField("Regarding.Name", "trainer"), HaveField("Regarding.UID", pod.UID),
			HaveField("Reason", pool.PodReasonPlanned), HaveField("Note", ContainSubstring("gpupool plan "+plan.Name)))))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// The fake clock stands still: the plan is well inside its window.
	g.Expect(env.Client.Delete(ctx, pod, client.GracePeriodSeconds(0))).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(&plan), got)).To(Succeed())
		g.Expect(got.Status.Phase).To(Equal(v1.PlanSuperseded))
		c := condition2(got.Status.Conditions, controllers.ConditionApproved)
		g.Expect(c.Message).To(HavePrefix(pool.WithdrawPrefix + "none of the 1 pod(s) it was made for is pending any more (default/trainer)"))
	}).WithTimeout(30*time.Second).Should(Succeed(), "a plan nobody needs is withdrawn, window or not")
}

func condition2(conds []metav1.Condition, t string) metav1.Condition {
	for _, c := range conds {
		if c.Type == t {
			return c
		}
	}
	return metav1.Condition{}
}

// TestEachPlanTransitionIsOneEvent guards issue 35's "each Event once": the plan controller
// decides on its cache, which right after a status write may still hold the plan as it was.
// The stale pass decides the same transition again and its status write fails on the old
// resourceVersion; it used to have sent the transition's Event already, so kubectl get events
// listed AwaitingApproval (and each step's end) twice. Here the cache is held stale on purpose.
func TestEachPlanTransitionIsOneEvent(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	ctx := context.Background()
	policy := poolPolicy("pool-a", map[string]string{"pool": "nowhere"})
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "nowhere", nvidia.LabelGPUProduct: "NVIDIA-H200"})
	plan := gatePlan("pool-a-events", "1f3e9a7c000000e1")
	createPlan(t, env, plan)
	stale := plan.DeepCopy()
	withWatch, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	staleCache := interceptor.NewClient(withWatch, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if p, ok := obj.(*v1.RepartitionPlan); ok && key.Name == stale.Name {
				stale.DeepCopyInto(p)
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		}})
	recorder := events.NewFakeRecorder(10)
	r := &controllers.PlanReconciler{Client: staleCache, Clock: clocktesting.NewFakeClock(time.Now()), Recorder: recorder, Namespace: "default"}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(plan)}
	_, err = r.Reconcile(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	got := &v1.RepartitionPlan{}
	g.Expect(env.Client.Get(ctx, req.NamespacedName, got)).To(Succeed())
	g.Expect(got.Status.Phase).To(Equal(v1.PlanAwaitingApproval), "the first pass recorded the transition")
	_, err = r.Reconcile(ctx, req)
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "the stale pass's write fails: %v", err)
	g.Expect(recorder.Events).To(HaveLen(1), "only the pass that recorded the transition told it")
	g.Expect(<-recorder.Events).To(ContainSubstring("AwaitingApproval"))
}
