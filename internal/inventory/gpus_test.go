package inventory_test

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
)

func TestGPUs(t *testing.T) {
	tests := []struct {
		name        string
		gpu         v1alpha1.GPUStatus
		wantMIG     bool
		wantPlaced  []string
		wantLayout  mig.Layout
		wantBusy    bool
		wantFree    map[string]int
		wantPods    []string
		wantErrText string
	}{{
		name:       "idle MIG GPU: instances sorted by placement",
		gpu:        fixture.MIGGPU(0, h100, fixture.Instance("1g.10gb", 6, 1), fixture.Instance("3g.40gb", 0, 4), fixture.Instance("2g.20gb", 4, 2)),
		wantMIG:    true,
		wantPlaced: []string{"3g.40gb@0+4", "2g.20gb@4+2", "1g.10gb@6+1"},
		wantLayout: mig.Layout{"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1},
		wantFree:   map[string]int{"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1},
	}, {
		name: "layout is a multiset",
		gpu: fixture.MIGGPU(0, h100, fixture.Instance("1g.10gb", 3, 1), fixture.Instance("1g.10gb", 0, 1), fixture.Instance("1g.10gb", 2, 1),
			fixture.Instance("1g.10gb", 1, 1), fixture.Instance("3g.40gb", 4, 4)),
		wantMIG:    true,
		wantPlaced: []string{"1g.10gb@0+1", "1g.10gb@1+1", "1g.10gb@2+1", "1g.10gb@3+1", "3g.40gb@4+4"},
		wantLayout: mig.Layout{"1g.10gb": 4, "3g.40gb": 1},
		wantFree:   map[string]int{"1g.10gb": 4, "3g.40gb": 1},
	}, {
		// The agent reports the pod from the PodResources API; an instance a pod holds is busy
		// even in a report that read no process on it yet.
		name: "an instance with a pod is busy and its pod is listed",
		gpu: fixture.MIGGPU(0, h100, fixture.Instance("1g.10gb", 6, 1), fixture.HeldBy(fixture.Instance("3g.40gb", 0, 4), "team/train"),
			func() v1alpha1.MIGInstance {
				in := fixture.Instance("2g.20gb", 4, 2)
				r := fixture.Ref("batch/infer")
				in.Pod = &r
				return in
			}()),
		wantMIG:    true,
		wantPlaced: []string{"3g.40gb@0+4*<team/train>", "2g.20gb@4+2*<batch/infer>", "1g.10gb@6+1"},
		wantLayout: mig.Layout{"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1},
		wantBusy:   true,
		wantFree:   map[string]int{"1g.10gb": 1},
		wantPods:   []string{"batch/infer", "team/train"},
	}, {
		name:       "an instance a process uses is busy without a pod",
		gpu:        fixture.MIGGPU(0, h100, fixture.Busy(fixture.Instance("4g.40gb", 0, 4)), fixture.Instance("3g.40gb", 4, 4)),
		wantMIG:    true,
		wantPlaced: []string{"4g.40gb@0+4*", "3g.40gb@4+4"},
		wantLayout: mig.Layout{"4g.40gb": 1, "3g.40gb": 1},
		wantBusy:   true,
		wantFree:   map[string]int{"3g.40gb": 1},
	}, {
		name: "a pod holding two instances is listed once",
		gpu: fixture.MIGGPU(0, h100, fixture.HeldBy(fixture.Instance("1g.10gb", 1, 1), "team/multi"), fixture.HeldBy(fixture.Instance("1g.10gb", 0, 1), "team/multi"),
			fixture.Instance("1g.10gb", 2, 1)),
		wantMIG:    true,
		wantPlaced: []string{"1g.10gb@0+1*<team/multi>", "1g.10gb@1+1*<team/multi>", "1g.10gb@2+1"},
		wantLayout: mig.Layout{"1g.10gb": 3},
		wantBusy:   true,
		wantFree:   map[string]int{"1g.10gb": 1},
		wantPods:   []string{"team/multi"},
	}, {
		name:       "a driver's drifted name is read as the canonical profile",
		gpu:        fixture.MIGGPU(0, h100, fixture.Instance("7g.79gb", 0, 8)),
		wantMIG:    true,
		wantPlaced: []string{"7g.80gb@0+8"},
		wantLayout: mig.Layout{"7g.80gb": 1},
		wantFree:   map[string]int{"7g.80gb": 1},
	}, {
		name:       "MIG enabled without instances",
		gpu:        fixture.MIGGPU(0, h100),
		wantMIG:    true,
		wantLayout: mig.Layout{},
		wantFree:   map[string]int{},
	}, {
		name:       "whole-GPU pods are listed sorted and make the GPU busy",
		gpu:        fixture.WholeGPU(0, h100, "team/z", "batch/a", "team/b"),
		wantLayout: mig.Layout{},
		wantBusy:   true,
		wantFree:   map[string]int{},
		wantPods:   []string{"batch/a", "team/b", "team/z"},
	}, {
		name:       "idle GPU with MIG off",
		gpu:        fixture.WholeGPU(0, h100),
		wantLayout: mig.Layout{},
		wantFree:   map[string]int{},
	}, {
		// MIG mode is what NVML reads now; a pending change takes effect at the next reset.
		name: "MIG disabled now but pending enabled is off",
		gpu: func() v1alpha1.GPUStatus {
			g := fixture.WholeGPU(0, h100)
			g.MIGMode.Pending = "Enabled"
			return g
		}(),
		wantLayout: mig.Layout{},
		wantFree:   map[string]int{},
	}, {
		name: "no migMode reported is off",
		gpu: func() v1alpha1.GPUStatus {
			g := fixture.WholeGPU(0, h100)
			g.MIGMode = nil
			return g
		}(),
		wantLayout: mig.Layout{},
		wantFree:   map[string]int{},
	}, {
		name: "an unreadable GPU carries the agent's error",
		gpu: func() v1alpha1.GPUStatus {
			g := fixture.WholeGPU(0, h100)
			g.Error = "nvmlDeviceGetMigMode: GPU is lost"
			g.MIGMode = nil
			return g
		}(),
		wantLayout:  mig.Layout{},
		wantFree:    map[string]int{},
		wantErrText: "nvmlDeviceGetMigMode: GPU is lost",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := inventory.Build([]corev1.Node{fixture.GPUHost(nodeA, h100Label, nil)},
				[]v1alpha1.GPUNode{report(nodeA, []v1alpha1.GPUStatus{tc.gpu})}, nil, nil, inventory.Options{Now: now})
			n := snap.Nodes[0]
			if len(n.GPUs) != 1 {
				t.Fatalf("%d GPUs, want 1", len(n.GPUs))
			}
			g := n.GPUs[0]
			if g.MIGEnabled != tc.wantMIG {
				t.Errorf("MIGEnabled = %v, want %v", g.MIGEnabled, tc.wantMIG)
			}
			if got := placed(g.Instances); !slices.Equal(got, tc.wantPlaced) {
				t.Errorf("Instances = %q\nwant        %q", got, tc.wantPlaced)
			}
			if got := g.Layout(); !got.Equal(tc.wantLayout) || got == nil {
				t.Errorf("Layout() = %v, want %v", got, tc.wantLayout)
			}
			if got := g.Busy(); got != tc.wantBusy {
				t.Errorf("Busy() = %v, want %v", got, tc.wantBusy)
			}
			if got := g.FreeInstances(); !maps.Equal(got, tc.wantFree) {
				t.Errorf("FreeInstances() = %v, want %v", got, tc.wantFree)
			}
			if got := keys(g.Pods); !slices.Equal(got, tc.wantPods) {
				t.Errorf("Pods = %q, want %q", got, tc.wantPods)
			}
			if g.Error != tc.wantErrText {
				t.Errorf("Error = %q, want %q", g.Error, tc.wantErrText)
			}
		})
	}
}

func TestGPUsSortedByIndex(t *testing.T) {
	tests := []struct {
		name    string
		indexes []int32
		want    []int
	}{
		{name: "already sorted", indexes: []int32{0, 1, 2, 3}, want: []int{0, 1, 2, 3}},
		{name: "reversed", indexes: []int32{7, 5, 3, 1}, want: []int{1, 3, 5, 7}},
		{name: "shuffled with gaps", indexes: []int32{4, 0, 6, 2}, want: []int{0, 2, 4, 6}},
		{name: "no GPUs", want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var gpus []v1alpha1.GPUStatus
			for _, i := range tc.indexes {
				gpus = append(gpus, fixture.WholeGPU(i, h100, fmt.Sprintf("team/p%d", i)))
			}
			snap := inventory.Build([]corev1.Node{fixture.GPUHost(nodeA, h100Label, nil)},
				[]v1alpha1.GPUNode{report(nodeA, gpus)}, nil, nil, inventory.Options{Now: now})
			var got []int
			for _, g := range snap.Nodes[0].GPUs {
				got = append(got, g.Index)
				// Each GPU keeps what its own entry of the report said.
				if want := []string{fmt.Sprintf("team/p%d", g.Index)}; !slices.Equal(keys(g.Pods), want) {
					t.Errorf("GPU %d: Pods = %q, want %q", g.Index, keys(g.Pods), want)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("indexes = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestNodeTarget guards the executor's view of a step's target: the step's layouts for the GPUs
// it changes, the report's for the others, profile names as the planner spells them (a driver's
// drifted "3g.39gb" is the table's 3g.40gb), in index order whatever order the report lists.
func TestNodeTarget(t *testing.T) {
	const a100 = "NVIDIA A100-SXM4-80GB"
	report := report(nodeA, []v1alpha1.GPUStatus{
		fixture.MIGGPU(1, a100, fixture.Instance("3g.39gb", 4, 4), fixture.Instance("2g.20gb", 0, 2)),
		fixture.WholeGPU(2, a100),
		fixture.MIGGPU(0, a100, fixture.Instance("7g.80gb", 0, 8)),
	})
	changes := []v1alpha1.GPUChange{{Index: 0, From: v1alpha1.ProfileCounts{"7g.80gb": 1}, To: v1alpha1.ProfileCounts{"1g.10gb": 7}}}
	got := inventory.NodeTarget(ptr.To(fixture.GPUHost(nodeA, h100Label, nil)), &report, changes)
	want := []mig.GPUTarget{
		{Index: 0, MIGEnabled: true, Layout: mig.Layout{"1g.10gb": 7}},
		{Index: 1, MIGEnabled: true, Layout: mig.Layout{"3g.40gb": 1, "2g.20gb": 1}},
		{Index: 2, MIGEnabled: false, Layout: mig.Layout{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("NodeTarget = %+v\nwant %+v", got, want)
	}
}
