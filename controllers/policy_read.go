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
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/pool"
)

// read lists everything one pass reads.
func (r *PolicyReconciler) read(ctx context.Context) (*pool.Cluster, error) {
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
	pods, err := r.pods.pendingGPU(nil)
	if err != nil {
		return nil, err
	}
	reported := map[string]bool{}
	for _, g := range gpuNodes.Items {
		reported[g.Name] = true
	}
	for _, n := range nodes.Items {
		if !reported[n.Name] && n.Labels[v1alpha1.LabelGPUPresent] != "true" {
			continue
		}
		if pods, err = r.pods.onNode(pods, n.Name); err != nil {
			return nil, err
		}
	}
	heartbeats, err := r.heartbeats(ctx)
	if err != nil {
		return nil, err
	}
	if r.AgentPodSelector != nil {
		// The agents' pods run on the GPU nodes, so they are among the nodes' pods read above.
		heartbeats = inventory.ReadinessHeartbeats(heartbeats, pods, nodes.Items,
			inventory.AgentPods{Namespace: r.AgentNamespace, Selector: r.AgentPodSelector,
				DaemonSet: r.AgentDaemonSet, ServiceAccount: r.AgentServiceAccount}, r.Clock.Now())
	}
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

// migManagerReboot reads from NVIDIA's ClusterPolicy whether mig-manager may reboot a node
// whose MIG mode change fails, so that the planner keeps such changes off nodes where a reboot
// would kill pods. Without a readable ClusterPolicy it is unknown, which the planner treats
// as a reboot wherever a toggle needs a GPU reset.
func (r *PolicyReconciler) migManagerReboot(ctx context.Context) planner.MIGManagerReboot {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(nvidia.ClusterPolicyGVK.GroupVersion().WithKind(nvidia.ClusterPolicyGVK.Kind + "List"))
	if err := r.Client.List(ctx, list); err != nil || len(list.Items) == 0 {
		return planner.RebootUnknown
	}
	if nvidia.MIGManagerWithReboot(nvidia.ActiveClusterPolicy(list.Items)) {
		return planner.RebootOnFailure
	}
	return planner.RebootNever
}

// heartbeats reads the agents' Leases: per node, when its agent last renewed. A Lease counts
// only when it is held by that node's agent (v1alpha1.AgentLeaseHolder).
func (r *PolicyReconciler) heartbeats(ctx context.Context) (map[string]time.Time, error) {
	if r.AgentNamespace == "" {
		return nil, nil
	}
	var leases coordinationv1.LeaseList
	if err := r.Client.List(ctx, &leases, client.InNamespace(r.AgentNamespace),
		client.MatchingLabels{v1alpha1.LabelAgentLease: "true"}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the agents' heartbeat Leases in %s: %w", r.AgentNamespace, err)
	}
	out := make(map[string]time.Time, len(leases.Items))
	for _, l := range leases.Items {
		if l.Spec.RenewTime != nil && ptr.Deref(l.Spec.HolderIdentity, "") == v1alpha1.AgentLeaseHolder(l.Name) {
			out[l.Name] = l.Spec.RenewTime.Time
		}
	}
	return out, nil
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
