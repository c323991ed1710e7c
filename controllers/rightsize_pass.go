package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/metrics"
	"github.com/gpupool/gpupool/internal/podrecord"
	"github.com/gpupool/gpupool/internal/rightsize"
	"github.com/gpupool/gpupool/internal/rightsize/workloads"
)

// DefaultRightsizeInterval is how often the right-sizing pass runs: the usage it reads changes
// rarely (an agent republishes a pod's summary when its p95 or peak moves by 10% or its window
// doubles, rightsize.PublishRule), no recommendation is made before a day of data, and the
// series it sets are scraped every minute or so.
const DefaultRightsizeInterval = 5 * time.Minute

// RightsizePass recommends a MIG profile for every GPU workload, as kubectl gpupool rightsize -A
// does, and exports the sums per namespace (metrics.ObserveRightsize): requested against used
// GPU memory, the slices the recommendations would give back, and the workloads per verdict.
// It changes nothing.
//
// It is a periodic runnable rather than a controller on GPUNode changes: GPUNodes change on
// every agent report (MIG layouts, pods, conditions), far more often than usage does, and a
// pass over every workload on each would redo the same sums; a pass every Interval over what
// the manager already caches (pods as records, GPUNodes, Nodes, policies) costs a walk of the
// cache and no API call, whatever the churn. It runs only in the leader (NeedLeaderElection),
// so that replicas do not export the same sums twice.
type RightsizePass struct {
	// Client reads GPUNodes, Nodes and GPUPoolPolicies, from the manager's cache.
	Client client.Reader
	// Pods is the cache's pod records.
	Pods *PodStore
	// Metrics receives the sums; nil records nothing.
	Metrics *metrics.Metrics
	// Compute, when set, measures each pod's compute (--prometheus-url); nil recommends from
	// memory only, and the recommendations say so.
	Compute rightsize.ComputeSource
	// Options tune the recommender; the zero value is the CLI's defaults.
	Options rightsize.Options
	// Interval between passes; DefaultRightsizeInterval when zero.
	Interval time.Duration
}

// AddRightsizePass registers the pass with mgr, reading mgr's cache. Call it before the manager
// starts: it makes the pod informer hold records, as the controllers' PodStores do.
func AddRightsizePass(mgr manager.Manager, p *RightsizePass) error {
	pods, err := NewPodStore(context.Background(), mgr.GetCache())
	if err != nil {
		return fmt.Errorf("right-sizing pass: %w", err)
	}
	p.Pods, p.Client = pods, mgr.GetClient()
	if err := mgr.Add(p); err != nil {
		return fmt.Errorf("adding the right-sizing pass: %w", err)
	}
	return nil
}

// NeedLeaderElection: only the leader exports the sums.
func (p *RightsizePass) NeedLeaderElection() bool { return true }

// Start runs a pass at once (the manager starts leader runnables once its caches have synced)
// and then every Interval, until ctx ends. A failed pass is logged and leaves the series as the
// last good pass set them.
func (p *RightsizePass) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("rightsize")
	interval := p.Interval
	if interval <= 0 {
		interval = DefaultRightsizeInterval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if n, err := p.Pass(ctx); err != nil {
			log.Error(err, "right-sizing pass failed; its metrics keep the last pass's values")
		} else {
			log.V(1).Info("right-sizing pass", "workloads", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Pass recommends for every GPU workload the cache holds and exports the sums; it returns how
// many workloads it judged.
func (p *RightsizePass) Pass(ctx context.Context) (int, error) {
	var gpuNodes v1alpha1.GPUNodeList
	if err := p.Client.List(ctx, &gpuNodes); err != nil {
		return 0, fmt.Errorf("listing GPUNodes for right-sizing: %w", err)
	}
	var nodes corev1.NodeList
	if err := p.Client.List(ctx, &nodes); err != nil {
		return 0, fmt.Errorf("listing nodes for right-sizing: %w", err)
	}
	policies, err := listPolicies(ctx, p.Client)
	if err != nil {
		return 0, fmt.Errorf("right-sizing: %w", err)
	}
	var compute rightsize.ComputeActivity
	if p.Compute != nil {
		if compute, err = p.Compute.ComputeActivity(ctx); err != nil {
			// Compute only ever narrows a recommendation; memory alone still holds.
			ctrl.Log.WithName("rightsize").Error(err, "reading compute activity; recommending from memory only")
			compute = nil
		}
	}
	results := workloads.Recommend(workloads.Input{Pods: p.Pods.all(), GPUNodes: gpuNodes.Items, Nodes: nodes.Items,
		Policies: policies, Compute: compute}, p.Options)
	p.Metrics.ObserveRightsize(RightsizeObservation(results))
	return len(results), nil
}

// RightsizeObservation sums recommendations per namespace, profile and verdict: the only labels
// the series carry.
func RightsizeObservation(results []workloads.Result) metrics.RightsizeObservation {
	obs := metrics.RightsizeObservation{RequestedMiB: map[string]int64{}, UsedMiB: map[string]int64{},
		SlicesAway: map[metrics.NamespaceProfile]int{}, Workloads: map[metrics.NamespaceVerdict]int{}}
	for _, r := range results {
		obs.Workloads[metrics.NamespaceVerdict{Namespace: r.Namespace, Verdict: string(r.Verdict)}]++
		if r.Measured > 0 {
			obs.RequestedMiB[r.Namespace] += r.RequestedMiB
			obs.UsedMiB[r.Namespace] += r.UsedMiB
		}
		if r.Verdict == rightsize.Shrink && r.FreedSlices > 0 {
			profile := r.Requested
			if profile == workloads.WholeGPU {
				profile = "whole-gpu"
			}
			obs.SlicesAway[metrics.NamespaceProfile{Namespace: r.Namespace, Profile: profile}] += r.FreedSlices
		}
	}
	return obs
}

// all is every pod record the cache holds.
func (s *PodStore) all() []*podrecord.Record {
	items := s.indexer.List()
	out := make([]*podrecord.Record, 0, len(items))
	for _, o := range items {
		if r, ok := o.(*podrecord.Record); ok {
			out = append(out, r)
		}
	}
	return out
}
