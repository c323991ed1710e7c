package rightsize_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpupool/gpupool/internal/rightsize"
)

const h200_3g = 71 * gib // 3g.71gb on an H200

func TestEmptyHistogram(t *testing.T) {
	h := rightsize.NewHistogram(0)
	if s := h.Summary(); s != (rightsize.Summary{}) {
		t.Errorf("empty summary %+v, want zero", s)
	}
}

// Percentiles come from bucket bounds: never below the true value, never more than one 5%
// bucket above it, and never above the peak.
func TestPercentilesOfKnownData(t *testing.T) {
	h := rightsize.NewHistogram(time.Hour)
	for i := range 100 {
		h.Add(epoch, int64((i+1)*100), 20000) // 100, 200, ..., 10000 MiB at one instant
	}
	for _, tc := range []struct {
		p    float64
		true int64
	}{{0.5, 5000}, {0.95, 9500}, {1, 10000}} {
		got := h.Percentile(tc.p)
		if got < tc.true || float64(got) > float64(tc.true)*1.05+16 {
			t.Errorf("p%.0f = %d, want within one bucket above %d", tc.p*100, got, tc.true)
		}
	}
	if h.Peak() != 10000 || h.Percentile(1) > h.Peak() {
		t.Errorf("peak %d, p100 %d; want 10000 and p100 <= peak", h.Peak(), h.Percentile(1))
	}
	if h.Samples() != 100 || h.Window() != 0 || h.CeilingMiB() != 20000 {
		t.Errorf("samples %d window %s ceiling %d", h.Samples(), h.Window(), h.CeilingMiB())
	}
}

// Buckets cover from 0 to beyond any GPU's memory, and a value's bucket always contains it.
func TestBucketsCoverEveryGPU(t *testing.T) {
	h := rightsize.NewHistogram(0)
	h.Add(epoch, 2<<20, 2<<20) // 2 TiB, beyond the last bucket's start
	if got := h.Percentile(0.5); got != 2<<20 {
		t.Errorf("a value in the last bucket reads back as %d, want the peak %d", got, 2<<20)
	}
	for _, v := range []int64{0, 1, 15, 16, 17, 1000, 9216, 18432, 72704, 143771, 1 << 20} {
		h := rightsize.NewHistogram(0)
		h.Add(epoch, v, 1<<21)
		if got := h.Percentile(0.5); got < v || float64(got) > float64(v)*1.06+17 {
			t.Errorf("value %d reads back as p50 %d", v, got)
		}
	}
}

// Old samples lose weight: after a week at 2 GiB, a first day at 40 GiB no longer sets p95.
func TestDecayForgetsOldUsage(t *testing.T) {
	h := rightsize.NewHistogram(rightsize.DefaultHalfLife)
	end := feed(h, steady(40*gib), h200_3g, epoch, 24*time.Hour, 1)
	if p95 := h.Percentile(0.95); p95 < 40*gib {
		t.Fatalf("after a day at 40 GiB p95 = %d", p95)
	}
	feed(h, steady(2*gib), h200_3g, end.Add(refresh), 9*24*time.Hour, 2)
	if p95 := h.Percentile(0.95); p95 > 3*gib {
		t.Errorf("a week later p95 = %d MiB, want the recent 2 GiB", p95)
	}
	if h.Window() < 9*24*time.Hour || h.Samples() != int64(10*24*time.Hour/refresh) {
		t.Errorf("window %s samples %d: decay must not shorten the window or the count", h.Window(), h.Samples())
	}
}

// A peak seen once counts for eight half-lives, then falls to what the pod still uses.
func TestPeakDecays(t *testing.T) {
	h := rightsize.NewHistogram(time.Hour)
	h.Add(epoch, 40*gib, h200_3g)
	end := feed(h, steady(2*gib), h200_3g, epoch.Add(refresh), 7*time.Hour, 1)
	if peak := h.Peak(); peak != 40*gib {
		t.Fatalf("7 half-lives after it, peak = %d MiB, want the 40 GiB spike", peak)
	}
	feed(h, steady(2*gib), h200_3g, end.Add(refresh), 2*time.Hour, 2)
	if peak := h.Peak(); peak > 3*gib || peak < 2*gib {
		t.Errorf("9 half-lives after it, peak = %d MiB, want the recent 2 GiB", peak)
	}
}

// A pod running for a year (far past the weight exponent's renormalisation) keeps finite,
// correct percentiles.
func TestLongRunStaysFinite(t *testing.T) {
	h := rightsize.NewHistogram(time.Hour)
	start := epoch
	for day := range 365 {
		h.Add(start.Add(time.Duration(day)*24*time.Hour), 9*gib, h200_3g)
	}
	s := h.Summary()
	if s.P95MiB < 9*gib || s.P95MiB > 9*gib*105/100 || s.PeakMiB != 9*gib || s.P50MiB < 9*gib || s.P50MiB > s.P95MiB {
		t.Errorf("after a year: %+v", s)
	}
}

// Merging two histograms is the same as having added every sample to one, whichever way round.
func TestMergeEqualsOneHistogram(t *testing.T) {
	a, b, all := rightsize.NewHistogram(0), rightsize.NewHistogram(0), rightsize.NewHistogram(0)
	endA := feed(a, steady(9*gib), h200_3g, epoch, 6*time.Hour, 1)
	feed(b, bursty(4*gib, 30*gib, 10), h200_3g, endA, 3*time.Hour, 2)
	feed(all, steady(9*gib), h200_3g, epoch, 6*time.Hour, 1)
	feed(all, bursty(4*gib, 30*gib, 10), h200_3g, endA, 3*time.Hour, 2)

	ab, ba := rightsize.NewHistogram(0), rightsize.NewHistogram(0)
	for _, m := range []struct {
		into  *rightsize.Histogram
		parts []*rightsize.Histogram
	}{{ab, []*rightsize.Histogram{a, b}}, {ba, []*rightsize.Histogram{b, a}}} {
		for _, p := range m.parts {
			if err := m.into.Merge(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := all.Summary()
	for name, h := range map[string]*rightsize.Histogram{"a+b": ab, "b+a": ba} {
		if got := h.Summary(); got != want {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
	if err := a.Merge(rightsize.NewHistogram(time.Hour)); err != nil {
		t.Errorf("merging an empty histogram: %v", err)
	}
	other := rightsize.NewHistogram(time.Hour)
	other.Add(epoch, 1, 1)
	if err := a.Merge(other); err == nil {
		t.Error("merging histograms with different half-lives succeeded")
	}
}

// The preallocation detector flags high, flat use (JAX's default 75%, vLLM's 90%, TensorFlow
// taking it all) and nothing else: steady low use, high use that moves, or a pod whose
// preallocation was turned off.
func TestFlatAtCeiling(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    series
		want bool
	}{
		{"JAX default 75%", preallocating(h200_3g, 0.75), true},
		{"vLLM gpu_memory_utilization 0.9", preallocating(h200_3g, 0.90), true},
		{"TensorFlow without allow_growth", preallocating(h200_3g, 0.97), true},
		{"steady at 9 GiB", steady(9 * gib), false},
		{"bursty up to the ceiling", bursty(20*gib, 70*gib, 4), false},
		{"high but moving (training with a growing cache)", func(i int, _ *rand.Rand) int64 {
			return h200_3g*72/100 + int64(i%100)*h200_3g/400
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := summarize(tc.s, h200_3g, 2*time.Hour, 3).FlatAtCeiling; got != tc.want {
				t.Errorf("FlatAtCeiling = %v, want %v", got, tc.want)
			}
		})
	}
}
