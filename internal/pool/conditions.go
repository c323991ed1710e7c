package pool

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Reasons of the policy's conditions that more than one place spells.
const (
	ReasonObserving          = "Observing"
	ReasonNodesSelectedTwice = "NodesSelectedTwice"
	ReasonPlanProposed       = "PlanProposed"
	ReasonNodesNotPlannable  = "NodesNotPlannable"
	ReasonPlanFailed         = "PlanFailed"
)

// Ready says the controller observes the pool: a policy it cannot use gets Ready=False
// elsewhere, with what to fix.
func Ready(nodes int32) Condition {
	return Condition{True: true, Reason: ReasonObserving, Message: fmt.Sprintf("observing %d node(s)", nodes)}
}

// Conflict is True when another policy selects some of the pool's nodes, which both leave alone.
func Conflict(conflicts map[string]string) Condition {
	if len(conflicts) > 0 {
		return Condition{True: true, Reason: ReasonNodesSelectedTwice, Message: ConflictMessage(conflicts)}
	}
	return Condition{Reason: "NoConflict", Message: "no other policy selects these nodes"}
}

// AwaitingApproval is True while the policy's live plan waits for a human; phase is the
// approval gate's verdict on it now (not only its recorded phase).
func AwaitingApproval(current *v1alpha1.RepartitionPlan, phase v1alpha1.PlanPhase) Condition {
	if current != nil && phase == v1alpha1.PlanAwaitingApproval {
		return Condition{True: true, Reason: ReasonPlanProposed, Message: fmt.Sprintf(
			"approve with: kubectl annotate repartitionplan %s %s=%s", current.Name, v1alpha1.AnnotationApprove, current.Spec.Hash)}
	}
	return Condition{Reason: "NoPlanWaiting", Message: "no plan waits for approval"}
}

// Reconfiguring is True while the policy's live plan is past its approval gate.
func Reconfiguring(current *v1alpha1.RepartitionPlan, phase v1alpha1.PlanPhase) Condition {
	if current != nil && phase != v1alpha1.PlanAwaitingApproval {
		return Condition{True: true, Reason: string(phase), Message: "plan " + current.Name + " is " + strings.ToLower(string(phase))}
	}
	return Condition{Reason: "Idle", Message: "no plan is executing"}
}

// Degraded is True when some pool nodes are left out of planning (unreported, see Unreported)
// or the policy's newest finished plan failed (failed, see LastFailedPlan); silent nodes come
// first, since they also keep the next plan from seeing the pool.
func Degraded(unreported, failed string) Condition {
	switch {
	case unreported != "":
		return Condition{True: true, Reason: ReasonNodesNotPlannable, Message: unreported}
	case failed != "":
		return Condition{True: true, Reason: ReasonPlanFailed, Message: failed}
	}
	return Condition{Reason: "AllNodesReporting", Message: "every pool node's agent reports its GPUs"}
}

// LastFailedPlan says what failed when the policy's newest finished plan failed ("" when it
// did not): a failed reconfiguration degrades the pool until a later plan finishes.
func LastFailedPlan(policy *v1alpha1.GPUPoolPolicy, plans []v1alpha1.RepartitionPlan) string {
	for _, p := range OwnPlans(policy, plans) {
		if !Finished(p.Status.Phase) {
			continue
		}
		if p.Status.Phase != v1alpha1.PlanFailed {
			return ""
		}
		msg := "plan " + p.Name + " failed"
		if c := meta.FindStatusCondition(p.Status.Conditions, "Ready"); c != nil && c.Status == metav1.ConditionFalse {
			msg += ": " + c.Message
		}
		for _, n := range p.Status.Nodes {
			if n.State == v1alpha1.NodeFailed {
				msg += "; node " + n.Node + ": " + n.Message
				break
			}
		}
		return msg
	}
	return ""
}

// Finished reports whether a plan is in an end phase: it changes nothing any more.
func Finished(phase v1alpha1.PlanPhase) bool {
	switch phase {
	case v1alpha1.PlanSucceeded, v1alpha1.PlanFailed, v1alpha1.PlanRejected,
		v1alpha1.PlanExpired, v1alpha1.PlanSuperseded:
		return true
	}
	return false
}
