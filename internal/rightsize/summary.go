package rightsize

import (
	"time"

	"github.com/gpupool/gpupool/api/v1alpha1"
)

// Summary is what the agent publishes per pod (GPUNode status.usage): a few integers drawn
// from the pod's Histogram.
type Summary struct {
	P50MiB, P95MiB, PeakMiB int64
	// CeilingMiB is the memory of the device the pod runs on.
	CeilingMiB int64
	Samples    int64
	Window     time.Duration
	// FlatAtCeiling marks usage that looks preallocated (Histogram.FlatAtCeiling).
	FlatAtCeiling bool
}

// Evidence thresholds: below them no recommendation is made, and the agent publishes the
// moment a pod crosses them so the manager need not wait for another change to learn of it.
const (
	// DefaultMinWindow is the shortest history a recommendation is drawn from: a day covers
	// the daily cycle most serving workloads follow.
	DefaultMinWindow = 24 * time.Hour
	// DefaultMinSamples is the fewest samples: 50 minutes of the agent's 30-second refresh.
	DefaultMinSamples = 100
)

// Defaults of PublishRule.
const (
	// DefaultChangeFraction: p95 or peak must move by more than 10% to be republished; the
	// smallest step between two MIG profiles is 2x, so 10% never hides one.
	DefaultChangeFraction = 0.10
	// DefaultChangeMiB: and by more than 256 MiB, so that small pods' noise writes nothing.
	DefaultChangeMiB = 256
	// DefaultWindowFloor: the window is republished when it has doubled since the last write,
	// and not before it has grown by an hour, so a pod's life costs a logarithmic number of
	// writes (1h, 2h, 4h, ...) rather than one per refresh.
	DefaultWindowFloor = time.Hour
)

// PublishRule says when a pod's new summary differs enough from the one the API server holds
// to be worth a GPUNode write. The zero value uses the defaults.
type PublishRule struct {
	// ChangeFraction and ChangeMiB: p95, peak or ceiling moved by more than both.
	ChangeFraction float64
	ChangeMiB      int64
	// MinWindow and MinSamples are the recommender's evidence thresholds; crossing either is
	// published at once.
	MinWindow  time.Duration
	MinSamples int64
	// WindowFloor: a window that doubled is republished once it grew by at least this much.
	WindowFloor time.Duration
}

func (r PublishRule) withDefaults() PublishRule {
	if r.ChangeFraction <= 0 {
		r.ChangeFraction = DefaultChangeFraction
	}
	if r.ChangeMiB <= 0 {
		r.ChangeMiB = DefaultChangeMiB
	}
	if r.MinWindow <= 0 {
		r.MinWindow = DefaultMinWindow
	}
	if r.MinSamples <= 0 {
		r.MinSamples = DefaultMinSamples
	}
	if r.WindowFloor <= 0 {
		r.WindowFloor = DefaultWindowFloor
	}
	return r
}

// Changed reports whether cur should replace published (nil: nothing published yet) and why,
// in a few words for the agent's log. Steady usage changes nothing but the window, so a pod
// that runs for a month costs about a dozen writes.
func (r PublishRule) Changed(published *Summary, cur Summary) (bool, string) {
	r = r.withDefaults()
	if published == nil {
		return true, "first summary"
	}
	p := *published
	switch {
	case p.FlatAtCeiling != cur.FlatAtCeiling:
		return true, "flat-at-ceiling flipped"
	case p.Window < r.MinWindow && cur.Window >= r.MinWindow:
		return true, "window reached the minimum"
	case p.Samples < r.MinSamples && cur.Samples >= r.MinSamples:
		return true, "samples reached the minimum"
	case r.moved(p.P95MiB, cur.P95MiB):
		return true, "p95 moved"
	case r.moved(p.PeakMiB, cur.PeakMiB):
		return true, "peak moved"
	case r.moved(p.CeilingMiB, cur.CeilingMiB):
		return true, "ceiling moved"
	case cur.Window >= 2*p.Window && cur.Window-p.Window >= r.WindowFloor:
		return true, "window doubled"
	}
	return false, ""
}

// moved reports whether a value changed by more than both the fraction and the MiB threshold.
func (r PublishRule) moved(old, cur int64) bool {
	d := cur - old
	if d < 0 {
		d = -d
	}
	return d > r.ChangeMiB && float64(d) > r.ChangeFraction*float64(max(old, cur))
}

// SummaryOf reads a published summary back.
func SummaryOf(u v1alpha1.PodUsage) Summary {
	return Summary{
		P50MiB:        u.P50MiB,
		P95MiB:        u.P95MiB,
		PeakMiB:       u.PeakMiB,
		CeilingMiB:    u.CeilingMiB,
		Samples:       u.Samples,
		Window:        time.Duration(u.WindowSeconds) * time.Second,
		FlatAtCeiling: u.FlatAtCeiling,
	}
}

// PodUsage is the summary as the agent publishes it for pod; the window is truncated to
// whole seconds.
func (s Summary) PodUsage(pod v1alpha1.PodReference) v1alpha1.PodUsage {
	return v1alpha1.PodUsage{
		Namespace:     pod.Namespace,
		Name:          pod.Name,
		P50MiB:        s.P50MiB,
		P95MiB:        s.P95MiB,
		PeakMiB:       s.PeakMiB,
		CeilingMiB:    s.CeilingMiB,
		Samples:       s.Samples,
		WindowSeconds: int64(s.Window / time.Second),
		FlatAtCeiling: s.FlatAtCeiling,
	}
}
