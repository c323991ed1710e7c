package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// The series a human in the loop acts on: a policy's conditions, a plan waiting for approval,
// and how long GPU pods wait to be bound.

// conditionStatuses are the values a condition's status takes; every one gets a series, so
// that a status a condition left reads 0, not absent (as kube-state-metrics'
// kube_node_status_condition does).
var conditionStatuses = []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}

// ObserveConditions replaces a policy's condition series with its status' conditions, for
// the passes that write the status without a full observation (a policy whose spec cannot be
// used, or that cannot be decoded). ObservePolicy does the same from the status it receives.
func (m *Metrics) ObserveConditions(policy string, conditions []metav1.Condition) {
	if m == nil {
		return
	}
	m.setConditions(policy, conditions)
}

// setConditions exports every condition the status reports, whatever its type, so that a
// condition added to the API is exported without a change here.
func (m *Metrics) setConditions(policy string, conditions []metav1.Condition) {
	m.policyCondition.DeletePartialMatch(prometheus.Labels{"policy": policy})
	for _, c := range conditions {
		for _, s := range conditionStatuses {
			v := 0.0
			if c.Status == s {
				v = 1
			}
			m.policyCondition.WithLabelValues(policy, c.Type, string(s)).Set(v)
		}
	}
}

// approvedCondition is the plan condition the plan controller sets from the approval gate
// (controllers.ConditionApproved): False with reason AwaitingApproval while the plan waits.
// Its status stays False for as long as the plan waits, so its lastTransitionTime is when the
// wait began, whatever the manager restarted meanwhile.
const approvedCondition = "Approved"

// setAwaiting sets since when a plan waits for approval, or removes the series once it does
// not. A waiting plan whose status carries no Approved condition yet has no series until it does.
func (m *Metrics) setAwaiting(policy, plan string, status v1alpha1.RepartitionPlanStatus) {
	c := meta.FindStatusCondition(status.Conditions, approvedCondition)
	if status.Phase != v1alpha1.PlanAwaitingApproval || c == nil || c.Status != metav1.ConditionFalse || c.LastTransitionTime.IsZero() {
		m.planAwaitingSince.DeletePartialMatch(prometheus.Labels{"plan": plan})
		return
	}
	m.planAwaitingSince.WithLabelValues(policy, plan).Set(float64(c.LastTransitionTime.Unix()))
}

// podPendingBuckets span a pod bound at once (a free slice) to a day in the queue: a re-carve
// of an idle GPU takes minutes, a drain up to the policy's timeouts, a plan awaiting a human
// up to its planTTL (an hour by default).
var podPendingBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400}

// ObservePodPending records how long a GPU pod waited, from its creation to its binding, under
// the GPU resource it asked for. The caller observes each pod once (controllers.PodWait).
func (m *Metrics) ObservePodPending(shape string, waited time.Duration) {
	if m == nil {
		return
	}
	m.podPending.WithLabelValues(shape).Observe(max(waited, 0).Seconds())
}
