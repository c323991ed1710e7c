package pool

import (
	"fmt"
	"strings"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// shownTableNotes is how many GPUs the MIGTablesMatch message names; the count says the rest.
const shownTableNotes = 3

// MIGTablesMatch compares what the pool's agents report with the built-in MIG table: False
// when some GPU's reported profile table differs from it (naming node, GPU, product and
// profile) or when a GPU has no built-in table at all. Either way gpupool plans with the
// reported table; the condition exists so that an error in the built-in table, or a GPU it
// does not know, is visible to whoever reads the policy. Nodes are given sorted by name.
func MIGTablesMatch(pool []*inventory.Node) Condition {
	var differ, unknown []string
	nDiffer, nUnknown := 0, 0
	for _, n := range pool {
		for _, g := range n.GPUs {
			switch {
			case g.TableDiff != "":
				nDiffer++
				if len(differ) < shownTableNotes {
					differ = append(differ, fmt.Sprintf("%s GPU %d (%s): %s", n.Name, g.Index, g.Product.Name, g.TableDiff))
				}
			case g.NoBuiltinTable:
				nUnknown++
				if len(unknown) < shownTableNotes {
					unknown = append(unknown, fmt.Sprintf("%s GPU %d (%s)", n.Name, g.Index, g.ProductName))
				}
			}
		}
	}
	switch {
	case nDiffer > 0:
		return Condition{Reason: v1alpha1.ReasonDeviceTableDiffers, Message: fmt.Sprintf(
			"%d GPU(s) report MIG profile tables that differ from gpupool's built-in table; gpupool plans with what they report: %s%s",
			nDiffer, strings.Join(differ, "; "), more(nDiffer, len(differ)))}
	case nUnknown > 0:
		return Condition{Reason: v1alpha1.ReasonNoBuiltinTable, Message: fmt.Sprintf(
			"%d GPU(s) have no built-in MIG table and are planned from their agent's report alone: %s%s",
			nUnknown, strings.Join(unknown, "; "), more(nUnknown, len(unknown)))}
	}
	return Condition{True: true, Reason: v1alpha1.ReasonTablesMatch, Message: "every MIG profile table the agents report matches the built-in one"}
}

func more(total, shown int) string {
	if total > shown {
		return fmt.Sprintf("; and %d more", total-shown)
	}
	return ""
}

// Reasons of the DRASlicesCurrent condition.
const (
	ReasonSlicesCurrent = "SlicesCurrent"
	ReasonSlicesStale   = "SlicesStale"
)

// DRASlicesCurrent is False when NVIDIA's DRA driver publishes, on some pool node, MIG devices
// other than those NVML reports (inventory.Node.DRAStale), naming the nodes and what to do:
// the driver rescans only when its kubelet plugin starts. Nodes are given sorted by name.
func DRASlicesCurrent(pool []*inventory.Node) Condition {
	var named []string
	count := 0
	for _, n := range pool {
		if n.DRAStale == "" {
			continue
		}
		count++
		if len(named) < shownTableNotes {
			named = append(named, n.Name+": "+n.DRAStale)
		}
	}
	if count == 0 {
		return Condition{True: true, Reason: ReasonSlicesCurrent,
			Message: "NVIDIA's DRA driver publishes the MIG instances NVML reports, or does not run in the pool"}
	}
	return Condition{Reason: ReasonSlicesStale, Message: fmt.Sprintf(
		"on %d node(s) NVIDIA's DRA driver publishes other MIG devices than NVML reports, so claims cannot use the current layout "+
			"until the driver's kubelet plugin restarts there (it discovers MIG devices only at start): %s%s",
		count, strings.Join(named, "; "), more(count, len(named)))}
}
