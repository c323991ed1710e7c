package sim

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
	"github.com/gpupool/gpupool/internal/agent/nvmlmock"
	"github.com/gpupool/gpupool/internal/mig"
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
}

// DRA says whether NVIDIA's DRA driver serves the node's GPUs.
func (n *Node) DRA() bool { return n.dra }

// gpuProfile is one GPU-instance profile of a GPU as NVML describes it.
type gpuProfile struct {
	constant int
	info     nvml.GpuInstanceProfileInfo
	slot     SlotProfile
}

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
		dra:           spec.DRA,
	}
	if n.dra {
		n.plugin = nil // no device plugin: nothing is handed out through extended resources
	}
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
				return fmt.Errorf("GPU %d: GpuInstance.Destroy(%s): %s", i, p.slot.Name, ret.Error())
			}
		}
	}
	return nil
}

// migDeviceID is the GPUs' PCI identity as mig-parted reads it to match device-filter: the
// device and vendor IDs NVML reports (e.g. 0x233510DE: device 0x2335, vendor 0x10DE), and the
// subsystem's. Every GPU of a node is of one model.
func (n *Node) migDeviceID() migDeviceID { return n.pciID }

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
