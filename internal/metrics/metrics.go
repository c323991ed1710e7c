// Package metrics defines gpupool's Prometheus metrics and how the controllers' observations
// become series. One Metrics value is registered per process (on controller-runtime's registry,
// which the manager serves at /metrics); tests give each controller its own registry.
//
// Series carry the policy (and the plan) so that one scrape answers "which pool is starved of
// what". Series of deleted policies and plans are removed, so label sets stay bounded by the
// objects that exist.
package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Metrics holds gpupool's collectors. The zero value is not usable; a nil *Metrics records
// nothing, so controllers built without metrics (tests of other behaviour) need no stub.
type Metrics struct {
	pendingPods        *prometheus.GaugeVec
	strandedSlices     *prometheus.GaugeVec
	feasibleNodesRatio *prometheus.GaugeVec
	unreportedNodes    *prometheus.GaugeVec
	planPhase          *prometheus.GaugeVec
	evictions          *prometheus.CounterVec
	reconfigureSeconds *prometheus.HistogramVec
}

// New creates the collectors and registers them with reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		pendingPods: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpupool_pending_pods",
			Help: "Pending pods in a pool that ask for a GPU resource, per requested resource (shape).",
		}, []string{"policy", "shape"}),
		strandedSlices: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpupool_stranded_slices",
			Help: "Free MIG instances in a pool that no pending pod can use, per profile.",
		}, []string{"policy", "profile"}),
		feasibleNodesRatio: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpupool_feasible_nodes_ratio",
			Help: "Of the pool's nodes eligible for a pending shape, the fraction that could be carved to host it.",
		}, []string{"policy", "shape"}),
		unreportedNodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpupool_unreported_nodes",
			Help: "Nodes of a pool left out of planning because their agent's GPU report is missing, cannot read NVML, or is stale.",
		}, []string{"policy"}),
		planPhase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpupool_plan_phase",
			Help: "1 for the phase a RepartitionPlan is in, 0 for its other phases.",
		}, []string{"policy", "plan", "phase"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpupool_evictions_total",
			Help: "Eviction API calls made by plans, by outcome (Evicted, Blocked by a PodDisruptionBudget, Refused, Failed).",
		}, []string{"policy", "outcome"}),
		reconfigureSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gpupool_reconfigure_seconds",
			Help: "Time a node spent in a plan step, from cordon to done or failed.",
			// From a quick idle re-carve to a drain that waits on PodDisruptionBudgets.
			Buckets: prometheus.ExponentialBuckets(5, 2, 10),
		}, []string{"policy", "result"}),
	}
	for _, c := range []prometheus.Collector{m.pendingPods, m.strandedSlices, m.feasibleNodesRatio, m.unreportedNodes,
		m.planPhase, m.evictions, m.reconfigureSeconds} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering gpupool metrics: %w", err)
		}
	}
	return m, nil
}

// ObservePolicy replaces a policy's pool series with what its status now says: shapes and
// profiles that are no longer reported disappear instead of keeping their last value.
func (m *Metrics) ObservePolicy(policy string, st v1alpha1.GPUPoolPolicyStatus) {
	if m == nil {
		return
	}
	m.ForgetPolicy(policy)
	for _, d := range st.Demand {
		m.pendingPods.WithLabelValues(policy, d.Resource).Set(float64(d.PendingPods))
		ratio := 0.0
		if d.EligibleNodes > 0 {
			ratio = float64(d.FeasibleNodes) / float64(d.EligibleNodes)
		}
		m.feasibleNodesRatio.WithLabelValues(policy, d.Resource).Set(ratio)
	}
	for _, s := range st.Pool.Slices {
		m.strandedSlices.WithLabelValues(policy, s.Profile).Set(float64(s.Stranded))
	}
	m.unreportedNodes.WithLabelValues(policy).Set(float64(st.Pool.UnreportedNodes))
}

// ForgetPolicy removes a policy's pool series.
func (m *Metrics) ForgetPolicy(policy string) {
	if m == nil {
		return
	}
	for _, v := range []*prometheus.GaugeVec{m.pendingPods, m.strandedSlices, m.feasibleNodesRatio, m.unreportedNodes} {
		v.DeletePartialMatch(prometheus.Labels{"policy": policy})
	}
}

// planPhases are every phase a plan can be in, so that a phase it left reads 0, not absent.
var planPhases = []v1alpha1.PlanPhase{v1alpha1.PlanAwaitingApproval, v1alpha1.PlanApproved, v1alpha1.PlanExecuting,
	v1alpha1.PlanSucceeded, v1alpha1.PlanFailed, v1alpha1.PlanRolledBack, v1alpha1.PlanRejected,
	v1alpha1.PlanExpired, v1alpha1.PlanSuperseded}

// ObservePlan sets a plan's phase series.
func (m *Metrics) ObservePlan(policy, plan string, phase v1alpha1.PlanPhase) {
	if m == nil {
		return
	}
	for _, p := range planPhases {
		v := 0.0
		if p == phase {
			v = 1
		}
		m.planPhase.WithLabelValues(policy, plan, string(p)).Set(v)
	}
}

// ForgetPlan removes a deleted plan's series.
func (m *Metrics) ForgetPlan(plan string) {
	if m == nil {
		return
	}
	m.planPhase.DeletePartialMatch(prometheus.Labels{"plan": plan})
}

// CountEvictions adds one eviction pass's calls of one outcome.
func (m *Metrics) CountEvictions(policy, outcome string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.evictions.WithLabelValues(policy, outcome).Add(float64(n))
}

// ObserveNodeStep records how long a node was out of service for a step that finished.
func (m *Metrics) ObserveNodeStep(policy string, state v1alpha1.NodeStepState, took time.Duration) {
	if m == nil {
		return
	}
	m.reconfigureSeconds.WithLabelValues(policy, string(state)).Observe(took.Seconds())
}
