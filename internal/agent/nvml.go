package agent

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// The NVML surface the agent may touch.
//
// go-nvml's methods return its own interface types (DeviceGetHandleByIndex
// returns nvml.Device, which also has SetMigMode, CreateGpuInstance, ...), and
// Go has no covariant returns, so a plain narrow interface could not be
// satisfied by nvml.Interface without handing the full nvml.Device back to the
// caller. Instead the narrow interfaces are generic over the handle types: the
// reading code is written against type parameters constrained by Device and
// GPUInstance, so inside it a handle has only the methods listed here and a
// mutating call does not compile. Production instantiates them with go-nvml's
// own types (NVML below); the assertions at the bottom of this file prove that
// nvml.Interface, nvml.Device and nvml.GpuInstance provide the subset.
//
// Compute instances are read through MIG device handles rather than through
// GpuInstance.GetComputeInstances: NVML creates one MIG device per compute
// instance and only that handle carries the UUID the device plugin hands to
// pods, its GPU- and compute-instance IDs and its processes.

// Device is the read-only part of nvml.Device the agent uses. D is the device
// handle type itself (MIG device handles are devices too) and G the
// GPU-instance handle type.
type Device[D any, G any] interface {
	// GetUUID returns GPU-... for a GPU and MIG-... for a MIG device.
	GetUUID() (string, nvml.Return)
	// GetName returns the product name, e.g. NVIDIA H100 80GB HBM3.
	GetName() (string, nvml.Return)
	// GetPciInfo returns PCI information, of which the agent uses PciDeviceId.
	GetPciInfo() (nvml.PciInfo, nvml.Return)
	// GetMemoryInfo returns the total memory the profile names are computed from and, on a
	// MIG device, the memory its pod uses (usage.go).
	GetMemoryInfo() (nvml.Memory, nvml.Return)
	// GetMigMode returns the current and pending MIG modes.
	GetMigMode() (int, int, nvml.Return)
	// GetGpuInstanceProfileInfo describes one GPU_INSTANCE_PROFILE_* constant.
	GetGpuInstanceProfileInfo(int) (nvml.GpuInstanceProfileInfo, nvml.Return)
	// GetGpuInstancePossiblePlacements lists where an instance of a profile may start.
	GetGpuInstancePossiblePlacements(*nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return)
	// GetGpuInstances lists the existing GPU instances of a profile.
	GetGpuInstances(*nvml.GpuInstanceProfileInfo) ([]G, nvml.Return)
	// GetMaxMigDeviceCount bounds the MIG device indexes of a GPU.
	GetMaxMigDeviceCount() (int, nvml.Return)
	// GetMigDeviceHandleByIndex returns one MIG device (one compute instance) of a GPU.
	GetMigDeviceHandleByIndex(int) (D, nvml.Return)
	// GetGpuInstanceId returns the GPU instance a MIG device belongs to.
	GetGpuInstanceId() (int, nvml.Return)
	// GetComputeInstanceId returns the compute instance a MIG device is.
	GetComputeInstanceId() (int, nvml.Return)
	// GetComputeRunningProcesses lists the compute processes on a MIG device, or on a GPU
	// used whole with the memory each uses (usage.go).
	GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return)
}

// GPUInstance is the read-only part of nvml.GpuInstance the agent uses.
type GPUInstance interface {
	// GetInfo returns the instance's ID, profile ID and placement.
	GetInfo() (nvml.GpuInstanceInfo, nvml.Return)
}

// Library is the read-only part of nvml.Interface the agent uses, generic over
// the handle types so that the code reading through it cannot reach any other
// method of a handle.
type Library[D Device[D, G], G GPUInstance] interface {
	// Init loads libnvidia-ml and initialises NVML; it fails when there is no driver.
	Init() nvml.Return
	// Shutdown releases what Init took.
	Shutdown() nvml.Return
	// DeviceGetCount returns the number of GPUs NVML sees.
	DeviceGetCount() (int, nvml.Return)
	// DeviceGetHandleByIndex returns the GPU with an NVML index.
	DeviceGetHandleByIndex(int) (D, nvml.Return)
}

// NVML is the Library instantiated with go-nvml's handle types: what nvml.New()
// and go-nvml's mock servers provide.
type NVML = Library[nvml.Device, nvml.GpuInstance]

// Compile-time proof that go-nvml's interfaces provide the read-only subset:
// if go-nvml renamed or retyped a call the agent relies on, this stops the build.
var (
	_ NVML                                  = nvml.Interface(nil)
	_ Device[nvml.Device, nvml.GpuInstance] = nvml.Device(nil)
	_ GPUInstance                           = nvml.GpuInstance(nil)
)
