package sim

import (
	"errors"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpupool/gpupool/api/v1alpha1"
)

func rl(pairs ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(pairs); i += 2 {
		out[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return out
}

func sameResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || v.Cmp(w) != 0 {
			return false
		}
	}
	return true
}

// The device plugin's mixed strategy: exclusive, one nvidia.com/mig-<profile> per MIG device
// ("+" written ".") and one nvidia.com/gpu per GPU with MIG disabled; nothing for a MIG-enabled
// GPU without instances and no zero-valued keys. Time-slicing with r replicas renames and
// shares every device: r x nvidia.com/mig-<profile>.shared per MIG device and r x
// nvidia.com/gpu.shared per whole GPU, and none of the unshared names. MPS with r replicas
// shares whole GPUs only (r x nvidia.com/gpu.shared) and leaves MIG devices exclusive.
func TestCapacity(t *testing.T) {
	none := v1alpha1.SharingConfig{Mode: v1alpha1.SharingNone}
	ts4 := v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: 4}
	mps3 := v1alpha1.SharingConfig{Mode: v1alpha1.SharingMPS, Replicas: 3}
	mixed := []GPUState{
		{Index: 0, MIGEnabled: true, Instances: []InstanceState{
			{Profile: "3g.71gb", Start: 0, Size: 4, UUID: "MIG-a"},
			{Profile: "1g.18gb", Start: 4, Size: 1, UUID: "MIG-b"},
			{Profile: "1g.18gb", Start: 5, Size: 1, UUID: "MIG-c"},
			{Profile: "1g.18gb+me", Start: 6, Size: 1, UUID: "MIG-d"}}},
		{Index: 1},
	}
	whole := []GPUState{{Index: 0}, {Index: 1}}
	all3g := []GPUState{
		{Index: 0, MIGEnabled: true, Instances: []InstanceState{
			{Profile: "3g.71gb", Start: 0, Size: 4, UUID: "MIG-a"}, {Profile: "3g.71gb", Start: 4, Size: 4, UUID: "MIG-b"}}},
		{Index: 1, MIGEnabled: true, Instances: []InstanceState{
			{Profile: "3g.71gb", Start: 0, Size: 4, UUID: "MIG-c"}, {Profile: "3g.71gb", Start: 4, Size: 4, UUID: "MIG-d"}}},
	}
	for _, tc := range []struct {
		name    string
		gpus    []GPUState
		sharing v1alpha1.SharingConfig
		want    corev1.ResourceList
	}{
		{name: "no GPUs", sharing: none, want: rl()},
		{name: "no GPUs, shared", sharing: ts4, want: rl()},
		{name: "whole GPUs", gpus: whole, sharing: none, want: rl("nvidia.com/gpu", "2")},
		{name: "whole GPUs, zero-value sharing is exclusive", gpus: whole, want: rl("nvidia.com/gpu", "2")},
		{name: "whole GPUs, time-slicing x4", gpus: whole, sharing: ts4, want: rl("nvidia.com/gpu.shared", "8")},
		{name: "whole GPUs, MPS x3", gpus: whole, sharing: mps3, want: rl("nvidia.com/gpu.shared", "6")},
		{name: "MIG enabled, no instances", gpus: []GPUState{{Index: 0, MIGEnabled: true}}, sharing: none, want: rl()},
		{name: "MIG enabled, no instances, shared", gpus: []GPUState{{Index: 0, MIGEnabled: true}}, sharing: ts4, want: rl()},
		{name: "mixed node", gpus: mixed, sharing: none,
			want: rl("nvidia.com/mig-3g.71gb", "1", "nvidia.com/mig-1g.18gb", "2", "nvidia.com/mig-1g.18gb.me", "1", "nvidia.com/gpu", "1")},
		{name: "mixed node, time-slicing x4 shares MIG devices too", gpus: mixed, sharing: ts4,
			want: rl("nvidia.com/mig-3g.71gb.shared", "4", "nvidia.com/mig-1g.18gb.shared", "8", "nvidia.com/mig-1g.18gb.me.shared", "4",
				"nvidia.com/gpu.shared", "4")},
		{name: "mixed node, MPS x3 shares whole GPUs only", gpus: mixed, sharing: mps3,
			want: rl("nvidia.com/mig-3g.71gb", "1", "nvidia.com/mig-1g.18gb", "2", "nvidia.com/mig-1g.18gb.me", "1", "nvidia.com/gpu.shared", "3")},
		{name: "all-3g", gpus: all3g, sharing: none, want: rl("nvidia.com/mig-3g.71gb", "4")},
		{name: "all-3g, time-slicing x2", gpus: all3g, sharing: v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: 2},
			want: rl("nvidia.com/mig-3g.71gb.shared", "8")},
		{name: "all-3g, time-slicing with no replicas is exclusive", gpus: all3g,
			sharing: v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing}, want: rl("nvidia.com/mig-3g.71gb", "4")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Capacity(tc.gpus, tc.sharing); !sameResources(got, tc.want) {
				t.Errorf("Capacity = %v, want %v", got, tc.want)
			}
		})
	}
}

// The device plugin's start-up check refuses MPS as soon as any GPU has a MIG device, and
// nothing else: time-slicing on MIG nodes, MPS on whole GPUs, and MPS next to a MIG-enabled GPU
// without instances (which has no MIG device) are accepted.
func TestCheckSharing(t *testing.T) {
	ts := v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: 2}
	mps := v1alpha1.SharingConfig{Mode: v1alpha1.SharingMPS, Replicas: 2}
	migGPU := GPUState{Index: 1, MIGEnabled: true, Instances: []InstanceState{{Profile: "7g.141gb", Size: 8, UUID: "MIG-a"}}}
	for _, tc := range []struct {
		name    string
		gpus    []GPUState
		sharing v1alpha1.SharingConfig
		refused bool
	}{
		{name: "exclusive on MIG", gpus: []GPUState{{Index: 0}, migGPU}, sharing: v1alpha1.SharingConfig{Mode: v1alpha1.SharingNone}},
		{name: "time-slicing on MIG", gpus: []GPUState{{Index: 0}, migGPU}, sharing: ts},
		{name: "MPS on whole GPUs", gpus: []GPUState{{Index: 0}, {Index: 1}}, sharing: mps},
		{name: "MPS next to MIG enabled without instances", gpus: []GPUState{{Index: 0}, {Index: 1, MIGEnabled: true}}, sharing: mps},
		{name: "MPS on a node with a MIG device", gpus: []GPUState{{Index: 0}, migGPU}, sharing: mps, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkSharing(tc.gpus, tc.sharing)
			if tc.refused != (err != nil) {
				t.Fatalf("checkSharing = %v, want refused %t", err, tc.refused)
			}
			if tc.refused && !errors.Is(err, errMPSOnMIG) {
				t.Errorf("checkSharing = %v, want it to wrap %v", err, errMPSOnMIG)
			}
		})
	}
}

// The device plugin's status patch touches only nvidia.com/ keys: it sets what differs,
// deletes what the layout no longer has, leaves cpu/memory/pods alone, and is empty when the
// node already advertises the layout (so a steady node is never rewritten).
func TestCapacityPatch(t *testing.T) {
	s := func(v string) *string { return &v }
	status := corev1.NodeStatus{
		Capacity:    rl("cpu", "8", "memory", "1Gi", "pods", "110", "nvidia.com/mig-1g.18gb", "7", "example.com/foo", "1"),
		Allocatable: rl("cpu", "7", "memory", "1Gi", "pods", "110", "nvidia.com/mig-1g.18gb", "7"),
	}
	got := capacityPatch(status, rl("nvidia.com/mig-3g.71gb", "2"))
	want := map[string]map[corev1.ResourceName]*string{
		"capacity":    {"nvidia.com/mig-3g.71gb": s("2"), "nvidia.com/mig-1g.18gb": nil},
		"allocatable": {"nvidia.com/mig-3g.71gb": s("2"), "nvidia.com/mig-1g.18gb": nil},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("capacityPatch = %v, want %v", got, want)
	}
	if got := capacityPatch(status, rl("nvidia.com/mig-1g.18gb", "7")); len(got) != 0 {
		t.Errorf("capacityPatch for an advertised layout = %v, want empty", got)
	}
	onlyAllocatable := corev1.NodeStatus{Capacity: rl("nvidia.com/gpu", "1"), Allocatable: rl()}
	if got := capacityPatch(onlyAllocatable, rl("nvidia.com/gpu", "1")); len(got) != 1 || got["allocatable"]["nvidia.com/gpu"] == nil {
		t.Errorf("capacityPatch with a stale allocatable = %v, want allocatable set", got)
	}
}
