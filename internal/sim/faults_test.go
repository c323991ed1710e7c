package sim

import (
	"testing"
	"time"
)

// Fault annotations parse to the knobs they document; unknown words and bad durations are
// errors so that a typo cannot silently disable a fault test.
func TestParseFaultAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ann     map[string]string
		want    Faults
		wantErr bool
	}{
		{name: "none", ann: nil, want: Faults{}},
		{name: "fail-next", ann: map[string]string{AnnotationFault: "fail-next"}, want: Faults{FailNext: true}},
		{name: "list with spaces", ann: map[string]string{AnnotationFault: "stuck-pending, wrong-layout"}, want: Faults{StuckPending: true, WrongLayout: true}},
		{name: "delay", ann: map[string]string{AnnotationApplyDelay: "5s"}, want: Faults{ApplyDelay: 5 * time.Second}},
		{name: "unknown fault", ann: map[string]string{AnnotationFault: "explode"}, wantErr: true},
		{name: "bad delay", ann: map[string]string{AnnotationApplyDelay: "soon"}, wantErr: true},
		{name: "negative delay", ann: map[string]string{AnnotationApplyDelay: "-1s"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFaultAnnotations(tc.ann)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseFaultAnnotations(%v) error %v, want error %v", tc.ann, err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("ParseFaultAnnotations(%v) = %+v, want %+v", tc.ann, got, tc.want)
			}
		})
	}
}

// Consuming fail-next removes only that word, so other faults in the list stay on.
func TestWithoutFault(t *testing.T) {
	for in, want := range map[string]string{
		"fail-next":                  "",
		"fail-next,wrong-layout":     "wrong-layout",
		"wrong-layout, fail-next":    "wrong-layout",
		"stuck-pending,wrong-layout": "stuck-pending,wrong-layout",
	} {
		if got := withoutFault(in, FaultFailNext); got != want {
			t.Errorf("withoutFault(%q) = %q, want %q", in, got, want)
		}
	}
}

// Programmatic and annotated knobs add up; the longer delay wins.
func TestFaultsMerge(t *testing.T) {
	got := Faults{FailNext: true, ApplyDelay: time.Second}.merge(Faults{WrongLayout: true, ApplyDelay: time.Minute})
	if want := (Faults{FailNext: true, WrongLayout: true, ApplyDelay: time.Minute}); got != want {
		t.Errorf("merge = %+v, want %+v", got, want)
	}
}
