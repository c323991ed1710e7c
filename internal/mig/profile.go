// A GPU-instance profile: its media and graphics variants, placements and catalog order.

package mig

import (
	"slices"
	"strings"
)

// Media says which of a GPU's media engines (video decoders and encoders,
// JPEG, OFA) an instance takes. It decides which profiles may share a GPU
// beyond slices: NVIDIA's profile names carry it as a suffix.
type Media uint8

const (
	// MediaShare is a plain profile: the instance gets its share of the
	// decoders and none of the single JPEG/OFA unit.
	MediaShare Media = iota
	// MediaExtensions is "+me": the instance also takes the GPU's single
	// JPEG/OFA unit, so at most one such instance fits a GPU.
	MediaExtensions
	// MediaNone is "-me" (RTX PRO Blackwell): the instance takes no media engine.
	MediaNone
	// MediaAll is "+me.all" (RTX PRO Blackwell): the instance takes every
	// media engine, so it shares the GPU only with "-me" instances. NVIDIA's
	// guide does not spell this rule out; it is inferred from what the
	// profiles take, and it errs on the side of layouts the driver accepts.
	MediaAll
)

// MediaOf reads the media kind from a profile name's suffix as go-nvlib
// writes it (pkg/nvlib/device/mig_profile.go: "+me", "+me.all", "-me";
// attributes after "+" are comma-separated, so "1g.24gb+me.all,gfx" is MediaAll).
func MediaOf(name string) Media {
	n := strings.ToLower(name)
	if _, neg, ok := strings.Cut(n, "-"); ok && neg == "me" {
		return MediaNone
	}
	_, attrs, ok := strings.Cut(n, "+")
	if !ok {
		return MediaShare
	}
	kind := MediaShare
	for a := range strings.SplitSeq(attrs, ",") {
		switch a {
		case "me.all":
			return MediaAll
		case "me":
			kind = MediaExtensions
		}
	}
	return kind
}

// GraphicsOf reports whether a profile name carries go-nvlib's "+gfx" attribute.
func GraphicsOf(name string) bool {
	_, attrs, ok := strings.Cut(strings.ToLower(name), "+")
	return ok && slices.Contains(strings.Split(attrs, ","), "gfx")
}

// Placement is the memory-slice range [Start, Start+Size) an instance occupies.
type Placement struct{ Start, Size int }

// Profile is one GPU-instance profile of a product with the placements the driver allows.
type Profile struct {
	ID            int         // NVML GPU-instance profile ID (GIProfile*)
	Name          string      // canonical name, e.g. "3g.71gb"
	Aliases       []string    // other names drivers have used for it, e.g. "7g.79gb"
	ComputeSlices int         // compute slices (the "Ng" of the name)
	MemorySlices  int         // memory slices every placement covers
	MemoryMiB     int         // memory of one instance, as NVML reports it
	MaxCount      int         // most instances of this profile one GPU holds
	Placements    []Placement // allowed placements, ascending Start
	// Media is which media engines an instance takes ("+me", "-me", "+me.all"):
	// it limits which instances may share a GPU.
	Media Media
	// Graphics marks "+gfx" profiles (RTX PRO Blackwell), whose instances
	// also run graphics APIs; the planner treats them as their own profile.
	Graphics bool
}

// Special reports whether the profile is a variant a pod has to ask for on
// purpose (media or graphics); layouts chosen without a catalog leave them out.
func (pr *Profile) Special() bool { return pr.Media != MediaShare || pr.Graphics }

// compareCatalog orders profiles larger first, which is both the order people
// read catalogs in and the most constrained-first order the search wants.
func compareCatalog(a, b Profile) int {
	switch {
	case a.MemorySlices != b.MemorySlices:
		return b.MemorySlices - a.MemorySlices
	case a.ComputeSlices != b.ComputeSlices:
		return b.ComputeSlices - a.ComputeSlices
	case a.Special() != b.Special():
		if a.Special() {
			return 1
		}
		return -1
	case a.ID != b.ID:
		return a.ID - b.ID
	}
	return strings.Compare(a.Name, b.Name)
}
