package sim

import (
	"maps"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	"github.com/gpupool/gpupool/internal/agent/nvmlmock"
)

// derived is the NVML table of a part go-nvml has no mock for, made from the (corrected) mock
// of a part with the same MIG geometry: same profile constants, slice counts, instance counts
// and placements, with the device's name, PCI device ID and memory. Every profile keeps its
// share of the GPU's memory, so the device plugin's naming rule gives the part's own names
// (GB200 1g.23gb, B300 1g.34gb, ...). This is what the simulator believes of those parts, not
// what gpupool's built-in table says: the two are written independently.
func derived(base gpus.Config, name string, memoryGiB uint64, pciDeviceID uint32) gpus.Config {
	c := nvmlmock.Corrected(base)
	c.Name, c.PciDeviceId = name, pciDeviceID
	c.MemoryMB = memoryGiB * 1024
	profiles := make(map[int]nvml.GpuInstanceProfileInfo, len(c.MIGProfiles.GpuInstanceProfiles))
	for id, info := range c.MIGProfiles.GpuInstanceProfiles {
		info.MemorySizeMB = info.MemorySizeMB * c.MemoryMB / base.MemoryMB
		profiles[id] = info
	}
	c.MIGProfiles.GpuInstanceProfiles = profiles
	return c
}

// rtxPro6000Blackwell is the RTX PRO 6000 Blackwell Server Edition as the simulator knows it:
// 96 GB in four memory slices with the A30's placements (go-nvml's A30 mock), and beside each
// plain profile the variants NVIDIA's mig-parted config lists for it (deployments/systemd/
// config-default.yaml: 1g.24gb+gfx, 1g.24gb-me, 1g.24gb+me.all, 2g.48gb+gfx, 2g.48gb-me,
// 2g.48gb+me.all, 4g.96gb+gfx), under the NVML profile constants go-nvlib names them by
// (pkg/nvlib/device/mig_profile.go). The A30's +me profiles do not exist on this part.
func rtxPro6000Blackwell() gpus.Config {
	base := gpus.A30_PCIE_24GB
	c := derived(base, "NVIDIA RTX PRO 6000 Blackwell Server Edition", 96, 0x2BB510DE)
	c.Architecture = nvml.DEVICE_ARCH_BLACKWELL
	src := c.MIGProfiles
	out := gpus.MIGProfileConfig{
		GpuInstanceProfiles:       map[int]nvml.GpuInstanceProfileInfo{},
		ComputeInstanceProfiles:   map[int]map[int]nvml.ComputeInstanceProfileInfo{},
		GpuInstancePlacements:     map[int][]nvml.GpuInstancePlacement{},
		ComputeInstancePlacements: map[int]map[int][]nvml.ComputeInstancePlacement{},
	}
	variants := map[int][]int{
		nvml.GPU_INSTANCE_PROFILE_1_SLICE: {nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX,
			nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME},
		nvml.GPU_INSTANCE_PROFILE_2_SLICE: {nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX,
			nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME},
		nvml.GPU_INSTANCE_PROFILE_4_SLICE: {nvml.GPU_INSTANCE_PROFILE_4_SLICE, nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX},
	}
	for plain, constants := range variants {
		info := src.GpuInstanceProfiles[plain]
		for _, constant := range constants {
			v := info
			v.Id = uint32(constant)
			// Media engines: a plain (or graphics) slice gets its share of the GPU's four
			// decoders, encoders and JPEG units, -me none, +me.all all of them and the OFA.
			share := v.SliceCount
			v.DecoderCount, v.EncoderCount, v.JpegCount, v.OfaCount = share, share, share, 0
			if plain == nvml.GPU_INSTANCE_PROFILE_4_SLICE {
				v.OfaCount = 1
			}
			switch constant {
			case nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
				v.DecoderCount, v.EncoderCount, v.JpegCount = 0, 0, 0
			case nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
				v.DecoderCount, v.EncoderCount, v.JpegCount, v.OfaCount = 4, 4, 4, 1
				v.InstanceCount = 1
			}
			out.GpuInstanceProfiles[constant] = v
			out.GpuInstancePlacements[constant] = src.GpuInstancePlacements[int(info.Id)]
			out.ComputeInstanceProfiles[constant] = maps.Clone(src.ComputeInstanceProfiles[int(info.Id)])
			out.ComputeInstancePlacements[constant] = maps.Clone(src.ComputeInstancePlacements[int(info.Id)])
		}
	}
	c.MIGProfiles = out
	return c
}
