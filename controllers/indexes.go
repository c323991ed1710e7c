package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/gpupool/gpupool/internal/podrecord"
)

// Indexes over the pod informer's store, so that a pass reads the pods of GPU nodes and the
// pending GPU pods instead of every pod of the cluster.
const (
	// indexPodNode is a pod's spec.nodeName.
	indexPodNode = "gpupool.io/node"
	// indexPendingGPU holds "true" for unbound pods that may ask for GPUs.
	indexPendingGPU = "gpupool.io/pending-gpu"
)

// PodStore reads the manager's pods: the pod informer's own records (podrecord.Record),
// pointers into its store rather than copies. What a pass does with them is read-only
// (pool's TestAPassLeavesItsInputAlone). The informer holds records, not Pods, so pods are
// never read through the manager's cached client; a decision that must see the whole pod as
// it is now (the drain, before evicting) reads it from the API server.
type PodStore struct {
	indexer toolscache.Indexer
}

// NewPodStore makes the cache's pod informer hold records and index them. It may be called
// more than once for one cache (each controller that reads pods does), but only before the
// cache starts: an informer's transform cannot change once it runs.
func NewPodStore(ctx context.Context, c cache.Cache) (*PodStore, error) {
	inf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("getting the pod informer: %w", err)
	}
	// controller-runtime's informer cache hands out client-go's SharedIndexInformer.
	shared, ok := inf.(toolscache.SharedIndexInformer)
	if !ok {
		return nil, fmt.Errorf("the cache's pod informer is a %T, not a client-go SharedIndexInformer", inf)
	}
	if _, done := shared.GetIndexer().GetIndexers()[indexPodNode]; done {
		return &PodStore{indexer: shared.GetIndexer()}, nil
	}
	if err := shared.SetTransform(recordPod(&podrecord.Interner{})); err != nil {
		return nil, fmt.Errorf("making the pod informer keep records (set up every controller before the manager starts): %w", err)
	}
	if err := shared.AddIndexers(toolscache.Indexers{
		indexPodNode:    indexByNode,
		indexPendingGPU: indexPendingGPUPod,
	}); err != nil {
		return nil, fmt.Errorf("indexing pods: %w", err)
	}
	return &PodStore{indexer: shared.GetIndexer()}, nil
}

func indexByNode(obj any) ([]string, error) {
	if r, ok := obj.(*podrecord.Record); ok && r.NodeName != "" {
		return []string{r.NodeName}, nil
	}
	return nil, nil
}

func indexPendingGPUPod(obj any) ([]string, error) {
	// A record keeps its unbound pod only when the pod may ask for GPUs (through the device
	// plugin or through ResourceClaims; which, the pass decides with the claims).
	if r, ok := obj.(*podrecord.Record); ok && r.Unbound != nil {
		return []string{"true"}, nil
	}
	return nil, nil
}

// Get is the record of the pod key names; nil when the cache holds none.
func (s *PodStore) Get(key types.NamespacedName) (*podrecord.Record, error) {
	obj, ok, err := s.indexer.GetByKey(key.Namespace + "/" + key.Name)
	if err != nil || !ok {
		return nil, err
	}
	r, _ := obj.(*podrecord.Record)
	return r, nil
}

// onNode appends the pods bound to node to out.
func (s *PodStore) onNode(out []*podrecord.Record, node string) ([]*podrecord.Record, error) {
	return s.appendIndexed(out, indexPodNode, node)
}

// pendingGPU appends the unbound pods that may ask for GPUs to out.
func (s *PodStore) pendingGPU(out []*podrecord.Record) ([]*podrecord.Record, error) {
	return s.appendIndexed(out, indexPendingGPU, "true")
}

func (s *PodStore) appendIndexed(out []*podrecord.Record, index, value string) ([]*podrecord.Record, error) {
	objs, err := s.indexer.ByIndex(index, value)
	if err != nil {
		return out, fmt.Errorf("reading pods by %s=%s: %w", index, value, err)
	}
	for _, o := range objs {
		if r, ok := o.(*podrecord.Record); ok {
			out = append(out, r)
		}
	}
	return out, nil
}
