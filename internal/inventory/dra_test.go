package inventory_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/inventory"
)

// draSlice is node-a's ResourceSlice as NVIDIA's DRA driver publishes it: one device per MIG
// instance, named by slot, with the instance's UUID as an attribute.
func draSlice(driver string, devices map[string]string) resourcev1.ResourceSlice {
	s := resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a-gpu.nvidia.com-x7k2q"},
		Spec: resourcev1.ResourceSliceSpec{Driver: driver, Pool: resourcev1.ResourcePool{Name: nodeA, ResourceSliceCount: 1},
			NodeName: ptr.To(nodeA)},
	}
	for name, uuid := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type": {StringValue: ptr.To("mig")}, "uuid": {StringValue: ptr.To(uuid)}}})
	}
	return s
}

// allocated is a claim the scheduler allocated device on node-a's pool, reserved for pod ("" for none yet).
func allocated(name, driver, device, pod string) resourcev1.ResourceClaim {
	c := resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}}
	c.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: driver, Pool: nodeA, Device: device}}}}
	if pod != "" {
		c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pod, UID: types.UID("uid-" + pod)}}
	}
	return c
}

// An instance NVIDIA's DRA driver allocated to a claim is busy and held by the claim's pod, as
// an instance the device plugin gave a pod is: the agent's PodResources attribution does not
// see DRA devices, and without this the planner would re-carve it under the pod.
func TestDRAAllocatedInstancesAreHeld(t *testing.T) {
	gpu := fixture.MIGGPU(0, h100, fixture.Instance("1g.10gb", 0, 1), fixture.Instance("1g.10gb", 1, 1), fixture.Instance("1g.10gb", 2, 1))
	slice := draSlice("gpu.nvidia.com", map[string]string{
		"gpu-0-mig-1g10gb-19-0": "MIG-1g.10gb-0", "gpu-0-mig-1g10gb-19-1": "MIG-1g.10gb-1", "gpu-0-mig-1g10gb-19-2": "MIG-1g.10gb-2"})
	claims := []resourcev1.ResourceClaim{
		allocated("held", "gpu.nvidia.com", "gpu-0-mig-1g10gb-19-0", "trainer"),
		allocated("no-pod-yet", "gpu.nvidia.com", "gpu-0-mig-1g10gb-19-1", ""),
		allocated("other-driver", "nic.example.com", "gpu-0-mig-1g10gb-19-2", "nic-user"),
	}
	trainerPod := fixture.Pod("team/trainer", fixture.Running(nodeA), fixture.Requests("cpu", "1"))
	snap := inventory.Build([]corev1.Node{fixture.GPUHost(nodeA, h100Label, nil)},
		[]v1alpha1.GPUNode{report(nodeA, []v1alpha1.GPUStatus{gpu})}, []*corev1.Pod{&trainerPod}, nil,
		inventory.Options{Now: now, DeviceHolders: inventory.DRAHolders(claims, []resourcev1.ResourceSlice{slice})})
	// Its claim, not its requests, says what the pod needs: the planner could not re-land it.
	if p := podOf(t, snap.Nodes[0], "team/trainer"); p.Evictable || !strings.Contains(p.Blocker, "DRA driver allocated") {
		t.Errorf("the claim's pod: evictable %v, blocker %q; want it kept where it runs", p.Evictable, p.Blocker)
	}
	g := snap.Nodes[0].GPUs[0]
	trainer := types.NamespacedName{Namespace: "team", Name: "trainer"}
	if in := g.Instances[0]; !in.Busy || in.Pod == nil || *in.Pod != trainer {
		t.Errorf("instance 0 = %+v, want busy and held by %s", in, trainer)
	}
	if in := g.Instances[1]; !in.Busy || in.Pod != nil {
		t.Errorf("instance 1 = %+v, want busy with no pod yet", in)
	}
	if in := g.Instances[2]; in.Busy || in.Pod != nil {
		t.Errorf("instance 2 = %+v, want idle: another driver's result does not name it", in)
	}
	if len(g.Pods) != 1 || g.Pods[0] != trainer {
		t.Errorf("GPU pods %v, want [%s]", g.Pods, trainer)
	}
	if got := g.FreeInstances(); got["1g.10gb"] != 1 {
		t.Errorf("free instances %v, want one 1g.10gb", got)
	}
	// Another driver's slice, or an unallocated claim, holds nothing.
	other := draSlice("nic.example.com", map[string]string{"gpu-0-mig-1g10gb-19-0": "MIG-1g.10gb-0"})
	unallocated := resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "pending"}}
	if h := inventory.DRAHolders([]resourcev1.ResourceClaim{claims[0], unallocated}, []resourcev1.ResourceSlice{other}); len(h) != 0 {
		t.Errorf("holders %v from another driver's slice", h)
	}
}

// A node where NVIDIA's DRA driver runs DynamicMIG is never planned: the driver would destroy
// a layout gpupool carved there. It is known by what only that mode publishes, partitionable
// devices consuming shared counters, in a slice of its own or a counters-only slice.
func TestDynamicMIGNodesAreLeftAlone(t *testing.T) {
	static := draSlice("gpu.nvidia.com", map[string]string{"gpu-0-mig-1g10gb-19-0": "MIG-1g.10gb-0"})
	partitionable := draSlice("gpu.nvidia.com", map[string]string{"gpu-0-mig-1g10gb-19-0": ""})
	partitionable.Spec.Devices[0].ConsumesCounters = []resourcev1.DeviceCounterConsumption{{CounterSet: "gpu-0-counter-set",
		Counters: map[string]resourcev1.Counter{"memory-slice-0": {}}}}
	countersOnly := resourcev1.ResourceSlice{Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.nvidia.com",
		Pool:           resourcev1.ResourcePool{Name: "node-b"},
		SharedCounters: []resourcev1.CounterSet{{Name: "gpu-0-counter-set", Counters: map[string]resourcev1.Counter{"memory-slice-0": {}}}}}}
	otherDriver := partitionable.DeepCopy()
	otherDriver.Spec.Driver, otherDriver.Spec.Pool.Name, otherDriver.Spec.NodeName = "other.example.com", "node-c", ptr.To("node-c")
	for _, tc := range []struct {
		name   string
		slices []resourcev1.ResourceSlice
		want   []string
	}{
		{"static MIG", []resourcev1.ResourceSlice{static}, nil},
		{"partitionable devices", []resourcev1.ResourceSlice{partitionable}, []string{nodeA}},
		{"a counters-only slice names the node by its pool", []resourcev1.ResourceSlice{countersOnly}, []string{"node-b"}},
		{"another driver's partitions", []resourcev1.ResourceSlice{*otherDriver}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := inventory.DynamicMIGNodes(tc.slices)
			if len(got) != len(tc.want) {
				t.Fatalf("DynamicMIGNodes = %v, want %v", got, tc.want)
			}
			for _, n := range tc.want {
				if !got[n] {
					t.Errorf("DynamicMIGNodes = %v, want %v", got, tc.want)
				}
			}
		})
	}
	snap := inventory.Build([]corev1.Node{fixture.GPUHost(nodeA, h100Label, nil)},
		[]v1alpha1.GPUNode{report(nodeA, []v1alpha1.GPUStatus{fixture.MIGGPU(0, h100, fixture.Instance("7g.80gb", 0, 8))})}, nil, nil,
		inventory.Options{Now: now, DynamicMIGNodes: inventory.DynamicMIGNodes([]resourcev1.ResourceSlice{partitionable})})
	if b := snap.Nodes[0].Blocker; !strings.Contains(b, "DynamicMIG") || snap.Nodes[0].Unreported {
		t.Errorf("node blocker %q (unreported %t), want DynamicMIG named and the node still counted as reporting", b, snap.Nodes[0].Unreported)
	}
}

// After a re-carve NVIDIA's DRA driver keeps publishing the old instances until its kubelet
// plugin restarts; the node says so, counting both ways.
func TestDRAStaleSlices(t *testing.T) {
	gpu := fixture.MIGGPU(0, h100, fixture.Instance("3g.40gb", 0, 4), fixture.Instance("3g.40gb", 4, 4))
	build := func(slices ...resourcev1.ResourceSlice) *inventory.Node {
		return inventory.Build([]corev1.Node{fixture.GPUHost(nodeA, h100Label, nil)},
			[]v1alpha1.GPUNode{report(nodeA, []v1alpha1.GPUStatus{gpu})}, nil, nil,
			inventory.Options{Now: now, DRAPublished: inventory.DRAPublished(slices)}).Nodes[0]
	}
	current := draSlice("gpu.nvidia.com", map[string]string{"gpu-0-mig-3g40gb-2-0": "MIG-3g.40gb-0", "gpu-0-mig-3g40gb-2-4": "MIG-3g.40gb-4"})
	stale := draSlice("gpu.nvidia.com", map[string]string{"gpu-0-mig-1g10gb-19-0": "MIG-1g.10gb-0", "gpu-0-mig-1g10gb-19-1": "MIG-1g.10gb-1",
		"gpu-0-mig-1g10gb-19-2": "MIG-1g.10gb-2"})
	if n := build(current); n.DRAStale != "" || !n.DRA {
		t.Errorf("current slices: DRAStale %q, DRA %v; want agreement on a node the driver serves", n.DRAStale, n.DRA)
	}
	if n := build(); n.DRAStale != "" || n.DRA {
		t.Errorf("no DRA driver: DRAStale %q, DRA %v", n.DRAStale, n.DRA)
	}
	if n, want := build(stale), "its DRA ResourceSlices miss 2 of the MIG instances NVML reports and list 3 it does not"; n.DRAStale != want {
		t.Errorf("stale slices: DRAStale %q, want %q", n.DRAStale, want)
	}
}
