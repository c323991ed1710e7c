// Changing a GPU's MIG settings through NVML calls, in the order mig-parted makes them.

package sim

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupool/gpupool/internal/mig"
)

// gpuTarget is what mig-parted is asked to make of one GPU.
type gpuTarget struct {
	MIGEnabled bool
	// Layout is the profile multiset; empty when MIG is disabled.
	Layout mig.Layout
}

// equal reports whether a GPU in state g already is the target: mig-parted leaves such a GPU
// alone, with its instances and the pods on them.
func (t gpuTarget) equal(g GPUState) bool {
	if t.MIGEnabled != g.MIGEnabled {
		return false
	}
	return !t.MIGEnabled || t.Layout.Equal(g.Layout())
}

func (t gpuTarget) String() string {
	if !t.MIGEnabled {
		return "MIG disabled"
	}
	if t.Layout.Total() == 0 {
		return "MIG enabled, no instances"
	}
	return t.Layout.String()
}

// slotProfiles is GPU i's profile table as ChooseSlots takes it.
func (n *Node) slotProfiles(i int) []SlotProfile {
	out := make([]SlotProfile, len(n.profiles[i]))
	for k, p := range n.profiles[i] {
		out[k] = p.slot
	}
	return out
}

// applyGPU makes GPU i the target the way mig-parted does: destroy every compute and GPU
// instance, set the MIG mode, then create each GPU instance (at the slot the simulated driver
// picks, see ChooseSlots) with one compute instance spanning it. The slots are chosen before
// anything is destroyed, so a layout that cannot exist leaves the GPU as it was.
func (n *Node) applyGPU(i int, t gpuTarget) error {
	var slots []Slot
	if t.MIGEnabled {
		var err error
		if slots, err = ChooseSlots(n.slotProfiles(i), t.Layout); err != nil {
			return fmt.Errorf("GPU %d: %w", i, err)
		}
	}
	d, err := n.device(i)
	if err != nil {
		return err
	}
	if err := n.destroyAll(i, d); err != nil {
		return err
	}
	mode := nvml.DEVICE_MIG_DISABLE
	if t.MIGEnabled {
		mode = nvml.DEVICE_MIG_ENABLE
	}
	if ret, _ := d.SetMigMode(mode); ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: SetMigMode(%d): %s", i, mode, ret.Error())
	}
	byName := map[string]gpuProfile{}
	for _, p := range n.profiles[i] {
		byName[p.slot.Name] = p
	}
	for _, s := range slots {
		p := byName[s.Profile]
		gi, ret := d.CreateGpuInstanceWithPlacement(&p.info, &nvml.GpuInstancePlacement{Start: uint32(s.Start), Size: uint32(s.Size)})
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: CreateGpuInstanceWithPlacement(%s at %d): %s", i, s.Profile, s.Start, ret.Error())
		}
		ciInfo, err := spanningComputeProfile(gi, p.info.SliceCount)
		if err != nil {
			return fmt.Errorf("GPU %d: %s at %d: %w", i, s.Profile, s.Start, err)
		}
		if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: CreateComputeInstance(%s at %d): %s", i, s.Profile, s.Start, ret.Error())
		}
	}
	return nil
}

// spanningComputeProfile is the compute-instance profile that covers all of a GPU instance's
// compute slices, the one mig-parted creates for a plain "<g>g.<m>gb" device.
func spanningComputeProfile(gi nvml.GpuInstance, slicesWanted uint32) (nvml.ComputeInstanceProfileInfo, error) {
	for c := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(c, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret == nvml.SUCCESS && info.SliceCount == slicesWanted {
			return info, nil
		}
	}
	return nvml.ComputeInstanceProfileInfo{}, fmt.Errorf("no compute-instance profile with %d slices", slicesWanted)
}

// destroyAll destroys every compute instance, then every GPU instance of GPU i.
func (n *Node) destroyAll(i int, d nvml.Device) error {
	for _, p := range n.profiles[i] {
		list, ret := d.GetGpuInstances(&p.info)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: GetGpuInstances(%s): %s", i, p.slot.Name, ret.Error())
		}
		for _, gi := range list {
			if err := destroyGPUInstance(i, gi, p.slot.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// destroyGPUInstance destroys a GPU instance of GPU i after its compute instances, as NVML
// requires; what names the instance in errors.
func destroyGPUInstance(i int, gi nvml.GpuInstance, what string) error {
	for c := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		ciInfo, ret := gi.GetComputeInstanceProfileInfo(c, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue
		}
		cis, ret := gi.GetComputeInstances(&ciInfo)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: GetComputeInstances: %s", i, ret.Error())
		}
		for _, ci := range cis {
			if ret := ci.Destroy(); ret != nvml.SUCCESS {
				return fmt.Errorf("GPU %d: ComputeInstance.Destroy: %s", i, ret.Error())
			}
		}
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: GpuInstance.Destroy(%s): %s", i, what, ret.Error())
	}
	return nil
}
