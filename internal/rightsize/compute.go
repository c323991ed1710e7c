package rightsize

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
)

// ComputeActivity is each pod's measured compute: the p95 fraction of time its device's
// graphics engine was busy, 0..1 (DCGM exporter's DCGM_FI_PROF_GR_ENGINE_ACTIVE, which unlike
// the *_UTIL fields is reported per MIG instance: dcgm-exporter#430). A pod missing from the
// map was not measured. A nil map means compute was not measured at all; recommendations then
// cover memory only and say so.
type ComputeActivity map[types.NamespacedName]float64

// ComputeSource reads ComputeActivity, e.g. from Prometheus (the manager's --prometheus-url).
// The manager's recommendation pass and kubectl gpupool rightsize call it once per pass; an
// error is logged and the pass goes on with memory only, since compute only ever narrows a
// recommendation further.
type ComputeSource interface {
	ComputeActivity(ctx context.Context) (ComputeActivity, error)
}

// Of is the activity of a workload made of pods: the highest measured among them, since the
// profile must hold the busiest; nil when none of them was measured.
func (a ComputeActivity) Of(pods []types.NamespacedName) *float64 {
	var hi *float64
	for _, p := range pods {
		if v, ok := a[p]; ok && (hi == nil || v > *hi) {
			hi = &v
		}
	}
	return hi
}
