package inventory_test

import (
	"slices"
	"testing"

	"k8s.io/utils/ptr"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/fixture"
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
			pod("web", fixture.Requests("cpu", "500m", "memory", "2Gi")),
			pod("infer", fixture.Requests("cpu", "1", "memory", "1Gi", "nvidia.com/mig-1g.10gb", "1")),
		},
		wantPods:      []string{"team/infer", "team/web"},
		wantRequested: fixture.Resources("cpu", "1500m", "memory", "3Gi", "nvidia.com/mig-1g.10gb", "1", "pods", "2"),
		wantFree: map[corev1.ResourceName]int64{"cpu": 62500, "memory": 509 << 30, "pods": 108,
			// Not in allocatable: nothing is free, however little is asked.
			"nvidia.com/mig-1g.10gb": 0},
	}, {
		// The scheduler already counts a pod bound to the node while it still starts.
		name:          "a pending pod bound to the node counts",
		pods:          []corev1.Pod{pod("starting", phase(corev1.PodPending))},
		wantPods:      []string{"team/starting"},
		wantRequested: fixture.Resources("cpu", "1", "memory", "1Gi", "pods", "1"),
		wantFree:      map[corev1.ResourceName]int64{"cpu": 63000, "pods": 109},
	}, {
		name: "succeeded and failed pods release what they requested",
		pods: []corev1.Pod{
			pod("done", phase(corev1.PodSucceeded), fixture.Requests("cpu", "8")),
			pod("crashed", phase(corev1.PodFailed), fixture.Requests("cpu", "8")),
			pod("live"),
		},
		wantPods:      []string{"team/live"},
		wantRequested: fixture.Resources("cpu", "1", "memory", "1Gi", "pods", "1"),
		wantFree:      map[corev1.ResourceName]int64{"cpu": 63000, "pods": 109},
	}, {
		name: "pending pods the scheduler has not bound, and pods of other nodes, do not count",
		pods: []corev1.Pod{
			pod("waiting", pendingUnbound(), fixture.Requests("cpu", "8", "nvidia.com/gpu", "1")),
			pod("elsewhere", onNode("node-b"), fixture.Requests("cpu", "8")),
			pod("here"),
		},
		wantPods:      []string{"team/here"},
		wantRequested: fixture.Resources("cpu", "1", "memory", "1Gi", "pods", "1"),
		wantFree:      map[corev1.ResourceName]int64{"cpu": 63000, "pods": 109},
	}, {
		// Init containers run one at a time before the main ones, so the pod needs the largest
		// init container or the sum of the main ones, whichever is more, per resource.
		name: "init containers count by the max rule",
		pods: []corev1.Pod{pod("train",
			fixture.Requests("cpu", "1", "memory", "1Gi", "nvidia.com/gpu", "1"),
			fixture.WithContainer("logger", "cpu", "1", "memory", "2Gi"),
			fixture.WithInit("fetch", "cpu", "4", "memory", "1Gi"),
			fixture.WithInit("warm", "cpu", "500m", "nvidia.com/gpu", "2"))},
		wantPods:      []string{"team/train"},
		wantRequested: fixture.Resources("cpu", "4", "memory", "3Gi", "nvidia.com/gpu", "2", "pods", "1"),
		wantFree:      map[corev1.ResourceName]int64{"cpu": 60000, "memory": 509 << 30, "pods": 109},
	}, {
		name: "limits stand in for absent requests, as the API server defaults them",
		pods: []corev1.Pod{pod("limited", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: fixture.Resources("cpu", "2", "nvidia.com/gpu", "1")}
		})},
		wantPods:      []string{"team/limited"},
		wantRequested: fixture.Resources("cpu", "2", "nvidia.com/gpu", "1", "pods", "1"),
		wantFree:      map[corev1.ResourceName]int64{"cpu": 62000, "nvidia.com/gpu": 0},
	}, {
		name:        "free is never negative on an overcommitted node",
		allocatable: fixture.Resources("cpu", "1", "memory", "1Gi", "pods", "1", "nvidia.com/gpu", "1"),
		pods: []corev1.Pod{
			pod("a", fixture.Requests("cpu", "2", "memory", "1Gi", "nvidia.com/gpu", "1")),
			pod("b", fixture.Requests("cpu", "1", "memory", "2Gi", "nvidia.com/gpu", "1")),
		},
		wantPods:      []string{"team/a", "team/b"},
		wantRequested: fixture.Resources("cpu", "3", "memory", "3Gi", "nvidia.com/gpu", "2", "pods", "2"),
		wantFree:      map[corev1.ResourceName]int64{"cpu": 0, "memory": 0, "pods": 0, "nvidia.com/gpu": 0},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := []corev1.Node{fixture.GPUHost(nodeA, h100Label, tc.allocatable), fixture.GPUHost("node-b", h100Label, nil)}
			gpuNodes := []v1alpha1.GPUNode{report(nodeA, nil), report("node-b", nil)}
			snap := inventory.Build(nodes, gpuNodes, fixture.Pointers(tc.pods), nil, inventory.Options{Now: now})
			n := nodeNamed(t, snap, nodeA)

			var got []string
			for _, p := range n.Pods {
				got = append(got, p.Key.String())
			}
			if !slices.Equal(got, tc.wantPods) {
				t.Errorf("pods = %v, want %v", got, tc.wantPods)
			}
			if !equality.Semantic.DeepEqual(n.Requested, tc.wantRequested) {
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
					if want := demand.PodRequests(src); !equality.Semantic.DeepEqual(p.Requests, want) {
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
		opts []fixture.PodOption
		want int32
	}{
		{name: "no resolved priority is zero", want: 0},
		{name: "resolved priority is copied", opts: []fixture.PodOption{fixture.Priority(1000)}, want: 1000},
		{name: "negative priority is kept", opts: []fixture.PodOption{fixture.Priority(-5)}, want: -5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := inventory.Build([]corev1.Node{fixture.GPUHost(nodeA, h100Label, nil)}, []v1alpha1.GPUNode{report(nodeA, nil)},
				[]*corev1.Pod{ptr.To(pod("p", tc.opts...))}, nil, inventory.Options{Now: now})
			if got := podOf(t, snap.Nodes[0], "team/p").Priority; got != tc.want {
				t.Errorf("Priority = %d, want %d", got, tc.want)
			}
		})
	}
}
