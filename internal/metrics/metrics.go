// Package metrics defines gpupool's Prometheus metrics and how the controllers' observations
// become series. One Metrics value is registered per process (on controller-runtime's registry,
// which the manager serves at /metrics); tests give each controller its own registry.
//
// Series carry the policy (and the plan) so that one scrape answers "which pool is starved of
// what". Series of deleted policies and plans are removed, so label sets stay bounded by the
// objects that exist; per-node series exist only while a node's step is in flight.
//
// The dashboard and alert rules (config/prometheus, charts/gpupool) are checked against
// Exported by test/monitoring, so a renamed metric or label fails a test, not a page at 3 am.
package metrics

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Metric names, so that the definitions below and Exported cannot disagree.
const (
	PendingPods              = "gpupool_pending_pods"
	UnservedPods             = "gpupool_unserved_pods"
	StrandedSlices           = "gpupool_stranded_slices"
	FeasibleNodes            = "gpupool_feasible_nodes"
	EligibleNodes            = "gpupool_eligible_nodes"
	FeasibleNodesRatio       = "gpupool_feasible_nodes_ratio"
	UnreportedNodes          = "gpupool_unreported_nodes"
	PolicyTimeoutSeconds     = "gpupool_policy_timeout_seconds"
	PlanPhase                = "gpupool_plan_phase"
	PlanDurationSeconds      = "gpupool_plan_duration_seconds"
	NodeStepStartedTimestamp = "gpupool_node_step_started_timestamp_seconds"
	NodeStepStateTimestamp   = "gpupool_node_step_state_timestamp_seconds"
	Evictions                = "gpupool_evictions_total"
	ReconfigureSeconds       = "gpupool_reconfigure_seconds"
	PolicyPasses             = "gpupool_policy_passes_total"
	PolicyPassSeconds        = "gpupool_policy_pass_seconds"
	CordonedNodes            = "gpupool_cordoned_nodes"
	PolicyCondition          = "gpupool_policy_condition"
	ConfiguredSlices         = "gpupool_configured_slices"
	UsedSlices               = "gpupool_used_slices"
	FreeSlices               = "gpupool_free_slices"
	PlanAwaitingSince        = "gpupool_plan_awaiting_approval_since_timestamp_seconds"
	PodPendingSeconds        = "gpupool_pod_pending_seconds"
	RightsizeRequestedBytes  = "gpupool_rightsize_requested_memory_bytes"
	RightsizeUsedBytes       = "gpupool_rightsize_used_memory_bytes"
	RightsizeSlicesAway      = "gpupool_rightsize_slices_recommended_away"
	RightsizeWorkloads       = "gpupool_rightsize_workloads"
)

// Metrics holds gpupool's collectors. The zero value is not usable; a nil *Metrics records
// nothing, so controllers built without metrics (tests of other behaviour) need no stub.
type Metrics struct {
	pendingPods        *prometheus.GaugeVec
	unservedPods       *prometheus.GaugeVec
	strandedSlices     *prometheus.GaugeVec
	feasibleNodes      *prometheus.GaugeVec
	eligibleNodes      *prometheus.GaugeVec
	feasibleNodesRatio *prometheus.GaugeVec
	unreportedNodes    *prometheus.GaugeVec
	policyTimeout      *prometheus.GaugeVec
	planPhase          *prometheus.GaugeVec
	planDuration       *prometheus.HistogramVec
	stepStarted        *prometheus.GaugeVec
	stepState          *prometheus.GaugeVec
	evictions          *prometheus.CounterVec
	reconfigureSeconds *prometheus.HistogramVec
	policyPasses       *prometheus.CounterVec
	policyPassSeconds  *prometheus.HistogramVec
	cordonedNodes      *prometheus.GaugeVec
	policyCondition    *prometheus.GaugeVec
	configuredSlices   *prometheus.GaugeVec
	usedSlices         *prometheus.GaugeVec
	freeSlices         *prometheus.GaugeVec
	planAwaitingSince  *prometheus.GaugeVec
	podPending         *prometheus.HistogramVec
	rightsize          rightsizeCollectors
}

// Series is one exported metric: its name, its type (gauge, counter, histogram), the labels its
// series carry (a histogram's _bucket series also carry "le") and its help text.
type Series struct {
	Name   string
	Type   string
	Labels []string
	Help   string
}

// Exported lists every metric the manager exports, with its labels and help, in name order: what
// the dashboard and the alert rules may name, and what docs/reference/metrics.md lists.
func Exported() []Series {
	out := slices.Clone(exported)
	slices.SortFunc(out, func(a, b Series) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// New creates the collectors and registers them with reg. gpupool_cordoned_nodes reads 0 for
// every reason from here on, in every replica, so that the manager-absent alert can rely on it
// existing wherever a manager is scraped.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := newCollectors()
	for _, c := range m.all() {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering gpupool metrics: %w", err)
		}
	}
	m.SetCordoned(nil)
	return m, nil
}

// Label sets, kept small: a policy, a shape or profile, a plan, and a node only while its step
// is in flight.
var (
	policyShape       = []string{"policy", "shape"}
	policyShapeReason = []string{"policy", "shape", "reason"}
	policyProfile     = []string{"policy", "profile"}
	policyOnly        = []string{"policy"}
	policyTimeout     = []string{"policy", "timeout"}
	policyPlanPhase   = []string{"policy", "plan", "phase"}
	policyPhase       = []string{"policy", "phase"}
	policyPlanNode    = []string{"policy", "plan", "node"}
	policyPlanState   = []string{"policy", "plan", "node", "state"}
	policyOutcome     = []string{"policy", "outcome"}
	policyResult      = []string{"policy", "result"}
	policyPass        = []string{"policy", "pass"}
	reasonOnly        = []string{"reason"}
	policyTypeStatus  = []string{"policy", "type", "status"}
	policyPlan        = []string{"policy", "plan"}
	shapeOnly         = []string{"shape"}
	namespaceOnly     = []string{"namespace"}
	namespaceProfile  = []string{"namespace", "profile"}
	namespaceVerdict  = []string{"namespace", "verdict"}
)

// newCollectors makes the collectors that exported describes, taking each one's name, labels
// and help from there, so that Exported (and the reference page generated from it,
// docs/reference/metrics.md) says what /metrics serves.
func newCollectors() *Metrics {
	gauge := func(name string) *prometheus.GaugeVec {
		s := describe(name, "gauge")
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: s.Help}, s.Labels)
	}
	counter := func(name string) *prometheus.CounterVec {
		s := describe(name, "counter")
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: s.Help}, s.Labels)
	}
	histogram := func(name string, buckets []float64) *prometheus.HistogramVec {
		s := describe(name, "histogram")
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: s.Help, Buckets: buckets}, s.Labels)
	}
	return &Metrics{
		pendingPods:        gauge(PendingPods),
		unservedPods:       gauge(UnservedPods),
		strandedSlices:     gauge(StrandedSlices),
		feasibleNodes:      gauge(FeasibleNodes),
		eligibleNodes:      gauge(EligibleNodes),
		feasibleNodesRatio: gauge(FeasibleNodesRatio),
		unreportedNodes:    gauge(UnreportedNodes),
		policyTimeout:      gauge(PolicyTimeoutSeconds),
		planPhase:          gauge(PlanPhase),
		// From one idle node re-carved to many nodes drained in turn.
		planDuration: histogram(PlanDurationSeconds, prometheus.ExponentialBuckets(10, 2, 12)),
		stepStarted:  gauge(NodeStepStartedTimestamp),
		stepState:    gauge(NodeStepStateTimestamp),
		evictions:    counter(Evictions),
		// From a quick idle re-carve to a drain that waits on PodDisruptionBudgets.
		reconfigureSeconds: histogram(ReconfigureSeconds, prometheus.ExponentialBuckets(5, 2, 10)),
		policyPasses:       counter(PolicyPasses),
		// From a small pool (milliseconds) to thousands of nodes on a busy machine (seconds).
		policyPassSeconds: histogram(PolicyPassSeconds, prometheus.ExponentialBuckets(0.005, 2.5, 10)),
		cordonedNodes:     gauge(CordonedNodes),
		policyCondition:   gauge(PolicyCondition),
		configuredSlices:  gauge(ConfiguredSlices),
		usedSlices:        gauge(UsedSlices),
		freeSlices:        gauge(FreeSlices),
		planAwaitingSince: gauge(PlanAwaitingSince),
		podPending:        histogram(PodPendingSeconds, podPendingBuckets),
		rightsize: rightsizeCollectors{requested: gauge(RightsizeRequestedBytes), used: gauge(RightsizeUsedBytes),
			slicesAway: gauge(RightsizeSlicesAway), workloads: gauge(RightsizeWorkloads)},
	}
}

func (m *Metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.pendingPods, m.unservedPods, m.strandedSlices, m.feasibleNodes, m.eligibleNodes,
		m.feasibleNodesRatio, m.unreportedNodes, m.policyTimeout, m.planPhase, m.planDuration, m.stepStarted,
		m.stepState, m.evictions, m.reconfigureSeconds, m.policyPasses, m.policyPassSeconds, m.cordonedNodes,
		m.policyCondition, m.configuredSlices, m.usedSlices, m.freeSlices, m.planAwaitingSince, m.podPending,
		m.rightsize.requested, m.rightsize.used, m.rightsize.slicesAway, m.rightsize.workloads}
}

// describe returns exported's entry for a collector newCollectors makes. A name missing there,
// or of another type, is a mistake in this file, which every test that makes Metrics finds.
func describe(name, typ string) Series {
	for _, s := range exported {
		if s.Name == name {
			if s.Type != typ {
				panic(fmt.Sprintf("metrics: %s is a %s in exported, made as a %s", name, s.Type, typ))
			}
			return s
		}
	}
	panic(fmt.Sprintf("metrics: %s is made but not in exported", name))
}

// exported describes the collectors newCollectors makes: it is their one definition.
var exported = []Series{
	{PendingPods, "gauge", policyShape,
		"Pending pods in a pool that ask for a GPU resource, per requested resource (shape)."},
	{UnservedPods, "gauge", policyShapeReason,
		"Pending pods of a pool that the current plan cannot serve, per shape and the planner's reason " +
			"(PartitionShape, NodePlacement, Capacity, Disruption)."},
	{StrandedSlices, "gauge", policyProfile,
		"Free MIG instances in a pool that no pending pod can use, per profile."},
	{FeasibleNodes, "gauge", policyShape,
		"Of the pool's nodes eligible for a pending shape, how many could be carved to host it."},
	{EligibleNodes, "gauge", policyShape,
		"The pool's nodes whose GPUs, labels and taints admit a pending shape."},
	{FeasibleNodesRatio, "gauge", policyShape,
		"Of the pool's nodes eligible for a pending shape, the fraction that could be carved to host it."},
	{UnreportedNodes, "gauge", policyOnly,
		"Nodes of a pool left out of planning because their agent's GPU report is missing, cannot read NVML, or is stale."},
	{PolicyTimeoutSeconds, "gauge", policyTimeout,
		"A policy's step timeouts with defaults applied: drain (spec.disruption.drainTimeout) and configure " +
			"(spec.disruption.configureTimeout), for alerts on steps that overrun them."},
	{PlanPhase, "gauge", policyPlanPhase,
		"1 for the phase a RepartitionPlan is in, 0 for its other phases."},
	{PlanDurationSeconds, "histogram", policyPhase,
		"Time from a plan's approval to its end, by the phase it ended in (Succeeded, Failed)."},
	{NodeStepStartedTimestamp, "gauge", policyPlanNode,
		"Unix time a node's in-flight plan step took it out of service (cordoned); present only while the step runs."},
	{NodeStepStateTimestamp, "gauge", policyPlanState,
		"Unix time a node's in-flight plan step entered its current state (Cordoned, Draining, Configuring, Verifying)."},
	{Evictions, "counter", policyOutcome,
		"Eviction API calls made by plans, by outcome (Evicted, Blocked by a PodDisruptionBudget, Refused, Failed)."},
	{ReconfigureSeconds, "histogram", policyResult,
		"Time a node spent in a plan step, from cordon to done or failed."},
	{PolicyPasses, "counter", policyPass,
		"Reconciles of a policy: complete (the pool read, planned and its status written) or unchanged " +
			"(no event and nothing time changes since the last complete pass, so none was made)."},
	{PolicyPassSeconds, "histogram", policyOnly,
		"Time a complete pass over a policy's pool took, from reading the cache to writing its status: " +
			"new demand waits for the pass under way and then its own."},
	{CordonedNodes, "gauge", reasonOnly,
		"Nodes gpupool holds cordoned, by why: executing (a plan's step is under way), failed-step (a step failed " +
			"and a GPU may be half-configured), orphaned (its plan is gone or ended and the GPUs are not shown whole), " +
			"outside-pool (no policy selects the node any more), mig-manager-busy (mig-manager is still applying)."},
	{PolicyCondition, "gauge", policyTypeStatus,
		"1 for the status (True, False, Unknown) a GPUPoolPolicy's condition of this type has, 0 for the other two; " +
			"one series per condition type the policy's status reports."},
	{ConfiguredSlices, "gauge", policyProfile,
		"MIG instances configured in a pool, per profile (used plus free)."},
	{UsedSlices, "gauge", policyProfile,
		"MIG instances of a pool held by a pod, per profile."},
	{FreeSlices, "gauge", policyProfile,
		"MIG instances of a pool no pod holds, per profile (the stranded ones among them)."},
	{PlanAwaitingSince, "gauge", policyPlan,
		"Unix time a RepartitionPlan started waiting for approval; present only while it waits."},
	{PodPendingSeconds, "histogram", shapeOnly,
		"Time from a GPU pod's creation to its binding to a node, per GPU resource it asks for (shape); " +
			"observed once per pod, by the leading manager, when it sees the binding."},
	{RightsizeRequestedBytes, "gauge", namespaceOnly,
		"GPU memory of the devices (MIG instances or whole GPUs) that a namespace's pods with usage reported hold, " +
			"from the node agents' GPUNode status.usage; the leading manager's right-sizing pass."},
	{RightsizeUsedBytes, "gauge", namespaceOnly,
		"GPU memory those pods use: the sum of each pod's p95 over its measured window."},
	{RightsizeSlicesAway, "gauge", namespaceProfile,
		"MIG memory slices the right-sizing recommendations would give back, per namespace and the profile asked for " +
			"(whole-gpu for a whole GPU): Shrink recommendations only, over all the workload's pods."},
	{RightsizeWorkloads, "gauge", namespaceVerdict,
		"GPU workloads (Deployments, StatefulSets, Jobs, bare pods, ...) per right-sizing verdict: Shrink, Keep, Grow, CannotTell."},
}

// PolicyObservation is what one pass of the policy controller saw of a pool.
type PolicyObservation struct {
	// Status is the policy's status as written.
	Status v1alpha1.GPUPoolPolicyStatus
	// Unserved counts pending pods the plan does not serve, per shape and reason.
	Unserved map[ShapeReason]int
	// DrainTimeout and ConfigureTimeout are the policy's step timeouts, defaults applied.
	DrainTimeout, ConfigureTimeout time.Duration
}

// ShapeReason keys unserved pods: the requested resource and the planner's reason.
type ShapeReason struct {
	Shape, Reason string
}

// ObservePolicy replaces a policy's pool series with what its pass saw: shapes and profiles
// that are no longer reported disappear instead of keeping their last value.
func (m *Metrics) ObservePolicy(policy string, obs PolicyObservation) {
	if m == nil {
		return
	}
	m.forgetPool(policy)
	st := obs.Status
	for _, d := range st.Demand {
		m.pendingPods.WithLabelValues(policy, d.Resource).Set(float64(d.PendingPods))
		m.feasibleNodes.WithLabelValues(policy, d.Resource).Set(float64(d.FeasibleNodes))
		m.eligibleNodes.WithLabelValues(policy, d.Resource).Set(float64(d.EligibleNodes))
		ratio := 0.0
		if d.EligibleNodes > 0 {
			ratio = float64(d.FeasibleNodes) / float64(d.EligibleNodes)
		}
		m.feasibleNodesRatio.WithLabelValues(policy, d.Resource).Set(ratio)
	}
	for k, n := range obs.Unserved {
		m.unservedPods.WithLabelValues(policy, k.Shape, k.Reason).Set(float64(n))
	}
	for _, s := range st.Pool.Slices {
		m.strandedSlices.WithLabelValues(policy, s.Profile).Set(float64(s.Stranded))
		m.configuredSlices.WithLabelValues(policy, s.Profile).Set(float64(s.Total))
		m.usedSlices.WithLabelValues(policy, s.Profile).Set(float64(s.Used))
		m.freeSlices.WithLabelValues(policy, s.Profile).Set(float64(s.Free))
	}
	m.setConditions(policy, st.Conditions)
	m.unreportedNodes.WithLabelValues(policy).Set(float64(st.Pool.UnreportedNodes))
	m.policyTimeout.WithLabelValues(policy, "drain").Set(obs.DrainTimeout.Seconds())
	m.policyTimeout.WithLabelValues(policy, "configure").Set(obs.ConfigureTimeout.Seconds())
}

// ForgetPolicy removes a deleted policy's series.
func (m *Metrics) ForgetPolicy(policy string) {
	if m == nil {
		return
	}
	m.forgetPool(policy)
	m.policyCondition.DeletePartialMatch(prometheus.Labels{"policy": policy})
	m.policyPasses.DeletePartialMatch(prometheus.Labels{"policy": policy})
	m.policyPassSeconds.DeletePartialMatch(prometheus.Labels{"policy": policy})
}

// forgetPool removes a policy's pool series.
func (m *Metrics) forgetPool(policy string) {
	for _, v := range []*prometheus.GaugeVec{m.pendingPods, m.unservedPods, m.strandedSlices, m.feasibleNodes,
		m.eligibleNodes, m.feasibleNodesRatio, m.unreportedNodes, m.policyTimeout, m.configuredSlices, m.usedSlices,
		m.freeSlices} {
		v.DeletePartialMatch(prometheus.Labels{"policy": policy})
	}
}

// planPhases are every phase a plan can be in, so that a phase it left reads 0, not absent.
var planPhases = []v1alpha1.PlanPhase{v1alpha1.PlanAwaitingApproval, v1alpha1.PlanApproved, v1alpha1.PlanExecuting,
	v1alpha1.PlanSucceeded, v1alpha1.PlanFailed, v1alpha1.PlanRejected,
	v1alpha1.PlanExpired, v1alpha1.PlanSuperseded}

// inFlight are the step states in which gpupool holds a node out of service.
var inFlight = []v1alpha1.NodeStepState{v1alpha1.NodeCordoned, v1alpha1.NodeDraining, v1alpha1.NodeConfiguring, v1alpha1.NodeVerifying}

// ObservePlan sets a plan's phase series and the series of its nodes whose steps are in flight.
func (m *Metrics) ObservePlan(policy, plan string, status v1alpha1.RepartitionPlanStatus) {
	if m == nil {
		return
	}
	for _, p := range planPhases {
		v := 0.0
		if p == status.Phase {
			v = 1
		}
		m.planPhase.WithLabelValues(policy, plan, string(p)).Set(v)
	}
	m.setAwaiting(policy, plan, status)
	m.stepStarted.DeletePartialMatch(prometheus.Labels{"plan": plan})
	m.stepState.DeletePartialMatch(prometheus.Labels{"plan": plan})
	for _, st := range status.Nodes {
		if !slices.Contains(inFlight, st.State) {
			continue
		}
		if st.StartedTime != nil {
			m.stepStarted.WithLabelValues(policy, plan, st.Node).Set(float64(st.StartedTime.Unix()))
		}
		if st.LastTransitionTime != nil {
			m.stepState.WithLabelValues(policy, plan, st.Node, string(st.State)).Set(float64(st.LastTransitionTime.Unix()))
		}
	}
}

// ObservePlanEnd records how long a plan ran, from approval to the phase it ended in; the
// controller calls it once, on the transition.
func (m *Metrics) ObservePlanEnd(policy string, phase v1alpha1.PlanPhase, took time.Duration) {
	if m == nil {
		return
	}
	m.planDuration.WithLabelValues(policy, string(phase)).Observe(took.Seconds())
}

// ForgetPlan removes a deleted plan's series.
func (m *Metrics) ForgetPlan(plan string) {
	if m == nil {
		return
	}
	for _, v := range []*prometheus.GaugeVec{m.planPhase, m.stepStarted, m.stepState, m.planAwaitingSince} {
		v.DeletePartialMatch(prometheus.Labels{"plan": plan})
	}
}

// CountEvictions adds one eviction pass's calls of one outcome.
func (m *Metrics) CountEvictions(policy, outcome string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.evictions.WithLabelValues(policy, outcome).Add(float64(n))
}

// CountPass counts one reconcile of a policy: complete, or skipped as unchanged.
func (m *Metrics) CountPass(policy string, complete bool) {
	if m == nil {
		return
	}
	pass := "unchanged"
	if complete {
		pass = "complete"
	}
	m.policyPasses.WithLabelValues(policy, pass).Inc()
}

// ObservePass records how long a complete pass over a policy's pool took.
func (m *Metrics) ObservePass(policy string, took time.Duration) {
	if m == nil {
		return
	}
	m.policyPassSeconds.WithLabelValues(policy).Observe(took.Seconds())
}

// ObserveNodeStep records how long a node was out of service for a step that finished.
func (m *Metrics) ObserveNodeStep(policy string, state v1alpha1.NodeStepState, took time.Duration) {
	if m == nil {
		return
	}
	m.reconfigureSeconds.WithLabelValues(policy, string(state)).Observe(took.Seconds())
}

// Reasons gpupool holds a node cordoned (the reason label of gpupool_cordoned_nodes).
const (
	CordonExecuting      = "executing"
	CordonFailedStep     = "failed-step"
	CordonOrphaned       = "orphaned"
	CordonOutsidePool    = "outside-pool"
	CordonMIGManagerBusy = "mig-manager-busy"
)

// CordonReasons lists every reason label, so that a reason with no node reads 0, not absent.
var CordonReasons = []string{CordonExecuting, CordonFailedStep, CordonOrphaned, CordonOutsidePool, CordonMIGManagerBusy}

// SetCordoned sets how many nodes gpupool holds cordoned for each reason; reasons absent from
// counts read 0.
func (m *Metrics) SetCordoned(counts map[string]int) {
	if m == nil {
		return
	}
	for _, r := range CordonReasons {
		m.cordonedNodes.WithLabelValues(r).Set(float64(counts[r]))
	}
}
