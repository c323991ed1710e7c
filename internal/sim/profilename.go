package sim

import (
	"fmt"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// profileName is the name NVIDIA's tools give a GPU instance profile, as mig-parted and the
// device plugin spell it (go-nvlib pkg/nvlib/device/mig_profile.go, NewMigProfile and
// getMigMemorySizeGB): <slices>g.<GB>gb, the memory being the profile's share of the GPU's
// total, rounded up to eighths, times the total in whole GiB, rounded; then +<attribute> for
// the media-extension and graphics variants, -me for the one without media extensions.
//
// The simulator names the profiles it reads from NVML with this, not with the agent's namer:
// mig-manager here must accept exactly the names NVIDIA's accepts, and a naming bug in
// gpupool's agent, mirrored here, would be invisible.
func profileName(giProfileID int, info nvml.GpuInstanceProfileInfo, totalBytes uint64) string {
	const gib = 1 << 30
	share := float64(info.MemorySizeMB) * (1 << 20) / float64(totalBytes)
	share = math.Ceil(share*8) / 8
	gb := math.Round(share * float64((totalBytes+gib-1)/gib))
	attribute := ""
	switch giProfileID {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:
		attribute = "+me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
		attribute = "+me.all"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:
		attribute = "+gfx"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
		attribute = "-me"
	}
	return fmt.Sprintf("%dg.%dgb%s", info.SliceCount, uint64(gb), attribute)
}
