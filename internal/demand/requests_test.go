package demand

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpupool/gpupool/internal/fixture"
)

func TestPodRequests(t *testing.T) {
	tests := []struct {
		name string
		pod  corev1.Pod
		want corev1.ResourceList
	}{{
		name: "one container, and every pod takes one of the node's pods",
		pod:  pendingPod("p"),
		want: fixture.Resources("cpu", "1", "nvidia.com/gpu", "1", "pods", "1"),
	}, {
		// The API server copies limits into absent requests when it stores a pod; a pod built
		// in a test or read from a manifest must count the same.
		name: "limits stand in for absent requests, for every resource",
		pod:  pendingPod("p", withMain(nil, fixture.Resources("nvidia.com/mig-1g.10gb", "2", "memory", "4Gi"))),
		want: fixture.Resources("nvidia.com/mig-1g.10gb", "2", "memory", "4Gi", "pods", "1"),
	}, {
		name: "an explicit request wins over the limit",
		pod:  pendingPod("p", withMain(fixture.Resources("cpu", "500m"), fixture.Resources("cpu", "2", "nvidia.com/gpu", "1"))),
		want: fixture.Resources("cpu", "500m", "nvidia.com/gpu", "1", "pods", "1"),
	}, {
		name: "containers add up",
		pod:  pendingPod("p", withContainer(container("second", fixture.Resources("cpu", "2", "nvidia.com/gpu", "1")))),
		want: fixture.Resources("cpu", "3", "nvidia.com/gpu", "2", "pods", "1"),
	}, {
		// Init containers run one at a time before the main ones: the pod needs the largest.
		name: "init containers by the max rule",
		pod: pendingPod("p",
			withInit(container("warm", fixture.Resources("cpu", "4", "nvidia.com/gpu", "2"))),
			withInit(container("fetch", fixture.Resources("cpu", "2", "memory", "8Gi")))),
		want: fixture.Resources("cpu", "4", "memory", "8Gi", "nvidia.com/gpu", "2", "pods", "1"),
	}, {
		// A sidecar keeps running next to the main containers and the init containers after it.
		name: "sidecar before an init container adds to both",
		pod: pendingPod("p",
			withInit(sidecar("proxy", fixture.Resources("cpu", "500m", "nvidia.com/gpu.shared", "1"))),
			withInit(container("warm", fixture.Resources("cpu", "4", "nvidia.com/gpu", "2")))),
		want: fixture.Resources("cpu", "4500m", "nvidia.com/gpu", "2", "nvidia.com/gpu.shared", "1", "pods", "1"),
	}, {
		name: "sidecar after an init container adds only to the main containers",
		pod: pendingPod("p",
			withInit(container("warm", fixture.Resources("cpu", "4", "nvidia.com/gpu", "2"))),
			withInit(sidecar("proxy", fixture.Resources("cpu", "500m", "nvidia.com/gpu.shared", "1")))),
		want: fixture.Resources("cpu", "4", "nvidia.com/gpu", "2", "nvidia.com/gpu.shared", "1", "pods", "1"),
	}, {
		name: "pod overhead is added",
		pod:  pendingPod("p", func(p *corev1.Pod) { p.Spec.Overhead = fixture.Resources("cpu", "250m", "memory", "120Mi") }),
		want: fixture.Resources("cpu", "1250m", "memory", "120Mi", "nvidia.com/gpu", "1", "pods", "1"),
	}, {
		name: "pod-level limits stand in for pod-level requests the containers leave unset",
		pod: pendingPod("p", withMain(fixture.Resources("nvidia.com/gpu", "1"), fixture.Resources("nvidia.com/gpu", "1")), func(p *corev1.Pod) {
			p.Spec.Resources = &corev1.ResourceRequirements{Limits: fixture.Resources("cpu", "8", "memory", "16Gi")}
		}),
		want: fixture.Resources("cpu", "8", "memory", "16Gi", "nvidia.com/gpu", "1", "pods", "1"),
	}, {
		name: "pod-level requests replace the containers' sum",
		pod: pendingPod("p", withContainer(container("second", fixture.Resources("cpu", "3"))), func(p *corev1.Pod) {
			p.Spec.Resources = &corev1.ResourceRequirements{Requests: fixture.Resources("cpu", "2")}
		}),
		want: fixture.Resources("cpu", "2", "nvidia.com/gpu", "1", "pods", "1"),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.pod.DeepCopy()
			got := PodRequests(&tt.pod)
			if !equality.Semantic.DeepEqual(got, tt.want) {
				t.Errorf("PodRequests = %v, want %v", got, tt.want)
			}
			if !equality.Semantic.DeepEqual(before, &tt.pod) {
				t.Errorf("PodRequests modified its input pod")
			}
		})
	}
}

func TestUnits(t *testing.T) {
	tests := []struct {
		q    string
		want int64
	}{
		{"0", 0}, {"-1", 0}, {"1", 1}, {"7", 7}, {"500m", 1}, {"1500m", 2}, {"1k", 1000},
		{"9223372036854775807", 9223372036854775807}, {"1E", 1000000000000000000}, {"100E", 9223372036854775807},
	}
	for _, tt := range tests {
		if got := units(resource.MustParse(tt.q)); got != tt.want {
			t.Errorf("units(%s) = %d, want %d", tt.q, got, tt.want)
		}
	}
}

func TestDefaultContainersSharesUnchangedInput(t *testing.T) {
	in := []corev1.Container{container("a", fixture.Resources("cpu", "1"))}
	out, changed := defaultContainers(in)
	if changed || &out[0] != &in[0] {
		t.Errorf("defaultContainers copied containers that needed no defaults")
	}
	in = append(in, corev1.Container{Name: "b", Resources: corev1.ResourceRequirements{Limits: fixture.Resources("cpu", "2")}})
	out, changed = defaultContainers(in)
	if !changed || &out[0] == &in[0] || in[1].Resources.Requests != nil {
		t.Errorf("defaultContainers must copy before defaulting and leave the input alone")
	}
	if !slices.Equal([]string{out[0].Name, out[1].Name}, []string{"a", "b"}) || !equality.Semantic.DeepEqual(out[1].Resources.Requests, fixture.Resources("cpu", "2")) {
		t.Errorf("defaultContainers = %+v", out)
	}
}
