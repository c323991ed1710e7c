package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpupool/gpupool/internal/mig"
)

// ResourceGPU is the device plugin's resource for a whole GPU (MIG disabled), and for every
// device under the none and single MIG strategies.
const ResourceGPU corev1.ResourceName = "nvidia.com/gpu"

// ResourceGPUShared is the resource a whole GPU's replicas are advertised as while a sharing
// config lists nvidia.com/gpu with renameByDefault.
const ResourceGPUShared corev1.ResourceName = ResourceGPU + sharedSuffix

// replicaSeparator joins a device's UUID and a replica number in a shared device's ID,
// "<GPU-UUID>::<n>" or "<MIG-UUID>::<n>", as the device plugin annotates replica IDs
// (internal/rm NewAnnotatedID).
const replicaSeparator = "::"

// resourcePrefix starts every resource the NVIDIA device plugin advertises; the simulated
// device plugin owns exactly these keys of a node's capacity and allocatable.
const resourcePrefix = "nvidia.com/"

// maxMPSClients is the most replicas the MPS control daemon accepts per device on GPUs of
// compute capability 7.5 and later, which every simulated model is
// (NVIDIA/k8s-device-plugin cmd/mps-control-daemon/mps/device.go maxClients, assertReplicas).
const maxMPSClients = 48

// GPUState is one GPU as NVML shows it: its MIG mode and its MIG devices.
type GPUState struct {
	// Index is the NVML index.
	Index int
	// UUID is the GPU's UUID (GPU-...), the device ID of a whole GPU.
	UUID string
	// MIGEnabled is the current MIG mode.
	MIGEnabled bool
	// Instances are the MIG devices (one compute instance spanning each GPU instance, as
	// mig-parted creates them), ordered by start.
	Instances []InstanceState
}

// InstanceState is one MIG device.
type InstanceState struct {
	// Profile is the GPU-instance profile name, e.g. "1g.18gb".
	Profile string
	// Start and Size are the memory slices of its GPU instance.
	Start, Size int
	// UUID is the MIG device's UUID (MIG-...), the device ID the device plugin hands to pods.
	UUID string
}

// Layout is the GPU's profile multiset, as mig-parted configs and GPUNode layouts write it.
func (g GPUState) Layout() mig.Layout {
	l := mig.Layout{}
	for _, in := range g.Instances {
		l[in.Profile]++
	}
	return l
}

// device is one allocatable unit the device plugin advertises.
type device struct {
	resource corev1.ResourceName
	id       string
	gpu      int
	// mig is whether the device is (a replica of) a MIG device.
	mig bool
}

// migResource is the mixed strategy's resource of a MIG profile: nvidia.com/mig-<profile>
// with "+" written "." (NVIDIA/k8s-device-plugin internal/rm/rm.go AddDefaultResourcesToConfig).
func migResource(profile string) corev1.ResourceName {
	return corev1.ResourceName(resourcePrefix + strings.ReplaceAll("mig-"+profile, "+", "."))
}

// replicaID is the device ID of replica i of a shared GPU or MIG device.
func replicaID(uuid string, i int) string {
	return fmt.Sprintf("%s%s%d", uuid, replicaSeparator, i)
}

// physicalID is the device a device ID stands for: a replica's GPU or MIG device UUID, any
// other ID as it is.
func physicalID(id string) string {
	uuid, _, _ := strings.Cut(id, replicaSeparator)
	return uuid
}

// isReplica reports whether the device is a replica of a shared GPU or MIG device.
func (d device) isReplica() bool { return strings.Contains(d.id, replicaSeparator) }

// pluginRun is a configuration the device plugin started with: the config key it read ("" for
// none), the MIG strategy in force and the decoded file (the zero value when there is none).
type pluginRun struct {
	key      string
	strategy string
	file     devicePluginFile
}

// exclusiveRun is the device plugin with no config file under the mixed strategy: every device
// exclusive.
var exclusiveRun = pluginRun{strategy: migStrategyMixed}

// advertise is the device plugin's start-up for the GPUs it finds: the checks it makes before
// serving (validateFlags, the device map builder, the MPS options and the MPS control daemon;
// an error means it does not start), then the devices it advertises. Following
// NVIDIA/k8s-device-plugin:
//
//   - cmd/nvidia-device-plugin/main.go validateFlags: an unknown MIG strategy is refused, and
//     MPS under the mixed strategy ("using --mig-strategy=mixed is not supported with MPS");
//   - internal/rm/device_map.go: under none every GPU is nvidia.com/gpu whatever its MIG mode;
//     under single every GPU must have MIG enabled with MIG devices of one kind, or none MIG
//     enabled, and MIG devices are nvidia.com/gpu; under mixed a GPU with MIG disabled is
//     nvidia.com/gpu and each MIG device nvidia.com/mig-<profile>, and a MIG-enabled GPU
//     without MIG devices advertises nothing;
//   - internal/plugin/mps.go getMPSOptions: MPS with any MIG device is refused ("sharing using
//     MPS is not supported for MIG devices");
//   - updateDeviceMapWithReplicas: each device of a listed resource becomes replicas
//     <id>::<n> of the resource renamed to <name>.shared under renameByDefault (the name
//     otherwise); resources not listed stay exclusive; a resource listed twice gets the
//     larger count;
//   - cmd/mps-control-daemon/mps/device.go: under MPS no device may have more than 48
//     replicas ("maximum allowed replicas exceeded").
//
// Devices come in GPU index order, then instance start, then replica.
func advertise(gpus []GPUState, run pluginRun) ([]device, error) {
	strategy := run.strategy
	switch strategy {
	case migStrategyNone, migStrategySingle, migStrategyMixed:
	default:
		return nil, fmt.Errorf("unable to validate flags: unknown MIG strategy: %v", strategy)
	}
	mps := run.file.sharingStrategy() == sharingMPS
	if mps && strategy == migStrategyMixed {
		return nil, errors.New("unable to validate flags: using --mig-strategy=mixed is not supported with MPS")
	}
	var base []device
	if strategy == migStrategySingle {
		if err := checkSingleStrategy(gpus); err != nil {
			return nil, fmt.Errorf("error building device map: invalid MIG configuration: %w", err)
		}
	}
	for _, g := range gpus {
		if !g.MIGEnabled || strategy == migStrategyNone {
			base = append(base, device{resource: ResourceGPU, id: g.UUID, gpu: g.Index})
			continue
		}
		for _, in := range g.Instances {
			r := migResource(in.Profile)
			if strategy == migStrategySingle {
				r = ResourceGPU
			}
			base = append(base, device{resource: r, id: in.UUID, gpu: g.Index, mig: true})
		}
	}
	if mps && slices.ContainsFunc(base, func(d device) bool { return d.mig }) {
		return nil, errors.New("error getting plugins: sharing using MPS is not supported for MIG devices")
	}
	rr := run.file.replicated()
	if rr == nil {
		return base, nil
	}
	replicas := map[corev1.ResourceName]int{}
	for _, r := range rr.Resources {
		replicas[corev1.ResourceName(r.Name)] = max(replicas[corev1.ResourceName(r.Name)], r.Replicas)
	}
	var out []device
	for _, d := range base {
		k, shared := replicas[d.resource]
		if !shared {
			out = append(out, d)
			continue
		}
		if mps && k > maxMPSClients {
			return nil, fmt.Errorf("invalid MPS configuration: invalid device maximum allowed replicas exceeded: %d > %d", k, maxMPSClients)
		}
		name := d.resource
		if rr.RenameByDefault {
			name += sharedSuffix
		}
		for i := range k {
			out = append(out, device{resource: name, id: replicaID(d.id, i), gpu: d.gpu, mig: d.mig})
		}
	}
	return out, nil
}

// checkSingleStrategy is the device map builder's check under the single strategy: every
// MIG-enabled GPU has MIG devices, all of one profile, and GPUs with MIG disabled do not sit
// next to MIG devices.
func checkSingleStrategy(gpus []GPUState) error {
	profile, whole, migDevices := "", false, false
	for _, g := range gpus {
		if !g.MIGEnabled {
			whole = true
			continue
		}
		if len(g.Instances) == 0 {
			return fmt.Errorf("at least one device with migEnabled=true was not configured correctly: device %d has no MIG devices configured", g.Index)
		}
		for _, in := range g.Instances {
			if profile != "" && in.Profile != profile {
				return errors.New("more than one MIG device type present on node")
			}
			profile, migDevices = in.Profile, true
		}
	}
	if whole && migDevices {
		return errors.New("all devices on the node must be configured with the same migEnabled value")
	}
	return nil
}

// capacityOf is the GPU part of a node's capacity (and allocatable) for the advertised devices:
// a count per resource, resources without a device absent.
func capacityOf(devices []device) corev1.ResourceList {
	counts := map[corev1.ResourceName]int64{}
	for _, d := range devices {
		counts[d.resource]++
	}
	out := make(corev1.ResourceList, len(counts))
	for r, n := range counts {
		out[r] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return out
}

// nothingAdvertised is what the node shows while the device plugin does not run: every
// nvidia.com/ resource it has at 0, as the kubelet leaves the resources of a device plugin
// that went away (allocatable at once, capacity after a grace period the simulator skips).
func nothingAdvertised(status corev1.NodeStatus) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, list := range []corev1.ResourceList{status.Capacity, status.Allocatable} {
		for r := range list {
			if isDevicePluginResource(r) {
				out[r] = *resource.NewQuantity(0, resource.DecimalSI)
			}
		}
	}
	return out
}

// isDevicePluginResource reports whether the device plugin owns the resource.
func isDevicePluginResource(r corev1.ResourceName) bool {
	return strings.HasPrefix(string(r), resourcePrefix)
}

// capacityPatch returns the values to write into status.capacity and status.allocatable so that
// their device-plugin resources equal want, leaving all others alone: a JSON merge patch
// value per key, nil to delete. It is empty when both lists already agree.
func capacityPatch(status corev1.NodeStatus, want corev1.ResourceList) map[string]map[corev1.ResourceName]*string {
	out := map[string]map[corev1.ResourceName]*string{}
	for field, have := range map[string]corev1.ResourceList{"capacity": status.Capacity, "allocatable": status.Allocatable} {
		diff := map[corev1.ResourceName]*string{}
		for r, q := range want {
			if cur, ok := have[r]; !ok || cur.Cmp(q) != 0 {
				s := q.String()
				diff[r] = &s
			}
		}
		for r := range have {
			if _, keep := want[r]; !keep && isDevicePluginResource(r) {
				diff[r] = nil
			}
		}
		if len(diff) > 0 {
			out[field] = diff
		}
	}
	return out
}
