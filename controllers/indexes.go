package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/gpupool/gpupool/internal/demand"
)

// Indexes over the pod informer's store, so that a pass reads the pods of GPU nodes and the
// pending GPU pods instead of every pod of the cluster.
const (
	// indexPodNode is a pod's spec.nodeName.
	indexPodNode = "gpupool.io/node"
	// indexPendingGPU holds "true" for unbound pods that may ask for GPUs.
	indexPendingGPU = "gpupool.io/pending-gpu"
)

// podStore reads pods straight from the informer's store: pointers to the cache's own
// objects, where a List through the client copies every Pod value (1.2 KB each, before what
// it points to) into a new slice on every pass. At 55,000 pods those copies were the largest
// thing in the manager's heap. What a pass does with them is read-only
// (pool's TestAPassLeavesItsInputAlone).
type podStore struct {
	indexer toolscache.Indexer
}

// newPodStore adds gpupool's indexes to the cache's pod informer, once per manager.
func newPodStore(ctx context.Context, c cache.Cache) (*podStore, error) {
	inf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("getting the pod informer: %w", err)
	}
	// controller-runtime's informer cache hands out client-go's SharedIndexInformer.
	shared, ok := inf.(toolscache.SharedIndexInformer)
	if !ok {
		return nil, fmt.Errorf("the cache's pod informer is a %T, not a client-go SharedIndexInformer", inf)
	}
	if err := shared.AddIndexers(toolscache.Indexers{
		indexPodNode:    indexByNode,
		indexPendingGPU: indexPendingGPUPod,
	}); err != nil {
		return nil, fmt.Errorf("indexing pods: %w", err)
	}
	return &podStore{indexer: shared.GetIndexer()}, nil
}

func indexByNode(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}, nil
	}
	return nil, nil
}

func indexPendingGPUPod(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	// A pod with ResourceClaims may ask NVIDIA's DRA driver for GPUs; whether it does is
	// decided in the pass, which has the claims.
	if ok && pod.Spec.NodeName == "" && (demand.MentionsGPU(pod) || len(pod.Spec.ResourceClaims) > 0) {
		return []string{"true"}, nil
	}
	return nil, nil
}

// onNode appends the pods bound to node to out.
func (s *podStore) onNode(out []*corev1.Pod, node string) ([]*corev1.Pod, error) {
	return s.appendIndexed(out, indexPodNode, node)
}

// pendingGPU appends the unbound pods that may ask for GPUs to out.
func (s *podStore) pendingGPU(out []*corev1.Pod) ([]*corev1.Pod, error) {
	return s.appendIndexed(out, indexPendingGPU, "true")
}

func (s *podStore) appendIndexed(out []*corev1.Pod, index, value string) ([]*corev1.Pod, error) {
	objs, err := s.indexer.ByIndex(index, value)
	if err != nil {
		return out, fmt.Errorf("reading pods by %s=%s: %w", index, value, err)
	}
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out, nil
}
