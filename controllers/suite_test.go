package controllers_test

import (
	"cmp"
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/metrics"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/testenv"
)

// startPolicyController runs the policy and plan controllers in a manager against a fresh API server,
// with a fake clock set to now (object timestamps come from the API server's real clock).
func startPolicyController(t *testing.T) (*testenv.Env, *clocktesting.FakeClock) {
	return startControllers(t, true)
}

// startPlanController runs only the plan controller, so that hand-made plans are not
// superseded by a policy controller that would plan differently.
func startPlanController(t *testing.T) (*testenv.Env, *clocktesting.FakeClock) {
	return startControllers(t, false)
}

func startControllers(t *testing.T, withPolicies bool) (*testenv.Env, *clocktesting.FakeClock) {
	t.Helper()
	env := startEnv(t)
	clock := clocktesting.NewFakeClock(time.Now())
	startManager(t, env, clock, withPolicies)
	return env, clock
}

// startEnv starts a fresh API server for one test, stopped when the test ends.
func startEnv(t *testing.T) *testenv.Env {
	t.Helper()
	ctrl.SetLogger(zap.New(zap.WriteTo(testWriter{t}), zap.UseDevMode(true)))
	env, err := testenv.Start()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	return env
}

// startManager runs gpupool's controllers in a new manager, as a new replica would: the plan
// and cordon controllers and the ConfigMap writer always, the policy controller when asked.
// stop ends the manager and waits for it (it also runs when the test ends); the registry holds
// this manager's metrics.
func startManager(t *testing.T, env *testenv.Env, clock *clocktesting.FakeClock, withPolicies bool) (stop func(), reg *prometheus.Registry) {
	t.Helper()
	g := NewWithT(t)
	mgr := newTestManager(t, env)
	reg = prometheus.NewRegistry()
	m, err := metrics.New(reg)
	g.Expect(err).NotTo(HaveOccurred())
	var recorder events.EventRecorder = mgr.GetEventRecorder("gpupool-policy-controller")
	if withPolicies {
		g.Expect((&controllers.PolicyReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: clock, Recorder: recorder, Metrics: m,
			AgentNamespace: agentNamespace, AgentPodSelector: labels.SelectorFromSet(agentPodLabels),
			AgentDaemonSet: agentDaemonSet, AgentServiceAccount: agentServiceAccount, ConfigNamespace: "default"}).
			SetupWithManager(mgr)).To(Succeed())
	}
	g.Expect((&controllers.PlanReconciler{Client: mgr.GetClient(), Clock: clock, Recorder: recorder,
		Namespace: "default", ConfigPropagation: time.Millisecond, Metrics: m}).SetupWithManager(mgr)).To(Succeed())
	g.Expect((&controllers.CordonReconciler{Client: mgr.GetClient(), Recorder: recorder, Namespace: "default", Metrics: m}).SetupWithManager(mgr)).To(Succeed())
	g.Expect((&controllers.OperatorConfigReconciler{Client: mgr.GetClient(), Namespace: "default"}).SetupWithManager(mgr)).To(Succeed())
	return runManager(t, mgr), reg
}

// newTestManager makes a manager as cmd/manager configures its cache (unstructured policies,
// only the agents' Leases), without metrics or probe listeners.
func newTestManager(t *testing.T, env *testenv.Env) ctrl.Manager {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme,
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: controllers.AgentLeaseCache(agentNamespace)}},
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		// Every test runs its own manager in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return mgr
}

// runManager starts the manager; the returned stop ends it and waits for it, and runs when the
// test ends too.
func runManager(t *testing.T, mgr ctrl.Manager) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			NewWithT(t).Eventually(done).WithTimeout(30 * time.Second).Should(Receive(BeNil()))
		})
	}
	t.Cleanup(stop)
	return stop
}

// agentNamespace is where the tests' agents keep their heartbeat Leases and run their pods,
// which carry agentPodLabels, are controlled by the DaemonSet agentDaemonSet and run as the
// ServiceAccount agentServiceAccount.
const (
	agentNamespace      = "gpupool-agent"
	agentDaemonSet      = "gpupool-agent"
	agentServiceAccount = "gpupool-agent"
)

var agentPodLabels = map[string]string{"app.kubernetes.io/name": "gpupool-agent"}

// testWriter sends the manager's log to the test's log, shown when a test fails.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// createPlan creates a hand-made plan as the manager would have made it: controlled by its
// policy (which must exist), every eviction naming its pod's UID (the pods must exist), the
// disruptive flags true exactly where pods are evicted, and spec.hash the hash of the steps.
// The plan controller refuses plans without these; the tests of that refusal build their
// forgeries from a plan this returns.
func createPlan(t *testing.T, env *testenv.Env, plan *v1.RepartitionPlan) *v1.RepartitionPlan {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	signPlan(t, env, plan)
	g.Expect(env.Client.Create(ctx, plan)).To(Succeed())
	return plan
}

// signPlan fills in what createPlan promises, without creating the plan.
func signPlan(t *testing.T, env *testenv.Env, plan *v1.RepartitionPlan) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	policy := &v1.GPUPoolPolicy{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: plan.Spec.Policy}, policy)).To(Succeed(), "the plan's policy must exist")
	plan.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(policy, v1.GroupVersion.WithKind("GPUPoolPolicy"))}
	if plan.Spec.Approval == "" {
		// The mode the manager records: the policy's when it makes the plan.
		plan.Spec.Approval = cmp.Or(policy.Spec.Disruption.Approval, v1.ApprovalManual)
	}
	plan.Spec.Disruptive = false
	for i := range plan.Spec.Steps {
		step := &plan.Spec.Steps[i]
		step.Disruptive = len(step.Evictions) > 0
		plan.Spec.Disruptive = plan.Spec.Disruptive || step.Disruptive
		// The entry name the manager would give the step: the executor cancels a step whose name
		// is not its target's. A step on a node without a report keeps the name the test chose.
		node, gpuNode := &corev1.Node{}, &v1.GPUNode{}
		if env.Client.Get(ctx, client.ObjectKey{Name: step.Node}, node) == nil &&
			env.Client.Get(ctx, client.ObjectKey{Name: step.Node}, gpuNode) == nil {
			step.MIGConfigName = nvidia.StepEntryName(inventory.NodeTarget(node, gpuNode, step.GPUs), plan.Name)
		}
		for j := range step.Evictions {
			e := &step.Evictions[j]
			pod := &corev1.Pod{}
			g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: e.Name}, pod)).To(Succeed(),
				"a pod the plan evicts must exist")
			e.UID = string(pod.UID)
		}
	}
	plan.Spec.Hash = v1.HashSteps(plan.Spec.Steps)
}

// entryOf is the mig-parted entry name signPlan gave the plan's step on node.
func entryOf(plan *v1.RepartitionPlan, node string) string {
	for _, s := range plan.Spec.Steps {
		if s.Node == node {
			return s.MIGConfigName
		}
	}
	return ""
}

// editPolicy changes a policy's spec as a user would, reading it afresh and retrying when the
// manager's status writes got in between (each bumps the resourceVersion the update names).
func editPolicy(t *testing.T, env *testenv.Env, name string, edit func(*v1.GPUPoolPolicy)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		policy := &v1.GPUPoolPolicy{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, policy); err != nil {
			return err
		}
		edit(policy)
		return env.Client.Update(context.Background(), policy)
	})
	if err != nil {
		t.Fatalf("editing policy %s: %v", name, err)
	}
}
