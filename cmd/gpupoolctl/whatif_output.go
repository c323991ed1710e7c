package main

import (
	"time"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/snapshot"
)

// planOutput is the -o json/yaml document: one object, whatever the number of policies, so
// that scripts can pipe it to jq without caring how the pool is split.
type planOutput struct {
	// Plans are the plans the planner wants now, one per policy that needs a change.
	Plans []*v1alpha1.RepartitionPlan `json:"plans"`
	// Proposals say, per policy, what the controller does with them given the plans already in
	// the cluster (pool.Decide): a plan may be kept back by a refusal or by the plan under
	// review it would replace inside the stabilization window.
	Proposals []proposalOutput `json:"proposals"`
	Unserved  []unservedOutput `json:"unserved"`
	Stranded  strandedOutput   `json:"stranded"`
	// Rightsized is what right-sizing frees per pool, with --rightsized.
	Rightsized *rightsizedOutput `json:"rightsized,omitempty"`
}

// What the controller does about a policy's plans in its pass.
const (
	// actionCreate: it creates the policy's plan in plans.
	actionCreate = "Create"
	// actionKeep: it keeps the plan named (under review or past approval) and creates none.
	actionKeep = "Keep"
	// actionRefused: the change was refused (rejected, or not approved within planTTL) within
	// pool.RefusalMemory; it is not proposed again yet.
	actionRefused = "Refused"
	// actionNone: no plan is wanted, or the controller cannot plan for the policy (reason).
	actionNone = "None"
)

type proposalOutput struct {
	Policy string `json:"policy"`
	// Action is Create, Keep, Refused or None.
	Action string `json:"action"`
	// Plan names the plan kept (Keep), the plan whose refusal holds (Refused), or the plan
	// created (Create, named as plans names it; the controller names it afresh).
	Plan string `json:"plan,omitempty"`
	// Current is the policy's plan after the pass, as its status.currentPlan will say; empty
	// for none, the plan's name in plans for the one created.
	Current string `json:"current,omitempty"`
	// Until is when a refused change may be proposed again (RFC 3339).
	Until string `json:"until,omitempty"`
	// Supersede are the plans under review the controller retires, with why.
	Supersede []supersedeOutput `json:"supersede,omitempty"`
	// Reason says why the controller plans nothing for the policy, when it cannot use it.
	Reason string `json:"reason,omitempty"`
}

type supersedeOutput struct {
	Plan string `json:"plan"`
	Why  string `json:"why"`
}

type unservedOutput struct {
	Pod     string `json:"pod"`
	Policy  string `json:"policy,omitempty"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

type strandedOutput struct {
	Before map[string]int `json:"before"`
	After  map[string]int `json:"after"`
}

// document builds the -o json/yaml object.
func document(rep *snapshot.Report) planOutput {
	out := planOutput{
		Plans:     []*v1alpha1.RepartitionPlan{},
		Proposals: []proposalOutput{},
		Unserved:  []unservedOutput{},
		Stranded:  strandedOutput{Before: nonZero(rep.StrandedBefore), After: nonZero(rep.StrandedAfter)},
	}
	for i := range rep.Policies {
		pr := &rep.Policies[i]
		if pr.Plan != nil {
			// As kubectl get prints objects: with their apiVersion and kind.
			plan := pr.Plan.DeepCopy()
			plan.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("RepartitionPlan"))
			out.Plans = append(out.Plans, plan)
		}
		out.Proposals = append(out.Proposals, proposal(pr))
	}
	for _, u := range rep.Unserved {
		out.Unserved = append(out.Unserved, unservedOutput{
			Pod: u.Pod.String(), Policy: u.Policy, Reason: string(u.Reason), Message: u.Message})
	}
	return out
}

// proposal is the controller's decision on the policy's plans, as the document says it.
func proposal(pr *snapshot.PolicyReport) proposalOutput {
	d := pr.Proposal
	out := proposalOutput{Policy: pr.Policy.Name, Action: actionNone, Reason: pr.Unusable}
	if d.Current != nil {
		out.Current = d.Current.Name
	}
	for _, s := range d.Supersede {
		out.Supersede = append(out.Supersede, supersedeOutput{Plan: s.Plan.Name, Why: s.Why})
	}
	switch {
	case d.Refused != nil:
		out.Action, out.Plan, out.Until = actionRefused, d.Refused.Plan, d.Refused.Until.UTC().Format(time.RFC3339)
	case d.Create != nil:
		out.Action, out.Plan = actionCreate, d.Create.Name
	case d.Current != nil:
		out.Action, out.Plan = actionKeep, d.Current.Name
	}
	return out
}

func nonZero(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}
