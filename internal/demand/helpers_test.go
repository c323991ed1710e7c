package demand

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupool/gpupool/internal/fixture"
)

// now is the fixtures' clock: the package never reads the real one and neither do its tests.
var now = fixture.Now

const minAge = 30 * time.Second

// podOpt changes one thing of a pod.
type podOpt = fixture.PodOption

// pendingPod is a pod (fixture.Pod, in namespace team-a) created two minutes before now that
// the scheduler marked Unschedulable a minute ago, asking for one whole GPU and one CPU;
// options change one thing each so a test row reads as the difference it tests.
func pendingPod(name string, opts ...podOpt) corev1.Pod {
	p := fixture.Pod("team-a/"+name, fixture.Unschedulable(now.Add(-time.Minute)),
		fixture.Requests("cpu", "1", "nvidia.com/gpu", "1"))
	p.CreationTimestamp = metav1.NewTime(now.Add(-2 * time.Minute))
	for _, o := range opts {
		o(&p)
	}
	return p
}

func inNamespace(ns string) podOpt { return func(p *corev1.Pod) { p.Namespace = ns } }

// withMain replaces the main container's requests and limits.
func withMain(requests, limits corev1.ResourceList) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: requests, Limits: limits}
	}
}

func withContainer(c corev1.Container) podOpt {
	return func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, c) }
}

func withInit(c corev1.Container) podOpt {
	return func(p *corev1.Pod) { p.Spec.InitContainers = append(p.Spec.InitContainers, c) }
}

func sidecar(name string, requests corev1.ResourceList) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	return corev1.Container{Name: name, RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: requests}}
}

func container(name string, requests corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: requests}}
}

// unschedulableFor moves the PodScheduled condition's transition to d before now.
func unschedulableFor(d time.Duration) podOpt {
	return func(p *corev1.Pod) { p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(now.Add(-d)) }
}

func withCondition(status corev1.ConditionStatus, reason string) podOpt {
	return func(p *corev1.Pod) {
		p.Status.Conditions[0].Status = status
		p.Status.Conditions[0].Reason = reason
	}
}
