package controllers

// What one pass of the policy controller reads: the cluster as the cache holds it, the agents'
// heartbeats and whether mig-manager may reboot a node.

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/pool"
)

// read lists everything one pass reads; heartbeats are judged at now, the pass's instant.
func (r *PolicyReconciler) read(ctx context.Context, now time.Time) (*pool.Cluster, error) {
	var (
		nodes    corev1.NodeList
		gpuNodes v1alpha1.GPUNodeList
		pdbs     policyv1.PodDisruptionBudgetList
		plans    v1alpha1.RepartitionPlanList
	)
	// Policies that cannot be decoded take no part in conflicts: each reports its own problem.
	policies, err := listPolicies(ctx, r.Client)
	if err != nil {
		return nil, err
	}
	// A pass reads the cache's own objects instead of deep copies of every one: the pass and
	// the planner never write into their input (pool's TestAPassLeavesItsInputAlone), and at
	// fleet scale the copies were most of the manager's memory and allocation.
	shared := client.UnsafeDisableDeepCopy
	for _, l := range []client.ObjectList{&nodes, &gpuNodes, &pdbs, &plans} {
		if err := r.Client.List(ctx, l, shared); err != nil {
			return nil, fmt.Errorf("listing %T: %w", l, err)
		}
	}
	// Only pending GPU pods and the pods of GPU nodes matter; the cache's indexes spare a
	// pass from walking every pod of a large cluster.
	pods, err := r.state.pods.pendingGPU(nil)
	if err != nil {
		return nil, err
	}
	reported := map[string]bool{}
	for _, g := range gpuNodes.Items {
		reported[g.Name] = true
	}
	for _, n := range nodes.Items {
		if !reported[n.Name] && n.Labels[nvidia.LabelGPUPresent] != "true" {
			continue
		}
		if pods, err = r.state.pods.onNode(pods, n.Name); err != nil {
			return nil, err
		}
	}
	leases, err := r.agentLeases(ctx)
	if err != nil {
		return nil, err
	}
	// The agents' pods run on the GPU nodes, so they are among the nodes' pods read above.
	// gpupoolctl what-if --live reads the same and calls the same function.
	heartbeats := pool.Heartbeats(leases, pods, nodes.Items, inventory.AgentPods{Namespace: r.AgentNamespace,
		Selector: r.AgentPodSelector, DaemonSet: r.AgentDaemonSet, ServiceAccount: r.AgentServiceAccount}, now)
	var claims []resourcev1.ResourceClaim
	var resourceSlices resourcev1.ResourceSliceList
	if r.readClaims {
		var list resourcev1.ResourceClaimList
		if err := r.Client.List(ctx, &list, shared); err != nil {
			return nil, fmt.Errorf("listing ResourceClaims: %w", err)
		}
		claims = list.Items
		if claims == nil {
			claims = []resourcev1.ResourceClaim{} // listed: pods' claims are read, none exist
		}
		if err := r.Client.List(ctx, &resourceSlices, shared); err != nil {
			return nil, fmt.Errorf("listing ResourceSlices: %w", err)
		}
	}
	return &pool.Cluster{Policies: policies, Nodes: nodes.Items, GPUNodes: gpuNodes.Items,
		Pods: pods, PDBs: pdbs.Items, Plans: plans.Items, Claims: claims, Slices: resourceSlices.Items, Heartbeats: heartbeats,
		MIGManagerReboot: r.migManagerReboot(ctx)}, nil
}

// migManagerReboot reads NVIDIA's ClusterPolicies for whether mig-manager may reboot a node
// (pool.MIGManagerRebootOf); a list that fails is read as none.
func (r *PolicyReconciler) migManagerReboot(ctx context.Context) planner.MIGManagerReboot {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(nvidia.ClusterPolicyGVK.GroupVersion().WithKind(nvidia.ClusterPolicyGVK.Kind + "List"))
	if err := r.Client.List(ctx, list); err != nil {
		return planner.RebootUnknown
	}
	return pool.MIGManagerRebootOf(list.Items)
}

// agentLeases lists the agents' heartbeat Leases (pool.Heartbeats reads them); none when the
// manager reads no Leases.
func (r *PolicyReconciler) agentLeases(ctx context.Context) ([]coordinationv1.Lease, error) {
	if r.AgentNamespace == "" {
		return nil, nil
	}
	var leases coordinationv1.LeaseList
	if err := r.Client.List(ctx, &leases, client.InNamespace(r.AgentNamespace),
		client.MatchingLabels{v1alpha1.LabelAgentLease: "true"}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the agents' heartbeat Leases in %s: %w", r.AgentNamespace, err)
	}
	return leases.Items, nil
}

// AgentLeaseCache is how the manager's cache must hold Leases for the policy controller: only
// the agents' heartbeat Leases, in their namespace (RBAC grants no more), never the
// leader-election Leases of other components.
func AgentLeaseCache(agentNamespace string) cache.ByObject {
	return cache.ByObject{
		Namespaces: map[string]cache.Config{agentNamespace: {}},
		Label:      labels.SelectorFromSet(labels.Set{v1alpha1.LabelAgentLease: "true"}),
	}
}
