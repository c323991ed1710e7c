package rightsize

import (
	"errors"
	"math"
	"time"
)

// Bucket layout: bucket i covers [start(i), start(i+1)) MiB with
// start(i) = FirstBucketMiB * (BucketRatio^i - 1) / (BucketRatio - 1), so each bucket is 5% wider
// than the one before, as VPA lays out its memory histograms. 5% is finer than any two MIG
// profiles differ (the closest, 1g and 2g of one GPU, differ by 2x), and the last bucket starts
// above 1 TiB, more than any GPU has.
const (
	// FirstBucketMiB is the width of the first bucket.
	FirstBucketMiB = 16.0
	// BucketRatio is how much wider each bucket is than the one before.
	BucketRatio = 1.05
	// NumBuckets is the number of buckets of every Histogram.
	NumBuckets = 166
)

// DefaultHalfLife is how fast old samples lose weight: a sample a day old counts half as much
// as a fresh one, VPA's half-life for memory.
const DefaultHalfLife = 24 * time.Hour

// Preallocation detector. Frameworks that preallocate take a fixed share of the device at
// start and hold it: JAX/XLA 75% by default (XLA_PYTHON_CLIENT_MEM_FRACTION=.75,
// https://docs.jax.dev/en/latest/gpu_memory_allocation.html), TensorFlow nearly all of it unless
// TF_FORCE_GPU_ALLOW_GROWTH=true, vLLM gpu_memory_utilization (0.9 by default). Their usage is
// high and flat whatever the model needs. A pod is flat at the ceiling when at least
// FlatWeight of its (decayed) samples use HighFraction of their instance or more, and its p5
// and p95 lie within FlatSpread of the instance's memory of each other: two 5% buckets at
// most, so a preallocated pool that grows by one step still counts as flat.
const (
	HighFraction = 0.70
	FlatWeight   = 0.90
	FlatSpread   = 0.10
)

// peakHalfLives is how long a peak seen once keeps counting: after this many half-lives with
// no sample in its bucket, Peak falls to the highest bucket that still holds weight. A bucket
// that held n samples lasts log2(n) half-lives longer: a level held for a day is no blip.
const peakHalfLives = 8

// renormalizeAfter bounds the weight exponent: once a sample's weight would exceed
// 2^renormalizeAfter, every weight is scaled down and the reference time moves forward, so
// float64 never overflows however long a pod runs.
const renormalizeAfter = 64

// bucketStart[i] is where bucket i starts, in MiB; bucketStart[NumBuckets] is +Inf.
var bucketStart = func() [NumBuckets + 1]float64 {
	var b [NumBuckets + 1]float64
	for i := range NumBuckets {
		b[i] = FirstBucketMiB * (math.Pow(BucketRatio, float64(i)) - 1) / (BucketRatio - 1)
	}
	b[NumBuckets] = math.Inf(1)
	return b
}()

// bucketOf is the bucket a value in MiB falls in.
func bucketOf(mib float64) int {
	if mib <= 0 {
		return 0
	}
	i := int(math.Floor(math.Log(1+mib*(BucketRatio-1)/FirstBucketMiB) / math.Log(BucketRatio)))
	// Floating point may put a value on a bound one bucket off; settle it on the table.
	for i > 0 && i < NumBuckets && mib < bucketStart[i] {
		i--
	}
	for i+1 < NumBuckets && mib >= bucketStart[i+1] {
		i++
	}
	return min(max(i, 0), NumBuckets-1)
}

// Histogram is one pod's GPU memory use over time: a fixed number of exponential buckets whose
// samples decay with a half-life. The zero value is not usable: make one with NewHistogram.
//
// Weights are stored relative to a reference time: a sample at t weighs 2^((t-ref)/halfLife),
// so a new sample is added without touching the others, and percentiles, which only compare
// weights, come out as if every old sample had decayed.
type Histogram struct {
	halfLife time.Duration
	ref      time.Time
	weights  [NumBuckets]float64
	total    float64
	// high is the weight of the samples at HighFraction of their ceiling or more.
	high float64
	// lastWeight is the weight of the most recent sample, the scale Peak measures decay by.
	lastWeight float64

	first, last time.Time
	samples     int64
	peakMiB     int64
	ceilingMiB  int64
}

// NewHistogram returns an empty histogram whose samples lose half their weight every halfLife
// (DefaultHalfLife when 0 or less).
func NewHistogram(halfLife time.Duration) *Histogram {
	if halfLife <= 0 {
		halfLife = DefaultHalfLife
	}
	return &Histogram{halfLife: halfLife}
}

// weightAt is the weight of a sample taken at t, relative to ref.
func (h *Histogram) weightAt(t time.Time) float64 {
	return math.Exp2(float64(t.Sub(h.ref)) / float64(h.halfLife))
}

// Add records that the pod used usedMiB of an instance (or whole GPU) of ceilingMiB at t.
// Negative values count as 0. Samples may arrive out of order; the window spans them all.
func (h *Histogram) Add(t time.Time, usedMiB, ceilingMiB int64) {
	usedMiB, ceilingMiB = max(usedMiB, 0), max(ceilingMiB, 0)
	if h.samples == 0 {
		h.ref, h.first, h.last = t, t, t
	}
	if float64(t.Sub(h.ref))/float64(h.halfLife) > renormalizeAfter {
		h.rebase(t)
	}
	w := h.weightAt(t)
	h.weights[bucketOf(float64(usedMiB))] += w
	h.total += w
	if ceilingMiB > 0 && float64(usedMiB) >= HighFraction*float64(ceilingMiB) {
		h.high += w
	}
	if !t.Before(h.last) {
		h.last, h.lastWeight = t, w
		h.ceilingMiB = ceilingMiB
	}
	if t.Before(h.first) {
		h.first = t
	}
	h.samples++
	h.peakMiB = max(h.peakMiB, usedMiB)
}

// rebase moves the reference time to t, scaling every weight so that they keep their ratios.
func (h *Histogram) rebase(t time.Time) {
	f := math.Exp2(-float64(t.Sub(h.ref)) / float64(h.halfLife))
	for i := range h.weights {
		h.weights[i] *= f
	}
	h.total *= f
	h.high *= f
	h.lastWeight *= f
	h.ref = t
}

// Merge adds o's samples to h, as if h had seen them too: the pods of one workload, or one
// pod's history from two sources. Both must decay at the same rate.
func (h *Histogram) Merge(o *Histogram) error {
	if o == nil || o.samples == 0 {
		return nil
	}
	if h.halfLife != o.halfLife {
		return errors.New("rightsize: cannot merge histograms with different half-lives (" + h.halfLife.String() + ", " + o.halfLife.String() + ")")
	}
	if h.samples == 0 {
		*h = *o
		return nil
	}
	// Express o's weights against h's reference time, after moving h's to the later one so
	// neither side's weights grow.
	if o.ref.After(h.ref) {
		h.rebase(o.ref)
	}
	f := math.Exp2(float64(o.ref.Sub(h.ref)) / float64(h.halfLife))
	for i := range h.weights {
		h.weights[i] += o.weights[i] * f
	}
	h.total += o.total * f
	h.high += o.high * f
	if o.last.After(h.last) {
		h.last, h.lastWeight, h.ceilingMiB = o.last, o.lastWeight*f, o.ceilingMiB
	}
	if o.first.Before(h.first) {
		h.first = o.first
	}
	h.samples += o.samples
	h.peakMiB = max(h.peakMiB, o.peakMiB)
	return nil
}

// Samples is how many samples were added.
func (h *Histogram) Samples() int64 { return h.samples }

// Window is the time from the first sample to the last.
func (h *Histogram) Window() time.Duration {
	if h.samples == 0 {
		return 0
	}
	return h.last.Sub(h.first)
}

// CeilingMiB is the memory of the instance the last sample was taken on.
func (h *Histogram) CeilingMiB() int64 { return h.ceilingMiB }

// Percentile returns the usage below which fraction p (0..1) of the decayed sample weight
// lies, in MiB: the upper bound of the bucket that reaches p, so it never understates, capped
// at Peak. It is 0 for an empty histogram.
func (h *Histogram) Percentile(p float64) int64 {
	if h.total <= 0 {
		return 0
	}
	p = min(max(p, 0), 1)
	target := p * h.total
	acc := 0.0
	for i, w := range h.weights {
		acc += w
		if w > 0 && acc >= target*(1-1e-12) {
			return min(upper(i), h.Peak())
		}
	}
	return h.Peak()
}

// upper is the end of bucket i in whole MiB; the last bucket has none.
func upper(i int) int64 {
	if i+1 >= NumBuckets {
		return math.MaxInt64
	}
	return int64(math.Ceil(bucketStart[i+1]))
}

// Peak is the most memory the pod used in the part of its history that still counts: the
// exact maximum while the bucket holding it keeps weight, and once that bucket has decayed
// for peakHalfLives without a new sample in it, the top of the highest bucket that has not.
func (h *Histogram) Peak() int64 {
	if h.samples == 0 {
		return 0
	}
	alive := h.lastWeight * math.Exp2(-peakHalfLives)
	for i := NumBuckets - 1; i >= 0; i-- {
		if h.weights[i] < alive {
			continue
		}
		if float64(h.peakMiB) < bucketStart[i+1] {
			return h.peakMiB
		}
		return min(upper(i), h.peakMiB)
	}
	return h.peakMiB
}

// FlatAtCeiling reports whether the usage looks preallocated rather than measured: nearly
// all samples high against their instance's memory, and barely moving (see HighFraction).
func (h *Histogram) FlatAtCeiling() bool {
	if h.total <= 0 || h.ceilingMiB <= 0 || h.high < FlatWeight*h.total {
		return false
	}
	spread := h.Percentile(0.95) - h.lowPercentile(0.05)
	return float64(spread) <= FlatSpread*float64(h.ceilingMiB)
}

// lowPercentile is Percentile's counterpart from below: the start of the bucket that reaches
// p, so that a spread measured between the two never understates how flat usage is.
func (h *Histogram) lowPercentile(p float64) int64 {
	target := p * h.total
	acc := 0.0
	for i, w := range h.weights {
		acc += w
		if w > 0 && acc >= target*(1-1e-12) {
			return int64(bucketStart[i])
		}
	}
	return 0
}

// Summary condenses the histogram into what the agent publishes.
func (h *Histogram) Summary() Summary {
	return Summary{
		P50MiB:        h.Percentile(0.50),
		P95MiB:        h.Percentile(0.95),
		PeakMiB:       h.Peak(),
		CeilingMiB:    h.ceilingMiB,
		Samples:       h.samples,
		Window:        h.Window(),
		FlatAtCeiling: h.FlatAtCeiling(),
	}
}
