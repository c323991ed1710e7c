package sim

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
)

func newTestNode(t *testing.T, model string, gpus int, preset string) *Node {
	t.Helper()
	n, err := NewNode(NodeSpec{Name: "node-a", Model: model, GPUs: gpus, InitialConfig: preset})
	if err != nil {
		t.Fatalf("NewNode: %v", err)
	}
	return n
}

func mustGPUs(t *testing.T, n *Node) []GPUState {
	t.Helper()
	g, err := n.GPUs()
	if err != nil {
		t.Fatalf("GPUs: %v", err)
	}
	return g
}

func uuids(g GPUState) []string {
	var out []string
	for _, in := range g.Instances {
		out = append(out, in.UUID)
	}
	return out
}

// The profile table the simulator reads from the corrected H200 mock is the one the pure slot
// tests use, so those tests describe the placements the simulator really makes.
func TestH200ProfileTableFromNVML(t *testing.T) {
	n := newTestNode(t, "h200", 1, PresetAllDisabled)
	got := n.slotProfiles(0)
	slices.SortFunc(got, func(a, b SlotProfile) int {
		return slices.Index(names(h200Slots), a.Name) - slices.Index(names(h200Slots), b.Name)
	})
	if !reflect.DeepEqual(got, h200Slots) {
		t.Errorf("H200 profiles from NVML:\n%+v\nwant\n%+v", got, h200Slots)
	}
}

func names(ps []SlotProfile) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

// Reconfiguring one GPU through NVML changes only that GPU: the other keeps its instances and
// their MIG device UUIDs, which is what keeps pods on unchanged GPUs running.
func TestApplyGPUChangesOnlyThatGPU(t *testing.T) {
	n := newTestNode(t, "h200", 2, PresetAll1g)
	before := mustGPUs(t, n)
	if err := n.applyGPU(0, gpuTarget{MIGEnabled: true, Layout: mig.Layout{"3g.71gb": 1, "1g.18gb": 4}}); err != nil {
		t.Fatal(err)
	}
	after := mustGPUs(t, n)
	want := []InstanceState{{Profile: "1g.18gb", Start: 0, Size: 1}, {Profile: "1g.18gb", Start: 1, Size: 1},
		{Profile: "1g.18gb", Start: 2, Size: 1}, {Profile: "1g.18gb", Start: 3, Size: 1}, {Profile: "3g.71gb", Start: 4, Size: 4}}
	got := slices.Clone(after[0].Instances)
	for i := range got {
		if got[i].UUID == "" {
			t.Errorf("instance %d has no MIG device UUID", i)
		}
		got[i].UUID = ""
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GPU 0 after apply: %+v, want %+v", got, want)
	}
	if slices.ContainsFunc(uuids(after[0]), func(u string) bool { return slices.Contains(uuids(before[0]), u) }) {
		t.Error("recreated instances kept old MIG device UUIDs")
	}
	if !reflect.DeepEqual(after[1], before[1]) {
		t.Errorf("GPU 1 changed: %+v -> %+v", before[1], after[1])
	}
	if err := n.applyGPU(1, gpuTarget{}); err != nil {
		t.Fatal(err)
	}
	if g := mustGPUs(t, n)[1]; g.MIGEnabled || len(g.Instances) != 0 {
		t.Errorf("GPU 1 after disabling MIG: %+v", g)
	}
	// A layout that cannot exist is refused before anything is destroyed.
	if err := n.applyGPU(0, gpuTarget{MIGEnabled: true, Layout: mig.Layout{"7g.141gb": 2}}); err == nil {
		t.Error("applying two 7g instances succeeded")
	}
	if g := mustGPUs(t, n)[0]; !reflect.DeepEqual(g, after[0]) {
		t.Errorf("refused layout changed GPU 0: %+v", g)
	}
}

// An entry's specs resolve per GPU as mig-parted reads them: device filters select models by
// PCI device and vendor ID, index lists select GPUs, later specs override earlier ones, GPUs not
// selected are absent (left alone), an index the node does not have selects nothing, counts of
// 0 create nothing, and an impossible layout makes the whole entry invalid.
func TestResolveEntry(t *testing.T) {
	n := newTestNode(t, "h200", 3, PresetAll1g)
	specs := mustEntry(t, `
version: v1
mig-configs:
  e:
    - device-filter: ["0x20B210DE"] # A100-80GB only
      devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - device-filter: "0x233510de"
      devices: all
      mig-enabled: true
      mig-devices: {"7g.141gb": 1, "1g.18gb": 0}
    - devices: [1, 7]
      mig-enabled: false
`, "e")
	got, err := n.resolveEntry(specs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]gpuTarget{
		0: {MIGEnabled: true, Layout: mig.Layout{"7g.141gb": 1}},
		1: {MIGEnabled: false, Layout: mig.Layout{}},
		2: {MIGEnabled: true, Layout: mig.Layout{"7g.141gb": 1}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("resolveEntry = %+v, want %+v", got, want)
	}
	partial, err := n.resolveEntry(mustEntry(t, "version: v1\nmig-configs:\n  e:\n  - {devices: [2, 3], mig-enabled: true, mig-devices: {}}\n", "e"))
	if err != nil || !slices.Equal(slices.Collect(maps.Keys(partial)), []int{2}) {
		t.Errorf("resolveEntry of one GPU = %+v, %v; want only GPU 2", partial, err)
	}
	for _, bad := range []string{
		`{devices: all, mig-enabled: true, mig-devices: {"4g.71gb": 1, "3g.71gb": 1, "1g.18gb": 1}}`,
		`{devices: all, mig-enabled: true, mig-devices: {"1g.10gb": 1}}`,
	} {
		if got, err := n.resolveEntry(mustEntry(t, "version: v1\nmig-configs:\n  e:\n  - "+bad+"\n", "e")); err == nil {
			t.Errorf("resolveEntry(%s) = %+v, want an error", bad, got)
		}
	}
}

// mig-parted's assert: an entry is already applied when it selects every GPU and each is as
// the last spec selecting it says.
func TestAlreadyApplied(t *testing.T) {
	n := newTestNode(t, "h200", 2, PresetAll1g)
	gpus := mustGPUs(t, n)
	for _, tc := range []struct {
		entry string
		want  bool
	}{
		{`[{devices: all, mig-enabled: true, mig-devices: {"1g.18gb": 7}}]`, true},
		{`[{devices: all, device-filter: "0x233510DE", mig-enabled: true, mig-devices: {"1g.18gb": 7}}]`, true},
		{`[{devices: all, device-filter: "0x233310DE", mig-enabled: true, mig-devices: {"1g.18gb": 7}}]`, false}, // selects no GPU
		{`[{devices: [0], mig-enabled: true, mig-devices: {"1g.18gb": 7}}]`, false},                              // GPU 1 not selected
		{`[{devices: all, mig-enabled: false}, {devices: all, mig-enabled: true, mig-devices: {"1g.18gb": 7}}]`, true},
		{`[{devices: all, mig-enabled: true, mig-devices: {"1g.18gb": 6}}]`, false},
		{`[{devices: all, mig-enabled: false}]`, false},
	} {
		specs := mustEntry(t, "version: v1\nmig-configs:\n  e: "+tc.entry+"\n", "e")
		if got := n.alreadyApplied(specs, gpus); got != tc.want {
			t.Errorf("alreadyApplied(%s) = %t, want %t", tc.entry, got, tc.want)
		}
	}
}

// mustEntry decodes a mig-parted file written by hand and selects one entry.
func mustEntry(t *testing.T, file, name string) []migConfigSpec {
	t.Helper()
	f, err := decodeMIGParted([]byte(file))
	if err != nil {
		t.Fatalf("decodeMIGParted: %v", err)
	}
	specs, err := f.selectMIGConfig(name)
	if err != nil {
		t.Fatal(err)
	}
	return specs
}

func gpuPod(name string, node string, res corev1.ResourceName, n int64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name:      "c",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{res: *resource.NewQuantity(n, resource.DecimalSI)}},
		}}},
	}
}

// A pod's device request: containers add up, init containers count by their largest, limits
// are read before requests, non-device resources are ignored.
func TestPodDeviceRequests(t *testing.T) {
	q := func(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": q(3)}}}},
		Containers: []corev1.Container{
			{Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{"nvidia.com/gpu": q(1), "cpu": q(4)},
				Requests: corev1.ResourceList{"nvidia.com/gpu": q(1)},
			}},
			{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": q(1), "nvidia.com/mig-1g.18gb": q(2)}}},
		},
	}}
	want := map[corev1.ResourceName]int64{"nvidia.com/gpu": 3, "nvidia.com/mig-1g.18gb": 2}
	if got := podDeviceRequests(pod); !reflect.DeepEqual(got, want) {
		t.Errorf("podDeviceRequests = %v, want %v", got, want)
	}
}

// Device assignment: pods get free devices in a fixed order, keep them across syncs, never
// share one, release them when gone or terminated, and a pod that asks for more than is free
// gets nothing (no partial assignment) and is reported for retry.
func TestSyncAssignments(t *testing.T) {
	n := newTestNode(t, "h200", 2, PresetAll1g)
	if err := n.applyGPU(1, gpuTarget{}); err != nil {
		t.Fatal(err)
	}
	gpus := mustGPUs(t, n)
	a := gpuPod("a", "node-a", "nvidia.com/mig-1g.18gb", 2)
	b := gpuPod("b", "node-a", "nvidia.com/gpu", 1)
	big := gpuPod("big", "node-a", "nvidia.com/mig-1g.18gb", 6)
	cpuOnly := gpuPod("cpu", "node-a", "cpu", 1)

	n.mu.Lock()
	defer n.mu.Unlock()
	starved := n.syncAssignmentsLocked([]*corev1.Pod{a, b, big, cpuOnly}, gpus)
	if want := []types.NamespacedName{{Namespace: "ns", Name: "big"}}; !reflect.DeepEqual(starved, want) {
		t.Errorf("starved = %v, want %v", starved, want)
	}
	keyA, keyB := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	wantA := []device{
		{resource: "nvidia.com/mig-1g.18gb", id: gpus[0].Instances[0].UUID, gpu: 0, mig: true},
		{resource: "nvidia.com/mig-1g.18gb", id: gpus[0].Instances[1].UUID, gpu: 0, mig: true},
	}
	if got := n.assigned[keyA]; !reflect.DeepEqual(got, wantA) {
		t.Errorf("pod a got %+v, want %+v", got, wantA)
	}
	if got := n.assigned[keyB]; len(got) != 1 || got[0].id != gpus[1].UUID {
		t.Errorf("pod b got %+v, want GPU 1 (%s)", got, gpus[1].UUID)
	}
	if len(n.assigned) != 2 {
		t.Errorf("assigned %d pods, want 2 (a and b): %+v", len(n.assigned), n.assigned)
	}
	if got := n.podsOnGPUsLocked(map[int]bool{0: true}); !reflect.DeepEqual(got, []types.NamespacedName{keyA}) {
		t.Errorf("pods on GPU 0 = %v", got)
	}

	// A new pod arriving first in name order does not take a's devices.
	early := gpuPod("0-early", "node-a", "nvidia.com/mig-1g.18gb", 1)
	n.syncAssignmentsLocked([]*corev1.Pod{early, a, b}, gpus)
	if got := n.assigned[keyA]; !reflect.DeepEqual(got, wantA) {
		t.Errorf("pod a's devices moved to %+v", got)
	}
	if got := n.assigned[types.NamespacedName{Namespace: "ns", Name: "0-early"}]; len(got) != 1 || got[0].id != gpus[0].Instances[2].UUID {
		t.Errorf("pod 0-early got %+v, want the third 1g device", got)
	}

	// a terminates, b is deleted: both release.
	a.Status.Phase = corev1.PodSucceeded
	n.syncAssignmentsLocked([]*corev1.Pod{early, a}, gpus)
	if _, ok := n.assigned[keyA]; ok {
		t.Error("terminated pod a kept its devices")
	}
	if _, ok := n.assigned[keyB]; ok {
		t.Error("deleted pod b kept its GPU")
	}
	owners := n.ownersLocked()
	if len(owners) != 1 || owners[gpus[0].Instances[2].UUID][0].Name != "0-early" {
		t.Errorf("owners = %v, want only 0-early's device", owners)
	}
}

// Shared replicas: a pod asking for nvidia.com/gpu.shared gets replicas named <GPU-UUID>::<n>,
// spread over the GPUs least shared so far; replicas of one GPU go to different pods; the
// agent's owners view lists each pod on its GPU's UUID (once, however many replicas it
// holds); and a pod keeps its replicas when the sharing setting changes under it, while the
// new setting's replicas are handed out beside them.
func TestSyncAssignmentsSharedReplicas(t *testing.T) {
	n := newTestNode(t, "a100-80gb", 2, PresetAllDisabled)
	gpus := mustGPUs(t, n)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.plugin = mustRun(t, timeSlicing(2, "nvidia.com/gpu"))
	a := gpuPod("a", "node-a", "nvidia.com/gpu.shared", 1)
	b := gpuPod("b", "node-a", "nvidia.com/gpu.shared", 2)
	c := gpuPod("c", "node-a", "nvidia.com/gpu.shared", 1)
	big := gpuPod("d-big", "node-a", "nvidia.com/gpu.shared", 1)
	starved := n.syncAssignmentsLocked([]*corev1.Pod{a, b, c, big}, gpus)
	ids := func(name string) []string {
		var out []string
		for _, d := range n.assigned[types.NamespacedName{Namespace: "ns", Name: name}] {
			out = append(out, d.id)
		}
		return out
	}
	g0, g1 := gpus[0].UUID, gpus[1].UUID
	for name, want := range map[string][]string{
		"a": {g0 + "::0"},
		"b": {g1 + "::0", g0 + "::1"},
		"c": {g1 + "::1"},
	} {
		if got := ids(name); !reflect.DeepEqual(got, want) {
			t.Errorf("pod %s got %v, want %v", name, got, want)
		}
	}
	if want := []types.NamespacedName{{Namespace: "ns", Name: "d-big"}}; !reflect.DeepEqual(starved, want) {
		t.Errorf("starved = %v, want %v (4 replicas, all taken)", starved, want)
	}
	ref := func(name string) v1alpha1.PodReference { return v1alpha1.PodReference{Namespace: "ns", Name: name} }
	wantOwners := map[string][]v1alpha1.PodReference{g0: {ref("a"), ref("b")}, g1: {ref("b"), ref("c")}}
	if got := n.ownersLocked(); !reflect.DeepEqual(got, wantOwners) {
		t.Errorf("owners = %v, want %v", got, wantOwners)
	}

	// The plugin restarts with 4 replicas: a, b and c keep what they hold, whose IDs the new
	// setting still counts as taken, and d-big gets the least shared GPU's first free one.
	n.plugin = mustRun(t, timeSlicing(4, "nvidia.com/gpu"))
	if starved := n.syncAssignmentsLocked([]*corev1.Pod{a, b, c, big}, gpus); len(starved) != 0 {
		t.Errorf("starved = %v after the restart with 4 replicas", starved)
	}
	if got, want := ids("d-big"), []string{g0 + "::2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("pod d-big got %v, want %v", got, want)
	}
	if got, want := ids("b"), []string{g1 + "::0", g0 + "::1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("pod b's replicas moved to %v", got)
	}

	// Back to exclusive: the pods keep their replicas while they run, and the whole GPUs are
	// advertised (and handed out) again beside them, as the kubelet knows nothing of sharing.
	n.plugin = ptrTo(exclusiveRun)
	whole := gpuPod("whole", "node-a", "nvidia.com/gpu", 1)
	n.syncAssignmentsLocked([]*corev1.Pod{a, b, c, big, whole}, gpus)
	if got := ids("a"); !reflect.DeepEqual(got, []string{g0 + "::0"}) {
		t.Errorf("pod a lost its replica on the restart: %v", got)
	}
	if got := ids("whole"); !reflect.DeepEqual(got, []string{g0}) {
		t.Errorf("pod whole got %v, want GPU 0", got)
	}
	if got := n.podsOnGPUsLocked(map[int]bool{1: true}); !reflect.DeepEqual(got, []types.NamespacedName{{Namespace: "ns", Name: "b"}, {Namespace: "ns", Name: "c"}}) {
		t.Errorf("pods on GPU 1 = %v, want b and c, whose replicas block a reconfiguration", got)
	}
}

// Time-sliced MIG devices: a pod asking for nvidia.com/mig-<profile>.shared gets replicas named
// <MIG-UUID>::<n> of instances of that profile, least used instance first (GPU, then start, on
// a tie); replicas of one instance go to different pods; the agent's owners view and NVML's
// processes list each pod on its MIG device's UUID; a replica holder blocks mig-manager from
// changing that GPU; and back to exclusive, the pod keeps its replica while the instance is
// advertised (and handed out) as nvidia.com/mig-<profile> again, until the pod ends.
func TestSyncAssignmentsSharedMIGReplicas(t *testing.T) {
	n := newTestNode(t, "h200", 2, PresetAll3g)
	gpus := mustGPUs(t, n)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.plugin = mustRun(t, timeSlicing(2, "nvidia.com/gpu", "nvidia.com/mig-1g.18gb", "nvidia.com/mig-3g.71gb"))
	const res = corev1.ResourceName("nvidia.com/mig-3g.71gb.shared")
	a := gpuPod("a", "node-a", res, 1)
	b := gpuPod("b", "node-a", res, 3)
	c := gpuPod("c", "node-a", res, 4)
	d := gpuPod("d", "node-a", res, 5)
	starved := n.syncAssignmentsLocked([]*corev1.Pod{a, b, c, d}, gpus)
	if want := []types.NamespacedName{{Namespace: "ns", Name: "d"}}; !reflect.DeepEqual(starved, want) {
		t.Errorf("starved = %v, want %v (8 replicas, 8 wanted before d)", starved, want)
	}
	ids := func(name string) []string {
		var out []string
		for _, d := range n.assigned[types.NamespacedName{Namespace: "ns", Name: name}] {
			out = append(out, d.id)
		}
		return out
	}
	m := [][]string{uuids(gpus[0]), uuids(gpus[1])}
	for name, want := range map[string][]string{
		"a": {m[0][0] + "::0"},
		"b": {m[0][1] + "::0", m[1][0] + "::0", m[1][1] + "::0"},
		"c": {m[0][0] + "::1", m[0][1] + "::1", m[1][0] + "::1", m[1][1] + "::1"},
	} {
		if got := ids(name); !reflect.DeepEqual(got, want) {
			t.Errorf("pod %s got %v, want %v", name, got, want)
		}
	}
	for _, dev := range n.assigned[types.NamespacedName{Namespace: "ns", Name: "a"}] {
		if dev.resource != res || dev.gpu != 0 {
			t.Errorf("pod a holds %+v, want a replica of %s on GPU 0", dev, res)
		}
	}
	ref := func(name string) v1alpha1.PodReference { return v1alpha1.PodReference{Namespace: "ns", Name: name} }
	wantOwners := map[string][]v1alpha1.PodReference{
		m[0][0]: {ref("a"), ref("c")}, m[0][1]: {ref("b"), ref("c")},
		m[1][0]: {ref("b"), ref("c")}, m[1][1]: {ref("b"), ref("c")},
	}
	if got := n.ownersLocked(); !reflect.DeepEqual(got, wantOwners) {
		t.Errorf("owners = %v, want %v", got, wantOwners)
	}
	if got := migProcesses(t, n, 0, m[0][0]); got != 2 {
		t.Errorf("NVML lists %d processes on %s, want one per pod (a, c)", got, m[0][0])
	}

	// c ends: its replicas are freed, and a new pod gets the least used instance's.
	c.Status.Phase = corev1.PodSucceeded
	e := gpuPod("e", "node-a", res, 1)
	n.syncAssignmentsLocked([]*corev1.Pod{a, b, c, e}, gpus)
	if got, want := ids("e"), []string{m[0][0] + "::1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("pod e got %v, want %v (the first instance with one holder, c's replica freed)", got, want)
	}

	// Back to exclusive: a, b and e keep their replicas, and the instances are advertised and
	// handed out as nvidia.com/mig-3g.71gb again beside them.
	n.plugin = ptrTo(exclusiveRun)
	excl := gpuPod("excl", "node-a", "nvidia.com/mig-3g.71gb", 1)
	n.syncAssignmentsLocked([]*corev1.Pod{a, b, e, excl}, gpus)
	if got := ids("a"); !reflect.DeepEqual(got, []string{m[0][0] + "::0"}) {
		t.Errorf("pod a lost its replica on the restart: %v", got)
	}
	if got := ids("excl"); !reflect.DeepEqual(got, []string{m[0][0]}) {
		t.Errorf("pod excl got %v, want the first 3g instance", got)
	}
	if got, want := n.podsOnGPUsLocked(map[int]bool{1: true}), []types.NamespacedName{{Namespace: "ns", Name: "b"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("pods on GPU 1 = %v, want %v, whose replicas block a reconfiguration", got, want)
	}

	// The pods end: every replica and every process is released.
	for _, p := range []*corev1.Pod{a, b, e, excl} {
		p.Status.Phase = corev1.PodSucceeded
	}
	n.syncAssignmentsLocked([]*corev1.Pod{a, b, e, excl}, gpus)
	if len(n.assigned) != 0 || len(n.ownersLocked()) != 0 {
		t.Errorf("assigned = %v after every pod ended, want none", n.assigned)
	}
	if got := migProcesses(t, n, 0, m[0][0]); got != 0 {
		t.Errorf("NVML lists %d processes on %s after every pod ended, want none", got, m[0][0])
	}
}

// migProcesses is how many compute processes NVML lists on the MIG device of GPU gpu with
// UUID uuid, read as the node agent reads them.
func migProcesses(t *testing.T, n *Node, gpu int, uuid string) int {
	t.Helper()
	d, err := n.device(gpu)
	if err != nil {
		t.Fatal(err)
	}
	count, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		t.Fatalf("GetMaxMigDeviceCount: %s", ret.Error())
	}
	for k := range count {
		md, ret := d.GetMigDeviceHandleByIndex(k)
		if ret != nvml.SUCCESS {
			continue
		}
		if id, _ := md.GetUUID(); id != uuid {
			continue
		}
		procs, ret := md.GetComputeRunningProcesses()
		if ret != nvml.SUCCESS {
			t.Fatalf("GetComputeRunningProcesses(%s): %s", uuid, ret.Error())
		}
		return len(procs)
	}
	t.Fatalf("GPU %d has no MIG device %s", gpu, uuid)
	return 0
}
