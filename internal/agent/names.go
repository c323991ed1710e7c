package agent

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

// ProfileName names a GPU-instance profile the way the NVIDIA device plugin
// and mig-parted do (through go-nvlib), because those names are what pods
// request (nvidia.com/mig-<name>) and what mig-parted configs list; matching
// them matters more than matching nvidia-smi's text, and they agree on every
// capture we have (A100 40/80GB, H100 80GB, A30).
//
// The form is "<g>g.<gb>gb<suffix>": g is the profile's compute slice count;
// gb is the instance's share of the GPU's memory rounded UP to an eighth, times
// the GPU's total memory in GiB rounded UP, rounded to the nearest integer.
// Rounding to eighths is what turns an H100's 9.75 GiB 1g instance into
// "10gb" and its 79.25 GiB 7g instance into "80gb". It is computed in integers
// so exact eighths never round up by float error. The suffix marks the
// profile variants: "+me" (REV1, media extensions), "+me.all", "-me", "+gfx".
// When the GPU's total memory is unknown (0), gb falls back to the instance
// memory in GiB rounded up, which can be one more than the driver's name.
//
// constant is the NVML_GPU_INSTANCE_PROFILE_* value the info was read with:
// info.Id is the device-specific profile ID (19 for an A100 1g.5gb) and does
// not identify the variant.
func ProfileName(constant int, info nvml.GpuInstanceProfileInfo, totalMemoryBytes uint64) string {
	return fmt.Sprintf("%dg.%dgb%s", info.SliceCount, profileGB(info.MemorySizeMB, totalMemoryBytes), profileSuffix(constant))
}

func profileGB(memMiB, totalBytes uint64) uint64 {
	if totalBytes == 0 {
		return (memMiB*mib + gib - 1) / gib
	}
	eighths := (memMiB*mib*8 + totalBytes - 1) / totalBytes
	totalGB := (totalBytes + gib - 1) / gib
	return (eighths*totalGB + 4) / 8
}

func profileSuffix(constant int) string {
	switch constant {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:
		return "+me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
		return "+me.all"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
		return "-me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX,
		nvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:
		return "+gfx"
	}
	return ""
}
