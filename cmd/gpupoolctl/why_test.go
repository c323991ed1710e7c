package main

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/triage"
)

// TestWhySliceMap is the golden text of a claim pod held by placement on a DynamicMIG GPU: the
// verdict, then each GPU's slice map with the legend saying which pod and claim hold what, and
// what "." means.
func TestWhySliceMap(t *testing.T) {
	v := &triage.Verdict{
		Pod: types.NamespacedName{Namespace: "team", Name: "big"}, Phase: "Pending",
		Asks:     "1 x nvidia.com/mig-3g.71gb (through ResourceClaims of NVIDIA's DRA driver)",
		Layer:    triage.LayerPlacement,
		Blocking: "memory-slice placement",
		Reason: "NVIDIA's DRA driver (DynamicMIG) places each claim first fit and never moves it: on dm-node, GPU 0 has 5 free memory " +
			"slices, enough for 3g.71gb (4), but none of its placements (memory slices 0-3, 4-7) is free",
		Next: "plan pool-a-20261205-3ed3ba9b opens memory slices 4-7 of node dm-node GPU 0 for it by moving pod team/small-2, " +
			"and waits for approval",
		SliceMaps: []triage.SliceMap{{Node: "dm-node", GPU: 0, Map: "[A B . . . C . .]", Fit: inventory.FitStranded,
			Legend: []string{
				"A = 1g.18gb at slice 0: pod team/small-0 (claim team/small-0-gpu)",
				"B = 1g.18gb at slice 1: pod team/small-1 (claim team/small-1-gpu)",
				"C = 1g.18gb at slice 5: pod team/small-2 (claim team/small-2-gpu)",
			}}},
	}
	var b bytes.Buffer
	ew := &errWriter{w: &b}
	writeWhy(ew, &whyOutput{Verdict: v, Complete: true}, false)
	want := `Pod team/big (Pending) asks for 1 x nvidia.com/mig-3g.71gb (through ResourceClaims of NVIDIA's DRA driver)
  Layer:     Placement
  Blocking:  memory-slice placement
  Why:       NVIDIA's DRA driver (DynamicMIG) places each claim first fit and never moves it: on
             dm-node, GPU 0 has 5 free memory slices, enough for 3g.71gb (4), but none of its
             placements (memory slices 0-3, 4-7) is free
  Next:      plan pool-a-20261205-3ed3ba9b opens memory slices 4-7 of node dm-node GPU 0 for it
             by moving pod team/small-2, and waits for approval
  Slices:    dm-node gpu 0: [A B . . . C . .]  StrandedByPlacement
               A = 1g.18gb at slice 0: pod team/small-0 (claim team/small-0-gpu)
               B = 1g.18gb at slice 1: pod team/small-1 (claim team/small-1-gpu)
               C = 1g.18gb at slice 5: pod team/small-2 (claim team/small-2-gpu)
               (. = free memory slice; the letters are the claims holding the others)
`
	if ew.err != nil || b.String() != want {
		t.Errorf("got\n%s\nwant\n%s\ndiff at %d", b.String(), want, firstDiff(b.String(), want))
	}
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// The help names the new meaning of the Placement layer.
func TestWhyHelpNamesDynamicMIG(t *testing.T) {
	if !strings.Contains(whyLong, "DynamicMIG") {
		t.Error("why --help does not explain the DynamicMIG placement layer")
	}
}
