package controllers

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/planner/placement"
)

// TestAClaimTheReserveHoldsBackGetsNoMove: on an H200 with 1g claims at slices 0-3 and the
// policy's reserve holding 3g at 4-7 (its 1g and 2g partitions tainted), a pending 1g or 2g
// claim would fit but for the reserve, so it waits as the headroom's price; no claim is moved
// for it. A 7g claim, which fits nowhere either way, is still the move planner's.
func TestAClaimTheReserveHoldsBackGetsNoMove(t *testing.T) {
	h200, ok := mig.LookupProduct("H200-141GB")
	if !ok {
		t.Fatal("no H200 product")
	}
	g := placement.GPU{Node: "dm-1", Index: 0, Product: h200}
	for s := range 4 {
		g.Holders = append(g.Holders, placement.Holder{Claim: fmt.Sprint("team/small-", s), Profile: "1g.18gb",
			Placement: mig.Placement{Start: s, Size: 1}})
	}
	var all, reserved []placement.Partition
	for _, pr := range h200.Profiles {
		for _, pl := range pr.Placements {
			p := placement.Partition{Profile: pr.Name, Placement: pl}
			all = append(all, p)
			// The reserve taints the partitions smaller than 3g over slices 4-7.
			if pl.Start < 4 || pr.MemorySlices >= 4 {
				reserved = append(reserved, p)
			}
		}
	}
	unreserved := g
	unreserved.Partitions = all
	pending := []placement.Claim{{Claim: "team/one-1g", Profile: "1g.18gb"}, {Claim: "team/two-2g", Profile: "2g.35gb"},
		{Claim: "team/whole-7g", Profile: "7g.141gb"}}

	kept := heldBackByReserve(pending, []placement.GPU{unreserved})
	var names []string
	for _, c := range kept {
		names = append(names, c.Claim)
	}
	if !slices.Equal(names, []string{"team/whole-7g"}) {
		t.Fatalf("claims left for the move planner: %v, want only the 7g", names)
	}
	// Without the reserve's taints in the picture the same claims are the planner's: the
	// reserved view alone does not decide it.
	g.Partitions = reserved
	if got := heldBackByReserve(pending, []placement.GPU{g}); len(got) != 3 {
		t.Fatalf("with the reserve's taints counted, %d claims are left, want all 3", len(got))
	}
}
