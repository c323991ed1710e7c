package controllers_test

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/metrics"
	"github.com/gpupool/gpupool/internal/testenv"
)

// startPodWait runs a manager with only the pod wait observer, as a new leader would; stop
// ends it and waits for it; cached says whether its cache holds a pod unbound, after which
// the pod's binding is an update the observer sees.
func startPodWait(t *testing.T, env *testenv.Env, clock *clocktesting.FakeClock) (stop func(), reg *prometheus.Registry,
	cached func(Gomega, *corev1.Pod)) {
	t.Helper()
	g := NewWithT(t)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	g.Expect(err).NotTo(HaveOccurred())
	reg = prometheus.NewRegistry()
	m, err := metrics.New(reg)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(controllers.AddPodWait(mgr, m, clock)).To(Succeed())
	store, err := controllers.NewPodStore(context.Background(), mgr.GetCache())
	g.Expect(err).NotTo(HaveOccurred())
	cached = func(g Gomega, pod *corev1.Pod) {
		r, err := store.Get(client.ObjectKeyFromObject(pod))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r).NotTo(BeNil())
		g.Expect(r.NodeName).To(BeEmpty())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	// The observer counts from the moment its replica leads.
	g.Eventually(mgr.Elected()).WithTimeout(30 * time.Second).Should(BeClosed())
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			NewWithT(t).Eventually(done).WithTimeout(30 * time.Second).Should(Receive(BeNil()))
		})
	}
	t.Cleanup(stop)
	return stop, reg, cached
}

// waitPod creates a pod asking for resources (none: a CPU pod), bound at creation to
// boundTo when it is not empty.
func waitPod(t *testing.T, env *testenv.Env, name, boundTo string, resources corev1.ResourceList) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: boundTo, Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Resources: corev1.ResourceRequirements{Requests: resources, Limits: resources}}}}}
	NewWithT(t).Expect(env.Client.Create(context.Background(), pod)).To(Succeed())
	return pod
}

// bind binds a pod to a node as the scheduler does, through the binding subresource.
func bind(t *testing.T, env *testenv.Env, pod *corev1.Pod, node string) {
	t.Helper()
	NewWithT(t).Expect(env.Client.SubResource("binding").Create(context.Background(), pod, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node}})).To(Succeed())
}

// pendingSeconds reads gpupool_pod_pending_seconds: per shape, its count and sum.
func pendingSeconds(g Gomega, reg *prometheus.Registry) map[string][2]float64 {
	families, err := reg.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	out := map[string][2]float64{}
	for _, f := range families {
		if f.GetName() != metrics.PodPendingSeconds {
			continue
		}
		for _, s := range f.GetMetric() {
			out[s.GetLabel()[0].GetValue()] = [2]float64{float64(s.GetHistogram().GetSampleCount()), s.GetHistogram().GetSampleSum()}
		}
	}
	return out
}

// TestPodWaitObservesEachGPUPodOnceWhenBound: a GPU pod is observed when the scheduler binds
// it, with the time since its creation, under its GPU resource; a CPU pod and a pod created
// bound are not; a new manager (a restart, a failover) counts neither the pods bound before
// it started nor any pod twice.
func TestPodWaitObservesEachGPUPodOnceWhenBound(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	clock := clocktesting.NewFakeClock(time.Now())
	stop, reg, cached := startPodWait(t, env, clock)

	mig := corev1.ResourceList{"nvidia.com/mig-1g.18gb": resource.MustParse("1")}
	cpu := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
	gpu := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	cpuPod := waitPod(t, env, "cpu", "", cpu)
	waitPod(t, env, "daemon", "gpu-1", gpu)
	migPod := waitPod(t, env, "mig", "", mig)
	clock.SetTime(migPod.CreationTimestamp.Add(90 * time.Second))
	g.Eventually(func(g Gomega) { cached(g, cpuPod); cached(g, migPod) }).Should(Succeed())
	// The CPU pod's binding comes first: the handler sees updates in order, so once the MIG
	// pod is counted, the CPU pod's binding has been seen and left out.
	bind(t, env, cpuPod, "cpu-1")
	bind(t, env, migPod, "gpu-1")
	g.Eventually(func(g Gomega) {
		g.Expect(pendingSeconds(g, reg)).To(Equal(map[string][2]float64{"nvidia.com/mig-1g.18gb": {1, 90}}))
	}).Should(Succeed())

	// The kubelet's status updates of a bound pod are not bindings.
	g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(migPod), migPod)).To(Succeed())
	migPod.Status.Phase = corev1.PodRunning
	g.Expect(env.Client.Status().Update(context.Background(), migPod)).To(Succeed())
	third := waitPod(t, env, "third", "", gpu)
	g.Eventually(func(g Gomega) { cached(g, third) }).Should(Succeed())
	clock.SetTime(third.CreationTimestamp.Add(30 * time.Second))
	bind(t, env, third, "gpu-1")
	g.Eventually(func(g Gomega) {
		g.Expect(pendingSeconds(g, reg)).To(Equal(map[string][2]float64{"nvidia.com/mig-1g.18gb": {1, 90}, "nvidia.com/gpu": {1, 30}}))
	}).Should(Succeed())

	stop()
	_, reg, cached = startPodWait(t, env, clock)
	another := waitPod(t, env, "another", "", gpu)
	clock.SetTime(another.CreationTimestamp.Add(10 * time.Minute))
	g.Eventually(func(g Gomega) { cached(g, another) }).Should(Succeed())
	bind(t, env, another, "gpu-2")
	g.Eventually(func(g Gomega) {
		g.Expect(pendingSeconds(g, reg)).To(Equal(map[string][2]float64{"nvidia.com/gpu": {1, 600}}))
	}).Should(Succeed(), "the pods bound before this manager started are not counted again")
}
