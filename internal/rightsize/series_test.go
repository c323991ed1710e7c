package rightsize_test

import (
	"math/rand/v2"
	"time"

	"github.com/gpupool/gpupool/internal/rightsize"
)

// Synthetic usage series, sampled every refresh period as the agent samples them.

const (
	refresh = 30 * time.Second
	gib     = 1024
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// series returns the memory used (MiB) at sample i.
type series func(i int, rng *rand.Rand) int64

// steady uses mib, give or take 2%.
func steady(mib int64) series {
	return func(_ int, rng *rand.Rand) int64 {
		return mib + int64(float64(mib)*0.02*(2*rng.Float64()-1))
	}
}

// bursty uses base, and burst for one sample in every `every`.
func bursty(base, burst int64, every int) series {
	return func(i int, rng *rand.Rand) int64 {
		if i%every == every-1 {
			return burst
		}
		return steady(base)(i, rng)
	}
}

// wave climbs from lo to hi and back over period samples, as a serving pod's cache follows its
// traffic; steady use high in its instance would look preallocated.
func wave(lo, hi int64, period int) series {
	return func(i int, _ *rand.Rand) int64 {
		x := i % period
		if x > period/2 {
			x = period - x
		}
		return lo + (hi-lo)*int64(x)/int64(period/2)
	}
}

// preallocating takes fraction of the ceiling at start and holds it, as JAX/XLA, TensorFlow
// and vLLM do; the framework's own context adds a few MiB that come and go.
func preallocating(ceiling int64, fraction float64) series {
	return func(_ int, rng *rand.Rand) int64 {
		return int64(float64(ceiling)*fraction) + rng.Int64N(64)
	}
}

// feed samples s every refresh period for d, on an instance of ceiling MiB.
func feed(h *rightsize.Histogram, s series, ceiling int64, start time.Time, d time.Duration, seed uint64) time.Time {
	rng := newRand(seed)
	n := int(d / refresh)
	t := start
	for i := range n {
		t = start.Add(time.Duration(i) * refresh)
		h.Add(t, s(i, rng), ceiling)
	}
	return t
}

// summarize is a pod that ran series s on a ceiling-MiB instance for d.
func summarize(s series, ceiling int64, d time.Duration, seed uint64) rightsize.Summary {
	h := rightsize.NewHistogram(0)
	feed(h, s, ceiling, epoch, d, seed)
	return h.Summary()
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 7)) }
