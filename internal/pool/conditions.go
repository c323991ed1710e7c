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

// Reasons of a Ready=False condition that Ready decides; the GPU Operator's own reasons
// (e.g. ClusterPolicyMisconfigured) are passed through, so that an alert names the cause.
const (
	ReasonPaused      = "Paused"
	ReasonNoNodes     = "NoNodes"
	ReasonSpecInvalid = "SpecInvalid"
	ReasonConflict    = "Conflict"
)

// Ready is True only when the pool can do its work: planning is not paused, the selector
// matches nodes, every part of the spec takes effect, no other policy selects the same nodes,
// and NVIDIA's GPU Operator is set to apply what gpupool writes. A condition that is True
// while any of these fails hides the one thing an operator must act on, so each failure makes
// Ready False: the reason is the first in that order, and the message names every one with
// its fix. conditions are the policy's other conditions as this pass set them (SpecValid,
// Conflict, GPUOperatorConfigured); a policy the controller cannot use at all gets Ready=False
// elsewhere (reportUnusable), with what to fix.
func Ready(nodes int32, paused bool, conditions []metav1.Condition) Condition {
	type problem struct{ reason, message string }
	var problems []problem
	if paused {
		problems = append(problems, problem{ReasonPaused,
			"planning is paused (spec.planning.paused); plans already executing run to completion; set it to false to plan again"})
	}
	if nodes == 0 {
		problems = append(problems, problem{ReasonNoNodes,
			"spec.nodeSelector matches no node: compare it with kubectl get nodes --show-labels"})
	}
	if c := meta.FindStatusCondition(conditions, v1alpha1.ConditionSpecValid); c != nil && c.Status == metav1.ConditionFalse {
		problems = append(problems, problem{ReasonSpecInvalid, "part of the spec cannot take effect (see SpecValid): " + c.Message})
	}
	if c := meta.FindStatusCondition(conditions, v1alpha1.ConditionConflict); c != nil && c.Status == metav1.ConditionTrue {
		problems = append(problems, problem{ReasonConflict, "nodes are left alone (see Conflict): " + c.Message})
	}
	if c := meta.FindStatusCondition(conditions, v1alpha1.ConditionGPUOperatorConfigured); c != nil && c.Status == metav1.ConditionFalse {
		problems = append(problems, problem{c.Reason, "plans would not be applied (see GPUOperatorConfigured): " + c.Message})
	}
	if len(problems) == 0 {
		return Condition{True: true, Reason: ReasonObserving, Message: fmt.Sprintf("observing %d node(s)", nodes)}
	}
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.message
	}
	return Condition{Reason: problems[0].reason, Message: strings.Join(msgs, "; ")}
}

// Paused is the policy's Paused condition: True while spec.planning.paused stops planning.
func Paused(paused bool) Condition {
	if paused {
		return Condition{True: true, Reason: ReasonPaused,
			Message: "spec.planning.paused is true: no plan is proposed or approved by the policy's mode; plans already executing run to completion"}
	}
	return Condition{Reason: "Planning", Message: "spec.planning.paused is false"}
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
		if !p.Status.Phase.Finished() {
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
