package sim

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourcev1 "k8s.io/api/resource/v1"
)

func newDynamicMIGNode(t *testing.T, gpus int, preset string) *Node {
	t.Helper()
	n, err := NewNode(NodeSpec{Name: "dm", Model: "h200", GPUs: gpus, InitialConfig: preset, DynamicMIG: true})
	if err != nil {
		t.Fatalf("NewNode: %v", err)
	}
	return n
}

// startedDynamicMIG reads the node's partitions as the plugin does at start.
func startedDynamicMIG(t *testing.T, n *Node) []resourcev1.ResourceSliceSpec {
	t.Helper()
	specs, table, err := n.dynamicMIGResources()
	if err != nil {
		t.Fatalf("dynamicMIGResources: %v", err)
	}
	n.dynamic.partitions = table
	return specs
}

func deviceNamed(t *testing.T, devices []resourcev1.Device, name string) resourcev1.Device {
	t.Helper()
	i := slices.IndexFunc(devices, func(d resourcev1.Device) bool { return d.Name == name })
	if i < 0 {
		t.Fatalf("no device %s among %d", name, len(devices))
	}
	return devices[i]
}

func counterValues(c map[string]resourcev1.Counter) map[string]int64 {
	out := map[string]int64{}
	for k, v := range c {
		out[k] = v.Value.Value()
	}
	return out
}

func TestParseDynamicMIGNodeGroup(t *testing.T) {
	specs, err := ParseNodeSpecs("h200:2:all-disabled:dynamicmig,h200:1:all-1g:dra,h200:1")
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, s := range specs {
		got = append(got, fmt.Sprintf("%s dra=%v dynamic=%v", s.InitialConfig, s.DRA, s.DynamicMIG))
	}
	want := []string{"all-disabled dra=true dynamic=true", "all-1g dra=true dynamic=false", "all-disabled dra=false dynamic=false"}
	if !slices.Equal(got, want) {
		t.Errorf("parsed %q, want %q", got, want)
	}
}

// The slices are in the driver's DynamicMIG shape (driver.go generateSplitResourceSlices,
// partitions.go): the counter sets alone in the first slice, then each GPU's devices, every
// (profile, placement) a device consuming its capacities and its memory slices from the GPU's
// counter set, and the GPU itself consuming all of them.
func TestDynamicMIGSliceShape(t *testing.T) {
	n := newDynamicMIGNode(t, 2, PresetAllDisabled)
	gpus := mustGPUs(t, n)
	specs := startedDynamicMIG(t, n)
	if len(specs) != 3 {
		t.Fatalf("%d slices, want the counters' and one per GPU", len(specs))
	}
	for k, s := range specs {
		if s.Driver != "gpu.nvidia.com" || s.NodeName == nil || *s.NodeName != "dm" || s.Pool.Name != "dm" || s.Pool.ResourceSliceCount != 3 {
			t.Errorf("slice %d: driver %s, node %v, pool %+v", k, s.Driver, s.NodeName, s.Pool)
		}
		if (len(s.SharedCounters) > 0) == (len(s.Devices) > 0) {
			t.Errorf("slice %d holds %d counter sets and %d devices: a slice holds one or the other", k, len(s.SharedCounters), len(s.Devices))
		}
	}
	sets := specs[0].SharedCounters
	if len(sets) != 2 || sets[0].Name != "gpu-0-counter-set" || sets[1].Name != "gpu-1-counter-set" {
		t.Fatalf("counter sets %+v, want gpu-0-counter-set and gpu-1-counter-set", sets)
	}
	whole := n.profiles[0][slices.IndexFunc(n.profiles[0], func(p gpuProfile) bool { return p.slot.Name == "7g.141gb" })].info
	wantSet := map[string]int64{
		"multiprocessors": int64(whole.MultiprocessorCount), "copy-engines": int64(whole.CopyEngineCount),
		"decoders": int64(whole.DecoderCount), "encoders": 0, "jpeg-engines": 1, "ofa-engines": 1, // the +me profile's
		"memory": int64(whole.MemorySizeMB) << 20,
	}
	for i := range 8 {
		wantSet[fmt.Sprintf("memory-slice-%d", i)] = 1
	}
	if got := counterValues(sets[0].Counters); !maps.Equal(got, wantSet) {
		t.Errorf("GPU 0's counters %v, want %v", got, wantSet)
	}

	devices := specs[1].Devices
	if !slices.IsSortedFunc(devices, func(a, b resourcev1.Device) int { return strings.Compare(a.Name, b.Name) }) {
		t.Error("devices are not sorted by name")
	}
	var oneG []string
	for _, d := range devices {
		if !strings.HasPrefix(d.Name, "gpu-0") {
			t.Errorf("GPU 0's slice holds %s", d.Name)
		}
		if *d.Attributes["type"].StringValue == "mig" && *d.Attributes["profile"].StringValue == "1g.18gb" {
			oneG = append(oneG, d.Name)
		}
	}
	// go-nvml's mock reports a profile's constant as its ID: 0 for 1g (real NVML says 19).
	if want := []string{"gpu-0-mig-1g18gb-0-0", "gpu-0-mig-1g18gb-0-1", "gpu-0-mig-1g18gb-0-2", "gpu-0-mig-1g18gb-0-3",
		"gpu-0-mig-1g18gb-0-4", "gpu-0-mig-1g18gb-0-5", "gpu-0-mig-1g18gb-0-6"}; !slices.Equal(oneG, want) {
		t.Errorf("1g partitions %v, want one per placement %v", oneG, want)
	}

	three := deviceNamed(t, devices, fmt.Sprintf("gpu-0-mig-3g71gb-%d-4", nvml.GPU_INSTANCE_PROFILE_3_SLICE))
	if got := *three.Attributes["parentUUID"].StringValue; got != gpus[0].UUID {
		t.Errorf("parentUUID %s, want GPU 0's %s", got, gpus[0].UUID)
	}
	if _, ok := three.Attributes["uuid"]; ok {
		t.Error("a partition has a uuid: its instance does not exist until a claim is allocated it")
	}
	if *three.Attributes["productName"].StringValue != n.model.NVML().Name || *three.Attributes["architecture"].StringValue != "Hopper" {
		t.Errorf("attributes %v", three.Attributes)
	}
	for name := range three.Capacity {
		if strings.HasPrefix(string(name), "memorySlice") {
			t.Errorf("a partition's capacity names memory slice %s: DynamicMIG places by counters only", name)
		}
	}
	if len(three.ConsumesCounters) != 1 || three.ConsumesCounters[0].CounterSet != "gpu-0-counter-set" {
		t.Fatalf("consumesCounters %+v", three.ConsumesCounters)
	}
	got := counterValues(three.ConsumesCounters[0].Counters)
	for _, s := range []string{"memory-slice-4", "memory-slice-5", "memory-slice-6", "memory-slice-7"} {
		if got[s] != 1 {
			t.Errorf("3g at 4 does not consume %s: %v", s, got)
		}
	}
	if _, ok := got["memory-slice-3"]; ok {
		t.Errorf("3g at 4 consumes memory-slice-3: %v", got)
	}
	if sms := three.Capacity["multiprocessors"].Value; got["multiprocessors"] != sms.Value() || got["multiprocessors"] == 0 {
		t.Errorf("3g consumes %d multiprocessors, has %s", got["multiprocessors"], sms.String())
	}

	gpu := deviceNamed(t, devices, "gpu-0")
	if *gpu.Attributes["type"].StringValue != "gpu" || *gpu.Attributes["uuid"].StringValue != gpus[0].UUID {
		t.Errorf("GPU device attributes %v", gpu.Attributes)
	}
	if len(gpu.ConsumesCounters) != 1 || !maps.Equal(counterValues(gpu.ConsumesCounters[0].Counters), wantSet) {
		t.Errorf("the GPU device consumes %+v, want every counter", gpu.ConsumesCounters)
	}
	if p := n.dynamic.partitions[three.Name]; p.GPU != 0 || p.Profile != "3g.71gb" || p.Start != 4 || p.Size != 4 {
		t.Errorf("partition table has %+v for %s", p, three.Name)
	}
	if _, ok := n.dynamic.partitions["gpu-0"]; ok {
		t.Error("the GPU device is in the partition table: allocating it carves nothing")
	}
}

// The counters let a GPU hold as many instances of each profile as NVML does: the whole GPU
// has every engine its smallest instances have together.
func TestDynamicMIGCountersHoldEveryProfilesMaximum(t *testing.T) {
	for _, m := range Models() {
		t.Run(m.Name, func(t *testing.T) {
			n, err := NewNode(NodeSpec{Name: "dm", Model: m.Name, GPUs: 1, DynamicMIG: true, InitialConfig: PresetAllEnabled})
			if err != nil {
				t.Fatal(err)
			}
			specs := startedDynamicMIG(t, n)
			set := counterValues(specs[0].SharedCounters[0].Counters)
			for _, p := range n.profiles[0] {
				for name, c := range migCapacities(p.info) {
					if need := int64(p.slot.MaxCount) * c.Value.Value(); need > set[counterName(name)] {
						t.Errorf("%d x %s take %d %s, the counter set has %d", p.slot.MaxCount, p.slot.Name, need, counterName(name), set[counterName(name)])
					}
				}
			}
		})
	}
}

// partitionName finds the device of profile at start on GPU 0.
func partitionName(t *testing.T, n *Node, profile string, start int) string {
	t.Helper()
	for name, p := range n.dynamic.partitions {
		if p.GPU == 0 && p.Profile == profile && p.Start == start {
			return name
		}
	}
	t.Fatalf("no partition %s at %d", profile, start)
	return ""
}

type placed struct {
	profile string
	start   int
}

func instancesOf(t *testing.T, n *Node) ([]placed, map[int]string, bool) {
	t.Helper()
	g := mustGPUs(t, n)[0]
	var out []placed
	ids := map[int]string{}
	for _, in := range g.Instances {
		out = append(out, placed{in.Profile, in.Start})
		ids[in.Start] = in.UUID
	}
	return out, ids, g.MIGEnabled
}

// Allocation is mirrored into NVML: each allocated partition becomes an instance at its
// placement, one whose slices are taken is refused as NVML refuses it, a released one is
// destroyed without touching the others, and the last one going disables MIG mode (Hopper).
func TestDynamicMIGMirrorsAllocation(t *testing.T) {
	n := newDynamicMIGNode(t, 1, PresetAllDisabled)
	startedDynamicMIG(t, n)
	a, b, c := partitionName(t, n, "1g.18gb", 0), partitionName(t, n, "1g.18gb", 1), partitionName(t, n, "1g.18gb", 5)
	refused, err := n.mirrorClaims(map[string]string{a: "ns/a", b: "ns/b", c: "ns/c"})
	if err != nil || len(refused) > 0 {
		t.Fatalf("mirror: refused %v, err %v", refused, err)
	}
	got, before, mig := instancesOf(t, n)
	if want := []placed{{"1g.18gb", 0}, {"1g.18gb", 1}, {"1g.18gb", 5}}; !slices.Equal(got, want) || !mig {
		t.Fatalf("instances %v (MIG %v), want %v with MIG enabled", got, mig, want)
	}

	// The dra-driver#933 pattern: four slices are free, but no 3g placement is.
	big := partitionName(t, n, "3g.71gb", 4)
	refused, err = n.mirrorClaims(map[string]string{a: "ns/a", b: "ns/b", c: "ns/c", big: "ns/big"})
	if err != nil {
		t.Fatal(err)
	}
	if len(refused) != 1 || !errors.Is(refused[0], nvml.ERROR_INSUFFICIENT_RESOURCES) || !strings.Contains(refused[0].Error(), "ns/big") {
		t.Fatalf("refused %v, want the 3g at 4 refused for insufficient resources, naming its claim", refused)
	}
	if got, _, _ := instancesOf(t, n); len(got) != 3 {
		t.Fatalf("instances after the refusal %v", got)
	}

	refused, err = n.mirrorClaims(map[string]string{a: "ns/a", c: "ns/c"})
	if err != nil || len(refused) > 0 {
		t.Fatalf("mirror: refused %v, err %v", refused, err)
	}
	got, after, _ := instancesOf(t, n)
	if want := []placed{{"1g.18gb", 0}, {"1g.18gb", 5}}; !slices.Equal(got, want) {
		t.Fatalf("instances %v after b's release, want %v", got, want)
	}
	if after[0] != before[0] || after[5] != before[5] {
		t.Errorf("instances that stayed allocated were re-created: %v then %v", before, after)
	}

	if _, err := n.mirrorClaims(nil); err != nil {
		t.Fatal(err)
	}
	if got, _, mig := instancesOf(t, n); len(got) > 0 || mig {
		t.Errorf("instances %v, MIG %v after every claim went: want none, MIG disabled", got, mig)
	}
}

// At start the plugin destroys the instances no allocated claim holds, as the driver's
// DestroyUnknownMIGDevices does.
func TestDynamicMIGStartDestroysUnclaimedInstances(t *testing.T) {
	n := newDynamicMIGNode(t, 1, PresetAll1g)
	startedDynamicMIG(t, n)
	keep := partitionName(t, n, "1g.18gb", 2)
	if _, err := n.mirrorClaims(map[string]string{keep: "ns/keep"}); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := instancesOf(t, n); !slices.Equal(got, []placed{{"1g.18gb", 2}}) {
		t.Errorf("instances %v, want only the claimed 1g at 2", got)
	}
}

// Only this node's pool, this driver and partitions carve; the GPU device does not.
func TestAllocatedPartitions(t *testing.T) {
	table := map[string]partition{"gpu-0-mig-1g18gb-0-0": {}, "gpu-0-mig-1g18gb-0-1": {}}
	claim := func(name, driver, pool, device string) resourcev1.ResourceClaim {
		c := resourcev1.ResourceClaim{}
		c.Namespace, c.Name = "ns", name
		c.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: driver, Pool: pool, Device: device}}}}
		return c
	}
	unallocated := resourcev1.ResourceClaim{}
	unallocated.Name = "pending"
	got := allocatedPartitions("dm", table, []resourcev1.ResourceClaim{
		claim("mine", "gpu.nvidia.com", "dm", "gpu-0-mig-1g18gb-0-0"),
		claim("other-pool", "gpu.nvidia.com", "other", "gpu-0-mig-1g18gb-0-1"),
		claim("other-driver", "example.com", "dm", "gpu-0-mig-1g18gb-0-1"),
		claim("whole", "gpu.nvidia.com", "dm", "gpu-0"),
		unallocated,
	})
	if want := map[string]string{"gpu-0-mig-1g18gb-0-0": "ns/mine"}; !maps.Equal(got, want) {
		t.Errorf("allocated partitions %v, want %v", got, want)
	}
}

// NVML's refusals, which go-nvml's mock does not make.
func TestGuardedPlacements(t *testing.T) {
	n := newDynamicMIGNode(t, 1, PresetAllEnabled)
	d, err := n.device(0)
	if err != nil {
		t.Fatal(err)
	}
	var three nvml.GpuInstanceProfileInfo
	for _, p := range n.profiles[0] {
		if p.slot.Name == "3g.71gb" {
			three = p.info
		}
	}
	if _, ret := d.CreateGpuInstanceWithPlacement(&three, &nvml.GpuInstancePlacement{Start: 2, Size: 4}); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("3g at 2: %v, want invalid argument (3g starts at 0 or 4)", ret)
	}
	if _, ret := d.CreateGpuInstanceWithPlacement(&three, &nvml.GpuInstancePlacement{Start: 0, Size: 4}); ret != nvml.SUCCESS {
		t.Fatalf("3g at 0: %v", ret)
	}
	if _, ret := d.CreateGpuInstanceWithPlacement(&three, &nvml.GpuInstancePlacement{Start: 0, Size: 4}); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("a second 3g at 0: %v, want insufficient resources", ret)
	}
}
