package rollout

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// The device plugin's advertising rules: what a node's allocatable shows once NVIDIA's device
// plugin serves a layout under the mixed MIG strategy and gpupool's sharing keys (the resource
// names are internal/nvidia's). The controller reads the allocatable; these say whether it is
// what the step's readiness checks wait for.

// AdvertisesSharing says whether allocatable shows the step's sharing setting: replicas x
// MIG-disabled GPUs of nvidia.com/gpu.shared and, under time-slicing, replicas x instances of
// nvidia.com/mig-<profile>.shared; none of them when sharing is off. It also names what must be
// advertised, for the step's message.
func AdvertisesSharing(step v1alpha1.NodeStep, targets []mig.GPUTarget, allocatable corev1.ResourceList) (bool, string) {
	want := map[corev1.ResourceName]int64{demand.ResourceSharedGPU: 0}
	replicas := int64(0)
	if s := step.SharingConfig; s != nil && s.Mode != v1alpha1.SharingNone {
		replicas = int64(s.Replicas)
	}
	timeSliced := TimeSliced(step)
	for _, t := range targets {
		if !t.MIGEnabled {
			want[demand.ResourceSharedGPU] += replicas
			continue
		}
		for p, n := range t.Layout {
			name := corev1.ResourceName(mig.ResourceName(p) + nvidia.SharedSuffix)
			want[name] += 0 // listed, so that an exclusive MIG device is checked to advertise no replica
			if timeSliced {
				want[name] += replicas * int64(n)
			}
		}
	}
	ok := true
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if demand.Quantity(allocatable, name) != want[name] {
			ok = false
		}
		if want[name] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", name, want[name]))
		}
	}
	if len(parts) == 0 {
		parts = []string{"no shared replicas"}
	}
	return ok, strings.Join(parts, ", ")
}

// AdvertisesLayout says whether allocatable shows the targets as the device plugin advertises
// them under the mixed strategy: nvidia.com/mig-<profile> per instance of each MIG-enabled GPU
// and nvidia.com/gpu per MIG-disabled one (when those are not shared). A layout the agent
// verified is of no use until the scheduler can place pods on it. It also names what must be
// advertised, for the step's message.
func AdvertisesLayout(targets []mig.GPUTarget, allocatable corev1.ResourceList) (bool, string) {
	want := map[corev1.ResourceName]int64{}
	for _, t := range targets {
		if !t.MIGEnabled {
			want[demand.ResourceGPU]++
			continue
		}
		for p, n := range t.Layout {
			want[corev1.ResourceName(mig.ResourceName(p))] += int64(n)
		}
	}
	ok := true
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if name == demand.ResourceGPU && demand.Quantity(allocatable, demand.ResourceSharedGPU) > 0 {
			continue // whole GPUs shared by MPS are advertised as replicas; the sharing check counts them
		}
		if demand.Quantity(allocatable, name) != want[name] {
			ok = false
		}
		parts = append(parts, fmt.Sprintf("%s=%d", name, want[name]))
	}
	return ok, strings.Join(parts, ", ")
}

// TimeSliced says whether the step time-slices its devices: they are then advertised as
// replicas, which AdvertisesSharing counts, and AdvertisesLayout does not apply.
func TimeSliced(step v1alpha1.NodeStep) bool {
	return step.SharingConfig != nil && step.SharingConfig.Mode == v1alpha1.SharingTimeSlicing
}
