package inventory_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/inventory"
)

// draDevice is one device of a ResourceSlice as NVIDIA's DRA driver publishes it: a MIG
// device with its instance's and its GPU's UUIDs, or a whole GPU (parent "").
type draDevice struct{ name, uuid, parent string }

// poolSlice is node-a's ResourceSlice of generation gen, named after it (several generations
// coexist while the driver replaces its pool).
func poolSlice(gen int64, devices ...draDevice) resourcev1.ResourceSlice {
	s := resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a-gpu.nvidia.com-" + string(rune('a'+gen))},
		Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.nvidia.com", NodeName: ptr.To(nodeA),
			Pool: resourcev1.ResourcePool{Name: nodeA, Generation: gen, ResourceSliceCount: 1}},
	}
	for _, d := range devices {
		attrs := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type": {StringValue: ptr.To("gpu")}, "uuid": {StringValue: ptr.To(d.uuid)}}
		if d.parent != "" {
			attrs["type"] = resourcev1.DeviceAttribute{StringValue: ptr.To("mig")}
			attrs["parentUUID"] = resourcev1.DeviceAttribute{StringValue: ptr.To(d.parent)}
		}
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: d.name, Attributes: attrs})
	}
	return s
}

// Slices of an older generation linger while NVIDIA's DRA driver replaces its pool, and the
// scheduler allocates only from the newest (k8s.io/dynamic-resource-allocation
// structured/internal/stable/pools_stable.go). What exists is the newest generation; what a
// claim holds is never lost: its device counts as held under every UUID a generation gives its
// name, and a held device the agent does not report on a GPU keeps that GPU as it is.
func TestDRASliceGenerations(t *testing.T) {
	const gpu0 = "GPU-0000" // fixture.MIGGPU's UUID for GPU 0
	// GPU 0 was re-carved from one 7g into 1g instances; the agent reports the 1g ones.
	oneG := fixture.MIGGPU(0, h100, fixture.Instance("1g.10gb", 0, 1), fixture.Instance("1g.10gb", 1, 1))
	old := poolSlice(1,
		draDevice{"gpu-0-mig-1g10gb-19-0", "MIG-before-recarve", gpu0},
		draDevice{"gpu-0-mig-7g80gb-0-0", "MIG-7g.80gb-0", gpu0})
	current := poolSlice(2,
		draDevice{"gpu-0-mig-1g10gb-19-0", "MIG-1g.10gb-0", gpu0},
		draDevice{"gpu-0-mig-1g10gb-19-1", "MIG-1g.10gb-1", gpu0})
	trainer := fixture.Pod("team/trainer", fixture.Running(nodeA), fixture.Requests("cpu", "1"))
	build := func(gpus []v1alpha1.GPUStatus, claims []resourcev1.ResourceClaim, slices ...resourcev1.ResourceSlice) *inventory.Node {
		t.Helper()
		return inventory.Build([]corev1.Node{fixture.GPUHost(nodeA, h100Label, nil)},
			[]v1alpha1.GPUNode{report(nodeA, gpus)}, []*corev1.Pod{&trainer}, nil,
			inventory.Options{Now: now, DeviceHolders: inventory.DRAHolders(claims, slices), DRAPublished: inventory.DRAPublished(slices)}).Nodes[0]
	}

	for _, tc := range []struct {
		name   string
		gpus   []v1alpha1.GPUStatus
		claim  resourcev1.ResourceClaim
		slices []resourcev1.ResourceSlice
		// busy are the instances (by start) the claim must hold; held is a part of the GPU's
		// DRAHeld, "" when it must have none.
		busy []int
		held string
	}{
		{name: "a name in both generations, the newest listed first",
			gpus: []v1alpha1.GPUStatus{oneG}, claim: allocated("c", "gpu.nvidia.com", "gpu-0-mig-1g10gb-19-0", "trainer"),
			slices: []resourcev1.ResourceSlice{current, old}, busy: []int{0}},
		{name: "a name in both generations, the oldest listed last",
			gpus: []v1alpha1.GPUStatus{oneG}, claim: allocated("c", "gpu.nvidia.com", "gpu-0-mig-1g10gb-19-0", "trainer"),
			slices: []resourcev1.ResourceSlice{old, current}, busy: []int{0}},
		{name: "a device only an older generation lists keeps its GPU busy",
			gpus: []v1alpha1.GPUStatus{oneG}, claim: allocated("c", "gpu.nvidia.com", "gpu-0-mig-7g80gb-0-0", "trainer"),
			slices: []resourcev1.ResourceSlice{current, old}, held: "ResourceClaim team/c holds device MIG-7g.80gb-0, which the agent does not report"},
		{name: "a whole GPU allocated before its pod started",
			gpus:  []v1alpha1.GPUStatus{fixture.WholeGPU(0, h100)},
			claim: allocated("c", "gpu.nvidia.com", "gpu-0", ""), slices: []resourcev1.ResourceSlice{poolSlice(1, draDevice{"gpu-0", gpu0, ""})},
			held: "ResourceClaim team/c holds the whole GPU and its pod has not started"},
		{name: "a whole GPU its pod holds is the pod's, nothing more",
			gpus:  []v1alpha1.GPUStatus{fixture.WholeGPU(0, h100)},
			claim: allocated("c", "gpu.nvidia.com", "gpu-0", "trainer"), slices: []resourcev1.ResourceSlice{poolSlice(1, draDevice{"gpu-0", gpu0, ""})}},
		{name: "an instance the agent reports, in the newest generation only",
			gpus: []v1alpha1.GPUStatus{oneG}, claim: allocated("c", "gpu.nvidia.com", "gpu-0-mig-1g10gb-19-1", "trainer"),
			slices: []resourcev1.ResourceSlice{old, current}, busy: []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := build(tc.gpus, []resourcev1.ResourceClaim{tc.claim}, tc.slices...).GPUs[0]
			for _, in := range g.Instances {
				want := slices.Contains(tc.busy, in.Placement.Start)
				if in.Busy != want {
					t.Errorf("instance %s@%d busy %t, want %t", in.Profile, in.Placement.Start, in.Busy, want)
				}
			}
			switch {
			case tc.held == "" && g.DRAHeld != "":
				t.Errorf("DRAHeld %q, want none", g.DRAHeld)
			case tc.held != "" && !strings.Contains(g.DRAHeld, tc.held):
				t.Errorf("DRAHeld %q, want it to say %q", g.DRAHeld, tc.held)
			case tc.held != "" && !g.Busy():
				t.Errorf("a GPU a claim holds is not busy")
			}
		})
	}

	// What the driver publishes is its newest generation: the lingering slice's instances are
	// not "listed but gone", which would hold a verified step waiting for the driver.
	for _, order := range [][]resourcev1.ResourceSlice{{old, current}, {current, old}} {
		if n := build([]v1alpha1.GPUStatus{oneG}, nil, order...); n.DRAStale != "" || !n.DRA {
			t.Errorf("slices of generations %d, %d: DRAStale %q, DRA %t; want the newest to agree with the report",
				order[0].Spec.Pool.Generation, order[1].Spec.Pool.Generation, n.DRAStale, n.DRA)
		}
	}
	// The newest generation is judged per pool: another node's older pool is its own newest.
	other := poolSlice(1, draDevice{"gpu-0-mig-1g10gb-19-0", "MIG-other", "GPU-other"})
	other.Spec.Pool.Name = "node-b"
	if got := inventory.DRAPublished([]resourcev1.ResourceSlice{current, other}); !got["node-b"]["MIG-other"] || got[nodeA]["MIG-other"] {
		t.Errorf("DRAPublished = %v, want node-b's generation 1 kept beside node-a's generation 2", got)
	}
}

// A ResourceClaim may be reserved for several pods (status.reservedFor), and each of them uses
// its device: every one holds the GPU and none is moved, not only the first.
func TestSharedClaimHasEveryConsumerAsHolder(t *testing.T) {
	const gpu0 = "GPU-0000"
	slice := poolSlice(1, draDevice{"gpu-0-mig-1g10gb-19-0", "MIG-1g.10gb-0", gpu0}, draDevice{"gpu-1", "GPU-0001", ""})
	consumers := func(c resourcev1.ResourceClaim, names ...string) resourcev1.ResourceClaim {
		c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{
			// Not a pod: holds the device for nobody gpupool could evict.
			{APIGroup: "example.com", Resource: "jobsets", Name: "not-a-pod"}}
		for _, n := range names {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: n})
		}
		return c
	}
	claims := []resourcev1.ResourceClaim{
		consumers(allocated("mig", "gpu.nvidia.com", "gpu-0-mig-1g10gb-19-0", ""), "reader-b", "reader-a"),
		consumers(allocated("whole", "gpu.nvidia.com", "gpu-1", ""), "trainer-a", "trainer-b"),
	}
	var pods []*corev1.Pod
	for _, name := range []string{"reader-a", "reader-b", "trainer-a", "trainer-b"} {
		p := fixture.Pod("team/"+name, fixture.Running(nodeA), fixture.Requests("cpu", "1"))
		pods = append(pods, &p)
	}
	gpus := []v1alpha1.GPUStatus{fixture.MIGGPU(0, h100, fixture.Instance("1g.10gb", 0, 1)), fixture.WholeGPU(1, h100)}
	gpus[1].UUID = "GPU-0001"
	n := inventory.Build([]corev1.Node{fixture.GPUHost(nodeA, h100Label, nil)},
		[]v1alpha1.GPUNode{report(nodeA, gpus)}, pods, nil,
		inventory.Options{Now: now, DeviceHolders: inventory.DRAHolders(claims, []resourcev1.ResourceSlice{slice})}).Nodes[0]
	for i, want := range [][]string{{"team/reader-a", "team/reader-b"}, {"team/trainer-a", "team/trainer-b"}} {
		if got := keys(n.GPUs[i].Pods); !slices.Equal(got, want) {
			t.Errorf("GPU %d pods %v, want every pod of its claim %v", i, got, want)
		}
		for _, key := range want {
			if p := podOf(t, n, key); p.Evictable || !strings.Contains(p.Blocker, "DRA driver allocated") {
				t.Errorf("%s: evictable %t, blocker %q; want it kept, as its claim's other pods", key, p.Evictable, p.Blocker)
			}
		}
	}
	if in := n.GPUs[0].Instances[0]; !in.Busy || in.Pod == nil {
		t.Errorf("the shared instance %+v, want busy and held", in)
	}
	if n.Blocker != "" || n.GPUs[0].DRAHeld != "" || n.GPUs[1].DRAHeld != "" {
		t.Errorf("node blocker %q, DRAHeld %q, %q; want the holders named, nothing else", n.Blocker, n.GPUs[0].DRAHeld, n.GPUs[1].DRAHeld)
	}
}
