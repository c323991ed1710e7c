package metrics_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/metrics"
)

func newMetrics(t *testing.T) (*metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return m, reg
}

// TestPolicySeriesFollowTheStatus guards that pool series are the policy status's numbers,
// that a shape no longer pending disappears rather than keeping its last value, and that a
// deleted policy leaves no series behind.
func TestPolicySeriesFollowTheStatus(t *testing.T) {
	g := NewWithT(t)
	m, reg := newMetrics(t)
	m.ObservePolicy("pool-a", v1alpha1.GPUPoolPolicyStatus{
		Demand: []v1alpha1.ShapeDemand{
			{Resource: "nvidia.com/mig-3g.71gb", PendingPods: 3, EligibleNodes: 4, FeasibleNodes: 1},
			{Resource: "nvidia.com/gpu", PendingPods: 1},
		},
		Pool: v1alpha1.PoolStatus{Slices: []v1alpha1.ProfileSlices{{Profile: "1g.18gb", Total: 28, Free: 9, Stranded: 5}}, UnreportedNodes: 2},
	})
	g.Expect(testutil.CollectAndCompare(reg, strings.NewReader(`
# HELP gpupool_feasible_nodes_ratio Of the pool's nodes eligible for a pending shape, the fraction that could be carved to host it.
# TYPE gpupool_feasible_nodes_ratio gauge
gpupool_feasible_nodes_ratio{policy="pool-a",shape="nvidia.com/gpu"} 0
gpupool_feasible_nodes_ratio{policy="pool-a",shape="nvidia.com/mig-3g.71gb"} 0.25
# HELP gpupool_pending_pods Pending pods in a pool that ask for a GPU resource, per requested resource (shape).
# TYPE gpupool_pending_pods gauge
gpupool_pending_pods{policy="pool-a",shape="nvidia.com/gpu"} 1
gpupool_pending_pods{policy="pool-a",shape="nvidia.com/mig-3g.71gb"} 3
# HELP gpupool_stranded_slices Free MIG instances in a pool that no pending pod can use, per profile.
# TYPE gpupool_stranded_slices gauge
gpupool_stranded_slices{policy="pool-a",profile="1g.18gb"} 5
# HELP gpupool_unreported_nodes Nodes of a pool left out of planning because their agent's GPU report is missing, cannot read NVML, or is stale.
# TYPE gpupool_unreported_nodes gauge
gpupool_unreported_nodes{policy="pool-a"} 2
`), "gpupool_pending_pods", "gpupool_stranded_slices", "gpupool_feasible_nodes_ratio", "gpupool_unreported_nodes")).To(Succeed())

	m.ObservePolicy("pool-a", v1alpha1.GPUPoolPolicyStatus{
		Demand: []v1alpha1.ShapeDemand{{Resource: "nvidia.com/gpu", PendingPods: 2, EligibleNodes: 2, FeasibleNodes: 2}}})
	g.Expect(testutil.CollectAndCount(reg, "gpupool_pending_pods")).To(Equal(1), "the 3g shape is no longer pending")
	g.Expect(testutil.CollectAndCount(reg, "gpupool_stranded_slices")).To(Equal(0))

	m.ForgetPolicy("pool-a")
	g.Expect(testutil.CollectAndCount(reg, "gpupool_pending_pods", "gpupool_feasible_nodes_ratio", "gpupool_unreported_nodes")).To(BeZero())
}

// TestPlanPhaseIsOneHot guards that exactly one phase of a plan reads 1, that the phase it
// left reads 0, and that a deleted plan's series go away.
func TestPlanPhaseIsOneHot(t *testing.T) {
	g := NewWithT(t)
	m, reg := newMetrics(t)
	m.ObservePlan("pool-a", "pool-a-1", v1alpha1.PlanAwaitingApproval)
	m.ObservePlan("pool-a", "pool-a-1", v1alpha1.PlanExecuting)
	families, err := reg.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	ones := map[string]float64{}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "phase" {
					ones[l.GetValue()] = s.GetGauge().GetValue()
				}
			}
		}
	}
	g.Expect(ones).To(HaveKeyWithValue("Executing", 1.0))
	g.Expect(ones).To(HaveKeyWithValue("AwaitingApproval", 0.0))
	sum := 0.0
	for _, v := range ones {
		sum += v
	}
	g.Expect(sum).To(Equal(1.0))
	m.ForgetPlan("pool-a-1")
	g.Expect(testutil.CollectAndCount(reg, "gpupool_plan_phase")).To(BeZero())
}

// TestEvictionsAndStepDurationsAccumulate guards the counters the drain and step code feed.
func TestEvictionsAndStepDurationsAccumulate(t *testing.T) {
	g := NewWithT(t)
	m, reg := newMetrics(t)
	m.CountEvictions("pool-a", "Evicted", 2)
	m.CountEvictions("pool-a", "Evicted", 1)
	m.CountEvictions("pool-a", "Blocked", 0)
	m.ObserveNodeStep("pool-a", v1alpha1.NodeDone, 42*time.Second)
	g.Expect(testutil.CollectAndCompare(reg, strings.NewReader(`
# HELP gpupool_evictions_total Eviction API calls made by plans, by outcome (Evicted, Blocked by a PodDisruptionBudget, Refused, Failed).
# TYPE gpupool_evictions_total counter
gpupool_evictions_total{outcome="Evicted",policy="pool-a"} 3
`), "gpupool_evictions_total")).To(Succeed(), "an outcome with no calls makes no series")
	g.Expect(testutil.CollectAndCount(reg, "gpupool_reconfigure_seconds")).To(Equal(1))
}

// TestNilMetricsRecordNothing guards that controllers built without metrics need no stub.
func TestNilMetricsRecordNothing(t *testing.T) {
	var m *metrics.Metrics
	m.ObservePolicy("p", v1alpha1.GPUPoolPolicyStatus{})
	m.ObservePlan("p", "q", v1alpha1.PlanFailed)
	m.CountEvictions("p", "Evicted", 1)
	m.ObserveNodeStep("p", v1alpha1.NodeDone, time.Second)
	m.ForgetPlan("q")
	m.ForgetPolicy("p")
}

// TestRegisteringTwiceFails guards against two Metrics on one registry silently splitting series.
func TestRegisteringTwiceFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := metrics.New(reg)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	_, err = metrics.New(reg)
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring("registering gpupool metrics")))
}
