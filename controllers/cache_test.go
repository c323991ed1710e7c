package controllers

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpupool/gpupool/internal/fixture"
)

// TestSlimPodKeepsWhatDecisionsRead guards the Pod transform: what the planner, the pending
// demand and the drain read survives; what they never read is gone.
func TestSlimPodKeepsWhatDecisionsRead(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	full := fixture.Pod("team/train", fixture.Running("gpu-1"), fixture.Requests("cpu", "4", "nvidia.com/mig-1g.18gb", "1"),
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
	full.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}

	got, err := slimPod(full.DeepCopy(), &resourceLists{})
	if err != nil {
		t.Fatal(err)
	}
	p := got.(*corev1.Pod)
	want := full.DeepCopy()
	want.ManagedFields = nil
	delete(want.Annotations, corev1.LastAppliedConfigAnnotation)
	want.Spec.Containers[0] = corev1.Container{Name: "main", Resources: full.Spec.Containers[0].Resources}
	want.Spec.InitContainers[0].Image = ""
	want.Status.ContainerStatuses = nil
	if !equality.Semantic.DeepEqual(p, want) {
		t.Errorf("slimPod kept or dropped the wrong fields:\ngot  %+v\nwant %+v", p, want)
	}

	tombstone := cache.DeletedFinalStateUnknown{Key: "team/train", Obj: full.DeepCopy()}
	if out, err := slimPod(tombstone, &resourceLists{}); err != nil || out != any(tombstone) {
		t.Errorf("a tombstone must pass unchanged, got %v, %v", out, err)
	}
}

// TestSlimPodsShareEqualResourceLists: pods whose containers ask for the same resources hold
// one map between them; different asks keep their own, with their own values.
func TestSlimPodsShareEqualResourceLists(t *testing.T) {
	lists := &resourceLists{}
	slim := func(p corev1.Pod) *corev1.Pod {
		t.Helper()
		out, err := slimPod(&p, lists)
		if err != nil {
			t.Fatal(err)
		}
		return out.(*corev1.Pod)
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
	if len(lists.byText) > maxSharedLists {
		t.Errorf("the table holds %d lists, more than its bound %d", len(lists.byText), maxSharedLists)
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
