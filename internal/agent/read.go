package agent

import (
	"cmp"
	"fmt"
	"iter"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupool/gpupool/api/v1alpha1"
)

// MIG mode values as GPUStatus reports them.
const (
	// MIGEnabled: the GPU is partitioned into MIG instances (or will be, as the pending mode).
	MIGEnabled = "Enabled"
	// MIGDisabled: the GPU is used whole.
	MIGDisabled = "Disabled"
	// MIGUnsupported: the GPU cannot do MIG at all (NVML answers NOT_SUPPORTED).
	MIGUnsupported = "Unsupported"
)

// Read initialises NVML, reads every GPU and shuts NVML down again. It returns
// an *Error (with a condition reason) only when the node as a whole cannot be
// read: NVML does not initialise, cannot count GPUs, or counts none. A failing
// NVML call for one GPU is recorded in that GPU's Error, and the rest of its
// fields are filled as far as NVML allows, so one sick GPU never hides the
// others. Pods and Sharing are left empty: Attribute adds pods from the
// kubelet, and sharing is the device plugin's setting, not NVML's.
//
// A caller that reads repeatedly can call lib.Init once for the life of the
// process: NVML counts references, so Read's own Init and Shutdown are then
// cheap and never unload the library.
func Read(lib NVML) ([]v1alpha1.GPUStatus, error) {
	return read(lib)
}

func read[D Device[D, G], G GPUInstance](lib Library[D, G]) ([]v1alpha1.GPUStatus, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, initError(ret)
	}
	// Shutdown's result is not actionable: the reading is done and NVML is
	// reference counted, so a failure here cannot corrupt the next Init.
	defer func() { _ = lib.Shutdown() }()

	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, &Error{Reason: ReasonDeviceCountFailed, Op: "DeviceGetCount", Return: ret}
	}
	if n == 0 {
		return nil, &Error{Reason: ReasonNoGPU, Op: "DeviceGetCount"}
	}
	gpus := make([]v1alpha1.GPUStatus, n)
	for i := range n {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			gpus[i] = v1alpha1.GPUStatus{Index: int32(i), Error: fmt.Sprintf("DeviceGetHandleByIndex(%d): %s", i, returnText(ret))}
			continue
		}
		gpus[i] = readGPU[D, G](i, dev)
	}
	return gpus, nil
}

// failures collects the NVML calls that failed for one GPU.
type failures []string

func (f *failures) add(op string, ret nvml.Return) {
	*f = append(*f, op+": "+returnText(ret))
}

func (f *failures) addf(format string, args ...any) {
	*f = append(*f, fmt.Sprintf(format, args...))
}

// profile is a supported GPU-instance profile with what reading instances
// needs besides the published fields.
type profile struct {
	constant int
	info     nvml.GpuInstanceProfileInfo
	status   v1alpha1.GPUInstanceProfile
}

func readGPU[D Device[D, G], G GPUInstance](index int, dev D) v1alpha1.GPUStatus {
	st := v1alpha1.GPUStatus{Index: int32(index)}
	var errs failures
	var ret nvml.Return

	if st.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		errs.add("GetUUID", ret)
	}
	if st.Product, ret = dev.GetName(); ret != nvml.SUCCESS {
		errs.add("GetName", ret)
	}
	if pci, ret := dev.GetPciInfo(); ret == nvml.SUCCESS {
		st.PCIDeviceID = fmt.Sprintf("0x%08X", pci.PciDeviceId)
	} else {
		errs.add("GetPciInfo", ret)
	}
	var totalMemory uint64
	if mem, ret := dev.GetMemoryInfo(); ret == nvml.SUCCESS {
		totalMemory = mem.Total
		st.MemoryMiB = int64(mem.Total / mib)
	} else {
		errs.add("GetMemoryInfo", ret)
	}

	current, pending, ret := dev.GetMigMode()
	switch ret {
	case nvml.SUCCESS:
		st.MIGMode = &v1alpha1.MIGModeStatus{Current: migModeText(current, &errs, "current"), Pending: migModeText(pending, &errs, "pending")}
	case nvml.ERROR_NOT_SUPPORTED:
		st.MIGMode = &v1alpha1.MIGModeStatus{Current: MIGUnsupported, Pending: MIGUnsupported}
	default:
		errs.add("GetMigMode", ret)
	}

	// Profiles are worth asking for whenever the GPU can do MIG: NVML answers
	// NOT_SUPPORTED while MIG is disabled, and simulators answer anyway.
	if st.MIGMode != nil && st.MIGMode.Current != MIGUnsupported {
		profiles := readProfiles(dev, totalMemory, &errs)
		for _, p := range profiles {
			st.Profiles = append(st.Profiles, p.status)
		}
		if st.MIGMode.Current == MIGEnabled {
			st.Instances = readInstances[D, G](dev, profiles, &errs)
		}
	}
	if len(errs) > 0 {
		st.Error = strings.Join(errs, "; ")
	}
	return st
}

func migModeText(mode int, errs *failures, which string) string {
	switch mode {
	case nvml.DEVICE_MIG_ENABLE:
		return MIGEnabled
	case nvml.DEVICE_MIG_DISABLE:
		return MIGDisabled
	}
	errs.addf("GetMigMode: unknown %s mode %d", which, mode)
	return ""
}

// readProfiles asks for every GPU-instance profile constant go-nvml knows and
// keeps those the GPU supports, ordered by constant.
func readProfiles[D Device[D, G], G GPUInstance](dev D, totalMemory uint64, errs *failures) []profile {
	var out []profile
	for c := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := dev.GetGpuInstanceProfileInfo(c)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
			// Not a profile of this GPU, or a constant newer than the driver.
			continue
		default:
			errs.add(fmt.Sprintf("GetGpuInstanceProfileInfo(%d)", c), ret)
			continue
		}
		p := profile{constant: c, info: info, status: v1alpha1.GPUInstanceProfile{
			ID:        int32(c),
			Name:      ProfileName(c, info, totalMemory),
			MemoryMiB: int64(info.MemorySizeMB),
			Slices:    int32(info.SliceCount),
			MaxCount:  int32(info.InstanceCount),
		}}
		placements, ret := dev.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS {
			errs.add(fmt.Sprintf("GetGpuInstancePossiblePlacements(%s)", p.status.Name), ret)
		}
		for _, pl := range placements {
			p.status.Placements = append(p.status.Placements, v1alpha1.SlicePlacement{Start: int32(pl.Start), Size: int32(pl.Size)})
		}
		slices.SortFunc(p.status.Placements, comparePlacement)
		out = append(out, p)
	}
	return out
}

// readInstances lists the GPU instances of every supported profile and joins
// them with the MIG devices (compute instances) that carry their UUIDs and
// processes.
func readInstances[D Device[D, G], G GPUInstance](dev D, profiles []profile, errs *failures) []v1alpha1.MIGInstance {
	byGI := map[int]int{} // GPU instance ID -> index in out
	var out []v1alpha1.MIGInstance
	for i := range profiles {
		p := &profiles[i]
		gis, ret := dev.GetGpuInstances(&p.info)
		if ret == nvml.ERROR_NOT_FOUND {
			continue
		}
		if ret != nvml.SUCCESS {
			errs.add(fmt.Sprintf("GetGpuInstances(%s)", p.status.Name), ret)
			continue
		}
		for _, gi := range gis {
			info, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				errs.add(fmt.Sprintf("GpuInstance.GetInfo(%s)", p.status.Name), ret)
				continue
			}
			if _, dup := byGI[int(info.Id)]; dup {
				continue // a driver may list one instance under two profile variants
			}
			byGI[int(info.Id)] = len(out)
			out = append(out, v1alpha1.MIGInstance{
				Profile:   p.status.Name,
				Placement: v1alpha1.SlicePlacement{Start: int32(info.Placement.Start), Size: int32(info.Placement.Size)},
			})
		}
	}
	attachMIGDevices(dev, out, byGI, errs)
	slices.SortStableFunc(out, func(a, b v1alpha1.MIGInstance) int {
		return cmp.Or(comparePlacement(a.Placement, b.Placement), strings.Compare(a.Profile, b.Profile))
	})
	return out
}

// attachMIGDevices walks the GPU's MIG devices and gives each GPU instance the
// UUID of its first compute instance (mig-parted creates exactly one per GPU
// instance) and Busy when any of its compute instances runs a process.
func attachMIGDevices[D Device[D, G], G GPUInstance](dev D, instances []v1alpha1.MIGInstance, byGI map[int]int, errs *failures) {
	firstCI := map[int]int{} // GPU instance ID -> lowest compute instance ID seen
	for i, mdev := range migDevices(dev, errs) {
		giID, ret := mdev.GetGpuInstanceId()
		if ret != nvml.SUCCESS {
			errs.add(fmt.Sprintf("MIG device %d: GetGpuInstanceId", i), ret)
			continue
		}
		ciID, ret := mdev.GetComputeInstanceId()
		if ret != nvml.SUCCESS {
			errs.add(fmt.Sprintf("MIG device %d: GetComputeInstanceId", i), ret)
			continue
		}
		uuid, ret := mdev.GetUUID()
		if ret != nvml.SUCCESS {
			errs.add(fmt.Sprintf("MIG device %d: GetUUID", i), ret)
		}
		k, ok := byGI[giID]
		if !ok {
			errs.addf("MIG device %s belongs to GPU instance %d, which no supported profile lists", uuid, giID)
			continue
		}
		inst := &instances[k]
		if first, seen := firstCI[giID]; !seen || ciID < first {
			firstCI[giID] = ciID
			if uuid != "" {
				inst.UUID = uuid
			}
		}
		procs, ret := mdev.GetComputeRunningProcesses()
		if ret != nvml.SUCCESS {
			// The recorded error tells readers that Busy=false here means
			// "unknown": the planner must not treat such an instance as idle.
			errs.add(fmt.Sprintf("MIG device %s: GetComputeRunningProcesses", uuid), ret)
			continue
		}
		if len(procs) > 0 {
			inst.Busy = true
		}
	}
}

func comparePlacement(a, b v1alpha1.SlicePlacement) int {
	return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.Size, b.Size))
}

// migDevices yields the GPU's MIG devices with their indexes, skipping unused slots and
// recording in errs the handles NVML fails to give.
func migDevices[D Device[D, G], G GPUInstance](dev D, errs *failures) iter.Seq2[int, D] {
	return func(yield func(int, D) bool) {
		maxDevices, ret := dev.GetMaxMigDeviceCount()
		if ret != nvml.SUCCESS {
			errs.add("GetMaxMigDeviceCount", ret)
			return
		}
		for i := range maxDevices {
			mdev, ret := dev.GetMigDeviceHandleByIndex(i)
			if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
				continue // an unused MIG device slot
			}
			if ret != nvml.SUCCESS {
				errs.add(fmt.Sprintf("GetMigDeviceHandleByIndex(%d)", i), ret)
				continue
			}
			if !yield(i, mdev) {
				return
			}
		}
	}
}
