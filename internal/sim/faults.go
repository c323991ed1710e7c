package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Node annotations that switch on the simulated operator's failure modes, so a demo or an
// end-to-end test can provoke them with kubectl. They add to the programmatic knobs
// (NodeSpec.Faults, Node.SetFaults).
const (
	// AnnotationFault holds a comma-separated list of faults:
	//   - fail-next: the next apply fails (state failed) without touching a GPU; the simulator
	//     removes the word from the annotation when it fires, so it fires once;
	//   - stuck-pending: every apply stops after setting state pending and pausing the
	//     operands, and never finishes (mig-manager's known wedge), until the annotation is
	//     removed and the label is set again;
	//   - wrong-layout: every apply creates one instance fewer than asked, on the first GPU it
	//     changes that gets any, and still reports success.
	AnnotationFault = "sim.gpupool.io/fault"
	// AnnotationApplyDelay is a Go duration ("5s") mig-manager stays pending before it applies.
	AnnotationApplyDelay = "sim.gpupool.io/apply-delay"
)

// Fault words of AnnotationFault.
const (
	FaultFailNext     = "fail-next"
	FaultStuckPending = "stuck-pending"
	FaultWrongLayout  = "wrong-layout"
)

// Faults are a node's fault knobs.
type Faults struct {
	// FailNext fails the next apply; it is consumed when it fires.
	FailNext bool
	// StuckPending leaves every apply pending forever.
	StuckPending bool
	// WrongLayout applies one instance fewer than asked and reports success.
	WrongLayout bool
	// ApplyDelay is how long an apply stays pending before the GPUs change.
	ApplyDelay time.Duration
}

// merge returns the knobs of both: a fault set in either is on, the longer delay wins.
func (f Faults) merge(o Faults) Faults {
	return Faults{
		FailNext:     f.FailNext || o.FailNext,
		StuckPending: f.StuckPending || o.StuckPending,
		WrongLayout:  f.WrongLayout || o.WrongLayout,
		ApplyDelay:   max(f.ApplyDelay, o.ApplyDelay),
	}
}

// ParseFaultAnnotations reads the fault knobs from a node's annotations. Unknown words and
// unparsable delays are errors, so a typo in a test does not silently test nothing.
func ParseFaultAnnotations(annotations map[string]string) (Faults, error) {
	var f Faults
	for word := range strings.SplitSeq(annotations[AnnotationFault], ",") {
		switch strings.TrimSpace(word) {
		case "":
		case FaultFailNext:
			f.FailNext = true
		case FaultStuckPending:
			f.StuckPending = true
		case FaultWrongLayout:
			f.WrongLayout = true
		default:
			return Faults{}, fmt.Errorf("annotation %s: unknown fault %q (known: %s, %s, %s)",
				AnnotationFault, word, FaultFailNext, FaultStuckPending, FaultWrongLayout)
		}
	}
	if v, ok := annotations[AnnotationApplyDelay]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return Faults{}, fmt.Errorf("annotation %s: %q is not a non-negative Go duration", AnnotationApplyDelay, v)
		}
		f.ApplyDelay = d
	}
	return f, nil
}

// withoutFault returns the AnnotationFault value with word removed.
func withoutFault(value, word string) string {
	words := strings.Split(value, ",")
	for i := range words {
		words[i] = strings.TrimSpace(words[i])
	}
	words = slices.DeleteFunc(words, func(w string) bool { return w == word || w == "" })
	return strings.Join(words, ",")
}
