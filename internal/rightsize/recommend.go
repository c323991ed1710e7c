package rightsize

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpupool/gpupool/internal/mig"
)

// Basis is which statistic of memory use a recommendation must cover.
type Basis string

const (
	// BasisP95 covers the 95th percentile: the default, as VPA's target for memory is a high
	// percentile rather than the maximum.
	BasisP95 Basis = "p95"
	// BasisPeak covers the highest use seen, for workloads that must never run out.
	BasisPeak Basis = "peak"
)

// Defaults of Options.
const (
	// DefaultHeadroom is added to the basis before a profile is picked: 20% above p95.
	DefaultHeadroom = 0.20
	// DefaultMaxSpread: pods of one workload disagree when one's basis exceeds another's by more
	// than 50%, and by more than disagreeMiB.
	DefaultMaxSpread = 0.50
)

// disagreeMiB is the smallest difference between pods that counts as disagreement: below a
// GiB, two pods sit in the same profile whatever their ratio.
const disagreeMiB = 1024

// reachedFraction: a peak within 3% of the instance's memory reached it; CUDA cannot allocate
// the last few hundred MiB of an instance, so a pod that ran out of memory peaks just below.
const reachedFraction = 0.97

// Options tune Recommend. The zero value uses the defaults.
type Options struct {
	// Basis is the statistic to cover; empty means BasisP95.
	Basis Basis
	// Headroom is the fraction added to the basis; 0 means DefaultHeadroom, negative none.
	Headroom float64
	// MinWindow and MinSamples are the evidence a pod needs before it counts.
	MinWindow  time.Duration
	MinSamples int64
	// MaxSpread is how far pods of one workload may disagree; 0 means DefaultMaxSpread.
	MaxSpread float64
}

func (o Options) withDefaults() Options {
	if o.Basis == "" {
		o.Basis = BasisP95
	}
	switch {
	case o.Headroom == 0:
		o.Headroom = DefaultHeadroom
	case o.Headroom < 0:
		o.Headroom = 0
	}
	if o.MinWindow <= 0 {
		o.MinWindow = DefaultMinWindow
	}
	if o.MinSamples <= 0 {
		o.MinSamples = DefaultMinSamples
	}
	if o.MaxSpread <= 0 {
		o.MaxSpread = DefaultMaxSpread
	}
	return o
}

// PodSummary is one pod's published summary.
type PodSummary struct {
	Pod string // namespace/name, for messages
	Summary
}

// Workload is what Recommend judges: the pods of one controller (a Deployment, a Job, ...)
// with what they ask for.
type Workload struct {
	// Name names the workload in messages, e.g. "Deployment team-a/server".
	Name string
	// Requested is the MIG profile each pod's device is, as the pods ask for it ("3g.71gb" or
	// the resource "nvidia.com/mig-3g.71gb"); empty for a whole GPU.
	Requested string
	Pods      []PodSummary
	// ComputeActivity is the p95 fraction of time the device's graphics engine was busy
	// (DCGM exporter's DCGM_FI_PROF_GR_ENGINE_ACTIVE, which unlike the *_UTIL fields is
	// reported per MIG instance: dcgm-exporter#430), 0..1; nil when not measured.
	ComputeActivity *float64
}

// Catalog is what the pool may carve: the product's MIG profiles, narrowed to Allowed (the
// policy's catalog entry) when that is set, or to the profiles without media or graphics
// extras, which a pod has to ask for on purpose.
type Catalog struct {
	Product *mig.Product
	Allowed []string
}

// Verdict is what Recommend concludes.
type Verdict string

const (
	// Shrink: a smaller profile covers the need.
	Shrink Verdict = "Shrink"
	// Keep: the requested profile is the smallest that covers the need, or the need exceeds it
	// without the peak reaching it (HeadroomShort), which is no reason to grow.
	Keep Verdict = "Keep"
	// Grow: the peak reached the instance's memory: the pods may be running out of it.
	Grow Verdict = "Grow"
	// CannotTell: the measurements do not support a recommendation (Reason says why, Fix
	// what to do).
	CannotTell Verdict = "CannotTell"
)

// Reason is the machine-readable cause of a verdict.
type Reason string

const (
	ReasonSmallerFits    Reason = "SmallerProfileFits"
	ReasonRequestFits    Reason = "RequestIsSmallest"
	ReasonHeadroomShort  Reason = "HeadroomShort"
	ReasonPeakAtCeiling  Reason = "PeakReachedInstance"
	ReasonTooLittleData  Reason = "TooLittleData"
	ReasonPreallocating  Reason = "Preallocating"
	ReasonPodsDisagree   Reason = "PodsDisagree"
	ReasonUnknownCatalog Reason = "UnknownCatalog"
	ReasonUnknownProfile Reason = "UnknownProfile"
	ReasonNoPods         Reason = "NoPods"
	ReasonNothingToOffer Reason = "NoLargerProfile"
)

// PreallocationFix is what a user does when usage is flat at the ceiling.
const PreallocationFix = "memory use sits flat near the instance's size, which is what a framework that " +
	"preallocates shows, not what the model needs: run the workload once with preallocation off and " +
	"measure again: JAX/XLA XLA_PYTHON_CLIENT_PREALLOCATE=false (or a small XLA_PYTHON_CLIENT_MEM_FRACTION), " +
	"TensorFlow TF_FORCE_GPU_ALLOW_GROWTH=true, vLLM a lower --gpu-memory-utilization; if use still sits at " +
	"the ceiling then, the pods need a larger profile"

// computeNotMeasured is ComputeNote when no activity was given.
const computeNotMeasured = "compute not measured: memory only; give the manager --prometheus-url to read " +
	"DCGM exporter's DCGM_FI_PROF_GR_ENGINE_ACTIVE"

// Recommendation is Recommend's answer for one workload.
type Recommendation struct {
	Verdict Verdict
	Reason  Reason
	// Message says why, with the numbers; Fix says what to do when the verdict is CannotTell.
	Message string
	Fix     string

	Requested    string
	RequestedMiB int64
	// Profile is the recommendation (Requested for Keep); empty for CannotTell.
	Profile    string
	ProfileMiB int64
	// BasisMiB is the highest basis (p95 or peak) across the pods that count; NeedMiB is it
	// with headroom.
	BasisMiB, NeedMiB int64
	// HeadroomShort: Keep although the request leaves less headroom than asked for.
	HeadroomShort bool
	// FreedMemorySlices is how many memory slices per pod the recommendation gives back.
	FreedMemorySlices int
	// Pods is how many pods had enough evidence to count.
	Pods int
	// ComputeMeasured says whether compute activity constrained the choice; ComputeNote
	// says how.
	ComputeMeasured bool
	ComputeNote     string
}

// request is the device the pods ask for, resolved against the catalog.
type request struct {
	name                        string
	mib                         int64
	computeSlices, memorySlices int
	profile                     *mig.Profile // nil for a whole GPU
}

// Recommend picks the smallest profile of c whose memory covers the workload's basis plus
// headroom, and whose compute covers its measured activity when that is known. It never
// recommends more than the request unless the peak reached the instance (Grow), and it says
// CannotTell, with a fix, when the data cannot be trusted.
func Recommend(w Workload, c Catalog, o Options) Recommendation {
	o = o.withDefaults()
	r := Recommendation{Requested: w.Requested}
	cannot := func(reason Reason, msg, fix string) Recommendation {
		r.Verdict, r.Reason, r.Message, r.Fix = CannotTell, reason, msg, fix
		return r
	}
	if c.Product == nil || c.Product.Err() != nil {
		return cannot(ReasonUnknownCatalog, "the pool's GPU product is unknown, so there are no profiles to choose from",
			"check that the node's GPUNode reports its GPUs (kubectl get gpunode)")
	}
	req, ok := resolveRequest(w, c.Product)
	if !ok {
		return cannot(ReasonUnknownProfile, fmt.Sprintf("%s asks for %q, which %s does not have", w.Name, w.Requested, c.Product.Name),
			"check the pods' nvidia.com/mig-* resource against the node's GPUs")
	}
	r.Requested, r.RequestedMiB = req.name, req.mib
	if len(w.Pods) == 0 {
		return cannot(ReasonNoPods, w.Name+" has no pod with usage reported", "wait for the node agents to report its pods")
	}

	var counted []PodSummary
	for _, p := range w.Pods {
		if p.Samples >= o.MinSamples && p.Window >= o.MinWindow {
			counted = append(counted, p)
		}
	}
	if len(counted) == 0 {
		best := slices.MaxFunc(w.Pods, func(a, b PodSummary) int { return cmp.Compare(a.Window, b.Window) })
		return cannot(ReasonTooLittleData,
			fmt.Sprintf("too little data: the longest-running pod of %s has %d samples over %s; a recommendation needs %d over %s",
				w.Name, best.Samples, best.Window.Round(time.Second), o.MinSamples, o.MinWindow),
			fmt.Sprintf("wait until a pod has run for %s", o.MinWindow))
	}
	r.Pods = len(counted)
	for _, p := range counted {
		if p.FlatAtCeiling {
			return cannot(ReasonPreallocating,
				fmt.Sprintf("pod %s uses %d of %d MiB, flat: its framework preallocates", p.Pod, p.P95MiB, p.CeilingMiB),
				PreallocationFix)
		}
	}
	basis := func(s Summary) int64 {
		if o.Basis == BasisPeak {
			return s.PeakMiB
		}
		return s.P95MiB
	}
	lo := slices.MinFunc(counted, func(a, b PodSummary) int { return cmp.Compare(basis(a.Summary), basis(b.Summary)) })
	hi := slices.MaxFunc(counted, func(a, b PodSummary) int { return cmp.Compare(basis(a.Summary), basis(b.Summary)) })
	if d := basis(hi.Summary) - basis(lo.Summary); d > disagreeMiB && float64(basis(hi.Summary)) > (1+o.MaxSpread)*float64(basis(lo.Summary)) {
		return cannot(ReasonPodsDisagree,
			fmt.Sprintf("pods of %s disagree: %s uses %d MiB (%s), %s %d MiB", w.Name, hi.Pod, basis(hi.Summary), o.Basis, lo.Pod, basis(lo.Summary)),
			"check whether the pods do different work (a leader, shards of unequal size); split them into workloads of like pods, or wait for their use to converge")
	}
	r.BasisMiB = basis(hi.Summary)
	r.NeedMiB = int64(math.Ceil(float64(r.BasisMiB) * (1 + o.Headroom)))
	var peak int64
	for _, p := range counted {
		peak = max(peak, p.PeakMiB)
	}

	needSlices := 1
	r.ComputeNote = computeNotMeasured
	if w.ComputeActivity != nil {
		a := min(max(*w.ComputeActivity, 0), 1)
		needSlices = max(1, int(math.Ceil(a*float64(req.computeSlices)*(1+o.Headroom)-1e-9)))
		needSlices = min(needSlices, req.computeSlices)
		r.ComputeMeasured = true
		r.ComputeNote = fmt.Sprintf("compute busy %.0f%% of %d slices: needs %d with headroom", a*100, req.computeSlices, needSlices)
	}

	if float64(peak) >= reachedFraction*float64(req.mib) {
		return grow(r, req, c, peak, o)
	}
	best := smallest(c, req, r.NeedMiB, needSlices)
	if best == nil {
		r.Verdict, r.Reason, r.HeadroomShort = Keep, ReasonHeadroomShort, true
		r.Profile, r.ProfileMiB = req.name, req.mib
		r.Message = fmt.Sprintf("%s uses up to %d MiB (%s) of %d: less than %.0f%% headroom, but its peak (%d MiB) never reached the instance, so keep it",
			w.Name, r.BasisMiB, o.Basis, req.mib, o.Headroom*100, peak)
		return r
	}
	r.Profile, r.ProfileMiB = best.Name, int64(best.MemoryMiB)
	// Memory alone never justifies giving up compute: a profile as large as the request in
	// memory is only a recommendation when measured activity says the compute is not needed.
	if int64(best.MemoryMiB) >= req.mib && (!r.ComputeMeasured || best.ComputeSlices >= req.computeSlices) {
		r.Verdict, r.Reason, r.Profile, r.ProfileMiB = Keep, ReasonRequestFits, req.name, req.mib
		r.Message = fmt.Sprintf("%s uses up to %d MiB (%s); with %.0f%% headroom it needs %d, and no smaller profile holds that",
			w.Name, r.BasisMiB, o.Basis, o.Headroom*100, r.NeedMiB)
		return r
	}
	r.Verdict, r.Reason = Shrink, ReasonSmallerFits
	r.FreedMemorySlices = max(0, req.memorySlices-best.MemorySlices)
	r.Message = fmt.Sprintf("%s uses up to %d MiB (%s) of %d; with %.0f%% headroom it needs %d, which %s (%d MiB) holds",
		w.Name, r.BasisMiB, o.Basis, req.mib, o.Headroom*100, r.NeedMiB, best.Name, best.MemoryMiB)
	return r
}

// grow answers for a workload whose peak reached its instance: the smallest larger profile that
// covers the peak with headroom, or Keep when the catalog has none.
func grow(r Recommendation, req request, c Catalog, peak int64, o Options) Recommendation {
	// The smallest larger profile that covers the peak with headroom, else the largest there is.
	need := int64(math.Ceil(float64(peak) * (1 + o.Headroom)))
	var covering, largest *mig.Profile
	for _, p := range candidates(c) {
		if int64(p.MemoryMiB) <= req.mib || p.ComputeSlices < req.computeSlices {
			continue
		}
		if int64(p.MemoryMiB) >= need && (covering == nil || smaller(p, covering)) {
			covering = p
		}
		if largest == nil || smaller(largest, p) {
			largest = p
		}
	}
	best := cmp.Or(covering, largest)
	if best == nil || req.profile == nil {
		r.Verdict, r.Reason, r.Profile, r.ProfileMiB = Keep, ReasonNothingToOffer, req.name, req.mib
		r.Message = fmt.Sprintf("its peak (%d MiB) reached the instance's %d MiB: the pods may be running out of memory, and no larger profile is allowed", peak, req.mib)
		return r
	}
	r.Verdict, r.Reason = Grow, ReasonPeakAtCeiling
	r.Profile, r.ProfileMiB = best.Name, int64(best.MemoryMiB)
	r.Message = fmt.Sprintf("its peak (%d MiB) reached the instance's %d MiB: the pods may be running out of memory; %s (%d MiB) gives them room",
		peak, req.mib, best.Name, best.MemoryMiB)
	return r
}

// resolveRequest finds the requested profile in the product, or the whole GPU.
func resolveRequest(w Workload, p *mig.Product) (request, bool) {
	full := slices.MaxFunc(p.Profiles, func(a, b mig.Profile) int { return cmp.Compare(a.MemoryMiB, b.MemoryMiB) })
	if strings.TrimSpace(w.Requested) == "" {
		// A whole GPU: its memory is what the pods saw as their ceiling, a little more than
		// the full-size MIG profile's.
		mib := int64(full.MemoryMiB)
		for _, pod := range w.Pods {
			mib = max(mib, pod.CeilingMiB)
		}
		return request{name: "whole GPU", mib: mib, computeSlices: p.ComputeSlices, memorySlices: p.MemorySlices}, true
	}
	prof, ok := p.Profile(w.Requested)
	if !ok {
		return request{}, false
	}
	return request{name: prof.Name, mib: int64(prof.MemoryMiB), computeSlices: prof.ComputeSlices, memorySlices: prof.MemorySlices, profile: prof}, true
}

// candidates are the profiles the catalog allows.
func candidates(c Catalog) []*mig.Profile {
	var out []*mig.Profile
	for i := range c.Product.Profiles {
		p := &c.Product.Profiles[i]
		allowed := !p.Special()
		if len(c.Allowed) > 0 {
			allowed = slices.ContainsFunc(c.Allowed, func(name string) bool {
				q, ok := c.Product.Profile(name)
				return ok && q.Name == p.Name
			})
		}
		if allowed {
			out = append(out, p)
		}
	}
	return out
}

// smallest is the smallest allowed profile that holds needMiB and needSlices without exceeding
// the request in either; the requested profile itself qualifies. For a whole GPU, the full-size
// profile does not: it frees nothing and costs the GPU its MIG-off mode.
func smallest(c Catalog, req request, needMiB int64, needSlices int) *mig.Profile {
	var best *mig.Profile
	for _, p := range candidates(c) {
		if int64(p.MemoryMiB) < needMiB || p.ComputeSlices < needSlices ||
			int64(p.MemoryMiB) > req.mib || p.ComputeSlices > req.computeSlices {
			continue
		}
		if req.profile == nil && p.MemorySlices >= req.memorySlices {
			continue
		}
		if best == nil || smaller(p, best) {
			best = p
		}
	}
	if best == nil && req.profile != nil && int64(req.profile.MemoryMiB) >= needMiB && req.profile.ComputeSlices >= needSlices {
		best = req.profile // requested but not in the allowed list: it still fits
	}
	return best
}

// smaller orders profiles by memory, then compute, then memory slices, then name.
func smaller(a, b *mig.Profile) bool {
	return cmp.Or(cmp.Compare(a.MemoryMiB, b.MemoryMiB), cmp.Compare(a.ComputeSlices, b.ComputeSlices),
		cmp.Compare(a.MemorySlices, b.MemorySlices), strings.Compare(a.Name, b.Name)) < 0
}
