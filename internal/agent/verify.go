package agent

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
)

// Reasons of the LayoutVerified condition. They are API: the plan controller
// waits for ReasonLayoutMatches before it uncordons a node.
const (
	// ReasonLayoutMatches: every GPU in spec.expectedLayout has exactly the expected multiset (True).
	ReasonLayoutMatches = "Matches"
	// ReasonNoExpectation: spec.expectedLayout is empty, so nothing can disagree (True).
	ReasonNoExpectation = "NoExpectation"
	// ReasonLayoutMismatch: some expected GPU differs; the message lists every difference (False).
	ReasonLayoutMismatch = "Mismatch"
	// ReasonGPUUnreadable: no GPU differs, but NVML failed for an expected GPU, so its
	// instances may be incomplete (Unknown).
	ReasonGPUUnreadable = "GPUUnreadable"
	// ReasonNVMLNotReady: NVML could not be read at all (Unknown).
	ReasonNVMLNotReady = "NVMLNotReady"
)

// VerifyLayout compares the GPUs NVML reports with spec.expectedLayout and
// returns the LayoutVerified condition (LastTransitionTime and
// ObservedGeneration left to the caller).
//
// Decisions, each for the reader of the condition:
//   - An expected GPU is compared by its profile multiset only: mig-parted's
//     config has no placement, so placement cannot be "wrong".
//   - Empty expected profiles mean MIG disabled; a GPU with MIG enabled and no
//     instances is a difference, because under the mixed strategy it serves
//     nothing, while a disabled GPU serves nvidia.com/gpu.
//   - GPUs that spec.expectedLayout does not list are not checked: the
//     controller expects nothing of them.
//   - No expectation at all is True/NoExpectation rather than Unknown, so a node
//     no plan ever touched does not look broken; readers that must know the
//     layout was checked against a plan look at the reason and at
//     ObservedGeneration.
//   - Names are compared after internal/mig's Canonical for the GPU's product,
//     so a driver alias (7g.79gb for 7g.80gb) is not a difference; for an
//     unknown product the names are compared as written.
//   - A GPU whose read carries an NVML error is unverifiable: its instance list
//     may be incomplete. Real differences elsewhere still make the condition
//     False; otherwise it is Unknown/GPUUnreadable, never a false Mismatch.
func VerifyLayout(expected []v1alpha1.GPULayout, actual []v1alpha1.GPUStatus) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionLayoutVerified}
	if len(expected) == 0 {
		c.Status = metav1.ConditionTrue
		c.Reason = ReasonNoExpectation
		c.Message = "spec.expectedLayout is empty: nothing to verify"
		return c
	}
	byIndex := make(map[int32]*v1alpha1.GPUStatus, len(actual))
	for i := range actual {
		byIndex[actual[i].Index] = &actual[i]
	}
	want := slices.Clone(expected)
	slices.SortFunc(want, func(a, b v1alpha1.GPULayout) int { return cmp.Compare(a.Index, b.Index) })

	var diffs, unreadable []string
	for _, e := range want {
		g, ok := byIndex[e.Index]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("GPU %d: missing", e.Index))
			continue
		}
		if g.Error != "" {
			unreadable = append(unreadable, fmt.Sprintf("GPU %d: %s", e.Index, g.Error))
			continue
		}
		if d := gpuDifference(e, g); d != "" {
			diffs = append(diffs, fmt.Sprintf("GPU %d: %s", e.Index, d))
		}
	}
	switch {
	case len(diffs) > 0:
		c.Status = metav1.ConditionFalse
		c.Reason = ReasonLayoutMismatch
		c.Message = strings.Join(diffs, "; ")
		if len(unreadable) > 0 {
			c.Message += "; unverifiable: " + strings.Join(unreadable, "; ")
		}
	case len(unreadable) > 0:
		c.Status = metav1.ConditionUnknown
		c.Reason = ReasonGPUUnreadable
		c.Message = "NVML failed for an expected GPU, its layout cannot be verified: " + strings.Join(unreadable, "; ")
	default:
		c.Status = metav1.ConditionTrue
		c.Reason = ReasonLayoutMatches
		c.Message = fmt.Sprintf("%d GPU(s) match spec.expectedLayout", len(want))
	}
	return c
}

// gpuDifference describes how one GPU differs from its expected layout, or
// returns "" when it matches.
func gpuDifference(e v1alpha1.GPULayout, g *v1alpha1.GPUStatus) string {
	wantLayout := mig.LayoutOf(e.Profiles)
	mode := MIGDisabled
	pending := ""
	if g.MIGMode != nil {
		mode = g.MIGMode.Current
		if g.MIGMode.Pending != "" && g.MIGMode.Pending != g.MIGMode.Current {
			pending = fmt.Sprintf(" (MIG mode %s pending a GPU reset)", g.MIGMode.Pending)
		}
	}
	haveLayout := mig.Layout{}
	if mode == MIGEnabled {
		haveLayout = mig.LayoutOf(g.ProfileCounts())
	}
	if p, _ := LookupBuiltin(*g); p != nil {
		// Canonical fails only on a name the product does not know; comparing
		// the raw names then shows that name in the difference.
		if w, err := p.Canonical(wantLayout); err == nil {
			wantLayout = w
		}
		if h, err := p.Canonical(haveLayout); err == nil {
			haveLayout = h
		}
	}

	wantMIG := len(wantLayout) > 0
	switch {
	case !wantMIG && mode != MIGEnabled:
		return ""
	case wantMIG && mode == MIGEnabled && wantLayout.Equal(haveLayout):
		return ""
	}
	return fmt.Sprintf("want %s, have %s%s", describeLayout(wantLayout, wantMIG), describeActual(mode, haveLayout), pending)
}

func describeLayout(l mig.Layout, migEnabled bool) string {
	if !migEnabled {
		return "MIG disabled"
	}
	return l.String()
}

func describeActual(mode string, l mig.Layout) string {
	switch mode {
	case MIGEnabled:
		if l.Total() == 0 {
			return "MIG enabled with no instances"
		}
		return l.String()
	case MIGUnsupported:
		return "no MIG support"
	}
	return "MIG disabled"
}
