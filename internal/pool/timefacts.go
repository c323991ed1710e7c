package pool

import (
	"slices"
	"time"

	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
)

// TimeFacts are the parts of a pass's input that time alone changes, with no object changing:
// which reports have grown too old to plan with, and which pending pods have waited past
// minPendingAge. A controller that has seen no event since its last pass, and finds these
// unchanged, would make the same pass again; computing them costs a fraction of a pass (no
// inventory, no planner), so it checks them instead of planning on a timer.
type TimeFacts struct {
	// Stale are the reports too old to plan with, by node name, sorted.
	Stale []string
	// Pending are the pods that count as pending demand now ("namespace/name"), sorted.
	Pending []string
}

// TimeFactsOf reads the time-dependent facts of the cluster at now, for a policy whose pods
// count as pending after minPendingAge and whose reports go stale after maxReportAge.
func TimeFactsOf(c *Cluster, now time.Time, minPendingAge, maxReportAge time.Duration) TimeFacts {
	var f TimeFacts
	for i := range c.GPUNodes {
		if inventory.Stale(&c.GPUNodes[i], c.Heartbeats, now, maxReportAge) != "" {
			f.Stale = append(f.Stale, c.GPUNodes[i].Name)
		}
	}
	slices.Sort(f.Stale)
	unbound, requests := c.Unbound()
	pending, _ := demand.PendingWithClaims(unbound, c.ClaimLookup(), requests, now, minPendingAge)
	for _, r := range pending {
		f.Pending = append(f.Pending, r.Pod.String())
	}
	slices.Sort(f.Pending)
	return f
}

// Equal reports whether f and g hold the same facts.
func (f TimeFacts) Equal(g TimeFacts) bool {
	return slices.Equal(f.Stale, g.Stale) && slices.Equal(f.Pending, g.Pending)
}
