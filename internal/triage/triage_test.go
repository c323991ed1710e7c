package triage_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/snapshot"
	"github.com/gpupool/gpupool/internal/triage"
)

// load reads one of the shipped snapshots (config/samples/snapshots), which document their own
// expected plans, so the triage is checked on the same pools users try the CLI on.
func load(t *testing.T, name string) *snapshot.Snapshot {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "config", "samples", "snapshots", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := snapshot.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pod(t *testing.T, s *snapshot.Snapshot, ns, name string) *corev1.Pod {
	t.Helper()
	i := slices.IndexFunc(s.Pods, func(p corev1.Pod) bool { return p.Namespace == ns && p.Name == name })
	if i < 0 {
		t.Fatalf("no pod %s/%s in the sample", ns, name)
	}
	return &s.Pods[i]
}

func explain(t *testing.T, s *snapshot.Snapshot, plans []v1alpha1.RepartitionPlan, ns, name string) *triage.Verdict {
	t.Helper()
	rep, err := s.Plan(snapshot.Options{Now: s.PlanningTime(time.Time{}, nil)})
	if err != nil {
		t.Fatal(err)
	}
	v, err := triage.Explain(s, rep, plans, types.NamespacedName{Namespace: ns, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestLayers guards that each kind of pending pod is blamed on the right layer and dimension.
func TestLayers(t *testing.T) {
	for _, tc := range []struct {
		name, sample, ns, pod string
		edit                  func(t *testing.T, s *snapshot.Snapshot)
		plans                 []v1alpha1.RepartitionPlan
		layer                 triage.Layer
		blocking              string
		next                  string
	}{{
		name:   "capacity under another profile is partition shape, served by the next plan",
		sample: "fragmented-h200.yaml", ns: "team-a", pod: "trainer-0-p7x2m",
		layer: triage.LayerPartitionShape, blocking: "nvidia.com/mig-3g.71gb", next: "the next plan of policy h200-pool",
	}, {
		name:   "a live plan awaiting approval is named with the command that approves it",
		sample: "fragmented-h200.yaml", ns: "team-a", pod: "trainer-0-p7x2m",
		plans: []v1alpha1.RepartitionPlan{{Spec: v1alpha1.RepartitionPlanSpec{Policy: "h200-pool", Hash: "0123456789abcdef",
			Expected: v1alpha1.PlanExpectation{Pods: []v1alpha1.PodReference{{Namespace: "team-a", Name: "trainer-0-p7x2m"}}}},
			Status: v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanAwaitingApproval}}},
		layer: triage.LayerPartitionShape, blocking: "nvidia.com/mig-3g.71gb", next: "kubectl gpupool approve",
	}, {
		name:   "more CPU than any node has is placement, on cpu",
		sample: "fragmented-h200.yaml", ns: "team-a", pod: "trainer-0-p7x2m",
		edit: func(t *testing.T, s *snapshot.Snapshot) {
			pod(t, s, "team-a", "trainer-0-p7x2m").Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("4000")
		},
		layer: triage.LayerPlacement, blocking: "cpu", next: "repartitioning cannot help",
	}, {
		name:   "a nodeSelector no pool node matches is not in a pool",
		sample: "fragmented-h200.yaml", ns: "team-a", pod: "trainer-0-p7x2m",
		edit: func(t *testing.T, s *snapshot.Snapshot) {
			pod(t, s, "team-a", "trainer-0-p7x2m").Spec.NodeSelector = map[string]string{"zone": "nowhere"}
		},
		layer: triage.LayerNotInPool, blocking: "nodeSelector",
	}, {
		name:   "no policy at all is not in a pool",
		sample: "fragmented-h200.yaml", ns: "team-a", pod: "trainer-0-p7x2m",
		edit:  func(t *testing.T, s *snapshot.Snapshot) { s.Policies = nil },
		layer: triage.LayerNotInPool, blocking: "no GPUPoolPolicy",
	}, {
		name:   "a PodDisruptionBudget that allows nothing is the disruption budget, named",
		sample: "busy-eviction.yaml", ns: "team-a", pod: "pretrain-7g-0-s5j3d",
		edit: func(t *testing.T, s *snapshot.Snapshot) {
			// The inference pods' budget allows nothing, and one more guards the simulation
			// pods, so that no GPU may be emptied but the do-not-disrupt notebook's.
			s.PDBs[0].Status.DisruptionsAllowed = 0
			sim := *s.PDBs[0].DeepCopy()
			sim.Namespace, sim.Name = "team-a", "sim"
			sim.Spec.Selector.MatchLabels = map[string]string{"app": "sim"}
			s.PDBs = append(s.PDBs, sim)
		},
		layer: triage.LayerDisruptionBudget, blocking: "PodDisruptionBudget team-b/infer",
	}, {
		name:   "a budget of zero nodes is the disruption budget, maxDisruptedNodes",
		sample: "busy-eviction.yaml", ns: "team-a", pod: "pretrain-7g-0-s5j3d",
		edit: func(t *testing.T, s *snapshot.Snapshot) {
			zero := intstr.FromInt32(0)
			s.Policies[0].Spec.Disruption.MaxDisruptedNodes = &zero
		},
		layer: triage.LayerDisruptionBudget, blocking: "maxDisruptedNodes",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := load(t, tc.sample)
			if tc.edit != nil {
				tc.edit(t, s)
			}
			v := explain(t, s, tc.plans, tc.ns, tc.pod)
			if v.Layer != tc.layer || v.Blocking != tc.blocking {
				t.Fatalf("layer %s blocking %q, want %s %q\nreason: %s", v.Layer, v.Blocking, tc.layer, tc.blocking, v.Reason)
			}
			if !strings.Contains(v.Next, tc.next) {
				t.Errorf("next %q, want it to say %q", v.Next, tc.next)
			}
			if len(v.Nodes) == 0 {
				t.Errorf("no node matrix")
			}
		})
	}
}

// TestNodeMatrixShowsTheFailingDimension guards the evidence behind a placement verdict: the
// row of each pool node says cpu fails and shows the free and needed amounts.
func TestNodeMatrixShowsTheFailingDimension(t *testing.T) {
	s := load(t, "fragmented-h200.yaml")
	pod(t, s, "team-a", "trainer-0-p7x2m").Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("4000")
	v := explain(t, s, nil, "team-a", "trainer-0-p7x2m")
	for _, row := range v.Nodes {
		if row.Fits {
			t.Errorf("node %s fits a pod asking for 4000 CPUs", row.Node)
		}
		i := slices.IndexFunc(row.Resources, func(d triage.Dimension) bool { return d.Name == "cpu" })
		if i < 0 || row.Resources[i].OK || row.Resources[i].Need != "4k" {
			t.Errorf("node %s: cpu dimension %+v, want failing with need 4k", row.Node, row.Resources)
		}
		if !strings.HasPrefix(row.Resources[0].Name, "nvidia.com/") {
			t.Errorf("node %s: GPU resource not first: %+v", row.Node, row.Resources)
		}
	}
}

// TestRunningPods guards the running side: a pod on the device it asked for is fine, and one
// whose container died of CUDA OOM is sent to the allocator, with evidence to collect.
func TestRunningPods(t *testing.T) {
	s := load(t, "fragmented-h200.yaml")
	v := explain(t, s, nil, "team-b", "infer-7c9d5f8b6-2xkqp")
	if v.Layer != triage.LayerRunning || !strings.Contains(v.Reason, "as it asked") {
		t.Fatalf("running pod: layer %s, reason %q", v.Layer, v.Reason)
	}

	p := pod(t, s, "team-b", "infer-7c9d5f8b6-2xkqp")
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "server", LastTerminationState: corev1.ContainerState{
		Terminated: &corev1.ContainerStateTerminated{Reason: "Error", Message: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}}}}
	v = explain(t, s, nil, "team-b", "infer-7c9d5f8b6-2xkqp")
	if v.Layer != triage.LayerAllocator || len(v.Evidence) == 0 || !strings.Contains(v.Evidence[0], "-c server --previous") {
		t.Fatalf("CUDA OOM: layer %s, evidence %q", v.Layer, v.Evidence)
	}
	if !strings.Contains(v.Next, "not the partitioning") {
		t.Errorf("next %q does not steer away from repartitioning", v.Next)
	}
}

// TestUnknownPodAndNonGPUPod guards the errors a user reads.
func TestUnknownPodAndNonGPUPod(t *testing.T) {
	s := load(t, "fragmented-h200.yaml")
	rep, err := s.Plan(snapshot.Options{Now: s.PlanningTime(time.Time{}, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := triage.Explain(s, rep, nil, types.NamespacedName{Namespace: "team-a", Name: "nope"}); err == nil ||
		!strings.Contains(err.Error(), "not found") {
		t.Errorf("unknown pod: %v", err)
	}
	s.Pods = append(s.Pods, corev1.Pod{})
	s.Pods[len(s.Pods)-1].Namespace, s.Pods[len(s.Pods)-1].Name = "web", "nginx"
	if _, err := triage.Explain(s, rep, nil, types.NamespacedName{Namespace: "web", Name: "nginx"}); err == nil ||
		!strings.Contains(err.Error(), "asks for no NVIDIA GPU resource") {
		t.Errorf("pod without GPUs: %v", err)
	}
}

// TestClaimPods: a pod that asks NVIDIA's DRA driver through a ResourceClaim is explained as a
// device-plugin pod is: what it asks for (in the device plugin's names, saying it comes
// through claims), the matrix counting it, and, once running, the device its claim holds,
// which the agent does not attribute.
func TestClaimPods(t *testing.T) {
	s := load(t, "dra-claims-h100.yaml")
	v := explain(t, s, nil, "team-a", "train-dra-0-4kq8z")
	if !strings.Contains(v.Asks, "1 x nvidia.com/mig-3g.40gb (through ResourceClaims of NVIDIA's DRA driver)") {
		t.Errorf("pending claim pod asks %q", v.Asks)
	}
	if v.Layer == triage.LayerRunning || len(v.Nodes) == 0 {
		t.Errorf("pending claim pod: layer %s, %d matrix rows", v.Layer, len(v.Nodes))
	}
	v = explain(t, s, nil, "team-a", "notebook-dra-0")
	if v.Layer != triage.LayerRunning || !strings.Contains(v.Reason, "holds 1g.10gb, as it asked") {
		t.Errorf("running claim pod: layer %s, reason %q", v.Layer, v.Reason)
	}
	v = explain(t, s, nil, "team-d", "sweep-0-j7t3r")
	if !strings.Contains(v.Asks, "GPUs through a ResourceClaim gpupool cannot map") {
		t.Errorf("unmappable claim pod asks %q", v.Asks)
	}
}
