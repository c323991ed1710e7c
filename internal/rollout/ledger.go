package rollout

import (
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// CordonRecord is gpupool's own record that a plan cordoned a node, kept where only the manager
// writes (the cordon ledger, a ConfigMap in gpupool's config namespace that an admission policy
// keeps for the manager alone). The node's gpupool.io/cordoned-by annotation says the same for
// people to read, but anyone who may patch nodes can write an annotation: gpupool acts on a
// cordon, and ever reopens a node, only when the annotation and the record agree.
//
// The record is written before the cordon (a write-ahead entry), with whether someone else had
// cordoned the node first, judged from the node version the cordon is then applied to with
// optimistic concurrency; it is removed after the node is given back.
type CordonRecord struct {
	// Plan names the RepartitionPlan that cordoned the node, and PlanUID is its UID, so that a
	// later plan of the same name is not taken for it.
	Plan    string `json:"plan"`
	PlanUID string `json:"planUID,omitempty"`
	// Policy is the plan's policy, so that a node whose cordon outlives its plan is judged
	// against the pool it was cordoned for.
	Policy string `json:"policy,omitempty"`
	// WasUnschedulable is true when someone else had cordoned the node before the plan did:
	// gpupool then never uncordons it.
	WasUnschedulable bool `json:"wasUnschedulable,omitempty"`
}

// ParseLedger decodes the cordon ledger's data, one JSON record per node. An entry that does
// not decode is left out: it is not gpupool's record (the manager writes only what EncodeLedger
// makes), so no node is reopened on its word.
func ParseLedger(data map[string]string) map[string]CordonRecord {
	out := make(map[string]CordonRecord, len(data))
	for node, raw := range data {
		var rec CordonRecord
		if err := json.Unmarshal([]byte(raw), &rec); err != nil || rec.Plan == "" {
			continue
		}
		out[node] = rec
	}
	return out
}

// EncodeRecord is the ledger value of one record.
func EncodeRecord(rec CordonRecord) (string, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return "", fmt.Errorf("encoding the cordon record of plan %s: %w", rec.Plan, err)
	}
	return string(b), nil
}

// CordonedByPlan is the plan whose cordon gpupool holds on node, "" when none: the node's
// annotation names a plan and the ledger records that plan's cordon there. An annotation the
// ledger does not back (forged, or left by hand) names nobody.
func CordonedByPlan(node *corev1.Node, rec *CordonRecord) string {
	ann := node.Annotations[v1alpha1.AnnotationCordonedBy]
	if rec == nil || ann == "" || ann != rec.Plan {
		return ""
	}
	return ann
}

// CordonIntent is the record to write before cordoning node for plan: whether someone else
// had cordoned the node is judged from this version of it, and the cordon is applied to this
// version only. A record that already holds this plan's applied cordon is kept as it is.
func CordonIntent(node *corev1.Node, plan, planUID, policy string, rec *CordonRecord) CordonRecord {
	if CordonedByPlan(node, rec) == plan {
		return *rec
	}
	return CordonRecord{Plan: plan, PlanUID: planUID, Policy: policy, WasUnschedulable: node.Spec.Unschedulable}
}

// MayUncordon says whether gpupool may clear spec.unschedulable on node for plan: the ledger
// backs the plan's cordon there and nobody else had cordoned the node before it.
func MayUncordon(node *corev1.Node, plan string, rec *CordonRecord) bool {
	return CordonedByPlan(node, rec) == plan && plan != "" && !rec.WasUnschedulable &&
		node.Annotations[v1alpha1.AnnotationWasUnschedulable] != "true"
}

// StaleRecord says whether a ledger record no longer stands for a cordon and may be dropped:
// the node is gone, or it does not carry the plan's annotation (the cordon was never applied,
// was given back, or someone took the node over) and the plan no longer runs a step there.
func StaleRecord(node *corev1.Node, rec CordonRecord, plan *v1alpha1.RepartitionPlan) bool {
	if node == nil {
		return true
	}
	if node.Annotations[v1alpha1.AnnotationCordonedBy] == rec.Plan {
		return false
	}
	if plan == nil || (rec.PlanUID != "" && string(plan.UID) != rec.PlanUID) {
		return true
	}
	switch plan.Status.Phase {
	case "", v1alpha1.PlanAwaitingApproval, v1alpha1.PlanApproved, v1alpha1.PlanExecuting:
		// A cordon written ahead and not applied yet: the step applies it, or ends. A plan that
		// looks unapproved is one a cache has not seen approved yet: only an approved plan
		// writes a record. Dropping the record under the step would make its own cordon read
		// as someone else's, and the node would never be reopened.
		i := slices.IndexFunc(plan.Status.Nodes, func(s v1alpha1.NodeStepStatus) bool { return s.Node == node.Name })
		return i >= 0 && (plan.Status.Nodes[i].State == v1alpha1.NodeDone || plan.Status.Nodes[i].State == v1alpha1.NodeFailed)
	}
	return true
}
