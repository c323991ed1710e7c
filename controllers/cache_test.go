package controllers

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/intern"
	"github.com/gpupool/gpupool/internal/podrecord"
)

// TestPodsEnterTheCacheAsRecords guards the pod informer's transform: a bound pod becomes a
// record of what the planner, the plan's observation and the drain read; an unbound GPU pod
// also keeps its object, slimmed to what pending demand reads.
func TestPodsEnterTheCacheAsRecords(t *testing.T) {
	transform := recordPod(&podrecord.Interner{})
	always := corev1.ContainerRestartPolicyAlways
	full := fixture.Pod("team/train", fixture.Unschedulable(fixture.Now.Add(-time.Hour)), fixture.Requests("cpu", "4", "nvidia.com/mig-1g.18gb", "1"),
		fixture.Annotated("gpupool.io/do-not-disrupt", "true"), fixture.Annotated(corev1.LastAppliedConfigAnnotation, "{...}"))
	full.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	full.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "b"}}
	full.Spec.Containers[0].Command = []string{"python", "train.py"}
	full.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "envoy", RestartPolicy: &always,
		Resources: corev1.ResourceRequirements{Requests: fixture.Resources("cpu", "1")}}}
	full.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	full.Spec.NodeSelector = map[string]string{"gpupool.io/pool": "a"}
	full.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}
	full.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Image: "registry.example/app:1"}}

	out, err := transform(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	r, ok := out.(*podrecord.Record)
	if !ok {
		t.Fatalf("the transform made a %T, want a *podrecord.Record", out)
	}
	if r.Unbound == nil {
		t.Fatal("an unbound GPU pod's record lost the pod that pending demand reads")
	}
	want := full.DeepCopy()
	want.ManagedFields = nil
	delete(want.Annotations, corev1.LastAppliedConfigAnnotation)
	want.Spec.Containers[0] = corev1.Container{Name: "main", Resources: full.Spec.Containers[0].Resources}
	want.Spec.InitContainers[0].Image = ""
	want.Status.ContainerStatuses = nil
	if !equality.Semantic.DeepEqual(r.Unbound, want) {
		t.Errorf("the unbound pod kept or dropped the wrong fields:\ngot  %+v\nwant %+v", r.Unbound, want)
	}
	if !equality.Semantic.DeepEqual(r.Requests, demand.PodRequests(&full)) {
		t.Errorf("record requests %v, want %v (demand.PodRequests)", r.Requests, demand.PodRequests(&full))
	}
	if !r.DoNotDisrupt || r.EmptyDirVolume != "scratch" || r.Controller != "ReplicaSet" || r.NodeSelector["gpupool.io/pool"] != "a" ||
		len(r.Tolerations) != 1 || r.Labels["app"] != "train" || r.UID != full.UID {
		t.Errorf("the record lost a fact decisions read: %+v", r)
	}

	bound := fixture.Pod("team/infer", fixture.Running("gpu-1"), fixture.Requests("nvidia.com/mig-1g.18gb", "1"))
	out, err = transform(&bound)
	if err != nil {
		t.Fatal(err)
	}
	if r := out.(*podrecord.Record); r.Unbound != nil || r.NodeName != "gpu-1" || !r.Bound() {
		t.Errorf("a bound pod's record: node %q, bound %v, keeps its pod %v; want gpu-1, true, no pod", r.NodeName, r.Bound(), r.Unbound != nil)
	}

	tombstone := cache.DeletedFinalStateUnknown{Key: "team/train", Obj: full.DeepCopy()}
	if out, err := transform(tombstone); err != nil || out != any(tombstone) {
		t.Errorf("a tombstone must pass unchanged, got %v, %v", out, err)
	}
}

// TestSlimPodsShareEqualResourceLists: pods whose containers ask for the same resources hold
// one map between them; different asks keep their own, with their own values.
func TestSlimPodsShareEqualResourceLists(t *testing.T) {
	shared := &podrecord.Interner{}
	slim := func(p corev1.Pod) *corev1.Pod {
		slimPod(&p, shared)
		return &p
	}
	ask := fixture.Requests("cpu", "4", "memory", "8Gi", "nvidia.com/mig-1g.18gb", "1")
	a := slim(fixture.Pod("team/a", fixture.Running("gpu-1"), ask))
	b := slim(fixture.Pod("team/b", fixture.Running("gpu-2"), ask))
	c := slim(fixture.Pod("team/c", fixture.Running("gpu-2"), fixture.Requests("cpu", "4", "memory", "8Gi", "nvidia.com/mig-2g.35gb", "1")))
	same := func(x, y corev1.ResourceList) bool {
		return reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer()
	}
	if !same(a.Spec.Containers[0].Resources.Requests, b.Spec.Containers[0].Resources.Requests) {
		t.Error("two pods asking for the same resources hold two maps")
	}
	if same(a.Spec.Containers[0].Resources.Requests, c.Spec.Containers[0].Resources.Requests) {
		t.Error("pods asking for different resources share a map")
	}
	if q := c.Spec.Containers[0].Resources.Requests["nvidia.com/mig-2g.35gb"]; q.Value() != 1 {
		t.Errorf("the 2g pod's request reads %s, want 1", q.String())
	}
}

// TestSlimNodeKeepsWhatDecisionsRead guards the Node transform.
func TestSlimNodeKeepsWhatDecisionsRead(t *testing.T) {
	full := fixture.GPUHost("gpu-1", "NVIDIA-H200", nil, "gpupool.io/pool", "a")
	full.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}}
	full.Spec.Unschedulable = true
	full.Annotations = map[string]string{"gpupool.io/cordoned-by": "plan-a"}
	full.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	full.Status.Images = []corev1.ContainerImage{{Names: []string{"nvcr.io/nvidia/pytorch:25.01"}, SizeBytes: 9 << 30}}
	full.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: "v1.37.2"}

	got, err := slimNode(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	want := full.DeepCopy()
	want.Status.Images, want.Status.NodeInfo = nil, corev1.NodeSystemInfo{}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("slimNode kept or dropped the wrong fields:\ngot  %+v\nwant %+v", got, want)
	}
}

// TestReportsShareEqualProfileTables guards the GPUNode transform: GPUs that report the same
// MIG profile table hold one copy of it, a different table keeps its own values, and
// managedFields go as the cache's default transform would have dropped them.
func TestReportsShareEqualProfileTables(t *testing.T) {
	transform := shareProfileTables(intern.NewTable[[]v1alpha1.GPUInstanceProfile](maxProfileTables))
	table := func(maxCount int32) []v1alpha1.GPUInstanceProfile {
		return []v1alpha1.GPUInstanceProfile{
			{ID: 19, Name: "1g.18gb", MemoryMiB: 16384, Slices: 1, MaxCount: maxCount, Placements: []v1alpha1.SlicePlacement{{Start: 0, Size: 1}}},
			{ID: 0, Name: "7g.141gb", MemoryMiB: 143360, Slices: 7, MaxCount: 1, Placements: []v1alpha1.SlicePlacement{{Start: 0, Size: 8}}},
		}
	}
	report := func(name string, maxCount int32) *v1alpha1.GPUNode {
		a, b := fixture.MIGGPU(0, "NVIDIA H200"), fixture.MIGGPU(1, "NVIDIA H200")
		a.Profiles, b.Profiles = table(maxCount), table(maxCount)
		g := fixture.Report(name, a, b)
		g.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "gpupool-agent"}}
		return &g
	}
	apply := func(g *v1alpha1.GPUNode) *v1alpha1.GPUNode {
		t.Helper()
		out, err := transform(g)
		if err != nil {
			t.Fatal(err)
		}
		return out.(*v1alpha1.GPUNode)
	}
	x, y, z := apply(report("gpu-1", 7)), apply(report("gpu-2", 7)), apply(report("gpu-3", 6))
	same := func(a, b []v1alpha1.GPUInstanceProfile) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	if !same(x.Status.GPUs[0].Profiles, x.Status.GPUs[1].Profiles) || !same(x.Status.GPUs[0].Profiles, y.Status.GPUs[0].Profiles) {
		t.Error("GPUs reporting the same table hold copies of it")
	}
	if same(x.Status.GPUs[0].Profiles, z.Status.GPUs[0].Profiles) || z.Status.GPUs[0].Profiles[0].MaxCount != 6 {
		t.Errorf("a different table shares another's copy: %+v", z.Status.GPUs[0].Profiles)
	}
	if x.ManagedFields != nil {
		t.Error("managedFields stay in the cache")
	}
	tombstone := cache.DeletedFinalStateUnknown{Key: "gpu-1", Obj: report("gpu-1", 7)}
	if out, err := transform(tombstone); err != nil || out != any(tombstone) {
		t.Errorf("a tombstone must pass unchanged, got %v, %v", out, err)
	}
}
