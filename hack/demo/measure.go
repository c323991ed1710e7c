// Counting the demo's pods, shared replicas and slices: what the before/after table compares.

package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// deployment counts one Deployment's pods.
type deployment struct{ running, pending int }

// pods counts the demo's pods per app label.
func (d *demo) pods(ctx context.Context) (map[string]deployment, error) {
	var list corev1.PodList
	if err := d.cluster.Client.List(ctx, &list, client.InNamespace("demo")); err != nil {
		return nil, err
	}
	out := map[string]deployment{}
	for _, p := range list.Items {
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		c := out[p.Labels["app"]]
		switch {
		case p.Status.Phase == corev1.PodRunning:
			c.running++
		case p.Spec.NodeName == "":
			c.pending++
		}
		out[p.Labels["app"]] = c
	}
	return out, nil
}

// sharedApp is the demo Deployment whose pods ask for a time-sliced share of a GPU.
const sharedApp = "notebook-shared"

// snapshot is what the before/after table compares.
type snapshot struct {
	pending, running int
	// sharedRunning counts running pods on shared replicas; sharedReplicas is every node's
	// advertised nvidia.com/gpu.shared.
	sharedRunning, sharedReplicas int
	slices                        map[string]v1alpha1.ProfileSlices
}

func (d *demo) measure(ctx context.Context) (snapshot, error) {
	s := snapshot{slices: map[string]v1alpha1.ProfileSlices{}}
	pods, err := d.pods(ctx)
	if err != nil {
		return s, err
	}
	for _, c := range pods {
		s.pending += c.pending
		s.running += c.running
	}
	s.sharedRunning = pods[sharedApp].running
	var nodes corev1.NodeList
	if err := d.cluster.Client.List(ctx, &nodes); err != nil {
		return s, err
	}
	for _, n := range nodes.Items {
		q := n.Status.Allocatable[corev1.ResourceName(nvidia.ResourceGPU+nvidia.SharedSuffix)]
		s.sharedReplicas += int(q.Value())
	}
	policy := &v1alpha1.GPUPoolPolicy{}
	if err := d.cluster.Client.Get(ctx, client.ObjectKey{Name: "demo-pool"}, policy); err != nil {
		return s, client.IgnoreNotFound(err)
	}
	for _, ps := range policy.Status.Pool.Slices {
		s.slices[ps.Profile] = ps
	}
	return s, nil
}

// settled measures once the policy's status counts every running pod's slice: the status lags
// the pods by one agent report and one reconcile, and the table compares settled numbers.
func (d *demo) settled(ctx context.Context) (snapshot, error) {
	var s snapshot
	err := d.waitFor(ctx, "the policy's status to count the running pods", time.Minute, func() (bool, error) {
		var err error
		s, err = d.measure(ctx)
		used := 0
		for _, ps := range s.slices {
			used += int(ps.Used)
		}
		return err == nil && used == s.running-s.sharedRunning, err
	})
	return s, err
}

// table compares what kubectl gpupool status does not show: pods, shared replicas, evictions
// and the time each phase took.
func (d *demo) table(before, after snapshot, evictions int, waited, executed time.Duration) {
	fmt.Printf("\n   %-38s %10s %10s\n", "", "before", "after")
	fmt.Printf("   %-38s %10d %10d\n", "pods running", before.running, after.running)
	fmt.Printf("   %-38s %10d %10d\n", "pods pending", before.pending, after.pending)
	fmt.Printf("   %-38s %10s %10s\n", "gpu.shared replicas used/advertised",
		fmt.Sprintf("%d/%d", before.sharedRunning, before.sharedReplicas), fmt.Sprintf("%d/%d", after.sharedRunning, after.sharedReplicas))
	fmt.Printf("   %-38s %10s %10d\n", "pods evicted", "", evictions)
	fmt.Printf("   %-38s %10s %10s\n", "submit -> approval (incl. reading)", "", waited.Round(time.Second))
	fmt.Printf("   %-38s %10s %10s\n", "approval -> plan done, pods running", "", executed.Round(time.Second))
}

// pendingPod names one pending pod of the app, for "kubectl gpupool why".
func pendingPod(ctx context.Context, d *demo, app string) string {
	var pods corev1.PodList
	if err := d.cluster.Client.List(ctx, &pods, client.InNamespace("demo"), client.MatchingLabels{"app": app}); err == nil {
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" {
				return p.Name
			}
		}
	}
	return app
}
