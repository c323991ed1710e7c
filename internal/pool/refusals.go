package pool

import (
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/rollout"
)

// RefusalMemory is how long a change a human rejected, or nobody approved within planTTL, is
// not proposed again.
const RefusalMemory = 24 * time.Hour

// conditionApproved is the plan condition the plan controller sets with the gate's verdict
// (controllers.ConditionApproved); its transition time is when a refusal was recorded.
const conditionApproved = "Approved"

// Refusal is a plan that said no to a change.
type Refusal struct {
	Plan string
	// Phase is Rejected or Expired.
	Phase v1alpha1.PlanPhase
	// Until is when the change may be proposed again.
	Until time.Time
}

// RefusedChange returns the refusal that still holds against the change want makes, or nil.
//
// A plan counts as refused by the approval gate's verdict (rollout.Gate), not by the phase the
// plan controller has recorded: a rejection annotation is a refusal from the moment the API
// server stores it, and the policy controller's next pass may run before the plan controller
// has written Rejected (or Expired) into the plan's status. The window runs from when the
// refusal was recorded (the Approved condition's transition), or from now when it has not
// been recorded yet.
//
// The same change is the same layout on the same nodes and GPUs (SameChange), whatever pods it
// would evict or serve: a Deployment that recreates its pending pods under new names must not
// turn a human's no into a new question.
func RefusedChange(plans []v1alpha1.RepartitionPlan, want *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy,
	now time.Time) *Refusal {
	for i := range plans {
		p := &plans[i]
		phase := rollout.Gate(p, policy, now).Phase
		if phase != v1alpha1.PlanRejected && phase != v1alpha1.PlanExpired {
			continue
		}
		at := now
		if c := meta.FindStatusCondition(p.Status.Conditions, conditionApproved); c != nil && p.Status.Phase == phase &&
			!c.LastTransitionTime.IsZero() && c.LastTransitionTime.Time.Before(now) {
			at = c.LastTransitionTime.Time
		}
		if until := at.Add(RefusalMemory); now.Before(until) && SameChange(want, p) {
			return &Refusal{Plan: p.Name, Phase: phase, Until: until}
		}
	}
	return nil
}

// refusedWithin says whether a finished plan is a refusal still remembered at now, so that
// it is kept as history (InHistory).
func refusedWithin(p *v1alpha1.RepartitionPlan, now time.Time) bool {
	if p.Status.Phase != v1alpha1.PlanRejected && p.Status.Phase != v1alpha1.PlanExpired {
		return false
	}
	c := meta.FindStatusCondition(p.Status.Conditions, conditionApproved)
	at := p.CreationTimestamp.Time
	if c != nil && !c.LastTransitionTime.IsZero() {
		at = c.LastTransitionTime.Time
	}
	return now.Sub(at) < RefusalMemory
}

// SameChange reports whether two plans change the same nodes' GPUs to the same layouts and
// sharing: what a human approves or refuses. Entry names, evictions, landings and the pods
// served are left out (they follow from the cluster at the moment a plan is made).
func SameChange(a, b *v1alpha1.RepartitionPlan) bool {
	return equality.Semantic.DeepEqual(changeOf(a), changeOf(b))
}

// nodeChange is what a plan does to one node; its fields are exported for DeepEqual.
type nodeChange struct {
	GPUs    []v1alpha1.GPUChange
	Sharing *v1alpha1.SharingConfig
}

func changeOf(p *v1alpha1.RepartitionPlan) map[string]nodeChange {
	out := make(map[string]nodeChange, len(p.Spec.Steps))
	for _, s := range p.Spec.Steps {
		gpus := slices.Clone(s.GPUs)
		slices.SortFunc(gpus, func(x, y v1alpha1.GPUChange) int { return int(x.Index) - int(y.Index) })
		for i := range gpus {
			// An empty and a missing count map mean the same layout.
			gpus[i].From, gpus[i].To = nonEmpty(gpus[i].From), nonEmpty(gpus[i].To)
		}
		out[s.Node] = nodeChange{GPUs: gpus, Sharing: s.SharingConfig}
	}
	return out
}

func nonEmpty(c v1alpha1.ProfileCounts) v1alpha1.ProfileCounts {
	if len(c) == 0 {
		return nil
	}
	return maps.Clone(c)
}
