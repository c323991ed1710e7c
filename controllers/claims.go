package controllers

import (
	"context"
	"fmt"
	"slices"

	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/rollout"
)

// claimed reads the devices NVIDIA's DRA driver allocated to ResourceClaims on nodes, by
// device UUID, for rollout.ClaimOnStep: the agent's report attributes only the device plugin's
// devices, so a claim allocated on a step's GPUs after planning shows only here. Nil where the
// API server serves no resource.k8s.io/v1. Both lists come from the manager's cache, which the
// policy controller's watches keep (RBAC in gpupoolpolicy_controller.go).
func (r *PlanReconciler) claimed(ctx context.Context, nodes []string) (map[string]rollout.ClaimFact, error) {
	if !r.readSlices || len(nodes) == 0 {
		return nil, nil
	}
	var sliceList resourcev1.ResourceSliceList
	if err := r.Client.List(ctx, &sliceList, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	// NVIDIA's DRA driver names its pool after the node (cmd/gpu-kubelet-plugin/driver.go).
	ours := slices.DeleteFunc(slices.Clone(sliceList.Items), func(s resourcev1.ResourceSlice) bool {
		return !slices.Contains(nodes, s.Spec.Pool.Name)
	})
	if len(ours) == 0 {
		return nil, nil
	}
	var claims resourcev1.ResourceClaimList
	if err := r.Client.List(ctx, &claims, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	holders := inventory.DRAHolders(claims.Items, ours)
	if len(holders) == 0 {
		return nil, nil
	}
	out := make(map[string]rollout.ClaimFact, len(holders))
	for uuid, h := range holders {
		fact := rollout.ClaimFact{Claim: h.Claim, GPU: h.GPU}
		for _, p := range h.Pods {
			fact.Pods = append(fact.Pods, p.String())
		}
		out[uuid] = fact
	}
	return out, nil
}
