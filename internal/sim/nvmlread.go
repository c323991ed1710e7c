// Reading a simulated node's GPUs through its mock NVML, as the device plugin and mig-parted read them.

package sim

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// gpuProfile is one GPU-instance profile of a GPU as NVML describes it.
type gpuProfile struct {
	constant int
	info     nvml.GpuInstanceProfileInfo
	slot     SlotProfile
}

func (n *Node) device(i int) (nvml.Device, error) {
	d, ret := n.nvml.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("DeviceGetHandleByIndex(%d): %s", i, ret.Error())
	}
	return d, nil
}

// readProfiles asks NVML for every GPU-instance profile constant, as the device plugin and
// mig-parted do, and names each the way they name it.
func (n *Node) readProfiles(i int) ([]gpuProfile, error) {
	d, err := n.device(i)
	if err != nil {
		return nil, err
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %d: GetMemoryInfo: %s", i, ret.Error())
	}
	var out []gpuProfile
	for c := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := d.GetGpuInstanceProfileInfo(c)
		if ret != nvml.SUCCESS {
			continue // not a profile of this GPU
		}
		placements, ret := d.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS || len(placements) == 0 {
			return nil, fmt.Errorf("GPU %d: GetGpuInstancePossiblePlacements(%d): %s", i, c, ret.Error())
		}
		p := gpuProfile{constant: c, info: info, slot: SlotProfile{
			Name:          profileName(c, info, mem.Total),
			ComputeSlices: int(info.SliceCount),
			MemorySlices:  int(placements[0].Size),
			MaxCount:      int(info.InstanceCount),
			JPEGs:         int(info.JpegCount),
			OFAs:          int(info.OfaCount),
		}}
		for _, pl := range placements {
			p.slot.Starts = append(p.slot.Starts, int(pl.Start))
		}
		slices.Sort(p.slot.Starts)
		out = append(out, p)
	}
	return out, nil
}

// GPUs reads the node's GPUs through NVML: MIG mode and MIG devices, as the device plugin
// enumerates them.
func (n *Node) GPUs() ([]GPUState, error) {
	out := make([]GPUState, n.gpus)
	for i := range n.gpus {
		g, err := n.readGPU(i)
		if err != nil {
			return nil, fmt.Errorf("reading GPU %d of node %s: %w", i, n.name, err)
		}
		out[i] = g
	}
	return out, nil
}

func (n *Node) readGPU(i int) (GPUState, error) {
	d, err := n.device(i)
	if err != nil {
		return GPUState{}, err
	}
	g := GPUState{Index: i}
	var ret nvml.Return
	if g.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return g, fmt.Errorf("GetUUID: %s", ret.Error())
	}
	mode, _, ret := d.GetMigMode()
	if ret != nvml.SUCCESS {
		return g, fmt.Errorf("GetMigMode: %s", ret.Error())
	}
	g.MIGEnabled = mode == nvml.DEVICE_MIG_ENABLE
	if !g.MIGEnabled {
		return g, nil
	}
	type giState struct {
		profile     string
		start, size int
	}
	gis := map[int]giState{}
	for _, p := range n.profiles[i] {
		list, ret := d.GetGpuInstances(&p.info)
		if ret != nvml.SUCCESS {
			return g, fmt.Errorf("GetGpuInstances(%s): %s", p.slot.Name, ret.Error())
		}
		for _, gi := range list {
			info, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return g, fmt.Errorf("GpuInstance.GetInfo(%s): %s", p.slot.Name, ret.Error())
			}
			gis[int(info.Id)] = giState{profile: p.slot.Name, start: int(info.Placement.Start), size: int(info.Placement.Size)}
		}
	}
	maxDevices, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return g, fmt.Errorf("GetMaxMigDeviceCount: %s", ret.Error())
	}
	for k := range maxDevices {
		md, ret := d.GetMigDeviceHandleByIndex(k)
		if ret != nvml.SUCCESS {
			continue // an unused MIG device slot
		}
		giID, ret := md.GetGpuInstanceId()
		if ret != nvml.SUCCESS {
			return g, fmt.Errorf("MIG device %d: GetGpuInstanceId: %s", k, ret.Error())
		}
		uuid, ret := md.GetUUID()
		if ret != nvml.SUCCESS {
			return g, fmt.Errorf("MIG device %d: GetUUID: %s", k, ret.Error())
		}
		gi, ok := gis[giID]
		if !ok {
			return g, fmt.Errorf("MIG device %s belongs to GPU instance %d, which no profile lists", uuid, giID)
		}
		g.Instances = append(g.Instances, InstanceState{Profile: gi.profile, Start: gi.start, Size: gi.size, UUID: uuid})
	}
	slices.SortFunc(g.Instances, func(a, b InstanceState) int { return cmp.Compare(a.Start, b.Start) })
	return g, nil
}

// readPCIID reads GPU 0's PCI IDs through NVML.
func (n *Node) readPCIID() (migDeviceID, error) {
	d, err := n.device(0)
	if err != nil {
		return migDeviceID{}, err
	}
	pci, ret := d.GetPciInfo()
	if ret != nvml.SUCCESS {
		return migDeviceID{}, fmt.Errorf("GPU 0: GetPciInfo: %s", ret.Error())
	}
	id := migDeviceID{HasSubsystem: true}
	id.Device, id.Vendor = deviceIDFromPacked(pci.PciDeviceId)
	id.SubsystemDevice, id.SubsystemVendor = deviceIDFromPacked(pci.PciSubSystemId)
	return id, nil
}
