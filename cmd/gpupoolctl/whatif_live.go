package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/podrecord"
	poolpass "github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/snapshot"
)

// liveFlags are the manager's settings that shape its passes beyond the cluster's objects, so
// that what-if --live reads the cluster as the manager does. Their names and defaults are the
// manager's flags as config/manager sets them: a manager started otherwise (the Helm chart
// names the agents after the release) is matched by passing its values.
type liveFlags struct {
	agentNamespace, agentPodSelector, agentDaemonSet, agentServiceAccount string
	maxReportAge                                                          time.Duration
}

func addLiveFlags(cmd *cobra.Command, wf *whatIfFlags) {
	l := &wf.agents
	cmd.Flags().BoolVar(&wf.live, "live", false, "plan the live cluster of the kubeconfig instead of a snapshot file")
	cmd.Flags().StringVar(&l.agentNamespace, "agent-namespace", "gpupool-agent",
		"with --live: the manager's --agent-namespace, where the node agents renew their heartbeat Leases (empty reads none)")
	cmd.Flags().StringVar(&l.agentPodSelector, "agent-pod-selector", "app.kubernetes.io/component=agent,app.kubernetes.io/name=gpupool",
		"with --live: the manager's --agent-pod-selector, the node agents' pods whose readiness is their heartbeat (empty reads none)")
	cmd.Flags().StringVar(&l.agentDaemonSet, "agent-daemonset", "gpupool-agent", "with --live: the manager's --agent-daemonset")
	cmd.Flags().StringVar(&l.agentServiceAccount, "agent-service-account", "gpupool-agent", "with --live: the manager's --agent-service-account")
	cmd.Flags().DurationVar(&l.maxReportAge, "max-report-age", poolpass.DefaultMaxReportAge,
		"with --live: how old a node's GPU report or its agent's last heartbeat may be before the node is not planned, as the manager judges it")
}

// agentPods are the agents' pods as the manager is told of them.
func (l *liveFlags) agentPods() (inventory.AgentPods, error) {
	agents := inventory.AgentPods{Namespace: l.agentNamespace, DaemonSet: l.agentDaemonSet, ServiceAccount: l.agentServiceAccount}
	if strings.TrimSpace(l.agentPodSelector) == "" {
		return agents, nil
	}
	sel, err := labels.Parse(l.agentPodSelector)
	if err != nil {
		return agents, usageError("--agent-pod-selector=%q: %v: give the manager's --agent-pod-selector", l.agentPodSelector, err)
	}
	agents.Selector = sel
	return agents, nil
}

// readLive reads the live cluster as the policy controller reads it for a pass at now: the
// objects it plans on, the agents' heartbeats (Leases and agent pods' readiness, poolpass.Heartbeats)
// and whether mig-manager may reboot a node (poolpass.MIGManagerRebootOf). What the user may not
// read that the controller does is a warning saying how the answer may differ.
func (c *cli) readLive(l *liveFlags, now time.Time) (*snapshot.Snapshot, error) {
	agents, err := l.agentPods()
	if err != nil {
		return nil, err
	}
	sess, err := c.open(false)
	if err != nil {
		return nil, err
	}
	defer sess.cancel()
	snap, err := readCluster(sess.ctx, sess.client)
	if err != nil {
		return nil, failure(err)
	}
	if snap.Claims == nil && claimsListed(sess.ctx, sess.client) {
		// The controller reads claims wherever resource.k8s.io/v1 is served, and a list that
		// gave none is "no claim", not "claims unread" (pool.Cluster.Claims).
		snap.Claims = []resourcev1.ResourceClaim{}
	}
	leases, err := agentLeases(sess.ctx, sess.client, l.agentNamespace)
	if err != nil {
		snap.Warnings = append(snap.Warnings, fmt.Sprintf("cannot list the agents' heartbeat Leases in %s (%v): "+
			"GPU reports are judged by their observedTime and agent pods' readiness, and the manager may find more of them fresh", l.agentNamespace, err))
	}
	snap.Heartbeats = poolpass.Heartbeats(leases, podrecord.FromPods(snap.PodPointers()), snap.Nodes, agents, now)
	snap.MIGManagerReboot, err = clusterPolicyReboot(sess.ctx, sess.client)
	if err != nil {
		snap.Warnings = append(snap.Warnings, fmt.Sprintf("cannot list NVIDIA's ClusterPolicies (%v): "+
			"planned as if mig-manager may reboot a node whose MIG mode change fails", err))
	}
	return snap, nil
}

// agentLeases lists the agents' heartbeat Leases as the controller does; none when ns is "".
func agentLeases(ctx context.Context, c client.Client, ns string) ([]coordinationv1.Lease, error) {
	if ns == "" {
		return nil, nil
	}
	var leases coordinationv1.LeaseList
	if err := c.List(ctx, &leases, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelAgentLease: "true"}); err != nil {
		return nil, err
	}
	return leases.Items, nil
}

// clusterPolicyReboot reads NVIDIA's ClusterPolicies for mig-manager's reboots. A cluster
// without the GPU Operator's CRD has none, as the controller finds; any other failure is
// returned, with the controller's reading of an unreadable list.
func clusterPolicyReboot(ctx context.Context, c client.Client) (planner.MIGManagerReboot, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(nvidia.ClusterPolicyGVK.GroupVersion().WithKind(nvidia.ClusterPolicyGVK.Kind + "List"))
	err := c.List(ctx, list)
	switch {
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		return poolpass.MIGManagerRebootOf(nil), nil
	case err != nil:
		return poolpass.MIGManagerRebootOf(nil), err
	}
	return poolpass.MIGManagerRebootOf(list.Items), nil
}

// claimsListed reports whether the user may list ResourceClaims, which the cluster serves.
func claimsListed(ctx context.Context, c client.Client) bool {
	return c.List(ctx, &resourcev1.ResourceClaimList{}, client.Limit(1)) == nil
}
