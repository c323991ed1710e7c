package sim

import (
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// guardPlacements makes the mock refuse what NVML refuses when a GPU instance is created at a
// placement: go-nvml's mock server creates any instance anywhere, even on taken memory slices.
// NVML answers NVML_ERROR_NOT_SUPPORTED while MIG mode is disabled, NVML_ERROR_INVALID_ARGUMENT
// for a placement the profile does not list, and NVML_ERROR_INSUFFICIENT_RESOURCES when the
// placement overlaps an existing GPU instance (as NVIDIA's DRA driver notes in
// cmd/gpu-kubelet-plugin/nvlib.go createMigDevice). mig-parted's path never meets these (it
// destroys every instance first and places without overlap); the DynamicMIG driver's does.
func guardPlacements(s *server.Server) {
	for _, dev := range s.Devices {
		d, ok := dev.(*server.Device)
		if !ok {
			continue
		}
		create := d.CreateGpuInstanceWithPlacementFunc
		d.CreateGpuInstanceWithPlacementFunc = func(info *nvml.GpuInstanceProfileInfo, placement *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
			if info == nil || placement == nil {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			if mode, _, ret := d.GetMigMode(); ret != nvml.SUCCESS || mode != nvml.DEVICE_MIG_ENABLE {
				return nil, nvml.ERROR_NOT_SUPPORTED
			}
			valid, ret := d.GetGpuInstancePossiblePlacements(info)
			if ret != nvml.SUCCESS || !slices.Contains(valid, *placement) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			d.RLock()
			for gi := range d.GpuInstances {
				p := gi.Info.Placement
				if p.Start < placement.Start+placement.Size && placement.Start < p.Start+p.Size {
					d.RUnlock()
					return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
				}
			}
			d.RUnlock()
			return create(info, placement)
		}
	}
}
