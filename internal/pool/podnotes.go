package pool

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/planner"
)

// Reasons of the Events gpupool writes on a pending GPU pod: what the pod's owner sees in
// kubectl describe pod, next to the scheduler's FailedScheduling.
const (
	// PodReasonPlanned: a plan that serves the pod waits for a human's approval.
	PodReasonPlanned = "GPUPoolPlanAwaitingApproval"
	// PodReasonPlanRunning: an approved plan that serves the pod is being carried out.
	PodReasonPlanRunning = "GPUPoolPlanRunning"
	// PodReasonCannotHelp: repartitioning cannot serve the pod; the message names the layer
	// (the planner's reason) and what blocks it.
	PodReasonCannotHelp = "GPUPoolCannotHelp"
	// PodReasonRefused: the change that would serve the pod was rejected (or expired) recently.
	PodReasonRefused = "GPUPoolChangeRefused"
)

// PodNote is what gpupool tells a pending pod.
type PodNote struct {
	UID     types.UID
	Reason  string
	Message string
	// Key changes only when what the pod is told changes in substance (another plan, another
	// layer), so that a pod gets one Event per change, not one per pass.
	Key string
}

// PodNotes decides what to tell each pending pod of the pool: which plan serves it and where
// that plan stands, or why no plan can. plan is the policy's live plan (nil when none), phase
// the approval gate's verdict on it, refused the refusal that held back wanted, the plan the
// planner wanted (both nil when none). Pods the current layouts already fit (the scheduler will place
// them), pods of other pools (NotInPool), and pods served by a plan yet to be proposed are
// told nothing: there is nothing they could act on.
func PodNotes(pending []demand.Request, res *planner.Result, plan *v1alpha1.RepartitionPlan, phase v1alpha1.PlanPhase,
	refused *Refusal, wanted *v1alpha1.RepartitionPlan) map[types.NamespacedName]PodNote {
	out := map[types.NamespacedName]PodNote{}
	uid := make(map[types.NamespacedName]types.UID, len(pending))
	for _, r := range pending {
		uid[r.Pod] = r.UID
	}
	if plan != nil {
		for _, p := range plan.Spec.Expected.Pods {
			pod := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
			if _, ok := uid[pod]; !ok {
				continue
			}
			switch phase {
			case v1alpha1.PlanAwaitingApproval:
				out[pod] = PodNote{UID: uid[pod], Reason: PodReasonPlanned, Key: PodReasonPlanned + "/" + plan.Name, Message: fmt.Sprintf(
					"gpupool plan %s repartitions GPUs for this pod; it waits for approval (kubectl gpupool plan %s)", plan.Name, plan.Name)}
			case v1alpha1.PlanApproved, v1alpha1.PlanExecuting:
				out[pod] = PodNote{UID: uid[pod], Reason: PodReasonPlanRunning, Key: PodReasonPlanRunning + "/" + plan.Name, Message: fmt.Sprintf(
					"gpupool plan %s is repartitioning GPUs for this pod (kubectl gpupool plan %s)", plan.Name, plan.Name)}
			}
		}
	}
	for _, u := range res.Unserved {
		if _, ok := out[u.Pod]; ok || u.Reason == planner.ReasonNotInPool {
			continue
		}
		if _, ok := uid[u.Pod]; !ok {
			continue
		}
		out[u.Pod] = PodNote{UID: uid[u.Pod], Reason: PodReasonCannotHelp, Key: PodReasonCannotHelp + "/" + string(u.Reason), Message: fmt.Sprintf(
			"gpupool cannot serve this pod by repartitioning (%s): %s; kubectl gpupool why %s -n %s",
			u.Reason, u.Message, u.Pod.Name, u.Pod.Namespace)}
	}
	if refused != nil && wanted != nil {
		for _, p := range wanted.Spec.Expected.Pods {
			pod := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
			if _, ok := out[pod]; ok {
				continue
			}
			if _, ok := uid[pod]; !ok {
				continue
			}
			out[pod] = PodNote{UID: uid[pod], Reason: PodReasonRefused, Key: PodReasonRefused + "/" + refused.Plan, Message: fmt.Sprintf(
				"the change that would serve this pod was %s in plan %s; gpupool does not propose it again before %s",
				refusedWord(refused.Phase), refused.Plan, refused.Until.UTC().Format(time.RFC3339))}
		}
	}
	return out
}

func refusedWord(phase v1alpha1.PlanPhase) string {
	if phase == v1alpha1.PlanExpired {
		return "not approved in time"
	}
	return "rejected"
}
