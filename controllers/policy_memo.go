package controllers

// What clusterState keeps of a policy's passes (what a complete pass started from, so that a
// reconcile that would repeat it is skipped; the planner's last result, so that a plan under
// review is not re-planned on every pod event), and the timing of a pass's phases.

import (
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/rollout"
)

// passInputs is what a complete pass started from, as far as a reconcile can tell without
// making the pass again: the policy's generation, the event count, and the facts time alone
// changes.
type passInputs struct {
	generation int64
	events     int64
	facts      pool.TimeFacts
	// young is the plan under review inside the stabilization window, "" when none.
	young string
	at    time.Time
}

// fullPassInterval bounds how long a policy goes without a complete pass when nothing seems to
// change: a safety net for rules that follow the clock beyond TimeFacts (a refused plan may be
// proposed again after pool.RefusalMemory). At 5,000 nodes a pass costs a few seconds of one core,
// so this costs well under 1% of a core.
const fullPassInterval = 10 * time.Minute

// plannedResult is one planner pass remembered.
type plannedResult struct {
	generation int64
	// frozen lists the nodes the planner was told not to change: a conflict or another plan
	// taking a node changes what may be planned at all, so it always plans again.
	frozen string
	plan   string
	res    *planner.Result
	// pending are the pods that were pending when the planner ran: a pod pending now that is
	// not among them is new demand, which the remembered result knows nothing about.
	pending map[types.NamespacedName]bool
}

// passClock times the phases of one pass.
type passClock struct {
	clock clock.Clock
	start time.Time
	last  time.Time
	laps  []any
}

// lap ends the phase named name.
func (t *passClock) lap(name string) {
	now := t.clock.Now()
	if t.last.IsZero() {
		t.last = t.start
	}
	t.laps = append(t.laps, name, now.Sub(t.last).Round(time.Millisecond).String())
	t.last = now
}

// total is the time from the pass's start to its last lap.
func (t *passClock) total() time.Duration { return t.last.Sub(t.start) }

// keysAndValues are the total and each phase, for a log line.
func (t *passClock) keysAndValues() []any {
	return append([]any{"took", t.total().Round(time.Millisecond).String()}, t.laps...)
}

func planNameOf(p *v1alpha1.RepartitionPlan) string {
	if p == nil {
		return ""
	}
	return p.Name
}

// recheckAfter is when to look again at what time alone changes.
func recheckAfter(minPendingAge time.Duration) time.Duration {
	return min(max(minPendingAge, time.Second), policyRecheckInterval)
}

// youngAwaitingPlan is the policy's plan that waits for approval and is younger than the
// stabilisation window: propose keeps such a plan whatever the planner says, unless the demand
// is gone, which revalidation at approval catches too.
func youngAwaitingPlan(policy *v1alpha1.GPUPoolPolicy, plans []v1alpha1.RepartitionPlan, now time.Time, window time.Duration) *v1alpha1.RepartitionPlan {
	for i := range plans {
		if rollout.Gate(&plans[i], policy, now).Phase == v1alpha1.PlanAwaitingApproval &&
			now.Sub(plans[i].CreationTimestamp.Time) < window {
			return &plans[i]
		}
	}
	return nil
}

// frozenKey is a stable text of the frozen nodes, for comparison.
func frozenKey(frozen map[string]string) string {
	return strings.Join(slices.Sorted(maps.Keys(frozen)), ",")
}
