package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// rightsizeCollectors are the right-sizing pass's series. Their labels are the namespace, the
// profile asked for and the verdict, never a pod's or a workload's name, so that their number
// is bounded by the namespaces that run GPU pods, not by the pods.
type rightsizeCollectors struct {
	requested, used, slicesAway, workloads *prometheus.GaugeVec
}

// RightsizeObservation is what one right-sizing pass found, summed per namespace.
type RightsizeObservation struct {
	// RequestedMiB and UsedMiB per namespace: the memory the measured pods' devices hold and
	// their p95 use.
	RequestedMiB, UsedMiB map[string]int64
	// SlicesAway per namespace and profile asked for: memory slices Shrink recommendations
	// give back.
	SlicesAway map[NamespaceProfile]int
	// Workloads per namespace and verdict.
	Workloads map[NamespaceVerdict]int
}

// NamespaceProfile keys RightsizeObservation.SlicesAway.
type NamespaceProfile struct{ Namespace, Profile string }

// NamespaceVerdict keys RightsizeObservation.Workloads.
type NamespaceVerdict struct{ Namespace, Verdict string }

// ObserveRightsize replaces the right-sizing series with what a pass found: a namespace whose
// GPU pods are gone, or a verdict no workload has any more, disappears.
func (m *Metrics) ObserveRightsize(obs RightsizeObservation) {
	if m == nil {
		return
	}
	r := m.rightsize
	for _, v := range []*prometheus.GaugeVec{r.requested, r.used, r.slicesAway, r.workloads} {
		v.Reset()
	}
	const mib = 1 << 20
	for ns, v := range obs.RequestedMiB {
		r.requested.WithLabelValues(ns).Set(float64(v) * mib)
	}
	for ns, v := range obs.UsedMiB {
		r.used.WithLabelValues(ns).Set(float64(v) * mib)
	}
	for k, v := range obs.SlicesAway {
		r.slicesAway.WithLabelValues(k.Namespace, k.Profile).Set(float64(v))
	}
	for k, v := range obs.Workloads {
		r.workloads.WithLabelValues(k.Namespace, k.Verdict).Set(float64(v))
	}
}
