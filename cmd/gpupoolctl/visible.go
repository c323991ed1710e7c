package main

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/snapshot"
)

// viewerRole is the read-only ClusterRole gpupool ships (config/rbac/viewer_role.yaml): the
// right to read its cluster-scoped objects, which a namespace's RoleBinding cannot grant.
const viewerRole = "gpupool-viewer"

// gap is something the user may not read, and the right that would show it.
type gap struct {
	// What could not be read, e.g. "nodes" or "pods in other namespaces".
	What string `json:"what"`
	// Error is "forbidden" or the API server's error.
	Error string `json:"error"`
	// Right is what to ask the cluster's admin for.
	Right string `json:"right"`
}

func (g gap) String() string { return g.What + ": " + g.Error + " (" + g.Right + ")" }

// The rights each read needs, in words a cluster admin acts on.
const (
	rightViewer  = "ask for the " + viewerRole + " ClusterRole, bound with a ClusterRoleBinding"
	rightNodes   = "ask for get/list on nodes, bound with a ClusterRoleBinding"
	rightAllPods = "ask for list on pods in all namespaces (e.g. the view ClusterRole bound with a ClusterRoleBinding)"
	rightAllPDBs = "ask for list on poddisruptionbudgets in all namespaces"
	rightTaints  = "ask for list on devicetaintrules (resource.k8s.io), bound with a ClusterRoleBinding"
)

// visible is what a user's reads gave: the cluster as far as they may see it, and what they
// may not see.
type visible struct {
	snap  *snapshot.Snapshot
	plans []v1alpha1.RepartitionPlan
	gaps  []gap
	// plansVisible and policiesVisible say whether the lists were read (an empty list is not
	// "no plan" when it was forbidden).
	plansVisible, policiesVisible bool
}

// complete is true when the planner saw everything it plans on, so its answer stands; a
// missing RepartitionPlan list only hides the plan that serves a pod, a missing DeviceTaintRule
// list only a taint on a DynamicMIG partition.
func (v *visible) complete() bool {
	for _, g := range v.gaps {
		if g.What != "repartitionplans" && g.What != "resourceslices" && g.What != "devicetaintrules" {
			return false
		}
	}
	return true
}

// readVisible reads what the planner reads, as `kubectl get nodes,pods,pdb,gpunodes,
// gpupoolpolicies,resourceclaims,resourceslices,devicetaintrules -A` would, plus the
// RepartitionPlans, and keeps going where the user may not read: a forbidden list is recorded
// as a gap with the right that would show it.
// Pods, PodDisruptionBudgets and ResourceClaims of all namespaces fall back to namespace ns
// (none when ns is ""), as a user confined to it may still read those.
func readVisible(ctx context.Context, c client.Client, ns string) (*visible, error) {
	var (
		nodes    corev1.NodeList
		pods     corev1.PodList
		pdbs     policyv1.PodDisruptionBudgetList
		gpuNodes v1alpha1.GPUNodeList
		policies v1alpha1.GPUPoolPolicyList
		plans    v1alpha1.RepartitionPlanList
		claims   resourcev1.ResourceClaimList
		rslices  resourcev1.ResourceSliceList
		taints   resourcev1.DeviceTaintRuleList
	)
	v := &visible{}
	for _, l := range []struct {
		what  string
		list  client.ObjectList
		right string
		// namespaced lists fall back to ns; optional ones may be absent from the cluster
		// (ResourceClaims before Kubernetes 1.34).
		namespaced, optional bool
	}{
		{"nodes", &nodes, rightNodes, false, false},
		{"pods", &pods, rightAllPods, true, false},
		{"poddisruptionbudgets", &pdbs, rightAllPDBs, true, false},
		{"gpunodes", &gpuNodes, rightViewer, false, false},
		{"gpupoolpolicies", &policies, rightViewer, false, false},
		{"repartitionplans", &plans, rightViewer, false, false},
		{"resourceclaims", &claims, "ask for list on resourceclaims in all namespaces", true, true},
		{"resourceslices", &rslices, "ask for list on resourceslices", false, true},
		// DeviceTaintRules keep claims off tainted DynamicMIG partitions (gpupool's reserve and
		// keep-free rules among them); API servers without resource.k8s.io/v1's serve none.
		{"devicetaintrules", &taints, rightTaints, false, true},
	} {
		err := c.List(ctx, l.list)
		if l.optional && (meta.IsNoMatchError(err) || apierrors.IsNotFound(err)) {
			continue
		}
		if err == nil {
			v.record(l.what)
			continue
		}
		if !apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("listing %s: %w", l.what, err)
		}
		what := l.what
		if l.namespaced && ns != "" {
			what = l.what + " in other namespaces than " + ns
			// The user's own namespace, which a namespace's view role lets them read.
			if nerr := c.List(ctx, l.list, client.InNamespace(ns)); nerr != nil {
				if !apierrors.IsForbidden(nerr) {
					return nil, fmt.Errorf("listing %s in namespace %s: %w", l.what, ns, nerr)
				}
				what = l.what
			}
		}
		v.gaps = append(v.gaps, gap{What: what, Error: "forbidden", Right: l.right})
	}
	v.plans = plans.Items
	v.snap = &snapshot.Snapshot{Nodes: nodes.Items, Pods: pods.Items, PDBs: pdbs.Items, GPUNodes: gpuNodes.Items,
		Policies: policies.Items, Plans: plans.Items, Claims: claims.Items, Slices: rslices.Items, TaintRules: taints.Items, Ignored: map[string]int{}}
	return v, nil
}

func (v *visible) record(what string) {
	switch what {
	case "repartitionplans":
		v.plansVisible = true
	case "gpupoolpolicies":
		v.policiesVisible = true
	}
}

// readCluster reads the whole cluster for the commands that plan on it (what-if --live): a
// partial view would plan on nodes and pods that are not all there, so what is forbidden is an
// error naming the rights.
func readCluster(ctx context.Context, c client.Client) (*snapshot.Snapshot, error) {
	v, err := readVisible(ctx, c, "")
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, g := range v.gaps {
		switch g.What {
		case "resourceclaims", "resourceslices":
			// As before: pods that use DRA claims are not seen, the rest plans.
			v.snap.Warnings = append(v.snap.Warnings, "cannot list "+g.What+" ("+g.Error+"): pods that use DRA claims are not seen")
		case "devicetaintrules":
			v.snap.Warnings = append(v.snap.Warnings, "cannot list "+g.What+" ("+g.Error+"): a tainted DynamicMIG partition reads as free")
		default:
			missing = append(missing, g.String())
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("the planner needs the whole cluster, and you may not read: %s", strings.Join(missing, "; "))
	}
	return v.snap, nil
}
