package rollout

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// Reasons a plan is refused before it may touch any node: it is not a plan the manager made
// for its policy. They are the reason of the plan's Ready=False condition and of its Event.
const (
	ReasonNotOwned          = "NotOwnedByPolicy"
	ReasonNodeOutsidePool   = "NodeOutsidePool"
	ReasonSpecHashMismatch  = "HashMismatch"
	ReasonDisruptiveLie     = "DisruptiveMismatch"
	ReasonForeignConfigName = "ForeignConfigName"
	ReasonNotApproved       = "NotApproved"
	ReasonMissingPodUID     = "EvictionWithoutUID"
	ReasonBadOrder          = "InvalidStepOrder"
)

// Refusal says why a plan must not run; the zero value means it may.
type Refusal struct {
	Reason, Message string
}

// Refused reports whether the plan must not run.
func (r Refusal) Refused() bool { return r.Reason != "" }

// Authenticate decides whether a plan is one the manager made for its policy, and may
// therefore run at all. A RepartitionPlan is input from the API like any other object: anyone
// allowed to create one could name an existing policy and some pods. Only a plan that the
// policy controls (a controller ownerReference carrying the policy's UID), whose every node is
// in the policy's pool now, whose hash is the hash of its steps, whose disruptive flags tell
// the truth, whose evictions name pod UIDs and whose config names are gpupool's own, is
// executed. The admission policies shipped in config/ keep anyone but the manager from creating
// plans; this check holds even where they are not installed.
func Authenticate(plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy, inPool func(node string) bool) Refusal {
	owner := metav1.GetControllerOfNoCopy(plan)
	if owner == nil || owner.Kind != "GPUPoolPolicy" || owner.Name != policy.Name || owner.UID != policy.UID ||
		!strings.HasPrefix(owner.APIVersion, v1alpha1.GroupVersion.Group+"/") {
		return Refusal{ReasonNotOwned, fmt.Sprintf("plan is not controlled by policy %s (uid %s): only plans the manager "+
			"made for the policy run; delete this plan", policy.Name, policy.UID)}
	}
	if got := v1alpha1.HashSteps(plan.Spec.Steps); got != plan.Spec.Hash {
		return Refusal{ReasonSpecHashMismatch, fmt.Sprintf("spec.hash %s is not the hash of the plan's steps (%s): the plan "+
			"was not made by the manager; delete it", plan.Spec.Hash, got)}
	}
	evicts := false
	for _, step := range plan.Spec.Steps {
		if !inPool(step.Node) {
			return Refusal{ReasonNodeOutsidePool, fmt.Sprintf("node %s is not in the pool of policy %s (its nodeSelector "+
				"does not select it)", step.Node, policy.Name)}
		}
		if step.Disruptive != (len(step.Evictions) > 0) {
			return Refusal{ReasonDisruptiveLie, fmt.Sprintf("the step on node %s says disruptive=%t but evicts %d pod(s)",
				step.Node, step.Disruptive, len(step.Evictions))}
		}
		evicts = evicts || len(step.Evictions) > 0
		if i := slices.IndexFunc(step.Evictions, func(e v1alpha1.Eviction) bool { return e.UID == "" }); i >= 0 {
			e := step.Evictions[i]
			return Refusal{ReasonMissingPodUID, fmt.Sprintf("the eviction of pod %s/%s on node %s names no pod UID, so it "+
				"could evict a pod the planner never saw", e.Namespace, e.Name, step.Node)}
		}
		// A placement step writes no config at all (the API refuses one that names any).
		if (step.Placement == nil && !ownConfigName(step.MIGConfigName)) || (step.SharingConfigName != "" && !ownConfigName(step.SharingConfigName)) {
			return Refusal{ReasonForeignConfigName, fmt.Sprintf("the step on node %s names config %q/%q, which is not one of "+
				"gpupool's own entries", step.Node, step.MIGConfigName, step.SharingConfigName)}
		}
	}
	if why := orderProblem(plan.Spec.Steps, inPool); why != "" {
		return Refusal{ReasonBadOrder, why}
	}
	if plan.Spec.Disruptive != evicts {
		return Refusal{ReasonDisruptiveLie, fmt.Sprintf("spec.disruptive is %t but the steps evict %s pods", plan.Spec.Disruptive,
			map[bool]string{true: "some", false: "no"}[evicts])}
	}
	return Refusal{}
}

// orderProblem says what is wrong with the steps' order and landings ("" when nothing): every
// node a step waits for is another step of the plan, the waits have no cycle (a cycle would
// leave every step in it pending for ever), and every landing is a pool node.
func orderProblem(steps []v1alpha1.NodeStep, inPool func(string) bool) string {
	waits := map[string][]string{}
	for _, step := range steps {
		waits[step.Node] = step.WaitsFor
	}
	for _, step := range steps {
		for _, other := range step.WaitsFor {
			if _, ok := waits[other]; !ok || other == step.Node {
				return fmt.Sprintf("the step on node %s waits for %q, which is not another step of the plan", step.Node, other)
			}
		}
		for _, e := range step.Evictions {
			if e.LandingNode != "" && e.LandingNode != step.Node && !inPool(e.LandingNode) {
				return fmt.Sprintf("the eviction of pod %s/%s moves it to node %s, which is not in the policy's pool", e.Namespace, e.Name, e.LandingNode)
			}
		}
	}
	state := map[string]int{} // 1 visiting, 2 done
	var cycle func(n string) bool
	cycle = func(n string) bool {
		switch state[n] {
		case 1:
			return true
		case 2:
			return false
		}
		state[n] = 1
		for _, m := range waits[n] {
			if cycle(m) {
				return true
			}
		}
		state[n] = 2
		return false
	}
	for _, step := range steps {
		if cycle(step.Node) {
			return fmt.Sprintf("the steps' waitsFor form a cycle through node %s, so they could never start", step.Node)
		}
	}
	return ""
}

// ownConfigName says whether name is one of gpupool's own mig-parted entries or device-plugin
// keys: a plan may only ask NVIDIA's components to apply what gpupool wrote.
func ownConfigName(name string) bool {
	return strings.HasPrefix(name, nvidia.ConfigPrefix) && len(name) > len(nvidia.ConfigPrefix)
}

// Approved says whether the plan's approval holds now: its gpupool.io/approve annotation
// carries its own hash (an admission policy lets only approvers set it), or both the mode it
// was made under and its policy's approval mode now approve it (ModeApproves). The plan's
// recorded phase is never evidence: whoever may write a plan's status could write "Approved".
// A plan whose approval does not hold starts no node.
func Approved(plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy) bool {
	if policy == nil {
		return false
	}
	annotations := plan.GetAnnotations()
	if _, rejected := annotations[v1alpha1.AnnotationReject]; rejected {
		return false
	}
	if annotations[v1alpha1.AnnotationApprove] == plan.Spec.Hash {
		return true
	}
	// Not autoApproves: pausing a policy stops planning and new approvals, while plans it
	// approved before run to completion.
	_, ok := ModeApproves(plan, policy)
	return ok
}
