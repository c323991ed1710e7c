package controllers

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/rollout"
)

// observePlacement reads what a placement step's decision (rollout.Placement) depends on: the
// node, the pods it evicts, the driver's devices and claims (CheckPlacement, on every pass),
// its DeviceTaintRules, the pending claim and, while evicting, the landings.
func (r *PlanReconciler) observePlacement(ctx context.Context, plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy,
	step v1alpha1.NodeStep, cur v1alpha1.NodeStepStatus) (rollout.Observation, error) {
	var obs rollout.Observation
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: step.Node}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return obs, nil
		}
		return obs, fmt.Errorf("reading node %s: %w", step.Node, err)
	}
	obs.NodeExists = true
	obs.Unschedulable = node.Spec.Unschedulable
	report := &v1alpha1.GPUNode{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: step.Node}, report); apierrors.IsNotFound(err) {
		report = nil
	} else if err != nil {
		return obs, fmt.Errorf("reading GPUNode %s: %w", step.Node, err)
	}
	for _, e := range step.Evictions {
		pod, err := r.pods.Get(types.NamespacedName{Namespace: e.Namespace, Name: e.Name})
		switch {
		case err != nil:
			return obs, fmt.Errorf("reading pod %s/%s: %w", e.Namespace, e.Name, err)
		case pod == nil || string(pod.UID) != e.UID || pod.NodeName != step.Node:
			// Gone, or a replacement the plan never named.
		default:
			obs.PodsLeft++
			if why := inventory.SafetyBlocker(pod, evictionRules(policy)); why != "" && pod.DeletionTimestamp.IsZero() && obs.Unsafe == "" {
				obs.Unsafe = fmt.Sprintf("pod %s/%s may not be evicted now: %s", e.Namespace, e.Name, why)
			}
		}
	}
	w, err := r.readPlacementWorld(ctx)
	if err != nil {
		return obs, err
	}
	judged := stepProfile(step, node, report)
	facts, err := r.placementFacts(w, judged, node, report, cur.State == v1alpha1.NodePending || cur.State == "")
	if err != nil {
		return obs, err
	}
	switch {
	case !r.readSlices:
		obs.Placement.Refused = "the API server does not serve resource.k8s.io/v1, so no DRA driver runs on node " + step.Node
	case !r.taintRules:
		obs.Placement.Refused = "the API server does not serve DeviceTaintRules (resource.k8s.io/v1, Kubernetes 1.37 and later), " +
			"so gpupool cannot keep the opened slices free while claims move"
		return obs, nil
	default:
		obs.Placement.Refused = rollout.CheckPlacement(judged, facts)
	}
	if obs.Placement.TaintsHeld, obs.Placement.TaintForeign, err = r.taintsHeld(ctx, plan, step); err != nil {
		return obs, err
	}
	claim := w.claim(step.Placement.Claim)
	obs.Placement.ClaimGone = claim == nil
	obs.Placement.Allocated, obs.Placement.AsPlanned = allocatedAt(claim, step)
	if cur.State == v1alpha1.NodeDraining {
		obs.DrainMessage = cur.Message
		if obs.LandingGone, err = r.landingGone(ctx, w, judged, facts.Devices, facts.Pods); err != nil {
			return obs, err
		}
	}
	return obs, nil
}

// plansOfClaim maps a ResourceClaim to the live plans with a placement step opened for it.
func (r *PlanReconciler) plansOfClaim(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.plansWhere(ctx, func(p *v1alpha1.RepartitionPlan) bool {
		return p.Status.Phase.Running() && slices.ContainsFunc(p.Spec.Steps, func(s v1alpha1.NodeStep) bool {
			return s.Placement != nil && s.Placement.Claim.Namespace == obj.GetNamespace() && s.Placement.Claim.Name == obj.GetName()
		})
	})
}
