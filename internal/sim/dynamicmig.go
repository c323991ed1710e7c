package sim

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// The DRA driver stand-in in its DynamicMIG mode (the driver's DynamicMIG feature gate, alpha
// and off by default in kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 and main,
// pkg/featuregates/featuregates.go). Written from the driver's source (v0.4.1 764900e7 and main
// 95932046, cmd/gpu-kubelet-plugin), never from gpupool's reader of it:
//
//   - At start the plugin enumerates, for each MIG-capable GPU, every GPU-instance profile whose
//     compute-instance count equals its slice count and each of its possible placements
//     (nvlib.go inspectMigProfilesAndPlacements); the GPU itself is allocatable too on Hopper and
//     newer, which toggle MIG mode without a reset, or on an older GPU with MIG disabled, which
//     then has no partitions (nvlib.go GetPerGpuAllocatableDevices, isDynamicMIGCapable).
//   - One counter set per GPU, gpu-<minor>-counter-set, holds one counter per capacity dimension
//     (the capacity name made a DNS label: multiprocessors, copy-engines, decoders, encoders,
//     jpeg-engines, ofa-engines, memory), each the largest any profile has, and memory-slice-<i>
//     = 1 for each memory slice, as many as the largest placement spans (partitions.go
//     PartSharedCounterSets, nvlib.go).
//   - Each (profile, placement) is a device named gpu-<minor>-mig-<profile without dots>-<GI
//     profile ID>-<start> (mig.go ToCanonicalName) with the static MIG device's attributes but
//     no uuid (it does not exist yet), capacities without memorySlice<i>, and consumesCounters
//     of its own capacities plus memory-slice-<i> for the slices its placement spans
//     (partitions.go PartConsumesCounters, mig.go CommonAttributesMig, CommonCapacitiesMig).
//     The GPU device gpu-<minor> consumes every counter (partitions.go PartConsumesCounters on
//     GpuInfo), so it excludes every partition and they exclude it.
//   - On Kubernetes 1.35 and later a slice holds either shared counters or devices: the plugin
//     publishes one slice with every GPU's counter set, then one slice of devices per GPU,
//     sorted by name (driver.go generateSplitResourceSlices, shouldUseSplitResourceSlices).
//   - Devices never change after start. The instance is created at the allocated placement
//     when the claim is prepared, and destroyed when it is unprepared; MIG mode is enabled
//     before the first instance and, on Hopper and newer, disabled after the last one goes
//     (device_state.go prepareDevices, unprepareDevices; nvlib.go createMigDevice,
//     deleteMigDevice, maybeDisableMigMode). At start it destroys every instance no prepared
//     claim holds (device_state.go DestroyUnknownMIGDevices).
//
// The simulation mirrors allocation, not the kubelet's prepare: the instance appears when a
// claim is allocated a partition of the node's pool and goes when the claim is deallocated or
// deleted. On a real node the kubelet prepares the claim once a pod using it is bound there
// and unprepares it when the last such pod stops; kwok runs no kubelet, and the scheduler
// binds the pod right after allocating its claims.

// counterSetSuffix ends a GPU's counter set name (partitions.go GetSharedCounterSetName).
const counterSetSuffix = "-counter-set"

// dynamicMIGMemory is what the simulated DynamicMIG kubelet plugin remembers.
type dynamicMIGMemory struct {
	mu sync.Mutex
	// started is true once the plugin published; partitions are the partition devices it
	// published, by device name, which is what an allocation result names.
	started    bool
	partitions map[string]partition
}

// partition is one (profile, placement) of one GPU.
type partition struct {
	GPU     int
	Profile string
	info    nvml.GpuInstanceProfileInfo
	// Start and Size are the memory slices of the placement.
	Start, Size int
}

// gpuFacts are what the driver reads of a GPU for its attributes (nvlib.go getGpuInfo).
type gpuFacts struct {
	uuid, product, brand, architecture, computeCapability, driverVersion, cudaDriverVersion string
	memoryBytes                                                                             uint64
	migEnabled, modeToggle                                                                  bool
}

func (n *Node) readGPUFacts(i int) (gpuFacts, error) {
	d, err := n.device(i)
	if err != nil {
		return gpuFacts{}, err
	}
	var f gpuFacts
	var ret nvml.Return
	if f.uuid, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return f, fmt.Errorf("GPU %d: GetUUID: %s", i, ret.Error())
	}
	if f.product, ret = d.GetName(); ret != nvml.SUCCESS {
		return f, fmt.Errorf("GPU %d: GetName: %s", i, ret.Error())
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return f, fmt.Errorf("GPU %d: GetMemoryInfo: %s", i, ret.Error())
	}
	f.memoryBytes = mem.Total
	brand, ret := d.GetBrand()
	if ret != nvml.SUCCESS {
		return f, fmt.Errorf("GPU %d: GetBrand: %s", i, ret.Error())
	}
	f.brand = brandName(brand)
	arch, ret := d.GetArchitecture()
	if ret != nvml.SUCCESS {
		return f, fmt.Errorf("GPU %d: GetArchitecture: %s", i, ret.Error())
	}
	f.architecture = architectureName(arch)
	// Hopper and newer toggle MIG mode without a GPU reset (nvlib.go supportsMIGModeToggle).
	f.modeToggle = arch >= nvml.DEVICE_ARCH_HOPPER
	major, minor, ret := d.GetCudaComputeCapability()
	if ret != nvml.SUCCESS {
		return f, fmt.Errorf("GPU %d: GetCudaComputeCapability: %s", i, ret.Error())
	}
	f.computeCapability = semver(fmt.Sprintf("%d.%d", major, minor))
	driver, ret := n.nvml.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return f, fmt.Errorf("SystemGetDriverVersion: %s", ret.Error())
	}
	f.driverVersion = semver(driver)
	cuda, ret := n.nvml.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		return f, fmt.Errorf("SystemGetCudaDriverVersion: %s", ret.Error())
	}
	f.cudaDriverVersion = semver(fmt.Sprintf("%d.%d", cuda/1000, (cuda%1000)/10))
	mode, _, ret := d.GetMigMode()
	if ret != nvml.SUCCESS {
		return f, fmt.Errorf("GPU %d: GetMigMode: %s", i, ret.Error())
	}
	f.migEnabled = mode == nvml.DEVICE_MIG_ENABLE
	return f, nil
}

// brandName and architectureName spell NVML's enums as go-nvlib does (pkg/nvlib/device/
// device.go GetBrandAsString, GetArchitectureAsString), for the names the simulated models use.
func brandName(b nvml.BrandType) string {
	if b == nvml.BRAND_NVIDIA {
		return "Nvidia"
	}
	return "Unknown"
}

func architectureName(a nvml.DeviceArchitecture) string {
	switch a {
	case nvml.DEVICE_ARCH_AMPERE:
		return "Ampere"
	case nvml.DEVICE_ARCH_HOPPER:
		return "Hopper"
	case nvml.DEVICE_ARCH_BLACKWELL:
		return "Blackwell"
	}
	return "Unknown"
}

// semver writes a dotted version with three parts, as the driver's semver.MustParse(v).String()
// publishes version attributes ("9.0" becomes "9.0.0").
func semver(v string) string {
	for strings.Count(v, ".") < 2 {
		v += ".0"
	}
	return v
}

func quantity(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.BinarySI) }

// migCapacities are a profile's capacities (mig.go CommonCapacitiesMig): no memory slices.
func migCapacities(info nvml.GpuInstanceProfileInfo) map[resourcev1.QualifiedName]resourcev1.DeviceCapacity {
	return map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
		"multiprocessors": {Value: quantity(int64(info.MultiprocessorCount))},
		"copyEngines":     {Value: quantity(int64(info.CopyEngineCount))},
		"decoders":        {Value: quantity(int64(info.DecoderCount))},
		"encoders":        {Value: quantity(int64(info.EncoderCount))},
		"jpegEngines":     {Value: quantity(int64(info.JpegCount))},
		"ofaEngines":      {Value: quantity(int64(info.OfaCount))},
		"memory":          {Value: quantity(int64(info.MemorySizeMB) << 20)},
	}
}

// counterName is a capacity's counter: the camel-case name made a DNS label (partitions.go
// capacitiesToCounters, mig.go camelToDNSName), e.g. copyEngines becomes copy-engines.
func counterName(capacity resourcev1.QualifiedName) string {
	var b strings.Builder
	for i, r := range string(capacity) {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// consumption is what a device with the given capacities and memory slices takes from its
// GPU's counter set (partitions.go PartConsumesCounters, addCountersForMemSlices).
func consumption(set string, caps map[resourcev1.QualifiedName]resourcev1.DeviceCapacity, start, size int) []resourcev1.DeviceCounterConsumption {
	counters := map[string]resourcev1.Counter{}
	for name, c := range caps {
		counters[counterName(name)] = resourcev1.Counter{Value: c.Value}
	}
	for s := start; s < start+size; s++ {
		counters[fmt.Sprintf("memory-slice-%d", s)] = resourcev1.Counter{Value: quantity(1)}
	}
	return []resourcev1.DeviceCounterConsumption{{CounterSet: set, Counters: counters}}
}

// dynamicMIGResources is what the plugin publishes at start, read from NVML now: the slice
// specs (the counter sets first, then one of devices per GPU) and the partitions by device name.
func (n *Node) dynamicMIGResources() ([]resourcev1.ResourceSliceSpec, map[string]partition, error) {
	pool := resourcev1.ResourcePool{Name: n.name}
	counters := resourcev1.ResourceSliceSpec{Driver: draDriverName, NodeName: ptr.To(n.name), Pool: pool}
	specs := []resourcev1.ResourceSliceSpec{counters}
	table := map[string]partition{}
	for i := range n.gpus {
		f, err := n.readGPUFacts(i)
		if err != nil {
			return nil, nil, fmt.Errorf("node %s: %w", n.name, err)
		}
		gpuName := fmt.Sprintf("gpu-%d", i)
		set := gpuName + counterSetSuffix
		gpuAttrs := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type": {StringValue: ptr.To(draTypeGPU)}, "uuid": {StringValue: ptr.To(f.uuid)},
		}
		migAttrs := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type": {StringValue: ptr.To(draTypeMIG)}, "parentUUID": {StringValue: ptr.To(f.uuid)},
		}
		for _, attrs := range []map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{gpuAttrs, migAttrs} {
			attrs["productName"] = resourcev1.DeviceAttribute{StringValue: ptr.To(f.product)}
			attrs["brand"] = resourcev1.DeviceAttribute{StringValue: ptr.To(f.brand)}
			attrs["architecture"] = resourcev1.DeviceAttribute{StringValue: ptr.To(f.architecture)}
			attrs["cudaComputeCapability"] = resourcev1.DeviceAttribute{VersionValue: ptr.To(f.computeCapability)}
			attrs["driverVersion"] = resourcev1.DeviceAttribute{VersionValue: ptr.To(f.driverVersion)}
			attrs["cudaDriverVersion"] = resourcev1.DeviceAttribute{VersionValue: ptr.To(f.cudaDriverVersion)}
		}
		devices := resourcev1.ResourceSliceSpec{Driver: draDriverName, NodeName: ptr.To(n.name), Pool: pool}
		// A GPU that cannot toggle MIG mode and has it disabled is not DynamicMIG-capable: the
		// driver publishes it whole, with its memory and no counters (partitions.go
		// fullGpuCapacity).
		if !f.modeToggle && !f.migEnabled {
			devices.Devices = append(devices.Devices, resourcev1.Device{Name: gpuName, Attributes: gpuAttrs,
				Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: quantity(int64(f.memoryBytes))}}})
			specs = append(specs, devices)
			continue
		}
		maxCaps := map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{}
		memSlices := 0
		for _, p := range n.profiles[i] {
			caps := migCapacities(p.info)
			for name, c := range caps {
				if cur, ok := maxCaps[name]; !ok || c.Value.Cmp(cur.Value) > 0 {
					maxCaps[name] = c
				}
			}
			memSlices = max(memSlices, p.slot.MemorySlices)
			for _, start := range p.slot.Starts {
				part := partition{GPU: i, Profile: p.slot.Name, info: p.info, Start: start, Size: p.slot.MemorySlices}
				name := fmt.Sprintf("gpu-%d-mig-%s-%d-%d", i, rfc1123(strings.ReplaceAll(p.slot.Name, ".", "")), p.info.Id, start)
				table[name] = part
				attrs := maps.Clone(migAttrs)
				attrs["profile"] = resourcev1.DeviceAttribute{StringValue: ptr.To(p.slot.Name)}
				devices.Devices = append(devices.Devices, resourcev1.Device{Name: name, Attributes: attrs, Capacity: caps,
					ConsumesCounters: consumption(set, caps, start, p.slot.MemorySlices)})
			}
		}
		// Allocatable whole on Hopper and newer whatever the MIG mode; an older GPU with MIG
		// enabled only in partitions (nvlib.go GetPerGpuAllocatableDevices).
		if f.modeToggle {
			devices.Devices = append(devices.Devices, resourcev1.Device{Name: gpuName, Attributes: gpuAttrs,
				Capacity: maps.Clone(maxCaps), ConsumesCounters: consumption(set, maxCaps, 0, memSlices)})
		}
		slices.SortFunc(devices.Devices, func(a, b resourcev1.Device) int { return cmp.Compare(a.Name, b.Name) })
		if len(devices.Devices) > resourcev1.ResourceSliceMaxDevicesWithAdvancedFeatures {
			return nil, nil, fmt.Errorf("node %s: GPU %d has %d partition devices, more than one slice holds (%d)",
				n.name, i, len(devices.Devices), resourcev1.ResourceSliceMaxDevicesWithAdvancedFeatures)
		}
		specs[0].SharedCounters = append(specs[0].SharedCounters, resourcev1.CounterSet{Name: set,
			Counters: consumption(set, maxCaps, 0, memSlices)[0].Counters})
		specs = append(specs, devices)
	}
	for k := range specs {
		specs[k].Pool.ResourceSliceCount = int64(len(specs))
	}
	return specs, table, nil
}
