package rollout

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// CordonAction is what the cordon janitor does with a node that carries gpupool's cordon
// annotation.
type CordonAction int

const (
	// CordonHeld: a live plan explains the cordon; nothing to do.
	CordonHeld CordonAction = iota
	// CordonWait: mig-manager is still at work on the node; reopening it now would hand
	// half-made devices to new pods. Look again later.
	CordonWait
	// CordonKeep: the plan is gone or ended and the node's GPUs may be half-configured; keep
	// it cordoned and say once what to check.
	CordonKeep
	// CordonRelease: drop gpupool's annotations, and uncordon unless someone else had cordoned
	// the node first.
	CordonRelease
)

// CordonDecision is the janitor's verdict on one node, with the words for its Event.
type CordonDecision struct {
	Action CordonAction
	// Why the node must stay cordoned (CordonKeep), from MayBeHalfConfigured.
	Why string
	// Gone says what became of the plan, for the Event.
	Gone string
	// Uncordon is true when CordonRelease also reopens the node.
	Uncordon bool
}

// JudgeCordon decides what becomes of gpupool's cordon on node, which plan owner (nil when it
// no longer exists, named ownerName) cordoned; gpuNode is the node's GPU report, nil when none.
func JudgeCordon(node *corev1.Node, ownerName string, owner *v1alpha1.RepartitionPlan, gpuNode *v1alpha1.GPUNode) CordonDecision {
	if owner != nil && Explains(owner, node) {
		return CordonDecision{Action: CordonHeld}
	}
	if state, _ := nvidia.MIGConfigState(node); state == nvidia.StatePending || state == nvidia.StateRebooting {
		return CordonDecision{Action: CordonWait}
	}
	gone := "plan " + ownerName + " no longer exists"
	if owner != nil {
		gone = fmt.Sprintf("plan %s is %s", ownerName, owner.Status.Phase)
	}
	// A failed plan whose step here ended (done, or failed and since uncordoned by someone) has
	// judged the GPUs itself. A step it left mid-way has not: a plan refused while executing
	// (its owner reference or its nodes stopped matching) stops with steps in flight, and such
	// a node is judged here like one whose plan was deleted.
	judged := false
	if owner != nil && owner.Status.Phase == v1alpha1.PlanFailed {
		if i := slices.IndexFunc(owner.Status.Nodes, func(s v1alpha1.NodeStepStatus) bool { return s.Node == node.Name }); i >= 0 {
			judged = owner.Status.Nodes[i].State == v1alpha1.NodeFailed || owner.Status.Nodes[i].State == v1alpha1.NodeDone
		}
	}
	if why := MayBeHalfConfigured(node, gpuNode); why != "" && !judged {
		return CordonDecision{Action: CordonKeep, Why: why, Gone: gone}
	}
	foreign := node.Annotations[v1alpha1.AnnotationWasUnschedulable] == "true"
	if owner != nil {
		if i := slices.IndexFunc(owner.Status.Nodes, func(s v1alpha1.NodeStepStatus) bool { return s.Node == node.Name }); i >= 0 {
			foreign = foreign || owner.Status.Nodes[i].WasUnschedulable
		}
		gone = fmt.Sprintf("plan %s is %s and no longer holds the node", ownerName, owner.Status.Phase)
	}
	return CordonDecision{Action: CordonRelease, Gone: gone, Uncordon: node.Spec.Unschedulable && !foreign}
}

// Explains says whether a plan still accounts for gpupool's cordon on a node: it is running and
// has a step there that is not finished, or the step failed with the node deliberately left
// cordoned (a GPU may be half-configured) and nobody has uncordoned it since.
func Explains(plan *v1alpha1.RepartitionPlan, node *corev1.Node) bool {
	if !slices.ContainsFunc(plan.Spec.Steps, func(s v1alpha1.NodeStep) bool { return s.Node == node.Name }) {
		return false
	}
	i := slices.IndexFunc(plan.Status.Nodes, func(s v1alpha1.NodeStepStatus) bool { return s.Node == node.Name })
	switch plan.Status.Phase {
	case "", v1alpha1.PlanAwaitingApproval, v1alpha1.PlanApproved, v1alpha1.PlanExecuting:
		// Only an approved plan cordons; a cached plan that looks unapproved is older than the
		// cordon, and its status update is on its way.
		// A step whose status write was lost after cordoning is not finished either.
		return i < 0 || plan.Status.Nodes[i].State != v1alpha1.NodeDone
	case v1alpha1.PlanFailed:
		return i >= 0 && plan.Status.Nodes[i].State == v1alpha1.NodeFailed && node.Spec.Unschedulable
	}
	return false
}
