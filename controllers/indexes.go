package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/demand"
)

// Cache indexes over pods, so that a pass reads the pods of GPU nodes and the pending GPU pods
// instead of every pod of the cluster.
const (
	// indexPodNode is a pod's spec.nodeName.
	indexPodNode = "spec.nodeName"
	// indexPendingGPU holds "true" for unbound pods that name a GPU resource.
	indexPendingGPU = "gpupool.io/pending-gpu"
)

// setupIndexes registers the pod indexes; once per manager, by the policy controller.
func setupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &corev1.Pod{}, indexPodNode, func(o client.Object) []string {
		if n := o.(*corev1.Pod).Spec.NodeName; n != "" {
			return []string{n}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing pods by node: %w", err)
	}
	if err := indexer.IndexField(ctx, &corev1.Pod{}, indexPendingGPU, func(o client.Object) []string {
		pod := o.(*corev1.Pod)
		// A pod with ResourceClaims may ask NVIDIA's DRA driver for GPUs; whether it does is
		// decided in the pass, which has the claims.
		if pod.Spec.NodeName == "" && (demand.MentionsGPU(pod) || len(pod.Spec.ResourceClaims) > 0) {
			return []string{"true"}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing pending GPU pods: %w", err)
	}
	return nil
}
