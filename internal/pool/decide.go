package pool

import (
	"fmt"
	"slices"
	"time"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/rollout"
)

// Supersession asks the plan controller to retire a plan still awaiting approval, with why.
type Supersession struct {
	Plan *v1alpha1.RepartitionPlan
	Why  string
}

// Proposal is what the policy controller does about its plans in one pass: the plans to
// supersede (in order), the plan to create (nil for none), and the plan that is the policy's
// current one afterwards (an existing plan, Create, or nil). Refused is the refusal that held
// the planner's plan back, when one did.
type Proposal struct {
	Supersede []Supersession
	Create    *v1alpha1.RepartitionPlan
	Current   *v1alpha1.RepartitionPlan
	Refused   *Refusal
}

// Decide keeps, replaces or retires the policy's unapproved plan so that at most one plan of a
// policy is live. plans are the policy's own plans (the one just created included, even when
// the cache does not show it yet); wanted makes the plan the planner would propose now (nil
// for none), called only when no plan is past the gate; pending are the pool's pending pods.
//
// A plan past the gate (approved or executing, by the gate's verdict, not only the recorded
// phase) is never touched: the planner waits for it. A plan under review younger than the
// stabilization window is kept while it still helps, so that every pod event does not churn a
// new plan under the eyes of the person asked to approve it; it is replaced inside the window
// only to serve demand it does not, and withdrawn at once when none of its pods still waits.
// A change a human refused (or nobody approved within planTTL) is not proposed again within
// RefusalMemory; a plan that failed or was superseded does not count, so retrying an
// identical change is allowed.
func Decide(policy *v1alpha1.GPUPoolPolicy, plans []v1alpha1.RepartitionPlan, wanted func() *v1alpha1.RepartitionPlan,
	pending []demand.Request, now time.Time) Proposal {
	var awaiting *v1alpha1.RepartitionPlan
	for i := range plans {
		switch rollout.Gate(&plans[i], policy, now).Phase {
		case v1alpha1.PlanApproved, v1alpha1.PlanExecuting:
			return Proposal{Current: &plans[i]}
		case v1alpha1.PlanAwaitingApproval:
			if awaiting == nil {
				awaiting = &plans[i]
			}
		}
	}
	want := wanted()
	var out Proposal
	retire := func(why string) {
		out.Supersede = append(out.Supersede, Supersession{Plan: awaiting, Why: why})
		awaiting = nil
	}
	if awaiting != nil && want != nil && HashAs(want, awaiting.Name) != awaiting.Spec.Hash {
		// Whatever the window says: nobody is asked to approve a plan for pods that no longer wait.
		if why := DemandGone(awaiting, pending); why != "" {
			retire(why)
		}
	}
	window := DurationOr(policy.Spec.Planning.StabilizationWindow, DefaultStabilizationWindow)
	switch {
	case want == nil && awaiting == nil:
		return out
	case want == nil:
		why := DemandGone(awaiting, pending)
		if why == "" {
			why = WithdrawPrefix + "the pending demand no longer needs it"
		}
		retire(why)
		return out
	case awaiting != nil && rollout.RecordedApproval(awaiting) != want.Spec.Approval:
		// The plan under review was made under another approval mode, and no later mode
		// approves it (rollout.ModeApproves): replace it with the same change made under the
		// policy's mode now, so that a mode its approvers chose applies to what is proposed.
		// A new mode does not override a human's no either.
		retire(fmt.Sprintf("superseded: the policy's approval is now %s, this plan was made under %s",
			want.Spec.Approval, rollout.RecordedApproval(awaiting)))
		if out.Refused = RefusedChange(plans, want, policy, now); out.Refused != nil {
			return out
		}
	case awaiting != nil && HashAs(want, awaiting.Name) == awaiting.Spec.Hash:
		out.Current = awaiting
		return out
	case awaiting != nil && now.Sub(awaiting.CreationTimestamp.Time) < window && !Extends(want, awaiting):
		out.Current = awaiting
		return out
	default:
		if out.Refused = RefusedChange(plans, want, policy, now); out.Refused != nil {
			out.Current = awaiting
			return out
		}
		if awaiting != nil {
			why := "superseded by a new plan"
			if Extends(want, awaiting) {
				why = "superseded by a new plan that also serves pods pending since it was proposed"
			}
			retire(why)
		}
	}
	out.Create, out.Current = want, want
	return out
}

// HashAs is the hash the planner's plan want would have had if it had been created under
// name: plans differ in their entry names only (nvidia.PlanEntryName), so this tells whether
// an existing plan makes the very same change.
func HashAs(want *v1alpha1.RepartitionPlan, name string) string {
	steps := slices.Clone(want.Spec.Steps)
	for i := range steps {
		if steps[i].Placement == nil { // a DynamicMIG placement step writes no MIG config
			steps[i].MIGConfigName = nvidia.PlanEntryName(steps[i].MIGConfigName, name)
		}
	}
	return v1alpha1.HashSteps(steps)
}
