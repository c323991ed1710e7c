package demand

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// now is a fixed clock: the package never reads the real one and neither do its tests.
var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

const minAge = 30 * time.Second

// list builds a ResourceList from name, quantity pairs.
func list(kv ...string) corev1.ResourceList {
	if len(kv) == 0 {
		return nil
	}
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

type podOpt func(*corev1.Pod)

// pendingPod is a pod the scheduler marked Unschedulable a minute ago, asking for one whole GPU
// and one CPU; options change one thing each so a test row reads as the difference it tests.
func pendingPod(name string, opts ...podOpt) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:         "team-a",
			Name:              name,
			UID:               types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(now.Add(-2 * time.Minute)),
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:      "main",
				Resources: corev1.ResourceRequirements{Requests: list("cpu", "1", "nvidia.com/gpu", "1"), Limits: list("nvidia.com/gpu", "1")},
			}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{{
				Type:               corev1.PodScheduled,
				Status:             corev1.ConditionFalse,
				Reason:             corev1.PodReasonUnschedulable,
				LastTransitionTime: metav1.NewTime(now.Add(-time.Minute)),
			}},
		},
	}
	for _, o := range opts {
		o(&p)
	}
	return p
}

func inNamespace(ns string) podOpt { return func(p *corev1.Pod) { p.Namespace = ns } }

func withPriority(v int32) podOpt { return func(p *corev1.Pod) { p.Spec.Priority = &v } }

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
