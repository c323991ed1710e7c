package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestScan reads testdata/events: constants by name with their block's comment, Events sent
// directly and through two layers of wrappers (listed at the outer caller, with a local
// variable's values resolved), and literals shaped like reasons, not messages.
func TestScan(t *testing.T) {
	s, err := scan("../..", []string{"./hack/reference/testdata/events"})
	if err != nil {
		t.Fatal(err)
	}
	const file = "hack/reference/testdata/events/events.go"
	const pkg = "github.com/gpupool/gpupool/hack/reference/testdata/events"
	want := &source{
		Conditions: []constDecl{{Pkg: pkg, File: file, Name: "ConditionHappy", Value: "Happy",
			Doc: "ConditionHappy is the sample's condition."}},
		Reasons: []constDecl{
			{Pkg: pkg, File: file, Name: "ReasonGood", Value: "Good", Doc: "ReasonGood: all is well.",
				Group: "Reasons of the sample's conditions."},
			{Pkg: pkg, File: file, Name: "ReasonBad", Value: "Bad", Group: "Reasons of the sample's conditions."},
		},
		Events: []eventCall{
			{File: file, Func: "Use", Object: "Node", Type: "`Warning` (`corev1.EventTypeWarning`)",
				Reason: "`Good` (`ReasonGood`) or `Late`", Action: "`Stop`"},
			{File: file, Func: "Use", Object: "Pod", Type: "`Normal` (`corev1.EventTypeNormal`)",
				Reason: "`Bad` (`ReasonBad`)", Action: "`Tell`"},
		},
		Inline: []inlineValue{
			{File: file, Func: "Use", Field: "reason", Value: "Late"},
			{File: file, Func: "Use", Field: "Type", Value: "Inline"},
			{File: file, Func: "Use", Field: "Reason", Value: "Spelled"},
		},
	}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("scan (-want +got):\n%s", diff)
	}

	var page bytes.Buffer
	writeConditions(&page, s)
	for _, row := range []string{
		"| `Happy` | `ConditionHappy` | ConditionHappy is the sample's condition. |",
		"Reasons of the sample's conditions.\n\n| Reason | Constant | Meaning |",
		"| Node | Warning | `Good` (`ReasonGood`) or `Late` | `Stop` | `" + file + "` (Use) |",
		"| Reason | `Spelled` | `" + file + "` (Use) |",
	} {
		if !strings.Contains(page.String(), row) {
			t.Errorf("the page lacks %q:\n%s", row, page.String())
		}
	}
}
