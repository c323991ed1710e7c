package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/pool"
)

// draFieldManager owns the DRASlicesCurrent condition on GPUNodes. The agent owns the rest of
// their status and applies only its own conditions, so the two never overwrite each other.
const draFieldManager = "gpupool-manager-dra"

// +kubebuilder:rbac:groups=gpupool.io,resources=gpunodes/status,verbs=patch

// reportDRASlices says on each node's GPUNode whether the MIG devices NVIDIA's DRA driver
// publishes there are the instances NVML reports (condition DRASlicesCurrent), for the nodes
// where the driver runs. The agent cannot say it: it would have to read ResourceSlices on
// every node, which the manager already watches. Written only when it changes.
func (r *PolicyReconciler) reportDRASlices(ctx context.Context, nodes []*inventory.Node, reports []v1alpha1.GPUNode) error {
	byName := make(map[string]*v1alpha1.GPUNode, len(reports))
	for i := range reports {
		byName[reports[i].Name] = &reports[i]
	}
	for _, n := range nodes {
		report := byName[n.Name]
		if !n.DRA || report == nil {
			continue
		}
		want := metav1.Condition{Type: v1alpha1.ConditionDRASlicesCurrent, Status: metav1.ConditionTrue, Reason: pool.ReasonSlicesCurrent,
			Message: "NVIDIA's DRA driver publishes the MIG instances NVML reports", ObservedGeneration: report.Generation}
		if n.DRAStale != "" {
			want.Status, want.Reason = metav1.ConditionFalse, pool.ReasonSlicesStale
			want.Message = n.DRAStale + ": claims cannot use the current layout until the driver's kubelet plugin restarts here " +
				"(it discovers MIG devices only at start; mig-manager restarts it with each change when its DaemonSet selects " +
				"nvidia.com/gpu.deploy.client=true)"
		}
		if have := meta.FindStatusCondition(report.Status.Conditions, want.Type); have != nil &&
			have.Status == want.Status && have.Reason == want.Reason && have.Message == want.Message && have.ObservedGeneration == want.ObservedGeneration {
			continue
		}
		want.LastTransitionTime = metav1.NewTime(r.Clock.Now())
		if have := meta.FindStatusCondition(report.Status.Conditions, want.Type); have != nil && have.Status == want.Status {
			want.LastTransitionTime = have.LastTransitionTime
		}
		cond, err := runtimeCondition(want)
		if err != nil {
			return err
		}
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1alpha1.GroupVersion.String(), "kind": "GPUNode",
			"metadata": map[string]any{"name": n.Name},
			"status":   map[string]any{"conditions": []any{cond}},
		}}
		if err := r.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(draFieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("writing condition %s on GPUNode %s: %w", want.Type, n.Name, err)
		}
	}
	return nil
}

// runtimeCondition is c as the API server stores it, for an unstructured apply.
func runtimeCondition(c metav1.Condition) (map[string]any, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&c)
	if err != nil {
		return nil, fmt.Errorf("encoding condition %s: %w", c.Type, err)
	}
	return u, nil
}
