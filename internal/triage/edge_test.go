package triage_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/snapshot"
	"github.com/gpupool/gpupool/internal/triage"
)

// addA100 puts an A100 node, carved into 1g.10gb instances, in the fragmented H200 sample's
// pool, with a catalog entry of its own; its name sorts before the H200 nodes'.
func addA100(s *snapshot.Snapshot) {
	node := fixture.GPUHost("a100-node-0", "NVIDIA-A100-SXM4-80GB",
		fixture.Resources("cpu", "96", "memory", "2Ti", "pods", "110", "nvidia.com/mig-1g.10gb", "7"), "gpupool.io/pool", "h200")
	node.Status.Conditions = s.Nodes[0].Status.Conditions
	var instances []v1alpha1.MIGInstance
	for i := range int32(7) {
		instances = append(instances, fixture.Instance("1g.10gb", i, 1))
	}
	report := fixture.Report("a100-node-0", fixture.MIGGPU(0, "NVIDIA A100-SXM4-80GB", instances...))
	report.Status.ObservedTime = s.GPUNodes[0].Status.ObservedTime
	s.Nodes = append([]corev1.Node{node}, s.Nodes...)
	s.GPUNodes = append([]v1alpha1.GPUNode{report}, s.GPUNodes...)
	s.Policies[0].Spec.Catalog = append(s.Policies[0].Spec.Catalog,
		v1alpha1.CatalogEntry{Product: "A100", MIGProfiles: []v1alpha1.MIGProfileName{"1g.10gb", "3g.40gb"}})
}

// forbid3g leaves 3g.71gb out of the H200's catalog entry.
func forbid3g(s *snapshot.Snapshot) {
	s.Policies[0].Spec.Catalog[0].MIGProfiles = []v1alpha1.MIGProfileName{"1g.18gb", "2g.35gb", "4g.71gb", "7g.141gb"}
}

// askWholeGPU makes the trainer ask for one whole GPU instead of a 3g.71gb instance.
func askWholeGPU(t *testing.T, s *snapshot.Snapshot) {
	c := &pod(t, s, "team-a", "trainer-0-p7x2m").Spec.Containers[0]
	delete(c.Resources.Requests, "nvidia.com/mig-3g.71gb")
	delete(c.Resources.Limits, "nvidia.com/mig-3g.71gb")
	c.Resources.Requests["nvidia.com/gpu"] = resource.MustParse("1")
	c.Resources.Limits["nvidia.com/gpu"] = resource.MustParse("1")
}

// TestEdgeCases guards the answers that misled in edge cases: each verdict must name the real
// obstacle and the field that removes it, and never blame something unrelated.
func TestEdgeCases(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(t *testing.T, s *snapshot.Snapshot)
		layer    triage.Layer
		blocking string
		// reason and next must contain every want and none of the lacks.
		reasonHas, reasonLacks, nextHas []string
	}{{
		name:  "a profile the H200's catalog entry forbids blames that entry, not the A100 that lacks the profile",
		edit:  func(t *testing.T, s *snapshot.Snapshot) { addA100(s); forbid3g(s) },
		layer: triage.LayerPartitionShape, blocking: "catalog",
		reasonHas:   []string{"NVIDIA-H200", "3g.71gb", "spec.catalog[0]"},
		reasonLacks: []string{"A100", "H200-141GB"},
		nextHas:     []string{"add 3g.71gb to spec.catalog[0].migProfiles"},
	}, {
		name:  "whole GPUs the catalog does not allow name allowWholeGPU, not a MIG profile",
		edit:  func(t *testing.T, s *snapshot.Snapshot) { askWholeGPU(t, s) },
		layer: triage.LayerPartitionShape, blocking: "catalog",
		reasonHas:   []string{"whole GPUs", "NVIDIA-H200", "allowWholeGPU"},
		reasonLacks: []string{"H200-141GB"},
		nextHas:     []string{"spec.catalog[0].allowWholeGPU: true"},
	}, {
		name: "whole GPUs the catalog does not allow read as the catalog, not as a full pool, when the only whole GPU is taken",
		edit: func(t *testing.T, s *snapshot.Snapshot) {
			askWholeGPU(t, s)
			// h200-node-2's first GPU is whole and runs a pod: the pool has a whole GPU, taken.
			g := &s.GPUNodes[1].Status.GPUs[0]
			g.MIGMode = &v1alpha1.MIGModeStatus{Current: "Disabled", Pending: "Disabled"}
			g.Instances = nil
			g.Pods = []v1alpha1.PodReference{{Namespace: "team-b", Name: "holder"}}
			s.Pods = append(s.Pods, fixture.Pod("team-b/holder", fixture.Running("h200-node-2"), fixture.Requests("nvidia.com/gpu", "1")))
		},
		layer: triage.LayerPartitionShape, blocking: "catalog",
		reasonHas:   []string{"allowWholeGPU", "NVIDIA-H200", "taken"},
		reasonLacks: []string{"pool is full"},
		nextHas:     []string{"spec.catalog[0].allowWholeGPU: true"},
	}, {
		name: "CPU in the reason carries its unit, never bare millicores",
		edit: func(t *testing.T, s *snapshot.Snapshot) {
			pod(t, s, "team-a", "trainer-0-p7x2m").Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("4000")
		},
		layer: triage.LayerPlacement, blocking: "cpu",
		reasonHas:   []string{"CPU free, the pod needs 4000 CPU"},
		reasonLacks: []string{"4000000"},
	}, {
		name: "memory in the reason in binary units",
		edit: func(t *testing.T, s *snapshot.Snapshot) {
			pod(t, s, "team-a", "trainer-0-p7x2m").Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("64Ti")
		},
		layer: triage.LayerPlacement, blocking: "memory",
		reasonHas:   []string{"memory free, the pod needs 64Ti memory"},
		reasonLacks: []string{"70368744177664"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := load(t, "fragmented-h200.yaml")
			tc.edit(t, s)
			v := explain(t, s, nil, "team-a", "trainer-0-p7x2m")
			if v.Layer != tc.layer || v.Blocking != tc.blocking {
				t.Errorf("layer %s blocking %q, want %s %q", v.Layer, v.Blocking, tc.layer, tc.blocking)
			}
			for _, w := range tc.reasonHas {
				if !strings.Contains(v.Reason, w) {
					t.Errorf("reason lacks %q: %s", w, v.Reason)
				}
			}
			for _, w := range tc.reasonLacks {
				if strings.Contains(v.Reason, w) {
					t.Errorf("reason says %q: %s", w, v.Reason)
				}
			}
			for _, w := range tc.nextHas {
				if !strings.Contains(v.Next, w) {
					t.Errorf("next lacks %q: %s", w, v.Next)
				}
			}
		})
	}
}
