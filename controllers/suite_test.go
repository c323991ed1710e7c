package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gpupool/gpupool/controllers"
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
	g := NewWithT(t)
	ctrl.SetLogger(zap.New(zap.WriteTo(testWriter{t}), zap.UseDevMode(true)))
	env, err := testenv.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	clock := clocktesting.NewFakeClock(time.Now())
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		// Every test runs its own manager in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	g.Expect(err).NotTo(HaveOccurred())
	var recorder events.EventRecorder = mgr.GetEventRecorder("gpupool-policy-controller")
	if withPolicies {
		g.Expect((&controllers.PolicyReconciler{Client: mgr.GetClient(), Clock: clock, Recorder: recorder}).
			SetupWithManager(mgr)).To(Succeed())
	}
	g.Expect((&controllers.PlanReconciler{Client: mgr.GetClient(), Clock: clock, Recorder: recorder,
		Namespace: "default", ConfigPropagation: time.Millisecond}).SetupWithManager(mgr)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(BeNil()))
	})
	return env, clock
}

// testWriter sends the manager's log to the test's log, shown when a test fails.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
