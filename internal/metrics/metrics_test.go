package metrics_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	m.ObservePolicy("pool-a", metrics.PolicyObservation{Status: v1alpha1.GPUPoolPolicyStatus{
		Demand: []v1alpha1.ShapeDemand{
			{Resource: "nvidia.com/mig-3g.71gb", PendingPods: 3, EligibleNodes: 4, FeasibleNodes: 1},
			{Resource: "nvidia.com/gpu", PendingPods: 1},
		},
		Pool: v1alpha1.PoolStatus{Slices: []v1alpha1.ProfileSlices{{Profile: "1g.18gb", Total: 28, Free: 9, Stranded: 5}}, UnreportedNodes: 2},
	}, Unserved: map[metrics.ShapeReason]int{{Shape: "nvidia.com/gpu", Reason: "NodePlacement"}: 1},
		DrainTimeout: 15 * time.Minute, ConfigureTimeout: 10 * time.Minute})
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
# HELP gpupool_unserved_pods Pending pods of a pool that the current plan cannot serve, per shape and the planner's reason (PartitionShape, NodePlacement, Capacity, Disruption).
# TYPE gpupool_unserved_pods gauge
gpupool_unserved_pods{policy="pool-a",reason="NodePlacement",shape="nvidia.com/gpu"} 1
# HELP gpupool_policy_timeout_seconds A policy's step timeouts with defaults applied: drain (spec.disruption.drainTimeout) and configure (spec.disruption.configureTimeout), for alerts on steps that overrun them.
# TYPE gpupool_policy_timeout_seconds gauge
gpupool_policy_timeout_seconds{policy="pool-a",timeout="configure"} 600
gpupool_policy_timeout_seconds{policy="pool-a",timeout="drain"} 900
`), "gpupool_pending_pods", "gpupool_stranded_slices", "gpupool_feasible_nodes_ratio", "gpupool_unreported_nodes",
		"gpupool_unserved_pods", "gpupool_policy_timeout_seconds")).To(Succeed())
	g.Expect(testutil.CollectAndCompare(reg, strings.NewReader(`
# HELP gpupool_eligible_nodes The pool's nodes whose GPUs, labels and taints admit a pending shape.
# TYPE gpupool_eligible_nodes gauge
gpupool_eligible_nodes{policy="pool-a",shape="nvidia.com/gpu"} 0
gpupool_eligible_nodes{policy="pool-a",shape="nvidia.com/mig-3g.71gb"} 4
`), "gpupool_eligible_nodes")).To(Succeed())

	m.ObservePolicy("pool-a", metrics.PolicyObservation{Status: v1alpha1.GPUPoolPolicyStatus{
		Demand: []v1alpha1.ShapeDemand{{Resource: "nvidia.com/gpu", PendingPods: 2, EligibleNodes: 2, FeasibleNodes: 2}}}})
	g.Expect(testutil.CollectAndCount(reg, "gpupool_pending_pods")).To(Equal(1), "the 3g shape is no longer pending")
	g.Expect(testutil.CollectAndCount(reg, "gpupool_stranded_slices")).To(Equal(0))

	g.Expect(testutil.CollectAndCount(reg, "gpupool_unserved_pods")).To(Equal(0), "no pod is unserved any more")
	m.CountPass("pool-a", true)
	m.ObservePass("pool-a", time.Second)
	m.ForgetPolicy("pool-a")
	g.Expect(testutil.CollectAndCount(reg, "gpupool_pending_pods", "gpupool_feasible_nodes_ratio", "gpupool_unreported_nodes",
		"gpupool_feasible_nodes", "gpupool_eligible_nodes", "gpupool_policy_timeout_seconds",
		"gpupool_policy_passes_total", "gpupool_policy_pass_seconds")).To(BeZero())
}

// TestPoolCapacityPerProfile guards total, used and free MIG instances per profile: the
// status's numbers, a profile no longer configured gone, a deleted policy's series gone.
func TestPoolCapacityPerProfile(t *testing.T) {
	g := NewWithT(t)
	m, reg := newMetrics(t)
	m.ObservePolicy("pool-a", metrics.PolicyObservation{Status: v1alpha1.GPUPoolPolicyStatus{Pool: v1alpha1.PoolStatus{
		Slices: []v1alpha1.ProfileSlices{
			{Profile: "1g.18gb", Total: 14, Used: 9, Free: 5, Stranded: 2},
			{Profile: "3g.71gb", Total: 2, Used: 2},
		}}}})
	g.Expect(testutil.CollectAndCompare(reg, strings.NewReader(`
# HELP gpupool_configured_slices MIG instances configured in a pool, per profile (used plus free).
# TYPE gpupool_configured_slices gauge
gpupool_configured_slices{policy="pool-a",profile="1g.18gb"} 14
gpupool_configured_slices{policy="pool-a",profile="3g.71gb"} 2
# HELP gpupool_free_slices MIG instances of a pool no pod holds, per profile (the stranded ones among them).
# TYPE gpupool_free_slices gauge
gpupool_free_slices{policy="pool-a",profile="1g.18gb"} 5
gpupool_free_slices{policy="pool-a",profile="3g.71gb"} 0
# HELP gpupool_used_slices MIG instances of a pool held by a pod, per profile.
# TYPE gpupool_used_slices gauge
gpupool_used_slices{policy="pool-a",profile="1g.18gb"} 9
gpupool_used_slices{policy="pool-a",profile="3g.71gb"} 2
`), metrics.ConfiguredSlices, metrics.UsedSlices, metrics.FreeSlices)).To(Succeed())

	m.ObservePolicy("pool-a", metrics.PolicyObservation{Status: v1alpha1.GPUPoolPolicyStatus{Pool: v1alpha1.PoolStatus{
		Slices: []v1alpha1.ProfileSlices{{Profile: "7g.141gb", Total: 1, Free: 1}}}}})
	g.Expect(testutil.CollectAndCount(reg, metrics.ConfiguredSlices)).To(Equal(1), "the re-carved profiles are gone")
	m.ForgetPolicy("pool-a")
	g.Expect(testutil.CollectAndCount(reg, metrics.ConfiguredSlices, metrics.UsedSlices, metrics.FreeSlices)).To(BeZero())
}

// conditionValues reads gpupool_policy_condition as "policy/type/status" -> value.
func conditionValues(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != metrics.PolicyCondition {
			continue
		}
		for _, s := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range s.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out[l["policy"]+"/"+l["type"]+"/"+l["status"]] = s.GetGauge().GetValue()
		}
	}
	return out
}

// TestPolicyConditionsAreOneHot guards the series the policy-not-ready alert and the
// dashboard's policy picker read: per condition the status reports (any type, including
// ones this package does not name), 1 for its status and 0 for the other two; a condition
// the status no longer reports is gone; the passes that only write conditions
// (ObserveConditions) update them; a deleted policy leaves none.
func TestPolicyConditionsAreOneHot(t *testing.T) {
	g := NewWithT(t)
	m, reg := newMetrics(t)
	m.ObservePolicy("pool-a", metrics.PolicyObservation{Status: v1alpha1.GPUPoolPolicyStatus{Conditions: []metav1.Condition{
		{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue},
		{Type: "Paused", Status: metav1.ConditionFalse},
		{Type: v1alpha1.ConditionConflict, Status: metav1.ConditionUnknown},
	}}})
	g.Expect(conditionValues(t, reg)).To(Equal(map[string]float64{
		"pool-a/Ready/True": 1, "pool-a/Ready/False": 0, "pool-a/Ready/Unknown": 0,
		"pool-a/Paused/True": 0, "pool-a/Paused/False": 1, "pool-a/Paused/Unknown": 0,
		"pool-a/Conflict/True": 0, "pool-a/Conflict/False": 0, "pool-a/Conflict/Unknown": 1,
	}))

	m.ObserveConditions("pool-a", []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse}})
	m.ObserveConditions("pool-b", []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue}})
	g.Expect(conditionValues(t, reg)).To(Equal(map[string]float64{
		"pool-a/Ready/True": 0, "pool-a/Ready/False": 1, "pool-a/Ready/Unknown": 0,
		"pool-b/Ready/True": 1, "pool-b/Ready/False": 0, "pool-b/Ready/Unknown": 0,
	}), "conditions no longer reported are gone; other policies are left alone")

	m.ForgetPolicy("pool-a")
	g.Expect(conditionValues(t, reg)).To(HaveLen(3))
	g.Expect(conditionValues(t, reg)).NotTo(HaveKey("pool-a/Ready/False"))
}

// TestPlanAwaitingApprovalSince guards the series the awaiting-approval alert reads: the time
// the plan's Approved condition turned False (when the wait began, not when the manager
// last looked), present only while the plan waits, gone with the plan.
func TestPlanAwaitingApprovalSince(t *testing.T) {
	g := NewWithT(t)
	m, reg := newMetrics(t)
	waiting := v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanAwaitingApproval, Conditions: []metav1.Condition{
		{Type: "Approved", Status: metav1.ConditionFalse, Reason: "AwaitingApproval", LastTransitionTime: metav1.NewTime(time.Unix(1200, 0))}}}
	m.ObservePlan("pool-a", "pool-a-1", waiting)
	m.ObservePlan("pool-a", "pool-a-2", v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanAwaitingApproval})
	g.Expect(testutil.CollectAndCompare(reg, strings.NewReader(`
# HELP gpupool_plan_awaiting_approval_since_timestamp_seconds Unix time a RepartitionPlan started waiting for approval; present only while it waits.
# TYPE gpupool_plan_awaiting_approval_since_timestamp_seconds gauge
gpupool_plan_awaiting_approval_since_timestamp_seconds{plan="pool-a-1",policy="pool-a"} 1200
`), metrics.PlanAwaitingSince)).To(Succeed(), "a plan without its Approved condition yet has no series")

	approved := *waiting.DeepCopy()
	approved.Phase = v1alpha1.PlanApproved
	approved.Conditions[0].Status = metav1.ConditionTrue
	m.ObservePlan("pool-a", "pool-a-1", approved)
	g.Expect(testutil.CollectAndCount(reg, metrics.PlanAwaitingSince)).To(BeZero(), "an approved plan waits no more")

	m.ObservePlan("pool-a", "pool-a-1", waiting)
	m.ForgetPlan("pool-a-1")
	g.Expect(testutil.CollectAndCount(reg, metrics.PlanAwaitingSince)).To(BeZero())
}

// TestPodPendingHistogram guards the pending-to-bound histogram: one observation per call,
// under its shape, and a negative wait (clock skew between the API server and the manager)
// counted as none.
func TestPodPendingHistogram(t *testing.T) {
	g := NewWithT(t)
	m, reg := newMetrics(t)
	m.ObservePodPending("nvidia.com/mig-1g.18gb", 90*time.Second)
	m.ObservePodPending("nvidia.com/mig-1g.18gb", -time.Second)
	m.ObservePodPending("nvidia.com/gpu", 2*time.Hour)
	families, err := reg.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	counts, sums := map[string]uint64{}, map[string]float64{}
	for _, f := range families {
		if f.GetName() != metrics.PodPendingSeconds {
			continue
		}
		for _, s := range f.GetMetric() {
			counts[s.GetLabel()[0].GetValue()] = s.GetHistogram().GetSampleCount()
			sums[s.GetLabel()[0].GetValue()] = s.GetHistogram().GetSampleSum()
		}
	}
	g.Expect(counts).To(Equal(map[string]uint64{"nvidia.com/mig-1g.18gb": 2, "nvidia.com/gpu": 1}))
	g.Expect(sums).To(Equal(map[string]float64{"nvidia.com/mig-1g.18gb": 90, "nvidia.com/gpu": 7200}))
}

// TestPlanPhaseIsOneHot guards that exactly one phase of a plan reads 1, that the phase it
// left reads 0, and that a deleted plan's series go away.
func TestPlanPhaseIsOneHot(t *testing.T) {
	g := NewWithT(t)
	m, reg := newMetrics(t)
	m.ObservePlan("pool-a", "pool-a-1", v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanAwaitingApproval})
	m.ObservePlan("pool-a", "pool-a-1", v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanExecuting})
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
	m.ObservePolicy("p", metrics.PolicyObservation{})
	m.ObservePlan("p", "q", v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanFailed})
	m.ObservePlanEnd("p", v1alpha1.PlanFailed, time.Second)
	m.CountEvictions("p", "Evicted", 1)
	m.ObserveNodeStep("p", v1alpha1.NodeDone, time.Second)
	m.ObserveConditions("p", []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}})
	m.ObservePodPending("nvidia.com/gpu", time.Second)
	m.SetCordoned(nil)
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

// gathered is every series in reg: metric name -> sorted label names of its series (without
// "le", which a histogram's buckets add on exposition), and each series' value keyed by its
// label values joined with ",".
func gathered(t *testing.T, reg *prometheus.Registry) (labels map[string][]string, types map[string]string) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels, types = map[string][]string{}, map[string]string{}
	for _, f := range families {
		types[f.GetName()] = strings.ToLower(f.GetType().String())
		for _, s := range f.GetMetric() {
			var names []string
			for _, l := range s.GetLabel() {
				names = append(names, l.GetName())
			}
			slices.Sort(names)
			labels[f.GetName()] = names
		}
	}
	return labels, types
}

// TestInFlightStepSeries guards the series the out-of-service and mig-manager alerts read:
// present with the step's times while a node's step is in flight, gone once it is done, and
// gone with the plan.
func TestInFlightStepSeries(t *testing.T) {
	g := NewWithT(t)
	m, reg := newMetrics(t)
	started := metav1.NewTime(time.Unix(1000, 0))
	entered := metav1.NewTime(time.Unix(1300, 0))
	m.ObservePlan("pool-a", "pool-a-1", v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanExecuting, Nodes: []v1alpha1.NodeStepStatus{
		{Node: "n1", State: v1alpha1.NodeConfiguring, StartedTime: &started, LastTransitionTime: &entered},
		{Node: "n2", State: v1alpha1.NodeDone, StartedTime: &started, LastTransitionTime: &entered},
	}})
	g.Expect(testutil.CollectAndCompare(reg, strings.NewReader(`
# HELP gpupool_node_step_started_timestamp_seconds Unix time a node's in-flight plan step took it out of service (cordoned); present only while the step runs.
# TYPE gpupool_node_step_started_timestamp_seconds gauge
gpupool_node_step_started_timestamp_seconds{node="n1",plan="pool-a-1",policy="pool-a"} 1000
# HELP gpupool_node_step_state_timestamp_seconds Unix time a node's in-flight plan step entered its current state (Cordoned, Draining, Configuring, Verifying).
# TYPE gpupool_node_step_state_timestamp_seconds gauge
gpupool_node_step_state_timestamp_seconds{node="n1",plan="pool-a-1",policy="pool-a",state="Configuring"} 1300
`), "gpupool_node_step_started_timestamp_seconds", "gpupool_node_step_state_timestamp_seconds")).To(Succeed())

	m.ObservePlan("pool-a", "pool-a-1", v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanSucceeded, Nodes: []v1alpha1.NodeStepStatus{
		{Node: "n1", State: v1alpha1.NodeDone, StartedTime: &started, LastTransitionTime: &entered}}})
	g.Expect(testutil.CollectAndCount(reg, "gpupool_node_step_started_timestamp_seconds", "gpupool_node_step_state_timestamp_seconds")).
		To(BeZero(), "a node whose step is done is back in service")
	m.ObservePlanEnd("pool-a", v1alpha1.PlanSucceeded, 90*time.Second)
	g.Expect(testutil.CollectAndCount(reg, "gpupool_plan_duration_seconds")).To(Equal(1))
}

// TestExportedDescribesEveryCollector guards the list the dashboard and alert tests check
// against: with every metric observed once, what the registry exposes is exactly Exported,
// names, types and labels.
func TestExportedDescribesEveryCollector(t *testing.T) {
	g := NewWithT(t)
	m, reg := newMetrics(t)
	now := metav1.NewTime(time.Unix(1000, 0))
	m.ObservePolicy("p", metrics.PolicyObservation{Status: v1alpha1.GPUPoolPolicyStatus{
		Demand:     []v1alpha1.ShapeDemand{{Resource: "nvidia.com/gpu", PendingPods: 1}},
		Pool:       v1alpha1.PoolStatus{Slices: []v1alpha1.ProfileSlices{{Profile: "1g.18gb", Stranded: 1}}},
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue}},
	}, Unserved: map[metrics.ShapeReason]int{{Shape: "nvidia.com/gpu", Reason: "Capacity"}: 1}})
	m.ObservePlan("p", "q", v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanExecuting, Nodes: []v1alpha1.NodeStepStatus{
		{Node: "n", State: v1alpha1.NodeDraining, StartedTime: &now, LastTransitionTime: &now}}})
	m.ObservePlan("p", "r", v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanAwaitingApproval, Conditions: []metav1.Condition{
		{Type: "Approved", Status: metav1.ConditionFalse, LastTransitionTime: now}}})
	m.ObservePodPending("nvidia.com/gpu", time.Minute)
	m.ObservePlanEnd("p", v1alpha1.PlanSucceeded, time.Minute)
	m.CountEvictions("p", "Evicted", 1)
	m.ObserveNodeStep("p", v1alpha1.NodeDone, time.Minute)
	m.CountPass("p", true)
	m.ObservePass("p", 2*time.Second)
	m.SetCordoned(map[string]int{metrics.CordonFailedStep: 1})
	m.ObserveRightsize(metrics.RightsizeObservation{RequestedMiB: map[string]int64{"ns": 1}, UsedMiB: map[string]int64{"ns": 1},
		SlicesAway: map[metrics.NamespaceProfile]int{{Namespace: "ns", Profile: "3g.71gb"}: 1},
		Workloads:  map[metrics.NamespaceVerdict]int{{Namespace: "ns", Verdict: "Shrink"}: 1}})

	labels, types := gathered(t, reg)
	want := map[string][]string{}
	wantTypes := map[string]string{}
	for _, s := range metrics.Exported() {
		want[s.Name] = slices.Sorted(slices.Values(s.Labels))
		wantTypes[s.Name] = s.Type
	}
	g.Expect(labels).To(Equal(want))
	g.Expect(types).To(Equal(wantTypes))
}

// TestCordonedNodesReadZeroForEveryReason: every reason has a series, so that an alert on one
// reads 0, not absent, once no node is kept for it; and from the moment the metrics exist, so
// that the manager-absent alert (absent(gpupool_cordoned_nodes)) is silent wherever a
// manager is scraped, leader or not.
func TestCordonedNodesReadZeroForEveryReason(t *testing.T) {
	g := NewWithT(t)
	m, reg := newMetrics(t)
	g.Expect(testutil.CollectAndCount(reg, metrics.CordonedNodes)).To(Equal(len(metrics.CordonReasons)))
	m.SetCordoned(map[string]int{metrics.CordonFailedStep: 2})
	m.SetCordoned(map[string]int{metrics.CordonExecuting: 1})
	families, err := reg.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != metrics.CordonedNodes {
			continue
		}
		for _, s := range f.GetMetric() {
			got[s.GetLabel()[0].GetValue()] = s.GetGauge().GetValue()
		}
	}
	want := map[string]float64{}
	for _, r := range metrics.CordonReasons {
		want[r] = 0
	}
	want[metrics.CordonExecuting] = 1
	g.Expect(got).To(Equal(want))
}
