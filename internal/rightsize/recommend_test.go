package rightsize_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/rightsize"
)

func product(t testing.TB, name string) *mig.Product {
	t.Helper()
	p, ok := mig.LookupProduct(name)
	if !ok {
		t.Fatalf("no built-in product %s", name)
	}
	return p
}

// pods are n pods that each ran s for d on a ceiling-MiB instance.
func pods(n int, s series, ceiling int64, d time.Duration) []rightsize.PodSummary {
	out := make([]rightsize.PodSummary, n)
	for i := range out {
		out[i] = rightsize.PodSummary{Pod: fmt.Sprintf("team-a/server-%d", i), Summary: summarize(s, ceiling, d, uint64(i))}
	}
	return out
}

func activity(a float64) *float64 { return &a }

func TestRecommend(t *testing.T) {
	const (
		day     = 24 * time.Hour
		h200_1g = 18 * gib
		h200GPU = 143771 // a whole H200 as NVML reports it
	)
	h200 := rightsize.Catalog{Product: product(t, "H200")}
	for _, tc := range []struct {
		name      string
		w         rightsize.Workload
		c         rightsize.Catalog
		o         rightsize.Options
		verdict   rightsize.Verdict
		reason    rightsize.Reason
		profile   string
		freed     int
		fixSays   []string
		msgSays   string
		computeOK bool
	}{
		{
			name:    "steady 9 GiB on 3g.71gb shrinks to 1g.18gb",
			w:       rightsize.Workload{Name: "Deployment team-a/server", Requested: "3g.71gb", Pods: pods(3, steady(9*gib), h200_3g, 2*day)},
			c:       h200,
			verdict: rightsize.Shrink, reason: rightsize.ReasonSmallerFits, profile: "1g.18gb", freed: 3,
			msgSays: "compute not measured",
		},
		{
			name:    "the device plugin's resource name works as the request",
			w:       rightsize.Workload{Name: "w", Requested: "nvidia.com/mig-3g.71gb", Pods: pods(1, steady(9*gib), h200_3g, 2*day)},
			c:       h200,
			verdict: rightsize.Shrink, reason: rightsize.ReasonSmallerFits, profile: "1g.18gb", freed: 3,
		},
		{
			name:    "bursty: p95 at 40 GiB needs its 3g.71gb",
			w:       rightsize.Workload{Name: "w", Requested: "3g.71gb", Pods: pods(2, bursty(8*gib, 40*gib, 5), h200_3g, 2*day)},
			c:       h200,
			verdict: rightsize.Keep, reason: rightsize.ReasonRequestFits, profile: "3g.71gb",
		},
		{
			name:    "rare bursts: p95 would shrink, the peak basis keeps 3g.71gb",
			w:       rightsize.Workload{Name: "w", Requested: "3g.71gb", Pods: pods(1, bursty(8*gib, 40*gib, 100), h200_3g, 2*day)},
			c:       h200,
			o:       rightsize.Options{Basis: rightsize.BasisPeak},
			verdict: rightsize.Keep, reason: rightsize.ReasonRequestFits, profile: "3g.71gb",
		},
		{
			name:    "rare bursts on p95 shrink",
			w:       rightsize.Workload{Name: "w", Requested: "3g.71gb", Pods: pods(1, bursty(8*gib, 40*gib, 100), h200_3g, 2*day)},
			c:       h200,
			verdict: rightsize.Shrink, reason: rightsize.ReasonSmallerFits, profile: "1g.18gb", freed: 3,
		},
		{
			name:    "preallocating (JAX's 75%): cannot tell, and the fix names the switches",
			w:       rightsize.Workload{Name: "w", Requested: "3g.71gb", Pods: pods(2, preallocating(h200_3g, 0.75), h200_3g, 2*day)},
			c:       h200,
			verdict: rightsize.CannotTell, reason: rightsize.ReasonPreallocating,
			fixSays: []string{"XLA_PYTHON_CLIENT_PREALLOCATE=false", "XLA_PYTHON_CLIENT_MEM_FRACTION", "TF_FORCE_GPU_ALLOW_GROWTH=true", "gpu-memory-utilization"},
		},
		{
			name:    "too few samples: an hour is not a day",
			w:       rightsize.Workload{Name: "w", Requested: "3g.71gb", Pods: pods(2, steady(9*gib), h200_3g, time.Hour)},
			c:       h200,
			verdict: rightsize.CannotTell, reason: rightsize.ReasonTooLittleData,
			fixSays: []string{"wait until a pod has run for 24h0m0s"},
			msgSays: "120 samples over 59m30s",
		},
		{
			name: "a pod without enough data is left out, the others count",
			w: rightsize.Workload{Name: "w", Requested: "3g.71gb", Pods: append(pods(1, steady(9*gib), h200_3g, 2*day),
				pods(1, steady(40*gib), h200_3g, time.Hour)...)},
			c:       h200,
			verdict: rightsize.Shrink, reason: rightsize.ReasonSmallerFits, profile: "1g.18gb", freed: 3,
		},
		{
			name: "pods disagree",
			w: rightsize.Workload{Name: "StatefulSet team-a/shards", Requested: "3g.71gb", Pods: append(pods(1, steady(9*gib), h200_3g, 2*day),
				rightsize.PodSummary{Pod: "team-a/shards-1", Summary: summarize(steady(30*gib), h200_3g, 2*day, 9)})},
			c:       h200,
			verdict: rightsize.CannotTell, reason: rightsize.ReasonPodsDisagree,
			fixSays: []string{"split them into workloads of like pods"},
			msgSays: "team-a/shards-1 uses",
		},
		{
			name:    "pods a little apart agree",
			w:       rightsize.Workload{Name: "w", Requested: "3g.71gb", Pods: append(pods(1, steady(9*gib), h200_3g, 2*day), pods(1, steady(11*gib), h200_3g, 2*day)...)},
			c:       h200,
			verdict: rightsize.Shrink, reason: rightsize.ReasonSmallerFits, profile: "1g.18gb", freed: 3,
		},
		{
			name:    "need above the request without reaching it: keep, never grow",
			w:       rightsize.Workload{Name: "w", Requested: "3g.71gb", Pods: pods(1, wave(40*gib, 65*gib, 120), h200_3g, 2*day)},
			c:       h200,
			verdict: rightsize.Keep, reason: rightsize.ReasonHeadroomShort, profile: "3g.71gb",
			msgSays: "never reached the instance",
		},
		{
			name:    "peak reached the instance: grow, and say so",
			w:       rightsize.Workload{Name: "w", Requested: "1g.18gb", Pods: pods(1, bursty(12*gib, h200_1g-100, 50), h200_1g, 2*day)},
			c:       h200,
			verdict: rightsize.Grow, reason: rightsize.ReasonPeakAtCeiling, profile: "1g.35gb",
			msgSays: "may be running out of memory",
		},
		{
			name:    "steady use at 90% of the instance cannot be told from preallocation",
			w:       rightsize.Workload{Name: "w", Requested: "3g.71gb", Pods: pods(1, steady(64*gib), h200_3g, 2*day)},
			c:       h200,
			verdict: rightsize.CannotTell, reason: rightsize.ReasonPreallocating,
		},
		{
			name:    "whole GPU using 9 GiB shrinks to 1g.18gb",
			w:       rightsize.Workload{Name: "w", Pods: pods(1, steady(9*gib), h200GPU, 2*day)},
			c:       h200,
			verdict: rightsize.Shrink, reason: rightsize.ReasonSmallerFits, profile: "1g.18gb", freed: 7,
		},
		{
			name:    "whole GPU using 100 GiB stays whole: the 7g profile frees nothing",
			w:       rightsize.Workload{Name: "w", Pods: pods(1, wave(60*gib, 120*gib, 120), h200GPU, 2*day)},
			c:       h200,
			verdict: rightsize.Keep, reason: rightsize.ReasonHeadroomShort, profile: "whole GPU",
		},
		{
			name:    "the policy's catalog leaves out 1g: the smallest it allows",
			w:       rightsize.Workload{Name: "w", Requested: "3g.71gb", Pods: pods(1, steady(9*gib), h200_3g, 2*day)},
			c:       rightsize.Catalog{Product: product(t, "H200"), Allowed: []string{"3g.71gb", "2g.35gb"}},
			verdict: rightsize.Shrink, reason: rightsize.ReasonSmallerFits, profile: "2g.35gb", freed: 2,
		},
		{
			name:    "busy compute keeps the slices memory alone would give up",
			w:       rightsize.Workload{Name: "w", Requested: "3g.71gb", Pods: pods(1, steady(9*gib), h200_3g, 2*day), ComputeActivity: activity(0.8)},
			c:       h200,
			verdict: rightsize.Keep, reason: rightsize.ReasonRequestFits, profile: "3g.71gb", computeOK: true,
		},
		{
			name:    "a third of the compute fits 2 slices",
			w:       rightsize.Workload{Name: "w", Requested: "3g.71gb", Pods: pods(1, steady(9*gib), h200_3g, 2*day), ComputeActivity: activity(0.3)},
			c:       h200,
			verdict: rightsize.Shrink, reason: rightsize.ReasonSmallerFits, profile: "2g.35gb", freed: 2, computeOK: true,
		},
		{
			name:    "same memory, less compute: not without measuring compute",
			w:       rightsize.Workload{Name: "w", Requested: "4g.71gb", Pods: pods(1, steady(50*gib), h200_3g, 2*day)},
			c:       h200,
			verdict: rightsize.Keep, reason: rightsize.ReasonRequestFits, profile: "4g.71gb",
		},
		{
			name:    "unknown profile",
			w:       rightsize.Workload{Name: "w", Requested: "3g.40gb", Pods: pods(1, steady(9*gib), h200_3g, 2*day)},
			c:       h200,
			verdict: rightsize.CannotTell, reason: rightsize.ReasonUnknownProfile,
		},
		{
			name:    "no product",
			w:       rightsize.Workload{Name: "w", Requested: "3g.71gb", Pods: pods(1, steady(9*gib), h200_3g, 2*day)},
			verdict: rightsize.CannotTell, reason: rightsize.ReasonUnknownCatalog,
		},
		{
			name:    "no pods",
			w:       rightsize.Workload{Name: "w", Requested: "3g.71gb"},
			c:       h200,
			verdict: rightsize.CannotTell, reason: rightsize.ReasonNoPods,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rightsize.Recommend(tc.w, tc.c, tc.o)
			if r.Verdict != tc.verdict || r.Reason != tc.reason || r.Profile != tc.profile || r.FreedMemorySlices != tc.freed {
				t.Fatalf("got %s/%s %q freeing %d, want %s/%s %q freeing %d\n%s\nfix: %s",
					r.Verdict, r.Reason, r.Profile, r.FreedMemorySlices, tc.verdict, tc.reason, tc.profile, tc.freed, r.Message, r.Fix)
			}
			for _, s := range tc.fixSays {
				if !strings.Contains(r.Fix, s) {
					t.Errorf("fix %q does not say %q", r.Fix, s)
				}
			}
			if tc.msgSays != "" && !strings.Contains(r.Message+"; "+r.ComputeNote, tc.msgSays) {
				t.Errorf("message %q (compute: %q) does not say %q", r.Message, r.ComputeNote, tc.msgSays)
			}
			if r.ComputeMeasured != tc.computeOK {
				t.Errorf("ComputeMeasured = %v, want %v", r.ComputeMeasured, tc.computeOK)
			}
			if r.Verdict == rightsize.CannotTell && (r.Fix == "" || r.Message == "") {
				t.Errorf("cannot tell without a reason and a fix: %+v", r)
			}
		})
	}
}

// checkInvariants holds what every recommendation promises.
func checkInvariants(t *testing.T, r rightsize.Recommendation, basis int64, headroom float64) {
	t.Helper()
	switch r.Verdict {
	case rightsize.Shrink, rightsize.Keep:
		if r.ProfileMiB > r.RequestedMiB {
			t.Errorf("%s to %s (%d MiB), larger than the request %s (%d MiB)", r.Verdict, r.Profile, r.ProfileMiB, r.Requested, r.RequestedMiB)
		}
		if !r.HeadroomShort && r.Reason != rightsize.ReasonNothingToOffer && float64(r.ProfileMiB) < float64(basis)*(1+headroom)-1 {
			t.Errorf("%s to %s (%d MiB) does not hold %d MiB with %.0f%% headroom", r.Verdict, r.Profile, r.ProfileMiB, basis, headroom*100)
		}
		if r.Verdict == rightsize.Shrink && r.ProfileMiB >= r.RequestedMiB && !r.ComputeMeasured {
			t.Errorf("shrink to %s without freeing memory", r.Profile)
		}
	case rightsize.Grow:
		if r.ProfileMiB <= r.RequestedMiB || r.Reason != rightsize.ReasonPeakAtCeiling {
			t.Errorf("grow to %s (%d MiB) from %d MiB, reason %s", r.Profile, r.ProfileMiB, r.RequestedMiB, r.Reason)
		}
	case rightsize.CannotTell:
		if r.Profile != "" || r.Fix == "" {
			t.Errorf("cannot tell, yet profile %q, fix %q", r.Profile, r.Fix)
		}
	default:
		t.Errorf("unknown verdict %q", r.Verdict)
	}
}

// FuzzRecommend: whatever the pods used, a recommendation holds the basis plus headroom (unless
// it says the headroom is short), never exceeds the request unless it says the peak reached
// the instance, and only shrinks when it frees memory.
func FuzzRecommend(f *testing.F) {
	f.Add(uint8(2), uint32(9*gib), uint32(10*gib), uint8(20), false, uint8(255))
	f.Add(uint8(0), uint32(17*gib), uint32(18*gib), uint8(0), true, uint8(40))
	f.Add(uint8(5), uint32(60*gib), uint32(70*gib), uint8(50), false, uint8(90))
	f.Add(uint8(6), uint32(130*gib), uint32(140*gib), uint8(10), true, uint8(255))
	products := []*mig.Product{product(f, "H200"), product(f, "A100-40GB"), product(f, "A30"), product(f, "H100-80GB")}
	f.Fuzz(func(t *testing.T, req uint8, p95, peak uint32, headroomPct uint8, usePeak bool, act uint8) {
		prod := products[int(req)%len(products)]
		names := prod.ProfileNames()
		requested := ""
		if int(req)/len(products)%(len(names)+1) < len(names) {
			requested = names[int(req)/len(products)%(len(names)+1)]
		}
		ceiling := int64(0)
		if p, ok := prod.Profile(requested); ok {
			ceiling = int64(p.MemoryMiB)
		} else {
			ceiling = int64(prod.Profiles[0].MemoryMiB) + 2000
		}
		s := rightsize.Summary{
			P95MiB: min(int64(p95), ceiling), PeakMiB: min(max(int64(peak), int64(p95)), ceiling), CeilingMiB: ceiling,
			Samples: rightsize.DefaultMinSamples, Window: rightsize.DefaultMinWindow,
		}
		s.P50MiB = s.P95MiB / 2
		o := rightsize.Options{Headroom: float64(headroomPct%101) / 100}
		if o.Headroom == 0 {
			o.Headroom = -1 // none
		}
		basis := s.P95MiB
		if usePeak {
			o.Basis, basis = rightsize.BasisPeak, s.PeakMiB
		}
		w := rightsize.Workload{Name: "w", Requested: requested, Pods: []rightsize.PodSummary{{Pod: "ns/p", Summary: s}}}
		if act != 255 {
			w.ComputeActivity = activity(float64(act%101) / 100)
		}
		r := rightsize.Recommend(w, rightsize.Catalog{Product: prod}, o)
		checkInvariants(t, r, basis, math.Max(o.Headroom, 0))
		if r.Verdict == rightsize.CannotTell {
			t.Errorf("one pod with enough flat-free data: cannot tell (%s: %s)", r.Reason, r.Message)
		}
	})
}
