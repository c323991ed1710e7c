// Package nvmlmock makes go-nvml's mock servers (pkg/nvml/mock/server and the
// dgx* packages) good enough to stand in for a real GPU node: it corrects the
// Hopper and Blackwell MIG tables and adds the MIG device handles the mock
// lacks. Tests and the simulator use it; product code never does.
package nvmlmock

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/uuid"
)

// eightSlicePlacements are the placements real 8-memory-slice GPUs (A100,
// H100, and by the same profile IDs H200 and B200) report for the profiles
// go-nvml's H100/H200/B200 mocks get wrong (docs/architecture.md, "MIG geometry").
var eightSlicePlacements = map[int][]nvml.GpuInstancePlacement{
	nvml.GPU_INSTANCE_PROFILE_3_SLICE:      {{Start: 0, Size: 4}, {Start: 4, Size: 4}},
	nvml.GPU_INSTANCE_PROFILE_7_SLICE:      {{Start: 0, Size: 8}},
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: {{Start: 0, Size: 2}, {Start: 2, Size: 2}, {Start: 4, Size: 2}, {Start: 6, Size: 2}},
}

// Corrected returns a copy of c with the MIG table fixed where go-nvml's mock
// is known to disagree with real devices. The input, and go-nvml's shared
// tables behind it, are never modified. Two fixes, both only for tables that
// carry the known mistake (a 7-slice profile placed with size 7 instead of 8):
//
//   - placements: 3g at {0,4} size 4, 7g at {0} size 8, and the double-memory
//     1g (GPU_INSTANCE_PROFILE_1_SLICE_REV2) at {0,2,4,6} size 2;
//   - memory: no profile gets more than its memory slices' share of the GPU
//     (total x size / 8). The H200 and B200 mocks give 1g (and on H200 3g and
//     4g) whole round GiB above that share, so the device plugin's naming rule
//     would call the H200's 1g profile "1g.35gb" and its 3g "3g.88gb"; capped,
//     they come out as 1g.18gb and 3g.71gb as on real parts.
//
// A100 and A30 tables are returned unchanged (as copies).
func Corrected(c gpus.Config) gpus.Config {
	out := c
	src := c.MIGProfiles
	out.MIGProfiles.GpuInstanceProfiles = maps.Clone(src.GpuInstanceProfiles)
	out.MIGProfiles.GpuInstancePlacements = maps.Clone(src.GpuInstancePlacements)
	for id, pl := range out.MIGProfiles.GpuInstancePlacements {
		out.MIGProfiles.GpuInstancePlacements[id] = slices.Clone(pl)
	}
	whole, ok := src.GpuInstanceProfiles[nvml.GPU_INSTANCE_PROFILE_7_SLICE]
	if !ok || !slices.Equal(src.GpuInstancePlacements[int(whole.Id)], []nvml.GpuInstancePlacement{{Start: 0, Size: 7}}) {
		return out
	}
	const memorySlices = 8
	for constant, info := range src.GpuInstanceProfiles {
		// The placement table is keyed by the profile's device ID (info.Id),
		// which go-nvml's tables set equal to the constant but real devices do not.
		if fixed, ok := eightSlicePlacements[constant]; ok {
			out.MIGProfiles.GpuInstancePlacements[int(info.Id)] = slices.Clone(fixed)
		}
		pl := out.MIGProfiles.GpuInstancePlacements[int(info.Id)]
		if len(pl) == 0 {
			continue
		}
		share := c.MemoryMB * uint64(pl[0].Size) / memorySlices
		if info.MemorySizeMB > share {
			info.MemorySizeMB = share
			out.MIGProfiles.GpuInstanceProfiles[constant] = info
		}
	}
	return out
}

// MIGDevices emulates NVML's MIG device handles on go-nvml mock devices, which
// have GPU and compute instances but no MIG devices: one MIG device per
// compute instance, enumerated by GPU instance ID then compute instance ID,
// with a UUID derived from the GPU's UUID and both IDs so it is stable across
// reads, with the compute processes set through SetProcesses and the memory in
// use set through SetMemoryUsed. It also gives whole GPUs the process list the
// mock lacks (SetProcesses with the GPU's UUID).
type MIGDevices struct {
	mu    sync.Mutex
	procs map[string][]nvml.ProcessInfo
	used  map[string]uint64
}

// Install adds MIG device handles to every device of s and returns the handle
// through which tests set processes.
func Install(s *server.Server) *MIGDevices {
	m := &MIGDevices{procs: map[string][]nvml.ProcessInfo{}, used: map[string]uint64{}}
	for _, d := range s.Devices {
		if dev, ok := d.(*server.Device); ok {
			m.install(dev)
		}
	}
	return m
}

// MIGUUID is the UUID the emulation gives the MIG device of compute instance
// ci in GPU instance gi on the GPU with UUID parent.
func MIGUUID(parent string, gi, ci uint32) string {
	return "MIG-" + uuid.NewSHA1(uuid.NameSpaceOID, []byte(parent+"/"+strconv.FormatUint(uint64(gi), 10)+"/"+strconv.FormatUint(uint64(ci), 10))).String()
}

// SetProcesses sets the compute processes NVML reports on a MIG device, or on a
// GPU given its UUID; nil makes it idle.
func (m *MIGDevices) SetProcesses(uuid string, procs []nvml.ProcessInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.procs[uuid] = slices.Clone(procs)
}

// SetMemoryUsed sets the bytes a MIG device's GetMemoryInfo reports in use (0
// until set); its total is its GPU instance profile's memory.
func (m *MIGDevices) SetMemoryUsed(migUUID string, bytes uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.used[migUUID] = bytes
}

func (m *MIGDevices) memoryUsed(migUUID string) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used[migUUID]
}

func (m *MIGDevices) processes(migUUID string) []nvml.ProcessInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.procs[migUUID])
}

type migRef struct{ gi, ci uint32 }

func (m *MIGDevices) install(d *server.Device) {
	// The most MIG devices a GPU can hold is its 1-slice instance count
	// (7 on 8-slice GPUs, 4 on an A30).
	maxDevices := 7
	if p, ok := d.Config.MIGProfiles.GpuInstanceProfiles[nvml.GPU_INSTANCE_PROFILE_1_SLICE]; ok {
		maxDevices = int(p.InstanceCount)
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) {
		return max(maxDevices, len(m.list(d))), nvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return m.processes(d.UUID), nvml.SUCCESS
	}
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		refs := m.list(d)
		if i < 0 || i >= len(refs) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return m.device(d, refs[i]), nvml.SUCCESS
	}
}

// list returns the compute instances of d in MIG device order.
func (m *MIGDevices) list(d *server.Device) []migRef {
	d.RLock()
	gis := slices.Collect(maps.Keys(d.GpuInstances))
	d.RUnlock()
	var refs []migRef
	for _, gi := range gis {
		gi.RLock()
		for ci := range gi.ComputeInstances {
			refs = append(refs, migRef{gi: gi.Info.Id, ci: ci.Info.Id})
		}
		gi.RUnlock()
	}
	slices.SortFunc(refs, func(a, b migRef) int { return cmp.Or(cmp.Compare(a.gi, b.gi), cmp.Compare(a.ci, b.ci)) })
	return refs
}

func (m *MIGDevices) device(parent *server.Device, ref migRef) nvml.Device {
	id := MIGUUID(parent.UUID, ref.gi, ref.ci)
	return &mock.Device{
		GetUUIDFunc:                            func() (string, nvml.Return) { return id, nvml.SUCCESS },
		GetNameFunc:                            func() (string, nvml.Return) { return parent.Config.Name, nvml.SUCCESS },
		GetGpuInstanceIdFunc:                   func() (int, nvml.Return) { return int(ref.gi), nvml.SUCCESS },
		GetComputeInstanceIdFunc:               func() (int, nvml.Return) { return int(ref.ci), nvml.SUCCESS },
		IsMigDeviceHandleFunc:                  func() (bool, nvml.Return) { return true, nvml.SUCCESS },
		GetDeviceHandleFromMigDeviceHandleFunc: func() (nvml.Device, nvml.Return) { return parent, nvml.SUCCESS },
		GetComputeRunningProcessesFunc:         func() ([]nvml.ProcessInfo, nvml.Return) { return m.processes(id), nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			total := instanceMemory(parent, ref.gi)
			used := min(m.memoryUsed(id), total)
			return nvml.Memory{Total: total, Used: used, Free: total - used}, nvml.SUCCESS
		},
	}
}

// instanceMemory is the memory of GPU instance gi on d, in bytes, as its
// profile gives it; 0 once the instance is gone.
func instanceMemory(d *server.Device, gi uint32) uint64 {
	d.RLock()
	defer d.RUnlock()
	for inst := range d.GpuInstances {
		if inst.Info.Id != gi {
			continue
		}
		for _, p := range d.Config.MIGProfiles.GpuInstanceProfiles {
			if p.Id == inst.Info.ProfileId {
				return p.MemorySizeMB << 20
			}
		}
	}
	return 0
}
