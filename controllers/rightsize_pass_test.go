package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/metrics"
	"github.com/gpupool/gpupool/internal/rightsize"
)

// TestRightsizePassExportsPerNamespace runs the pass in a manager against an API server: the
// usage an agent publishes in GPUNode status.usage becomes requested and used memory per
// namespace, the slices a Shrink gives back, and the workloads per verdict; when usage grows so
// that the workload keeps its profile, the slices series goes away.
func TestRightsizePassExportsPerNamespace(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	ctx := context.Background()
	gpuNode(t, env, "gpu-0", 1, map[string]string{"pool": "a"})
	g.Expect(env.Client.Create(ctx, &v1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pool-a"}, Spec: v1.GPUPoolPolicySpec{
		NodeSelector: v1.PoolSelector{MatchLabels: map[string]string{"pool": "a"}},
		Catalog:      []v1.CatalogEntry{{Product: "H200", MIGProfiles: []v1.MIGProfileName{"1g.18gb", "3g.71gb"}}},
	}})).To(Succeed())
	for _, ns := range []string{"team-a", "team-b"} {
		g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	// A Deployment's two pods (through a ReplicaSet the manager does not cache: the
	// pod-template-hash names the Deployment), and a bare pod on a whole GPU, not measured.
	gpuPod := func(ns, name, resourceName string, owner *metav1.OwnerReference) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{NodeName: "gpu-0", Containers: []corev1.Container{{Name: "main", Image: "registry.example/app:1",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(resourceName): resource.MustParse("1")}}}}}}
		if owner != nil {
			pod.OwnerReferences = []metav1.OwnerReference{*owner}
			pod.Labels = map[string]string{"pod-template-hash": "5d8f"}
		}
		g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	}
	rs := &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "server-5d8f", UID: "rs-uid", Controller: ptr.To(true)}
	gpuPod("team-a", "server-a", "nvidia.com/mig-3g.71gb", rs)
	gpuPod("team-a", "server-b", "nvidia.com/mig-3g.71gb", rs)
	gpuPod("team-b", "notebook", "nvidia.com/gpu", nil)
	const gib = 1024
	setUsage := func(p95 int64) {
		report := &v1.GPUNode{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "gpu-0"}, report)).To(Succeed())
		report.Status.Usage = nil
		for _, name := range []string{"server-a", "server-b"} {
			report.Status.Usage = append(report.Status.Usage, v1.PodUsage{Namespace: "team-a", Name: name,
				P50MiB: p95, P95MiB: p95, PeakMiB: p95, CeilingMiB: 71 * gib, Samples: 3000, WindowSeconds: 2 * 86400})
		}
		g.Expect(env.Client.Status().Update(ctx, report)).To(Succeed())
	}
	setUsage(9 * gib)

	mgr := newTestManager(t, env)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(controllers.AddRightsizePass(mgr, &controllers.RightsizePass{Metrics: m, Interval: 100 * time.Millisecond,
		Options: rightsize.Options{MinWindow: time.Hour, MinSamples: 100}})).To(Succeed())
	runManager(t, mgr)

	const mib = 1 << 20
	g.Eventually(func() map[string]float64 { return rightsizeSeries(t, reg) }).WithTimeout(20 * time.Second).Should(Equal(map[string]float64{
		`gpupool_rightsize_requested_memory_bytes{namespace="team-a"}`:                    2 * 71 * gib * mib,
		`gpupool_rightsize_used_memory_bytes{namespace="team-a"}`:                         2 * 9 * gib * mib,
		`gpupool_rightsize_slices_recommended_away{namespace="team-a",profile="3g.71gb"}`: 6,
		`gpupool_rightsize_workloads{namespace="team-a",verdict="Shrink"}`:                1,
		`gpupool_rightsize_workloads{namespace="team-b",verdict="CannotTell"}`:            1,
	}))

	// The pods now use most of their instance: they keep it, and nothing is recommended away.
	setUsage(60 * gib)
	g.Eventually(func() map[string]float64 { return rightsizeSeries(t, reg) }).WithTimeout(20 * time.Second).Should(Equal(map[string]float64{
		`gpupool_rightsize_requested_memory_bytes{namespace="team-a"}`:         2 * 71 * gib * mib,
		`gpupool_rightsize_used_memory_bytes{namespace="team-a"}`:              2 * 60 * gib * mib,
		`gpupool_rightsize_workloads{namespace="team-a",verdict="Keep"}`:       1,
		`gpupool_rightsize_workloads{namespace="team-b",verdict="CannotTell"}`: 1,
	}))
}

// rightsizeSeries is every gpupool_rightsize_* series the registry holds, as name{labels}.
func rightsizeSeries(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	out := map[string]float64{}
	for _, f := range families {
		switch f.GetName() {
		case metrics.RightsizeRequestedBytes, metrics.RightsizeUsedBytes, metrics.RightsizeSlicesAway, metrics.RightsizeWorkloads:
		default:
			continue
		}
		for _, s := range f.GetMetric() {
			key := f.GetName() + "{"
			for i, l := range s.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += l.GetName() + `="` + l.GetValue() + `"`
			}
			out[key+"}"] = s.GetGauge().GetValue()
		}
	}
	return out
}
