package pool

import (
	"maps"
	"slices"
	"time"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
)

// TimeFacts are the parts of a pass's input that time alone changes, with no object changing:
// which reports have grown too old to plan with, which pending pods have waited past
// minPendingAge, and which nodes are frozen (a failed node's backoff and a changed node's
// stabilization window both end with time). A controller that has seen no event since its
// last pass, and finds these unchanged, would make the same pass again; computing them costs a
// fraction of a pass (no inventory, no planner), so it checks them instead of planning on a
// timer.
type TimeFacts struct {
	// Stale are the reports too old to plan with, by node name, sorted.
	Stale []string
	// Pending are the pods that count as pending demand now ("namespace/name"), sorted.
	Pending []string
	// Frozen are the nodes the planner must leave alone now, sorted. Names only: a reason
	// such as "changed 40s ago" moves every second while what may be planned does not, and a
	// node changes reason only through an event (its plan's status).
	Frozen []string
}

// TimeFactsOf reads the time-dependent facts of the cluster at now for policy, whose reports
// go stale after maxReportAge.
func TimeFactsOf(policy *v1alpha1.GPUPoolPolicy, c *Cluster, now time.Time, maxReportAge time.Duration) TimeFacts {
	var f TimeFacts
	for i := range c.GPUNodes {
		if inventory.Stale(&c.GPUNodes[i], c.Heartbeats, now, maxReportAge) != "" {
			f.Stale = append(f.Stale, c.GPUNodes[i].Name)
		}
	}
	slices.Sort(f.Stale)
	unbound, requests := c.Unbound()
	minPendingAge := DurationOr(policy.Spec.Planning.MinPendingAge, DefaultMinPendingAge)
	pending, _ := demand.PendingWithClaims(unbound, c.ClaimLookup(), requests, now, minPendingAge)
	for _, r := range pending {
		f.Pending = append(f.Pending, r.Pod.String())
	}
	slices.Sort(f.Pending)
	if selector, err := policy.Spec.NodeSelector.Selector(); err == nil {
		window := DurationOr(policy.Spec.Planning.StabilizationWindow, DefaultStabilizationWindow)
		frozen, _ := frozenNodes(policy, c, conflictingNodes(policy, selector, c), window, now)
		f.Frozen = slices.Sorted(maps.Keys(frozen))
	}
	return f
}

// Equal reports whether f and g hold the same facts.
func (f TimeFacts) Equal(g TimeFacts) bool {
	return slices.Equal(f.Stale, g.Stale) && slices.Equal(f.Pending, g.Pending) && slices.Equal(f.Frozen, g.Frozen)
}
