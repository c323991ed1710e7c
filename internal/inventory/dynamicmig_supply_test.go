package inventory_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
)

const (
	// dmNode is the DynamicMIG node of these tests, and the driver's pool.
	dmNode = "dm-node"
	// h200 is the product name NVML reports for an H200.
	h200 = "NVIDIA H200"
)

func h200Product(t testing.TB) *mig.Product {
	t.Helper()
	p, ok := mig.LookupProduct(h200)
	if !ok {
		t.Fatal("no H200 in the built-in table")
	}
	return p
}

// dmDevice names a partition as the driver does, gpu-<minor>-mig-<profile without dots>-<GI
// profile ID>-<start> (cmd/gpu-kubelet-plugin/mig.go); gpupool never parses it.
func dmDevice(minor int, pr mig.Profile, start int) string {
	return fmt.Sprintf("gpu-%d-mig-%s-%d-%d", minor, strings.NewReplacer(".", "", "+", "-").Replace(pr.Name), pr.ID, start)
}

// dmCounters is what a device of profile pr at placement start takes from its GPU's counter
// set, in the driver's shape (partitions.go PartConsumesCounters): capacities as DNS-named
// counters plus memory-slice-<i> for each slice it spans. Engine values are made up but
// proportioned as NVIDIA's: one decoder per compute slice, the one OFA engine for +me and the
// whole GPU only, and memory by slices (NVML's sizes add up within the GPU's; the table's
// rounded GB names do not).
func dmCounters(pr mig.Profile, start, size int) map[string]resourcev1.Counter {
	q := func(v int64) resourcev1.Counter {
		return resourcev1.Counter{Value: *resource.NewQuantity(v, resource.BinarySI)}
	}
	c := map[string]resourcev1.Counter{
		"multiprocessors": q(int64(16 * pr.ComputeSlices)), "decoders": q(int64(pr.ComputeSlices)),
		"memory": q(int64(pr.MemorySlices) * 18 << 30), "ofa-engines": q(0),
	}
	if pr.Media == mig.MediaExtensions || pr.MemorySlices == 8 {
		c["ofa-engines"] = q(1)
	}
	for s := start; s < start+size; s++ {
		c[fmt.Sprintf("memory-slice-%d", s)] = q(1)
	}
	return c
}

// dynamicMIGSlices are the slices NVIDIA's driver publishes in DynamicMIG mode on Kubernetes
// 1.35+ for H200 GPUs with the given UUIDs (minor = position): one slice of counter sets, then
// one of devices per GPU, every profile at every placement plus the GPU itself
// (driver.go generateSplitResourceSlices).
func dynamicMIGSlices(t testing.TB, uuids ...string) []resourcev1.ResourceSlice {
	p := h200Product(t)
	pool := resourcev1.ResourcePool{Name: dmNode, ResourceSliceCount: int64(1 + len(uuids))}
	counters := resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: dmNode + "-counters"},
		Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.nvidia.com", Pool: pool, NodeName: ptr.To(dmNode)}}
	out := []resourcev1.ResourceSlice{}
	for minor, uuid := range uuids {
		set := fmt.Sprintf("gpu-%d-counter-set", minor)
		devices := resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-gpu-%d", dmNode, minor)},
			Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.nvidia.com", Pool: pool, NodeName: ptr.To(dmNode)}}
		capacity := map[string]resourcev1.Counter{}
		for _, pr := range p.Profiles {
			for _, pl := range pr.Placements {
				c := dmCounters(pr, pl.Start, pl.Size)
				for name, v := range c {
					if cur, ok := capacity[name]; !ok || v.Value.Cmp(cur.Value) > 0 {
						capacity[name] = v
					}
				}
				devices.Spec.Devices = append(devices.Spec.Devices, resourcev1.Device{Name: dmDevice(minor, pr, pl.Start),
					Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
						"type": {StringValue: ptr.To("mig")}, "parentUUID": {StringValue: ptr.To(uuid)}, "profile": {StringValue: ptr.To(pr.Name)}},
					ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: set, Counters: c}}})
			}
		}
		devices.Spec.Devices = append(devices.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-%d", minor),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"type": {StringValue: ptr.To("gpu")}, "uuid": {StringValue: ptr.To(uuid)}},
			ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: set, Counters: capacity}}})
		slices.SortFunc(devices.Spec.Devices, func(a, b resourcev1.Device) int { return strings.Compare(a.Name, b.Name) })
		counters.Spec.SharedCounters = append(counters.Spec.SharedCounters, resourcev1.CounterSet{Name: set, Counters: capacity})
		out = append(out, devices)
	}
	return append([]resourcev1.ResourceSlice{counters}, out...)
}

// dmClaim is a claim the scheduler allocated device of dmNode's pool, reserved for pod ("" for
// none yet).
func dmClaim(name, device, pod string) resourcev1.ResourceClaim {
	c := resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}}
	c.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: "gpu.nvidia.com", Pool: dmNode, Device: device}}}}
	if pod != "" {
		c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pod, UID: types.UID("uid-" + pod)}}
	}
	return c
}

// held is a claim named after its pod holding profile at start on GPU 0, and the NVML instance
// the driver carved for it.
type held struct {
	profile string
	start   int
	carved  bool
}

func dmSupply(t *testing.T, allocated []held, unclaimed ...v1alpha1.MIGInstance) *inventory.DynamicMIGNode {
	t.Helper()
	p := h200Product(t)
	var claims []resourcev1.ResourceClaim
	var instances []v1alpha1.MIGInstance
	for k, h := range allocated {
		pr, ok := p.Profile(h.profile)
		if !ok {
			t.Fatalf("no profile %s", h.profile)
		}
		pod := fmt.Sprintf("p%d", k)
		claims = append(claims, dmClaim(pod+"-gpu", dmDevice(0, *pr, h.start), pod))
		if h.carved {
			instances = append(instances, fixture.Instance(pr.Name, int32(h.start), int32(pr.MemorySlices)))
		}
	}
	instances = append(instances, unclaimed...)
	rep := fixture.Report(dmNode, fixture.MIGGPU(0, h200, instances...))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: dmNode}}
	return inventory.DynamicMIGSupply(node, &rep, claims, dynamicMIGSlices(t, "GPU-0000"))
}

// mapOf draws GPU 0's slice map as claim pods, "." for free: "p0 p1 . . . p2 . .".
func mapOf(n *inventory.DynamicMIGNode) string {
	g := n.GPUs[0]
	cells := make([]string, len(g.Slices))
	for s, k := range g.Slices {
		switch {
		case k < 0:
			cells[s] = "."
		case len(g.Holders[k].Pods) > 0:
			cells[s] = g.Holders[k].Pods[0].Name
		default:
			cells[s] = "?"
		}
	}
	return strings.Join(cells, " ")
}

// On a DynamicMIG GPU a claim fits only where an allowed placement is free: the
// dra-driver-nvidia-gpu#933 pattern (1g at 0, 1 and 5 of an H200) strands a 3g with five free
// slices, while a 2g still goes at 2-3, the first free partition in the driver's order.
func TestDynamicMIGFit(t *testing.T) {
	c := func(profile string, start int) held { return held{profile, start, true} }
	issue933 := []held{c("1g.18gb", 0), c("1g.18gb", 1), c("1g.18gb", 5)}
	for _, tc := range []struct {
		name      string
		allocated []held
		unclaimed []v1alpha1.MIGInstance
		profile   string
		slices    string
		kind      inventory.FitKind
		at        mig.Placement
		device    string
		reason    string
		notes     string
	}{
		{name: "empty GPU: the first 3g partition", profile: "3g.71gb", slices: ". . . . . . . .",
			kind: inventory.FitFree, at: mig.Placement{Start: 0, Size: 4}, device: "gpu-0-mig-3g71gb-2-0"},
		{name: "dra-driver#933: 3g stranded by placement", allocated: issue933, profile: "3g.71gb", slices: "p0 p1 . . . p2 . .",
			kind:   inventory.FitStranded,
			reason: "GPU 0 has 5 free memory slices, enough for 3g.71gb (4), but none of its placements (memory slices 0-3, 4-7) is free: 0-3 holds 1g.18gb of pod team/p0 and 1g.18gb of pod team/p1; 4-7 holds 1g.18gb of pod team/p2"},
		{name: "dra-driver#933: 4g stranded too", allocated: issue933, profile: "4g.71gb", kind: inventory.FitStranded},
		{name: "dra-driver#933: 2g fits at 2-3", allocated: issue933, profile: "2g.35gb",
			kind: inventory.FitFree, at: mig.Placement{Start: 2, Size: 2}, device: "gpu-0-mig-2g35gb-1-2"},
		{name: "dra-driver#933: 1g fits at 2", allocated: issue933, profile: "1g.18gb",
			kind: inventory.FitFree, at: mig.Placement{Start: 2, Size: 1}, device: "gpu-0-mig-1g18gb-0-2"},
		{name: "dra-driver#933: 7g has no room", allocated: issue933, profile: "7g.141gb", kind: inventory.FitNoRoom,
			reason: "GPU 0 has 5 free memory slices, 7g.141gb takes 8"},
		{name: "an allocated claim holds its slices before the driver carves", allocated: []held{{"1g.18gb", 3, false}},
			profile: "4g.71gb", slices: ". . . p0 . . . .", kind: inventory.FitStranded,
			notes: "ResourceClaim team/p0-gpu is allocated 1g.18gb at slice 3 on GPU 0 and NVML has no instance there yet (the driver carves it when the claim's pod is prepared on the node)"},
		{name: "an instance no claim holds still takes its slices", unclaimed: []v1alpha1.MIGInstance{fixture.Instance("1g.18gb", 4, 1)},
			profile: "3g.71gb", slices: ". . . . ? . . .", kind: inventory.FitFree, at: mig.Placement{Start: 0, Size: 4},
			notes: "NVML reports 1g.18gb at slice 4 on GPU 0, which no claim holds: the driver destroys it when its kubelet plugin restarts, and until then a claim allocated over it fails to prepare"},
		{name: "engines: the one OFA engine is taken", allocated: []held{c("1g.18gb+me", 0)}, profile: "1g.18gb+me",
			kind: inventory.FitEngines, reason: "1g.18gb+me has free memory slices on GPU 0 at memory slice 1, but the claims there use up its ofa-engines (0 left, 1 needed)"},
		{name: "a profile the GPU lacks", profile: "3g.40gb", kind: inventory.FitNoProfile, reason: "GPU 0 (NVIDIA H200) has no MIG profile 3g.40gb"},
		{name: "an alias resolves", allocated: []held{c("3g.71gb", 4)}, profile: "3g.71gb", kind: inventory.FitFree, at: mig.Placement{Start: 0, Size: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := dmSupply(t, tc.allocated, tc.unclaimed...)
			if len(n.GPUs) != 1 {
				t.Fatalf("%d GPUs, want 1", len(n.GPUs))
			}
			if tc.slices != "" {
				if got := mapOf(n); got != tc.slices {
					t.Errorf("slice map %q, want %q", got, tc.slices)
				}
			}
			f := n.Fit(tc.profile)[0]
			if f.Kind != tc.kind {
				t.Fatalf("Fit(%s) = %s (%s), want %s", tc.profile, f.Kind, f.Reason, tc.kind)
			}
			if tc.kind == inventory.FitFree && f.At != tc.at {
				t.Errorf("at %v, want %v", f.At, tc.at)
			}
			if tc.device != "" && f.Device != tc.device {
				t.Errorf("device %q, want %q", f.Device, tc.device)
			}
			if tc.reason != "" && f.Reason != tc.reason {
				t.Errorf("reason\n %q\nwant\n %q", f.Reason, tc.reason)
			}
			if tc.kind == inventory.FitStranded && tc.name == "dra-driver#933: 3g stranded by placement" {
				// Slices 4-7 hold one claim, 0-3 two: moving the one at 5 frees a 3g.
				if f.Cheapest != (mig.Placement{Start: 4, Size: 4}) || len(f.InTheWay) != 1 || f.InTheWay[0].Claim != "team/p2-gpu" {
					t.Errorf("cheapest %v in the way %+v, want 4-7 held by team/p2-gpu", f.Cheapest, f.InTheWay)
				}
			}
			if got := strings.Join(n.GPUs[0].Notes, "; "); got != tc.notes {
				t.Errorf("notes\n %q\nwant\n %q", got, tc.notes)
			}
		})
	}
}

// A whole-GPU claim takes every slice; a claim on a device the slices do not list is a note,
// not a guess; claims on other pools are not this node's.
func TestDynamicMIGSupplyClaims(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: dmNode}}
	rep := fixture.Report(dmNode, fixture.MIGGPU(0, h200), fixture.MIGGPU(1, h200))
	other := dmClaim("elsewhere", "gpu-0-mig-1g18gb-0-0", "q")
	other.Status.Allocation.Devices.Results[0].Pool = "other-node"
	claims := []resourcev1.ResourceClaim{dmClaim("whole", "gpu-1", "w"), dmClaim("ghost", "gpu-7-mig-1g18gb-0-0", "g"), other,
		dmClaim("ampere", "gpu-2", "a")}
	rep.Status.GPUs = append(rep.Status.GPUs, fixture.WholeGPU(2, h200))
	resourceSlices := dynamicMIGSlices(t, "GPU-0000", "GPU-0001")
	// A GPU the driver serves whole, without counters (an Ampere with MIG off): its claim holds
	// every slice all the same.
	resourceSlices[1].Spec.Devices = append(resourceSlices[1].Spec.Devices, resourcev1.Device{Name: "gpu-2",
		Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"type": {StringValue: ptr.To("gpu")}, "uuid": {StringValue: ptr.To("GPU-0002")}}})
	n := inventory.DynamicMIGSupply(node, &rep, claims, resourceSlices)
	if got := strings.Join(n.Notes, "; "); got != "ResourceClaim team/ghost holds device gpu-7-mig-1g18gb-0-0, which the driver's slices for the node do not list" {
		t.Errorf("notes %q", got)
	}
	if f := n.Fit("1g.18gb"); f[0].Kind != inventory.FitFree || f[1].Kind != inventory.FitNoRoom {
		t.Errorf("GPU 0 is free and GPU 1 held whole: got %s, %s", f[0].Kind, f[1].Kind)
	}
	if h := n.GPUs[1].Holders; len(h) != 1 || h[0].Claim != "team/whole" || h[0].Placement != (mig.Placement{Start: 0, Size: 8}) {
		t.Errorf("GPU 1 holders %+v", h)
	}
	if h := n.GPUs[2].Holders; len(h) != 1 || h[0].Claim != "team/ampere" || h[0].Placement != (mig.Placement{Start: 0, Size: 8}) ||
		n.GPUs[2].FreeSlices() != 0 {
		t.Errorf("GPU 2 holders %+v, map %v", h, n.GPUs[2].Slices)
	}
}

// Property: on random GPUs the driver's first-fit could have left, Fit agrees with brute force
// over the profile's allowed placements and a slice array kept here: it fits at the lowest
// free placement, else it is stranded exactly when enough slices are free in count.
func TestDynamicMIGFitMatchesBruteForce(t *testing.T) {
	p := h200Product(t)
	var plain []mig.Profile // +me profiles are limited by engines, which brute force over slices does not see
	for _, pr := range p.Profiles {
		if pr.Media == mig.MediaShare {
			plain = append(plain, pr)
		}
	}
	rng := rand.New(rand.NewPCG(38, 933))
	for iter := range 400 {
		var taken [8]bool
		var allocated []held
		for range rng.IntN(8) {
			pr := plain[rng.IntN(len(plain))]
			pl := pr.Placements[rng.IntN(len(pr.Placements))]
			free := true
			for s := pl.Start; s < pl.Start+pl.Size; s++ {
				free = free && !taken[s]
			}
			if !free {
				continue
			}
			for s := pl.Start; s < pl.Start+pl.Size; s++ {
				taken[s] = true
			}
			allocated = append(allocated, held{pr.Name, pl.Start, rng.IntN(4) > 0})
		}
		n := dmSupply(t, allocated)
		freeCount := 0
		for _, x := range taken {
			if !x {
				freeCount++
			}
		}
		for _, pr := range plain {
			var first *mig.Placement
			for _, pl := range pr.Placements {
				ok := true
				for s := pl.Start; s < pl.Start+pl.Size; s++ {
					ok = ok && !taken[s]
				}
				if ok {
					first = &pl
					break
				}
			}
			want := inventory.FitNoRoom
			switch {
			case first != nil:
				want = inventory.FitFree
			case freeCount >= pr.MemorySlices:
				want = inventory.FitStranded
			}
			f := n.Fit(pr.Name)[0]
			if f.Kind != want || (first != nil && f.At != *first) || f.FreeSlices != freeCount {
				t.Fatalf("iteration %d, %v: Fit(%s) = %s at %v with %d free (%s); brute force says %s at %v with %d free",
					iter, allocated, pr.Name, f.Kind, f.At, f.FreeSlices, f.Reason, want, first, freeCount)
			}
		}
	}
}
