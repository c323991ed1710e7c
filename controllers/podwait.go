package controllers

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/metrics"
	"github.com/gpupool/gpupool/internal/podrecord"
)

// PodWait observes how long GPU pods wait to be placed, the number gpupool exists to cut:
// for each pod that asks for a GPU resource, the time from its creation to the moment the
// manager sees it bound to a node (gpupool_pod_pending_seconds, per resource asked for).
//
// It reads the pod informer the controllers already run (PodStore), so it costs one check of
// two fields per pod update. A pod is observed on the update that binds it, which happens once
// in its life (spec.nodeName cannot change once set), so each pod counts once per manager
// that sees the binding. Only the leader observes: every replica runs the informer, and the
// standbys' series would add to the leader's. What this does not see is not counted: a pod
// bound while no manager led (a restart, a failover) and a pod created bound (a DaemonSet's,
// or one that names its node). A pod waiting across a restart is counted by the new leader,
// from its creation. Pods that ask for GPUs only through ResourceClaims are not counted: their
// shape is in the claim, which the binding update does not carry.
type PodWait struct {
	// Metrics receives the observations; nil records nothing.
	Metrics *metrics.Metrics
	// Clock is when a binding is seen.
	Clock clock.PassiveClock
	// Elected closes when this replica leads (manager.Manager's Elected); bindings seen
	// before are not observed.
	Elected <-chan struct{}
}

// AddPodWait watches the pods of mgr's cache for bindings. Call it before the manager starts:
// it makes the pod informer hold records, as the controllers' PodStores do, and its handler
// then sees every update from the informer's first list on (that list's adds are not
// bindings, so pods bound before are not counted).
func AddPodWait(mgr manager.Manager, m *metrics.Metrics, clk clock.PassiveClock) error {
	ctx := context.Background()
	if _, err := NewPodStore(ctx, mgr.GetCache()); err != nil {
		return fmt.Errorf("pod wait metrics: %w", err)
	}
	inf, err := mgr.GetCache().GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("getting the pod informer for pod wait metrics: %w", err)
	}
	w := &PodWait{Metrics: m, Clock: clk, Elected: mgr.Elected()}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: w.update}); err != nil {
		return fmt.Errorf("watching pods for pod wait metrics: %w", err)
	}
	return nil
}

// update observes a pod the update binds.
func (w *PodWait) update(oldObj, newObj any) {
	select {
	case <-w.Elected:
	default:
		return
	}
	before, ok := oldObj.(*podrecord.Record)
	if !ok {
		return
	}
	after, ok := newObj.(*podrecord.Record)
	if !ok || !justBound(before, after) {
		return
	}
	waited := w.Clock.Since(after.CreationTimestamp.Time)
	for _, shape := range gpuShapes(after.Requests) {
		w.Metrics.ObservePodPending(shape, waited)
	}
}

// justBound reports whether the update is the pod's binding: unbound before, bound after.
func justBound(before, after *podrecord.Record) bool {
	return before.NodeName == "" && after.NodeName != ""
}

// gpuShapes lists the GPU resources among a pod's effective requests, sorted: the shapes it
// waited for, named as gpupool_pending_pods names them. A pod asking for several counts once
// under each.
func gpuShapes(requests corev1.ResourceList) []string {
	var out []string
	for name, q := range requests {
		if _, _, ok := demand.Classify(name); ok && q.Sign() > 0 {
			out = append(out, string(name))
		}
	}
	slices.Sort(out)
	return out
}
