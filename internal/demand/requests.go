package demand

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// schedulerOptions are the PodResourcesOptions kube-scheduler 1.37 uses with its default
// feature gates: pod-level resources and in-place resize count. The status-based options only
// change anything for running pods, so callers may use PodRequests for pods already on a node
// and get the same numbers the scheduler subtracts from the node.
var schedulerOptions = resourcehelper.PodResourcesOptions{
	UseStatusResources: true,
	InPlacePodLevelResourcesVerticalScalingEnabled: true,
}

// onePod is what every pod takes of a node's allocatable "pods".
var onePod = *resource.NewQuantity(1, resource.DecimalSI)

// PodRequests is what a node must have free for the scheduler to place pod there, for every
// resource, computed as kube-scheduler does (k8s.io/component-helpers/resource.PodRequests:
// init containers by the max rule, sidecars added, pod overhead and pod-level resources).
//
// It adds two things, both so that a planner can compare the result against a node's
// allocatable with one loop and no special cases:
//   - limits stand in for absent requests, per container and at pod level, exactly as the API
//     server defaults them when it stores a pod. Stored pods are unchanged by this; pods built
//     in tests or read from manifests by the offline CLI count as they would once created.
//   - "pods" is 1, because the scheduler refuses a node whose pod capacity is used up. Use
//     PodRequests for running pods too, so used and requested are counted alike.
//
// GPUs a pod gets through Dynamic Resource Allocation claims are not device-plugin resources
// and do not appear here.
func PodRequests(pod *corev1.Pod) corev1.ResourceList {
	reqs := resourcehelper.PodRequests(withDefaultRequests(pod), schedulerOptions)
	// Pod-level requests are copied into the result by reference; a caller that adds to the
	// result must not write through into an informer's pod.
	for name, q := range reqs {
		reqs[name] = q.DeepCopy()
	}
	reqs[corev1.ResourcePods] = onePod.DeepCopy()
	return reqs
}

// withDefaultRequests returns pod, or a shallow copy of it whose containers carry the requests
// the API server would have defaulted from limits; the caller's pod is never modified because
// it usually lives in an informer cache.
func withDefaultRequests(pod *corev1.Pod) *corev1.Pod {
	containers, c := defaultContainers(pod.Spec.Containers)
	initContainers, ic := defaultContainers(pod.Spec.InitContainers)
	podLevel := pod.Spec.Resources != nil && len(pod.Spec.Resources.Limits) > 0
	if !c && !ic && !podLevel {
		return pod
	}
	cp := *pod
	cp.Spec.Containers, cp.Spec.InitContainers = containers, initContainers
	if podLevel {
		cp.Spec.Resources = defaultPodLevelRequests(&cp)
	}
	return &cp
}

// defaultContainers mirrors the API server's SetDefaults_Pod for one container list. It
// reports whether any container changed, and shares the input when none did.
func defaultContainers(in []corev1.Container) ([]corev1.Container, bool) {
	var out []corev1.Container
	for i := range in {
		lim, req := in[i].Resources.Limits, in[i].Resources.Requests
		missing := false
		for name := range lim {
			if _, ok := req[name]; !ok {
				missing = true
				break
			}
		}
		if !missing {
			continue
		}
		if out == nil {
			out = append([]corev1.Container(nil), in...)
		}
		merged := make(corev1.ResourceList, len(lim)+len(req))
		for name, q := range req {
			merged[name] = q.DeepCopy()
		}
		for name, q := range lim {
			if _, ok := merged[name]; !ok {
				merged[name] = q.DeepCopy()
			}
		}
		out[i].Resources.Requests = merged
	}
	if out == nil {
		return in, false
	}
	return out, true
}

// defaultPodLevelRequests mirrors the API server's pod-level defaulting: a pod-level request
// left unset takes the containers' aggregate request for cpu and memory, else the pod-level
// limit.
func defaultPodLevelRequests(pod *corev1.Pod) *corev1.ResourceRequirements {
	res := pod.Spec.Resources.DeepCopy()
	if res.Requests == nil {
		res.Requests = corev1.ResourceList{}
	}
	aggregate := resourcehelper.AggregateContainerRequests(pod, resourcehelper.PodResourcesOptions{})
	for name, q := range aggregate {
		if _, ok := res.Requests[name]; !ok && (name == corev1.ResourceCPU || name == corev1.ResourceMemory) {
			res.Requests[name] = q.DeepCopy()
		}
	}
	for name, q := range res.Limits {
		if _, ok := res.Requests[name]; !ok && resourcehelper.IsSupportedPodLevelResource(name) {
			res.Requests[name] = q.DeepCopy()
		}
	}
	return res
}

// units turns a device-plugin quantity into a device count. The API server only accepts whole
// numbers for extended resources; anything else (a hand-written snapshot) rounds up, as the
// scheduler's int64 accounting does, and absurdly large values saturate instead of wrapping.
func units(q resource.Quantity) int64 {
	if q.Sign() <= 0 {
		return 0
	}
	if v, ok := q.AsInt64(); ok {
		return v
	}
	if q.Cmp(*resource.NewQuantity(math.MaxInt64, resource.DecimalSI)) >= 0 {
		return math.MaxInt64
	}
	return q.Value()
}

// addSaturating adds non-negative counts without wrapping around.
func addSaturating(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Quantity is the integer the scheduler compares for one resource of a list: millicores for
// CPU, whole units for everything else; 0 when the list lacks it.
func Quantity(list corev1.ResourceList, name corev1.ResourceName) int64 {
	q, ok := list[name]
	if !ok {
		return 0
	}
	if name == corev1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}
