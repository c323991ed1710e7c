package sim

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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

// The device plugin's mixed strategy: one nvidia.com/mig-<profile> per MIG device ("+"
// written "."), one nvidia.com/gpu per GPU with MIG disabled, nothing for a MIG-enabled GPU
// without instances, and no zero-valued keys.
func TestCapacity(t *testing.T) {
	for _, tc := range []struct {
		name string
		gpus []GPUState
		want corev1.ResourceList
	}{
		{name: "no GPUs", want: rl()},
		{name: "whole GPUs", gpus: []GPUState{{Index: 0}, {Index: 1}}, want: rl("nvidia.com/gpu", "2")},
		{name: "MIG enabled, no instances", gpus: []GPUState{{Index: 0, MIGEnabled: true}}, want: rl()},
		{name: "mixed node", gpus: []GPUState{
			{Index: 0, MIGEnabled: true, Instances: []InstanceState{
				{Profile: "3g.71gb", Start: 0, Size: 4, UUID: "MIG-a"},
				{Profile: "1g.18gb", Start: 4, Size: 1, UUID: "MIG-b"},
				{Profile: "1g.18gb", Start: 5, Size: 1, UUID: "MIG-c"},
				{Profile: "1g.18gb+me", Start: 6, Size: 1, UUID: "MIG-d"}}},
			{Index: 1},
		}, want: rl("nvidia.com/mig-3g.71gb", "1", "nvidia.com/mig-1g.18gb", "2", "nvidia.com/mig-1g.18gb.me", "1", "nvidia.com/gpu", "1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Capacity(tc.gpus); !sameResources(got, tc.want) {
				t.Errorf("Capacity = %v, want %v", got, tc.want)
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
