package sim

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/gpupool/gpupool/internal/fixture"
)

// What the device plugin advertises, by MIG strategy and sharing config (configs written by
// hand in NVIDIA's format). Mixed: one nvidia.com/mig-<profile> per MIG device ("+" written
// ".") and one nvidia.com/gpu per GPU with MIG disabled, nothing for a MIG-enabled GPU without
// instances. Time-slicing with renameByDefault replicates exactly the listed resources under
// <name>.shared; without it, under the name itself; a resource listed twice gets the larger
// count. None: every GPU is nvidia.com/gpu. Single: MIG devices are nvidia.com/gpu.
func TestAdvertise(t *testing.T) {
	mixed := []GPUState{
		{Index: 0, MIGEnabled: true, Instances: []InstanceState{
			{Profile: "3g.71gb", Start: 0, Size: 4, UUID: "MIG-a"},
			{Profile: "1g.18gb", Start: 4, Size: 1, UUID: "MIG-b"},
			{Profile: "1g.18gb", Start: 5, Size: 1, UUID: "MIG-c"},
			{Profile: "1g.18gb+me", Start: 6, Size: 1, UUID: "MIG-d"}}},
		{Index: 1, UUID: "GPU-1"},
	}
	whole := []GPUState{{Index: 0, UUID: "GPU-0"}, {Index: 1, UUID: "GPU-1"}}
	all3g := []GPUState{
		{Index: 0, MIGEnabled: true, Instances: []InstanceState{
			{Profile: "3g.71gb", Start: 0, Size: 4, UUID: "MIG-a"}, {Profile: "3g.71gb", Start: 4, Size: 4, UUID: "MIG-b"}}},
		{Index: 1, MIGEnabled: true, Instances: []InstanceState{
			{Profile: "3g.71gb", Start: 0, Size: 4, UUID: "MIG-c"}, {Profile: "3g.71gb", Start: 4, Size: 4, UUID: "MIG-d"}}},
	}
	exclusive := "version: v1\n"
	ts4 := timeSlicing(4, "nvidia.com/gpu", "mig-3g.71gb", "nvidia.com/mig-1g.18gb", "nvidia.com/mig-1g.18gb.me")
	for _, tc := range []struct {
		name     string
		gpus     []GPUState
		config   string
		strategy string
		want     corev1.ResourceList
	}{
		{name: "no GPUs", config: exclusive, want: fixture.Resources()},
		{name: "whole GPUs", gpus: whole, config: exclusive, want: fixture.Resources("nvidia.com/gpu", "2")},
		{name: "whole GPUs, time-slicing x4", gpus: whole, config: ts4, want: fixture.Resources("nvidia.com/gpu.shared", "8")},
		{name: "whole GPUs, time-slicing without renameByDefault keeps the name", gpus: whole, config: `
version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 3
      rename: ignored-anyway`, want: fixture.Resources("nvidia.com/gpu", "6")},
		{name: "whole GPUs, a resource listed twice gets the larger count", gpus: whole, config: `
version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources: [{name: gpu, replicas: 2}, {name: gpu, replicas: 5, devices: [0]}]`, want: fixture.Resources("nvidia.com/gpu.shared", "10")},
		{name: "whole GPUs, MPS x3 under none", gpus: whole, config: mps(3, "nvidia.com/gpu"), strategy: migStrategyNone,
			want: fixture.Resources("nvidia.com/gpu.shared", "6")},
		{name: "whole GPUs, MPS x48 under none", gpus: whole, config: mps(48, "nvidia.com/gpu"), strategy: migStrategyNone,
			want: fixture.Resources("nvidia.com/gpu.shared", "96")},
		{name: "MIG enabled, no instances", gpus: []GPUState{{Index: 0, MIGEnabled: true}}, config: exclusive, want: fixture.Resources()},
		{name: "MIG enabled, no instances, shared", gpus: []GPUState{{Index: 0, MIGEnabled: true}}, config: ts4, want: fixture.Resources()},
		{name: "mixed node", gpus: mixed, config: exclusive,
			want: fixture.Resources("nvidia.com/mig-3g.71gb", "1", "nvidia.com/mig-1g.18gb", "2", "nvidia.com/mig-1g.18gb.me", "1", "nvidia.com/gpu", "1")},
		{name: "mixed node, time-slicing x4 shares the listed MIG resources", gpus: mixed, config: ts4,
			want: fixture.Resources("nvidia.com/mig-3g.71gb.shared", "4", "nvidia.com/mig-1g.18gb.shared", "8", "nvidia.com/mig-1g.18gb.me.shared", "4",
				"nvidia.com/gpu.shared", "4")},
		{name: "mixed node, unlisted MIG resources stay exclusive", gpus: mixed, config: timeSlicing(2, "nvidia.com/gpu"),
			want: fixture.Resources("nvidia.com/mig-3g.71gb", "1", "nvidia.com/mig-1g.18gb", "2", "nvidia.com/mig-1g.18gb.me", "1", "nvidia.com/gpu.shared", "2")},
		{name: "all-3g", gpus: all3g, config: exclusive, want: fixture.Resources("nvidia.com/mig-3g.71gb", "4")},
		{name: "all-3g, time-slicing x2", gpus: all3g, config: timeSlicing(2, "nvidia.com/mig-3g.71gb"),
			want: fixture.Resources("nvidia.com/mig-3g.71gb.shared", "8")},
		{name: "all-3g under none: each GPU whole", gpus: all3g, config: exclusive, strategy: migStrategyNone, want: fixture.Resources("nvidia.com/gpu", "2")},
		{name: "all-3g under single: MIG devices as nvidia.com/gpu", gpus: all3g, config: exclusive, strategy: migStrategySingle,
			want: fixture.Resources("nvidia.com/gpu", "4")},
		{name: "all-3g under single, time-sliced", gpus: all3g, config: timeSlicing(2, "nvidia.com/gpu"), strategy: migStrategySingle,
			want: fixture.Resources("nvidia.com/gpu.shared", "8")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := mustRun(t, tc.config)
			if tc.strategy != "" {
				run.strategy = tc.strategy
			}
			devices, err := advertise(tc.gpus, *run)
			if err != nil {
				t.Fatalf("advertise: %v", err)
			}
			if got := capacityOf(devices); !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("capacity = %v, want %v", got, tc.want)
			}
		})
	}
}

// The device plugin refuses to start, as NVIDIA's does: MPS under the mixed strategy (whatever
// the file says, the ClusterPolicy's strategy wins), MPS with more than 48 replicas, MPS next
// to MIG devices (single strategy), an unknown strategy, and under single a node mixing MIG
// and whole GPUs, two MIG profiles, or a MIG-enabled GPU without MIG devices.
func TestAdvertiseRefusals(t *testing.T) {
	whole := []GPUState{{Index: 0, UUID: "GPU-0"}, {Index: 1, UUID: "GPU-1"}}
	mig3g := GPUState{Index: 1, UUID: "GPU-1", MIGEnabled: true, Instances: []InstanceState{{Profile: "3g.71gb", Size: 4, UUID: "MIG-a"}}}
	for _, tc := range []struct {
		name, config, strategy string
		gpus                   []GPUState
		want                   string
	}{
		{name: "MPS under mixed", gpus: whole, config: mps(2, "nvidia.com/gpu"), strategy: migStrategyMixed,
			want: "using --mig-strategy=mixed is not supported with MPS"},
		{name: "MPS under mixed even when the file says none", gpus: whole,
			config:   "version: v1\nflags: {migStrategy: none}\nsharing:\n  mps:\n    resources: [{name: nvidia.com/gpu, replicas: 2}]\n",
			strategy: migStrategyMixed, want: "using --mig-strategy=mixed is not supported with MPS"},
		{name: "MPS with 49 replicas", gpus: whole, config: mps(49, "nvidia.com/gpu"), strategy: migStrategyNone,
			want: "maximum allowed replicas exceeded: 49 > 48"},
		{name: "MPS next to a MIG device", gpus: []GPUState{mig3g}, config: mps(2, "nvidia.com/gpu"), strategy: migStrategySingle,
			want: "sharing using MPS is not supported for MIG devices"},
		{name: "unknown strategy", gpus: whole, config: "version: v1\n", strategy: "both", want: "unknown MIG strategy: both"},
		{name: "single, MIG next to whole GPUs", gpus: []GPUState{whole[0], mig3g}, config: "version: v1\n", strategy: migStrategySingle,
			want: "same migEnabled value"},
		{name: "single, two profiles", strategy: migStrategySingle, config: "version: v1\n", gpus: []GPUState{
			{Index: 0, MIGEnabled: true, Instances: []InstanceState{{Profile: "1g.18gb", UUID: "MIG-b"}}}, mig3g},
			want: "more than one MIG device type"},
		{name: "single, MIG enabled without devices", strategy: migStrategySingle, config: "version: v1\n",
			gpus: []GPUState{{Index: 0, MIGEnabled: true}}, want: "has no MIG devices configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := mustRun(t, tc.config)
			run.strategy = tc.strategy
			devices, err := advertise(tc.gpus, *run)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("advertise = %v, %v; want an error containing %q", devices, err, tc.want)
			}
		})
	}
}

// A plugin that does not run leaves every nvidia.com/ resource the node has at 0.
func TestNothingAdvertised(t *testing.T) {
	status := corev1.NodeStatus{
		Capacity:    fixture.Resources("cpu", "8", "nvidia.com/gpu.shared", "8", "nvidia.com/mig-1g.18gb", "7"),
		Allocatable: fixture.Resources("cpu", "8", "nvidia.com/gpu.shared", "8", "nvidia.com/mig-3g.71gb", "1"),
	}
	want := fixture.Resources("nvidia.com/gpu.shared", "0", "nvidia.com/mig-1g.18gb", "0", "nvidia.com/mig-3g.71gb", "0")
	if got := nothingAdvertised(status); !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("nothingAdvertised = %v, want %v", got, want)
	}
}

// The device plugin's status patch touches only nvidia.com/ keys: it sets what differs,
// deletes what the layout no longer has, leaves cpu/memory/pods alone, and is empty when the
// node already advertises the layout (so a steady node is never rewritten).
func TestCapacityPatch(t *testing.T) {
	s := func(v string) *string { return &v }
	status := corev1.NodeStatus{
		Capacity:    fixture.Resources("cpu", "8", "memory", "1Gi", "pods", "110", "nvidia.com/mig-1g.18gb", "7", "example.com/foo", "1"),
		Allocatable: fixture.Resources("cpu", "7", "memory", "1Gi", "pods", "110", "nvidia.com/mig-1g.18gb", "7"),
	}
	got := capacityPatch(status, fixture.Resources("nvidia.com/mig-3g.71gb", "2"))
	want := map[string]map[corev1.ResourceName]*string{
		"capacity":    {"nvidia.com/mig-3g.71gb": s("2"), "nvidia.com/mig-1g.18gb": nil},
		"allocatable": {"nvidia.com/mig-3g.71gb": s("2"), "nvidia.com/mig-1g.18gb": nil},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("capacityPatch = %v, want %v", got, want)
	}
	if got := capacityPatch(status, fixture.Resources("nvidia.com/mig-1g.18gb", "7")); len(got) != 0 {
		t.Errorf("capacityPatch for an advertised layout = %v, want empty", got)
	}
	onlyAllocatable := corev1.NodeStatus{Capacity: fixture.Resources("nvidia.com/gpu", "1"), Allocatable: fixture.Resources()}
	if got := capacityPatch(onlyAllocatable, fixture.Resources("nvidia.com/gpu", "1")); len(got) != 1 || got["allocatable"]["nvidia.com/gpu"] == nil {
		t.Errorf("capacityPatch with a stale allocatable = %v, want allocatable set", got)
	}
}
