package rightsize_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/rightsize"
)

func TestPublishRule(t *testing.T) {
	base := rightsize.Summary{P50MiB: 9000, P95MiB: 9500, PeakMiB: 10000, CeilingMiB: h200_3g, Samples: 500, Window: 3 * time.Hour}
	with := func(f func(*rightsize.Summary)) rightsize.Summary { s := base; f(&s); return s }
	for _, tc := range []struct {
		name string
		pub  *rightsize.Summary
		cur  rightsize.Summary
		want string
	}{
		{"nothing published", nil, base, "first summary"},
		{"same", &base, base, ""},
		{"p95 up 8%", &base, with(func(s *rightsize.Summary) { s.P95MiB = 10260 }), ""},
		{"p95 up 12%", &base, with(func(s *rightsize.Summary) { s.P95MiB = 10640 }), "p95 moved"},
		{"p95 down 12%", &base, with(func(s *rightsize.Summary) { s.P95MiB = 8360 }), "p95 moved"},
		{"peak up 20%", &base, with(func(s *rightsize.Summary) { s.PeakMiB = 12000 }), "peak moved"},
		{"small pod: 50% but 200 MiB", ptr(with(func(s *rightsize.Summary) { s.P95MiB = 400 })), with(func(s *rightsize.Summary) { s.P95MiB = 600 }), ""},
		{"p50 alone moves nothing", &base, with(func(s *rightsize.Summary) { s.P50MiB = 5000 }), ""},
		{"moved to another instance", &base, with(func(s *rightsize.Summary) { s.CeilingMiB = 18 * gib }), "ceiling moved"},
		{"preallocation seen", &base, with(func(s *rightsize.Summary) { s.FlatAtCeiling = true }), "flat-at-ceiling flipped"},
		{"window reaches a day", ptr(with(func(s *rightsize.Summary) { s.Window = 20 * time.Hour })), with(func(s *rightsize.Summary) { s.Window = 24 * time.Hour }), "window reached the minimum"},
		{"samples reach the minimum", ptr(with(func(s *rightsize.Summary) { s.Samples = 90 })), with(func(s *rightsize.Summary) { s.Samples = 100 }), "samples reached the minimum"},
		{"window 3h to 5h", &base, with(func(s *rightsize.Summary) { s.Window = 5 * time.Hour }), ""},
		{"window doubled", &base, with(func(s *rightsize.Summary) { s.Window = 6 * time.Hour }), "window doubled"},
		{"window doubled but by less than an hour", ptr(with(func(s *rightsize.Summary) { s.Window = 20 * time.Minute })), with(func(s *rightsize.Summary) { s.Window = 50 * time.Minute }), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changed, why := rightsize.PublishRule{}.Changed(tc.pub, tc.cur)
			if changed != (tc.want != "") || why != tc.want {
				t.Errorf("Changed = %v %q, want %q", changed, why, tc.want)
			}
		})
	}
}

func ptr(s rightsize.Summary) *rightsize.Summary { return &s }

func TestSummaryRoundTripsThroughTheAPI(t *testing.T) {
	s := rightsize.Summary{P50MiB: 1, P95MiB: 2, PeakMiB: 3, CeilingMiB: 4, Samples: 5, Window: 6 * time.Second, FlatAtCeiling: true}
	u := s.PodUsage(v1alpha1.PodReference{Namespace: "ns", Name: "p"})
	if u.Namespace != "ns" || u.Name != "p" || rightsize.SummaryOf(u) != s {
		t.Errorf("round trip: %+v -> %+v -> %+v", s, u, rightsize.SummaryOf(u))
	}
}

// publishes counts the writes the rule asks for while one pod runs s for d, sampled every
// refresh period, each write replacing the published summary.
func publishes(s series, d time.Duration, seed uint64) int {
	h := rightsize.NewHistogram(0)
	var pub *rightsize.Summary
	writes := 0
	rng := newRand(seed)
	for i := range int(d / refresh) {
		h.Add(epoch.Add(time.Duration(i)*refresh), s(i, rng), h200_3g)
		if changed, _ := (rightsize.PublishRule{}).Changed(pub, h.Summary()); changed {
			writes++
			pub = ptr(h.Summary())
		}
	}
	return writes
}

// Steady use costs a logarithmic number of writes: the first summary, the sample and window
// minimums, and each doubling of the window from an hour on (1h, 2h, ..., 512h in 30 days).
func TestSteadyUsePublishesRarely(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    series
		d    time.Duration
		max  int
	}{
		{"a day", steady(9 * gib), 24 * time.Hour, 8},
		{"30 days", steady(9 * gib), 30 * 24 * time.Hour, 14},
		{"30 days preallocated", preallocating(h200_3g, 0.75), 30 * 24 * time.Hour, 14},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := publishes(tc.s, tc.d, 1); got > tc.max {
				t.Errorf("%d writes, want at most %d", got, tc.max)
			}
		})
	}
}

// BenchmarkUsageWrites prints the GPUNode writes per second that usage reporting costs a
// cluster of nodes whose every GPU is cut into seven 1g instances, each held by a pod with
// steady use, beside what the status heartbeat costs (one write per node per 30s refresh; the
// readiness heartbeat writes nothing while the GPUs do not change). Pods are assumed to start
// at different times, so no two pods' writes share a GPUNode write: the worst case.
func BenchmarkUsageWrites(b *testing.B) {
	const podsPerNode = 8 * 7
	for _, life := range []time.Duration{24 * time.Hour, 30 * 24 * time.Hour} {
		b.Run(fmt.Sprintf("pods_living_%s", life), func(b *testing.B) {
			writes := 0
			for i := range b.N {
				writes = publishes(steady(9*gib), life, uint64(i))
			}
			perNode := float64(writes*podsPerNode) / life.Seconds()
			b.ReportMetric(float64(writes), "writes/pod")
			for _, nodes := range []int{1000, 5000} {
				b.ReportMetric(perNode*float64(nodes), fmt.Sprintf("usage-writes/s@%dnodes", nodes))
				b.ReportMetric(float64(nodes)/refresh.Seconds(), fmt.Sprintf("status-heartbeat-writes/s@%dnodes", nodes))
			}
		})
	}
}
