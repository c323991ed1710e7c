package metrics_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpupool/gpupool/internal/metrics"
)

// TestRightsizeSeriesAreReplacedEachPass: the series are a pass's sums in bytes, and a namespace
// or verdict the next pass does not report disappears instead of keeping its last value.
func TestRightsizeSeriesAreReplacedEachPass(t *testing.T) {
	g := NewWithT(t)
	m, reg := newMetrics(t)
	m.ObserveRightsize(metrics.RightsizeObservation{
		RequestedMiB: map[string]int64{"team-a": 2 * 72704, "team-b": 18432},
		UsedMiB:      map[string]int64{"team-a": 2 * 9216, "team-b": 3072},
		SlicesAway:   map[metrics.NamespaceProfile]int{{Namespace: "team-a", Profile: "3g.71gb"}: 6},
		Workloads: map[metrics.NamespaceVerdict]int{{Namespace: "team-a", Verdict: "Shrink"}: 1,
			{Namespace: "team-b", Verdict: "Keep"}: 1},
	})
	names := []string{metrics.RightsizeRequestedBytes, metrics.RightsizeUsedBytes, metrics.RightsizeSlicesAway, metrics.RightsizeWorkloads}
	g.Expect(testutil.CollectAndCompare(reg, strings.NewReader(`
# HELP gpupool_rightsize_requested_memory_bytes GPU memory of the devices (MIG instances or whole GPUs) that a namespace's pods with usage reported hold, from the node agents' GPUNode status.usage; the leading manager's right-sizing pass.
# TYPE gpupool_rightsize_requested_memory_bytes gauge
gpupool_rightsize_requested_memory_bytes{namespace="team-a"} 1.52471339008e+11
gpupool_rightsize_requested_memory_bytes{namespace="team-b"} 1.9327352832e+10
# HELP gpupool_rightsize_used_memory_bytes GPU memory those pods use: the sum of each pod's p95 over its measured window.
# TYPE gpupool_rightsize_used_memory_bytes gauge
gpupool_rightsize_used_memory_bytes{namespace="team-a"} 1.9327352832e+10
gpupool_rightsize_used_memory_bytes{namespace="team-b"} 3.221225472e+09
# HELP gpupool_rightsize_slices_recommended_away MIG memory slices the right-sizing recommendations would give back, per namespace and the profile asked for (whole-gpu for a whole GPU): Shrink recommendations only, over all the workload's pods.
# TYPE gpupool_rightsize_slices_recommended_away gauge
gpupool_rightsize_slices_recommended_away{namespace="team-a",profile="3g.71gb"} 6
# HELP gpupool_rightsize_workloads GPU workloads (Deployments, StatefulSets, Jobs, bare pods, ...) per right-sizing verdict: Shrink, Keep, Grow, CannotTell.
# TYPE gpupool_rightsize_workloads gauge
gpupool_rightsize_workloads{namespace="team-a",verdict="Shrink"} 1
gpupool_rightsize_workloads{namespace="team-b",verdict="Keep"} 1
`), names...)).To(Succeed())

	// team-b's pods are gone and team-a's workload now keeps its profile.
	m.ObserveRightsize(metrics.RightsizeObservation{
		RequestedMiB: map[string]int64{"team-a": 72704},
		UsedMiB:      map[string]int64{"team-a": 60000},
		Workloads:    map[metrics.NamespaceVerdict]int{{Namespace: "team-a", Verdict: "Keep"}: 1},
	})
	g.Expect(testutil.CollectAndCount(reg, metrics.RightsizeSlicesAway)).To(Equal(0))
	g.Expect(testutil.CollectAndCount(reg, metrics.RightsizeRequestedBytes, metrics.RightsizeUsedBytes, metrics.RightsizeWorkloads)).To(Equal(3))
}
