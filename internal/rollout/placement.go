package rollout

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Actions of the placement protocol.
const (
	// ActionTaint creates one DeviceTaintRule with effect NoSchedule per device the step keeps
	// free (spec.steps[].placement.keepFree), or finds it there already.
	ActionTaint Action = "TaintDevices"
	// ActionUntaint deletes the step's DeviceTaintRules; gone ones are fine.
	ActionUntaint Action = "UntaintDevices"
)

// PlacementObservation is what the placement protocol reads of the world besides the node and
// the pods it evicts.
type PlacementObservation struct {
	// Refused says why the step does not hold against the world now ("" when it does):
	// CheckPlacement on what the controller read. A placement step is input from the API; it
	// is judged before anything is touched, and again on every pass, so that a status claiming
	// progress (written by someone else) never skips the check.
	Refused string
	// TaintsHeld is true when gpupool's DeviceTaintRule exists for every device the step keeps
	// free.
	TaintsHeld bool
	// TaintForeign names a DeviceTaintRule under one of the step's rule names that gpupool did
	// not make; the step never adopts it, nor deletes it.
	TaintForeign string
	// ClaimGone is true when the pending ResourceClaim the step opens the placement for no
	// longer exists: nobody waits for the placement any more.
	ClaimGone bool
	// Allocated, once the pending claim is allocated, says where ("device gpu-0-mig-... of
	// node n"); AsPlanned is true when that is the step's own Device on its node.
	Allocated string
	AsPlanned bool
}

// Placement is the protocol of a step that opens one MIG placement on a node where NVIDIA's
// DRA driver runs its DynamicMIG mode: check the step against the world, taint the devices it
// keeps free (NoSchedule: the scheduler's allocator stops handing them out, claims already
// allocated keep theirs), evict the claim pods in the way through the Eviction API, wait for
// the pending claim to be allocated, and remove the taints however the step ends. Nothing is
// cordoned, relabelled or drained: pods on the other instances keep running.
//
// States: Pending (not started), Draining (taints first; evictions only once every taint is
// seen), Verifying (the pods in the way are gone; waiting for the claim's allocation), Done,
// Failed.
var Placement = Protocol{
	Guards: []Guard{
		{Name: GuardNodeGone, Check: placementNodeGone},
		{Name: GuardPlacementRefused, Check: placementRefused},
		{Name: GuardUnsafe, Check: placementUnsafe},
		{Name: GuardClaimGone, Check: placementClaimGone},
	},
	Handlers: map[v1alpha1.NodeStepState]Handler{
		v1alpha1.NodePending:   placementStart,
		v1alpha1.NodeDraining:  placementDraining,
		v1alpha1.NodeVerifying: placementAwaitClaim,
	},
}

// Names of the placement protocol's own guards.
const (
	GuardPlacementRefused = "PlacementRefused"
	GuardClaimGone        = "ClaimGone"
)

// StepFor is the protocol that carries out a step: Placement for a step that opens a
// placement on a DynamicMIG node, MIGRelabel for every other.
func StepFor(step v1alpha1.NodeStep) Protocol {
	if step.Placement != nil {
		return Placement
	}
	return MIGRelabel
}

// untaint is the end of every placement step: its taints go, whatever else happened.
var untaint = []Action{ActionUntaint}

func placementNodeGone(in StepInput, cur v1alpha1.NodeStepStatus) (StepResult, bool) {
	if in.Obs.NodeExists {
		return StepResult{}, false
	}
	return fail(cur, in.Now, "node "+in.Step.Node+" no longer exists", untaint), true
}

func placementRefused(in StepInput, cur v1alpha1.NodeStepStatus) (StepResult, bool) {
	if in.Obs.Placement.Refused == "" {
		return StepResult{}, false
	}
	what := "refused before any eviction: "
	if cur.State != v1alpha1.NodePending {
		what = "stopped: "
	}
	return fail(cur, in.Now, what+in.Obs.Placement.Refused, untaint), true
}

func placementUnsafe(in StepInput, cur v1alpha1.NodeStepStatus) (StepResult, bool) {
	if in.Obs.Unsafe == "" || cur.State == v1alpha1.NodeVerifying {
		return StepResult{}, false
	}
	return fail(cur, in.Now, "cancelled: "+in.Obs.Unsafe, untaint), true
}

func placementClaimGone(in StepInput, cur v1alpha1.NodeStepStatus) (StepResult, bool) {
	if !in.Obs.Placement.ClaimGone {
		return StepResult{}, false
	}
	c := in.Step.Placement.Claim
	return fail(cur, in.Now, fmt.Sprintf("ResourceClaim %s/%s is gone: no claim waits for the placement any more", c.Namespace, c.Name), untaint), true
}

// placementStart taints the devices the step keeps free; nothing is evicted before every
// taint is seen.
func placementStart(in StepInput, cur v1alpha1.NodeStepStatus) StepResult {
	p := in.Step.Placement
	if in.Obs.Placement.Allocated != "" {
		return fail(cur, in.Now, "refused before any eviction: ResourceClaim "+p.Claim.Namespace+"/"+p.Claim.Name+
			" is allocated already ("+in.Obs.Placement.Allocated+"): nothing to open", untaint)
	}
	cur.StartedTime = &metav1.Time{Time: in.Now}
	return move(cur, v1alpha1.NodeDraining, in.Now, fmt.Sprintf("tainting %d device(s) NoSchedule to keep memory slices %s of GPU %d free for ResourceClaim %s/%s",
		len(p.KeepFree), sliceRange(p.Start, p.Size), p.GPU, p.Claim.Namespace, p.Claim.Name), quickLook, ActionTaint)
}

// placementDraining evicts the claim pods in the way once the taints hold, until none is left.
func placementDraining(in StepInput, cur v1alpha1.NodeStepStatus) StepResult {
	obs, p := in.Obs, in.Step.Placement
	switch {
	case obs.Placement.Allocated != "":
		return allocated(in, cur)
	case obs.Placement.TaintForeign != "":
		return fail(cur, in.Now, "stopped before evicting: "+obs.Placement.TaintForeign, untaint)
	case !obs.Placement.TaintsHeld:
		if in.Waited() >= in.Limits.Drain {
			return fail(cur, in.Now, fmt.Sprintf("the DeviceTaintRules were not seen within drainTimeout %s; nothing was evicted", in.Limits.Drain), untaint)
		}
		return stay(cur, fmt.Sprintf("waiting for the %d DeviceTaintRule(s) to be seen before evicting", len(p.KeepFree)), quickLook, ActionTaint)
	case obs.PodsLeft > 0 && obs.LandingGone != "":
		return fail(cur, in.Now, fmt.Sprintf("stopped evicting with %d pod(s) left: %s", obs.PodsLeft, obs.LandingGone), untaint)
	case obs.PodsLeft == 0:
		return move(cur, v1alpha1.NodeVerifying, in.Now, fmt.Sprintf("the claim pods in the way are gone; waiting for ResourceClaim %s/%s to be allocated %s",
			p.Claim.Namespace, p.Claim.Name, p.Device), quickLook)
	case in.Waited() >= in.Limits.Drain:
		return fail(cur, in.Now, fmt.Sprintf("eviction timed out after drainTimeout %s with %d pod(s) left: %s",
			in.Limits.Drain, obs.PodsLeft, obs.DrainMessage), untaint)
	}
	msg := fmt.Sprintf("%d pod(s) left", obs.PodsLeft)
	if obs.DrainMessage != "" {
		msg += ": " + obs.DrainMessage
	}
	return stay(cur, msg, drainBackoff(in.Waited()), ActionEvict)
}

// placementAwaitClaim waits for the scheduler to allocate the pending claim, within the
// policy's configureTimeout.
func placementAwaitClaim(in StepInput, cur v1alpha1.NodeStepStatus) StepResult {
	p := in.Step.Placement
	if in.Obs.Placement.Allocated != "" {
		return allocated(in, cur)
	}
	if in.Waited() >= in.Limits.Configure {
		return fail(cur, in.Now, fmt.Sprintf("ResourceClaim %s/%s was not allocated within configureTimeout %s after the claim pods in its way "+
			"had gone, although memory slices %s of GPU %d were kept free: check the claim's pod with kubectl gpupool why",
			p.Claim.Namespace, p.Claim.Name, in.Limits.Configure, sliceRange(p.Start, p.Size), p.GPU), untaint)
	}
	return stay(cur, cur.Message, slowLook)
}

// allocated ends the step: the claim has its device, wherever the scheduler put it.
func allocated(in StepInput, cur v1alpha1.NodeStepStatus) StepResult {
	p := in.Step.Placement
	msg := fmt.Sprintf("ResourceClaim %s/%s was allocated %s", p.Claim.Namespace, p.Claim.Name, in.Obs.Placement.Allocated)
	if in.Obs.Placement.AsPlanned {
		msg += ", the planned placement"
	} else {
		msg += fmt.Sprintf(", not the planned %s (the scheduler found room elsewhere first)", p.Device)
	}
	return move(cur, v1alpha1.NodeDone, in.Now, msg, 0, untaint...)
}

func sliceRange(start, size int32) string {
	if size == 1 {
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d-%d", start, start+size-1)
}
