package sim

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
	"github.com/gpupool/gpupool/internal/agent/nvmlmock"
)

// driverVersion is what the mock NVML reports; a current data-centre branch.
const driverVersion = "570.86.15"

// Node is one simulated GPU node: a go-nvml mock server holding its GPUs, the devices handed
// to its pods, its fault knobs and its mig-manager's memory. The MIG state of the mock is
// only ever changed through NVML calls (SetMigMode, CreateGpuInstanceWithPlacement,
// CreateComputeInstance, Destroy), the calls mig-parted makes on a real node.
type Node struct {
	name  string
	model Model
	gpus  int
	// initialConfig is the mig.config value the initial layout corresponds to.
	initialConfig string
	nvml          *server.Server
	migDevices    *nvmlmock.MIGDevices
	// profiles[i] is GPU i's profile table, read once from NVML: it never changes.
	profiles [][]gpuProfile

	// mu serialises layout changes with device assignment, so that no pod can be handed a
	// device between mig-manager's in-use check and its destroying the device.
	mu       sync.Mutex
	assigned map[types.NamespacedName][]device
	faults   Faults
	// plugin is the config the device plugin runs with, nil while it refuses to start;
	// assignment hands out what it advertises. Only the device plugin's part of the reconcile
	// changes it.
	plugin *pluginRun
	// pciID is the GPUs' PCI identity, read once from NVML.
	pciID migDeviceID

	// devicePlugin is what the simulated device plugin remembers; only the node's reconcile,
	// which controller-runtime never runs twice at once for one node, touches it.
	devicePlugin devicePluginMemory

	// migManager is what the simulated mig-manager remembers; it has its own lock because
	// the informer's event handler records label changes while a reconcile may be applying.
	migManager migManagerMemory

	// reboot is the host reboot an apply asked for (the reboot fault), nil when none is under
	// way; pluginSilent is true once an apply paused the device plugin under the plugin-silent
	// fault. Only the node's reconcile touches them, as devicePlugin.
	reboot       *rebootState
	pluginSilent bool

	// agent says whether the node's agent may run: not while the host reboots, nor under the
	// agent-down fault.
	agentState agentSwitch

	// dra is true when NVIDIA's DRA driver serves the node's GPUs instead of the device plugin;
	// draPlugin is what its simulated kubelet plugin remembers.
	dra       bool
	draPlugin draPluginMemory
	// dynamicMIG is true when that driver runs with its DynamicMIG feature gate; dynamicMIG
	// remembers the partitions its plugin published (dynamicmig.go).
	dynamicMIG bool
	dynamic    dynamicMIGMemory

	// usage is the AnnotationUsage of each pod holding devices (usage.go), under mu; now is
	// the simulator's clock, nil for the real one.
	usage map[types.NamespacedName]podUsage
	now   func() time.Time
}

// DRA says whether NVIDIA's DRA driver serves the node's GPUs.
func (n *Node) DRA() bool { return n.dra }

// DynamicMIG says whether that driver serves them with its DynamicMIG feature gate.
func (n *Node) DynamicMIG() bool { return n.dynamicMIG }

// NewNode builds the simulated node of spec with its GPUs in the spec's initial layout.
func NewNode(spec NodeSpec) (*Node, error) {
	if spec.Name == "" {
		return nil, errors.New("simulated node: a name is required")
	}
	model, err := LookupModel(spec.Model)
	if err != nil {
		return nil, fmt.Errorf("simulated node %s: %w", spec.Name, err)
	}
	if spec.GPUs < 1 || spec.GPUs > 64 {
		return nil, fmt.Errorf("simulated node %s: %d GPUs, want 1..64", spec.Name, spec.GPUs)
	}
	s, err := server.New(server.WithGPUs(gpus.Multiple(spec.GPUs, model.NVML())...), server.WithDriverVersion(driverVersion))
	if err != nil {
		return nil, fmt.Errorf("simulated node %s: building the NVML mock: %w", spec.Name, err)
	}
	n := &Node{
		name:          spec.Name,
		model:         model,
		gpus:          spec.GPUs,
		initialConfig: cmp.Or(spec.InitialConfig, PresetAllDisabled),
		nvml:          s,
		migDevices:    nvmlmock.Install(s),
		assigned:      map[types.NamespacedName][]device{},
		faults:        spec.Faults,
		plugin:        ptrTo(exclusiveRun),
		dra:           spec.DRA || spec.DynamicMIG,
		dynamicMIG:    spec.DynamicMIG,
	}
	if n.dra {
		n.plugin = nil // no device plugin: nothing is handed out through extended resources
	}
	guardPlacements(s)
	for i := range spec.GPUs {
		table, err := n.readProfiles(i)
		if err != nil {
			return nil, fmt.Errorf("simulated node %s: %w", spec.Name, err)
		}
		n.profiles = append(n.profiles, table)
	}
	if n.pciID, err = n.readPCIID(); err != nil {
		return nil, fmt.Errorf("simulated node %s: %w", spec.Name, err)
	}
	target, err := presetTarget(n.initialConfig, n.profiles[0])
	if err != nil {
		return nil, fmt.Errorf("simulated node %s: %w", spec.Name, err)
	}
	for i := range spec.GPUs {
		if err := n.applyGPU(i, target); err != nil {
			return nil, fmt.Errorf("simulated node %s: initial layout %s: %w", spec.Name, n.initialConfig, err)
		}
	}
	n.migManager.current = n.initialConfig
	return n, nil
}

// Name is the node's name.
func (n *Node) Name() string { return n.name }

// Model is the node's GPU model.
func (n *Node) Model() Model { return n.model }

// InitialConfig is the mig.config entry name the node's initial layout corresponds to.
func (n *Node) InitialConfig() string { return n.initialConfig }

// NVML is the node's mock NVML library, what the node agent reads. Callers must not change
// GPU settings through it: only mig-manager does.
func (n *Node) NVML() agent.NVML { return n.nvml }

// SetFaults replaces the node's programmatic fault knobs; annotations add to them.
func (n *Node) SetFaults(f Faults) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults = f
}

// peekFaults returns the programmatic faults without consuming any.
func (n *Node) peekFaults() Faults {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.faults
}

// takeFaults returns the programmatic faults and consumes FailNext, which fires once.
func (n *Node) takeFaults() Faults {
	n.mu.Lock()
	defer n.mu.Unlock()
	f := n.faults
	n.faults.FailNext = false
	return f
}

// takeReboot consumes the programmatic Reboot knob when it fires.
func (n *Node) takeReboot() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults.Reboot = false
}

// migDeviceID is the GPUs' PCI identity as mig-parted reads it to match device-filter: the
// device and vendor IDs NVML reports (e.g. 0x233510DE: device 0x2335, vendor 0x10DE), and the
// subsystem's. Every GPU of a node is of one model.
func (n *Node) migDeviceID() migDeviceID { return n.pciID }

// PCIDeviceID is the GPUs' packed PCI device and vendor ID as mig-parted's device-filter
// writes it, e.g. 0x233510DE.
func (n *Node) PCIDeviceID() string {
	return fmt.Sprintf("0x%04X%04X", n.pciID.Device, n.pciID.Vendor)
}

// Owners maps the devices handed out on the node to their pods: the simulated kubelet
// PodResources answer, fed to the node agent.
func (n *Node) Owners() map[string][]v1alpha1.PodReference {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ownersLocked()
}

// ownersLocked keys shared replicas by their GPU's or MIG device's UUID, as the agent's
// PodResources reader strips the "::<n>" suffix, so a pod holding replicas is listed once on
// its GPU or MIG device, and a device shared by several pods lists each of them.
func (n *Node) ownersLocked() map[string][]v1alpha1.PodReference {
	out := map[string][]v1alpha1.PodReference{}
	for _, pod := range slices.SortedFunc(maps.Keys(n.assigned), comparePodKeys) {
		ref := v1alpha1.PodReference{Namespace: pod.Namespace, Name: pod.Name}
		for _, d := range n.assigned[pod] {
			id := physicalID(d.id)
			if !slices.Contains(out[id], ref) {
				out[id] = append(out[id], ref)
			}
		}
	}
	return out
}

// DevicePluginState is how the simulated device plugin of a node runs.
type DevicePluginState struct {
	// Running is false while the plugin refuses its config and advertises nothing.
	Running bool
	// Config is the config key it runs with ("" for none), MIGStrategy the strategy in force.
	Config, MIGStrategy string
	// Sharing is the active sharing strategy: none, time-slicing or mps.
	Sharing string
}

// DevicePlugin returns how the node's simulated device plugin runs now.
func (n *Node) DevicePlugin() DevicePluginState {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.plugin == nil {
		return DevicePluginState{}
	}
	return DevicePluginState{Running: true, Config: n.plugin.key, MIGStrategy: n.plugin.strategy, Sharing: n.plugin.file.sharingStrategy()}
}

// Assignments returns the device IDs handed to each pod on the node: GPU-... or MIG-... UUIDs
// for exclusive devices, <GPU-UUID>::<n> or <MIG-UUID>::<n> for shared replicas.
func (n *Node) Assignments() map[types.NamespacedName][]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[types.NamespacedName][]string, len(n.assigned))
	for pod, devs := range n.assigned {
		for _, d := range devs {
			out[pod] = append(out[pod], d.id)
		}
	}
	return out
}

func comparePodKeys(a, b types.NamespacedName) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}
