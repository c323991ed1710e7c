package rollout_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/rollout"
)

// alloc is a node's allocatable from name=quantity pairs.
func alloc(pairs ...any) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(pairs); i += 2 {
		out[corev1.ResourceName(pairs[i].(string))] = *resource.NewQuantity(int64(pairs[i+1].(int)), resource.DecimalSI)
	}
	return out
}

// TestAdvertisesLayout holds the device plugin's mixed-strategy rule: one nvidia.com/mig-<profile>
// per instance, one nvidia.com/gpu per MIG-disabled GPU, unless MPS shares those GPUs.
func TestAdvertisesLayout(t *testing.T) {
	targets := []mig.GPUTarget{{Index: 0, MIGEnabled: true, Layout: mig.Layout{"3g.71gb": 2}}, {Index: 1}}
	for _, tc := range []struct {
		name        string
		allocatable corev1.ResourceList
		ok          bool
		what        string
	}{
		{name: "advertised", allocatable: alloc("nvidia.com/mig-3g.71gb", 2, "nvidia.com/gpu", 1), ok: true},
		{name: "the old layout still advertised", allocatable: alloc("nvidia.com/mig-1g.18gb", 7, "nvidia.com/gpu", 1)},
		{name: "an instance short", allocatable: alloc("nvidia.com/mig-3g.71gb", 1, "nvidia.com/gpu", 1)},
		{name: "the whole GPU shared by MPS is the sharing check's", allocatable: alloc("nvidia.com/mig-3g.71gb", 2, "nvidia.com/gpu.shared", 4), ok: true,
			what: "nvidia.com/mig-3g.71gb=2"},
		{name: "nothing advertised", allocatable: corev1.ResourceList{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ok, what := rollout.AdvertisesLayout(targets, tc.allocatable)
			g.Expect(ok).To(Equal(tc.ok))
			if tc.what == "" {
				tc.what = "nvidia.com/gpu=1, nvidia.com/mig-3g.71gb=2"
			}
			g.Expect(what).To(Equal(tc.what))
		})
	}
}

// TestAdvertisesSharing holds the sharing rule: replicas x MIG-disabled GPUs of
// nvidia.com/gpu.shared, replicas x instances of nvidia.com/mig-<profile>.shared under
// time-slicing, and no replica at all of anything the step does not share.
func TestAdvertisesSharing(t *testing.T) {
	whole := []mig.GPUTarget{{Index: 0}, {Index: 1}}
	carved := []mig.GPUTarget{{Index: 0, MIGEnabled: true, Layout: mig.Layout{"1g.18gb": 3}}}
	step := func(mode v1alpha1.SharingMode, replicas int32) v1alpha1.NodeStep {
		return v1alpha1.NodeStep{Node: "gpu-1", SharingConfigName: "key", SharingConfig: &v1alpha1.SharingConfig{Mode: mode, Replicas: replicas}}
	}
	for _, tc := range []struct {
		name        string
		step        v1alpha1.NodeStep
		targets     []mig.GPUTarget
		allocatable corev1.ResourceList
		ok          bool
		what        string
	}{
		{name: "MPS on whole GPUs advertised", step: step(v1alpha1.SharingMPS, 4), targets: whole,
			allocatable: alloc("nvidia.com/gpu.shared", 8), ok: true, what: "nvidia.com/gpu.shared=8"},
		{name: "MPS replicas not yet advertised", step: step(v1alpha1.SharingMPS, 4), targets: whole,
			allocatable: alloc("nvidia.com/gpu", 2), what: "nvidia.com/gpu.shared=8"},
		{name: "time-sliced instances advertised", step: step(v1alpha1.SharingTimeSlicing, 2), targets: carved,
			allocatable: alloc("nvidia.com/mig-1g.18gb.shared", 6), ok: true, what: "nvidia.com/mig-1g.18gb.shared=6"},
		{name: "sharing off: replicas left over are not done", step: step(v1alpha1.SharingNone, 0), targets: carved,
			allocatable: alloc("nvidia.com/mig-1g.18gb.shared", 6), what: "no shared replicas"},
		{name: "sharing off and none advertised", step: step(v1alpha1.SharingNone, 0), targets: carved,
			allocatable: alloc("nvidia.com/mig-1g.18gb", 3), ok: true, what: "no shared replicas"},
		{name: "MPS does not share MIG instances", step: step(v1alpha1.SharingMPS, 4), targets: carved,
			allocatable: alloc("nvidia.com/mig-1g.18gb.shared", 12), what: "no shared replicas"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ok, what := rollout.AdvertisesSharing(tc.step, tc.targets, tc.allocatable)
			g.Expect(ok).To(Equal(tc.ok))
			g.Expect(what).To(Equal(tc.what))
		})
	}
}
