package pool

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/planner"
)

// Condition is a status condition decided here and written by a controller.
type Condition struct {
	True            bool
	Reason, Message string
}

// ReasonAwaitingNextPlan: pending pods that the plan under review does not serve, though the
// planner would serve them; the next plan does, once the policy's stabilization window lets
// the plan under review be replaced.
const ReasonAwaitingNextPlan = "AwaitingNextPlan"

// DemandSatisfied is the policy's DemandSatisfied condition. It is True only when no GPU pod
// is pending. Otherwise it says whether every pending pod is served, and counts a pod as served
// only when it fits the current layouts (res.FitsNow) or the live plan names it among its
// expected pods: a plan kept while new demand arrived does not serve the newcomers, and the
// condition must not claim it does. plan is the policy's live plan, nil when none.
func DemandSatisfied(pending []demand.Request, res *planner.Result, plan *v1alpha1.RepartitionPlan) Condition {
	if len(pending) == 0 {
		return Condition{True: true, Reason: "NoPendingPods", Message: "no GPU pod is pending"}
	}
	served := map[types.NamespacedName]bool{}
	for _, p := range res.FitsNow {
		served[p] = true
	}
	by := "the current layouts serve them all"
	if plan != nil {
		for _, p := range plan.Spec.Expected.Pods {
			served[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = true
		}
		by = "the current layouts or plan " + plan.Name + " serve them all"
	}
	var missing []types.NamespacedName
	for _, r := range pending {
		if !served[r.Pod] {
			missing = append(missing, r.Pod)
		}
	}
	if len(missing) == 0 {
		return Condition{Reason: "PlanServesPending", Message: fmt.Sprintf("%d pod(s) pending; %s", len(pending), by)}
	}
	unserved := map[types.NamespacedName]planner.Unserved{}
	for _, u := range res.Unserved {
		unserved[u.Pod] = u
	}
	for _, p := range missing {
		if u, ok := unserved[p]; ok {
			return Condition{Reason: string(u.Reason), Message: fmt.Sprintf("%d pod(s) pending, %d not served; e.g. %s %s",
				len(pending), len(missing), u.Pod, u.Message)}
		}
	}
	// Every pod left out is one the planner would serve: the live plan predates it, or no plan
	// is live (a plan making the same change was refused within the day).
	if plan == nil {
		return Condition{Reason: ReasonAwaitingNextPlan, Message: fmt.Sprintf(
			"%d pod(s) pending, %d not served by any plan; e.g. %s, which the planner can serve but no live plan proposes yet",
			len(pending), len(missing), missing[0])}
	}
	return Condition{Reason: ReasonAwaitingNextPlan, Message: fmt.Sprintf(
		"%d pod(s) pending, %d not served by plan %s; e.g. %s, which the next plan serves", len(pending), len(missing), plan.Name, missing[0])}
}

// Extends reports whether the plan want serves a pending pod that the plan under review does
// not, and at least as many pods: new demand that arrived while a human reviews a plan is then
// worth replacing it inside the stabilization window, where a plan that merely rearranges the
// same demand is not.
func Extends(want, awaiting *v1alpha1.RepartitionPlan) bool {
	if len(want.Spec.Expected.Pods) < len(awaiting.Spec.Expected.Pods) {
		return false
	}
	old := make(map[v1alpha1.PodReference]bool, len(awaiting.Spec.Expected.Pods))
	for _, p := range awaiting.Spec.Expected.Pods {
		old[p] = true
	}
	for _, p := range want.Spec.Expected.Pods {
		if !old[p] {
			return true
		}
	}
	return false
}

// ShapeReason keys the unserved pending pods of a pool: the GPU resource asked for and the
// planner's reason.
type ShapeReason struct {
	Shape  string
	Reason planner.Reason
}

// UnservedByShape counts the pending pods the planner does not serve, per GPU resource they ask
// for and reason. Pods outside the pool (NotInPool) are left out: every pool would count the
// pods of every other pool. A pod asking for several GPU resources counts under each.
func UnservedByShape(pending []demand.Request, res *planner.Result) map[ShapeReason]int {
	reasons := make(map[types.NamespacedName]planner.Reason, len(res.Unserved))
	for _, u := range res.Unserved {
		if u.Reason != planner.ReasonNotInPool {
			reasons[u.Pod] = u.Reason
		}
	}
	out := map[ShapeReason]int{}
	for _, r := range pending {
		reason, ok := reasons[r.Pod]
		if !ok {
			continue
		}
		for _, g := range r.GPUs {
			out[ShapeReason{Shape: string(g.Resource), Reason: reason}]++
		}
	}
	return out
}
