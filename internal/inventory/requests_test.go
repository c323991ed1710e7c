package inventory_test

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
)

func TestRequestedAndFree(t *testing.T) {
	tests := []struct {
		name        string
		allocatable corev1.ResourceList
		pods        []corev1.Pod
		// wantPods are the keys of node-a's pods, in the order Build keeps them.
		wantPods      []string
		wantRequested corev1.ResourceList
		// wantFree is Free per resource: millicores for cpu, units for the rest.
		wantFree map[corev1.ResourceName]int64
	}{{
		name:          "a node without pods requests nothing",
		wantRequested: corev1.ResourceList{},
		wantFree:      map[corev1.ResourceName]int64{"cpu": 64000, "memory": 512 << 30, "pods": 110, "nvidia.com/gpu": 0},
	}, {
		name: "bound running pods add up, each taking one of the node's pods",
		pods: []corev1.Pod{
			pod("web", requests("cpu", "500m", "memory", "2Gi")),
			pod("infer", requests("cpu", "1", "memory", "1Gi", "nvidia.com/mig-1g.10gb", "1")),
		},
		wantPods:      []string{"team/infer", "team/web"},
		wantRequested: list("cpu", "1500m", "memory", "3Gi", "nvidia.com/mig-1g.10gb", "1", "pods", "2"),
		wantFree: map[corev1.ResourceName]int64{"cpu": 62500, "memory": 509 << 30, "pods": 108,
			// Not in allocatable: nothing is free, however little is asked.
			"nvidia.com/mig-1g.10gb": 0},
	}, {
		// The scheduler already counts a pod bound to the node while it still starts.
		name:          "a pending pod bound to the node counts",
		pods:          []corev1.Pod{pod("starting", phase(corev1.PodPending))},
		wantPods:      []string{"team/starting"},
		wantRequested: list("cpu", "1", "memory", "1Gi", "pods", "1"),
		wantFree:      map[corev1.ResourceName]int64{"cpu": 63000, "pods": 109},
	}, {
		name: "succeeded and failed pods release what they requested",
		pods: []corev1.Pod{
			pod("done", phase(corev1.PodSucceeded), requests("cpu", "8")),
			pod("crashed", phase(corev1.PodFailed), requests("cpu", "8")),
			pod("live"),
		},
		wantPods:      []string{"team/live"},
		wantRequested: list("cpu", "1", "memory", "1Gi", "pods", "1"),
		wantFree:      map[corev1.ResourceName]int64{"cpu": 63000, "pods": 109},
	}, {
		name: "pending pods the scheduler has not bound, and pods of other nodes, do not count",
		pods: []corev1.Pod{
			pod("waiting", pendingUnbound(), requests("cpu", "8", "nvidia.com/gpu", "1")),
			pod("elsewhere", onNode("node-b"), requests("cpu", "8")),
			pod("here"),
		},
		wantPods:      []string{"team/here"},
		wantRequested: list("cpu", "1", "memory", "1Gi", "pods", "1"),
		wantFree:      map[corev1.ResourceName]int64{"cpu": 63000, "pods": 109},
	}, {
		// Init containers run one at a time before the main ones, so the pod needs the largest
		// init container or the sum of the main ones, whichever is more, per resource.
		name: "init containers count by the max rule",
		pods: []corev1.Pod{pod("train",
			requests("cpu", "1", "memory", "1Gi", "nvidia.com/gpu", "1"),
			withContainer("logger", "cpu", "1", "memory", "2Gi"),
			withInit("fetch", "cpu", "4", "memory", "1Gi"),
			withInit("warm", "cpu", "500m", "nvidia.com/gpu", "2"))},
		wantPods:      []string{"team/train"},
		wantRequested: list("cpu", "4", "memory", "3Gi", "nvidia.com/gpu", "2", "pods", "1"),
		wantFree:      map[corev1.ResourceName]int64{"cpu": 60000, "memory": 509 << 30, "pods": 109},
	}, {
		name: "limits stand in for absent requests, as the API server defaults them",
		pods: []corev1.Pod{pod("limited", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: list("cpu", "2", "nvidia.com/gpu", "1")}
		})},
		wantPods:      []string{"team/limited"},
		wantRequested: list("cpu", "2", "nvidia.com/gpu", "1", "pods", "1"),
		wantFree:      map[corev1.ResourceName]int64{"cpu": 62000, "nvidia.com/gpu": 0},
	}, {
		name:        "free is never negative on an overcommitted node",
		allocatable: list("cpu", "1", "memory", "1Gi", "pods", "1", "nvidia.com/gpu", "1"),
		pods: []corev1.Pod{
			pod("a", requests("cpu", "2", "memory", "1Gi", "nvidia.com/gpu", "1")),
			pod("b", requests("cpu", "1", "memory", "2Gi", "nvidia.com/gpu", "1")),
		},
		wantPods:      []string{"team/a", "team/b"},
		wantRequested: list("cpu", "3", "memory", "3Gi", "nvidia.com/gpu", "2", "pods", "2"),
		wantFree:      map[corev1.ResourceName]int64{"cpu": 0, "memory": 0, "pods": 0, "nvidia.com/gpu": 0},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := []corev1.Node{gpuHost(nodeA, tc.allocatable), gpuHost("node-b", nil)}
			gpuNodes := []v1alpha1.GPUNode{report(nodeA, nil), report("node-b", nil)}
			snap := inventory.Build(nodes, gpuNodes, tc.pods, nil, inventory.Options{Now: now})
			n := nodeNamed(t, snap, nodeA)

			var got []string
			for _, p := range n.Pods {
				got = append(got, p.Key.String())
			}
			if !slices.Equal(got, tc.wantPods) {
				t.Errorf("pods = %v, want %v", got, tc.wantPods)
			}
			if !sameList(n.Requested, tc.wantRequested) {
				t.Errorf("Requested = %s, want %s", listString(n.Requested), listString(tc.wantRequested))
			}
			for name, want := range tc.wantFree {
				if got := n.Free(name); got != want {
					t.Errorf("Free(%s) = %d, want %d", name, got, want)
				}
			}
			// Every pod's own requests are the scheduler's count, as demand.PodRequests gives it.
			for i := range tc.pods {
				src := &tc.pods[i]
				if p := n.Pod(nn(src.Namespace + "/" + src.Name)); p != nil {
					if want := demand.PodRequests(src); !sameList(p.Requests, want) {
						t.Errorf("%s: Requests = %s, want %s", p.Key, listString(p.Requests), listString(want))
					}
				}
			}
		})
	}
}

func TestPodPriority(t *testing.T) {
	tests := []struct {
		name string
		opts []podOpt
		want int32
	}{
		{name: "no resolved priority is zero", want: 0},
		{name: "resolved priority is copied", opts: []podOpt{withPriority(1000)}, want: 1000},
		{name: "negative priority is kept", opts: []podOpt{withPriority(-5)}, want: -5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := inventory.Build([]corev1.Node{gpuHost(nodeA, nil)}, []v1alpha1.GPUNode{report(nodeA, nil)},
				[]corev1.Pod{pod("p", tc.opts...)}, nil, inventory.Options{Now: now})
			if got := podOf(t, snap.Nodes[0], "team/p").Priority; got != tc.want {
				t.Errorf("Priority = %d, want %d", got, tc.want)
			}
		})
	}
}
