package demand

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// GPURequest is one GPU resource a pending pod asks for.
type GPURequest struct {
	// Resource is the extended resource name as the pod spells it.
	Resource corev1.ResourceName
	// Kind says what the planner must create on a node to serve it.
	Kind Kind
	// Profile is the canonical MIG profile (1g.10gb+me) for MIG instances and replicas of one;
	// empty for whole and shared whole GPUs.
	Profile string
	// Count is how many units one node must have free, after the init-container max rule.
	Count int64
}

// Request is one pending pod the planner should try to place: what it needs from a node and
// where it may go.
type Request struct {
	// Pod names the pod.
	Pod types.NamespacedName
	// UID tells a pod from a recreated pod of the same name.
	UID types.UID
	// Priority is pod.spec.priority, 0 when unset, as the scheduler resolves it.
	Priority int32
	// PendingSince is when the scheduler first found the pod unschedulable (the PodScheduled
	// condition's lastTransitionTime), or its creation time when the condition has none; zero
	// when the pod carries neither (a hand-written snapshot), which counts as pending for long.
	PendingSince time.Time
	// GPUs are the pod's GPU resources, sorted by resource name; never empty.
	GPUs []GPURequest
	// Requests is everything the pod needs free on one node, GPUs included: see PodRequests.
	Requests corev1.ResourceList
	// NodeSelector is the pod's spec.nodeSelector.
	NodeSelector map[string]string
	// RequiredAffinity is the pod's requiredDuringSchedulingIgnoredDuringExecution node
	// affinity; nil when it has none.
	RequiredAffinity *corev1.NodeSelector
	// Tolerations are the pod's tolerations.
	Tolerations []corev1.Toleration
	// ViaClaims is true when the pod's GPUs come through ResourceClaims of NVIDIA's DRA driver:
	// only a node whose devices the driver publishes can serve it, and a node the device plugin
	// serves cannot (NVIDIA's driver and device plugin do not share a GPU).
	ViaClaims bool
}

// Skipped is a GPU pod that is not demand (yet), with the reason a user reads in the CLI.
type Skipped struct {
	// Pod names the pod.
	Pod types.NamespacedName
	// Reason says why the planner leaves the pod to the scheduler.
	Reason string
}

// Pending picks, from pods, the GPU demand the planner should serve at now: pods the scheduler
// has marked Unschedulable, not bound to a node, not terminating or finished, not nominated to
// a node by preemption, pending for at least minPendingAge and asking for at least one GPU
// resource (see Classify). Pods that ask for no GPU resource appear in neither list; every
// other pod appears in exactly one.
//
// reqs is sorted by priority (highest first), then PendingSince (oldest first), then namespace,
// name and UID, so the planner serves the same pods first whatever order the informer returned;
// skipped is sorted by namespace, name and reason. A PendingSince in the future (clock skew
// between the API server and the caller) counts as pending for zero time. pods is not modified,
// and nothing in the output shares memory with it.
func Pending(pods []*corev1.Pod, now time.Time, minPendingAge time.Duration) (reqs []Request, skipped []Skipped) {
	return PendingWithClaims(pods, nil, nil, now, minPendingAge)
}

// PendingWithClaims is Pending for pods that may also ask through ResourceClaims of NVIDIA's
// DRA driver, found with claims (see claimGPUs): a claim for a MIG profile counts as a request
// for nvidia.com/mig-<profile>, so the pod is demand exactly as if it had asked the device
// plugin, and a claim gpupool cannot map puts the pod among skipped with the reason. A nil
// claims ignores claims, as Pending does. requests gives each pod's requests where the caller
// has them already (the manager's pod records); nil computes them with PodRequests.
func PendingWithClaims(pods []*corev1.Pod, claims ClaimLookup, requests RequestsOf, now time.Time, minPendingAge time.Duration) (reqs []Request, skipped []Skipped) {
	minPendingAge = max(minPendingAge, 0)
	for _, pod := range pods {
		withClaims := claims != nil && len(pod.Spec.ResourceClaims) > 0
		if !withClaims && !MentionsGPU(pod) {
			continue
		}
		podRequests := requests.of(pod)
		var problem string
		viaClaims := false
		if withClaims {
			var fromClaims corev1.ResourceList
			fromClaims, problem = claimGPUs(pod, claims)
			if len(fromClaims) > 0 && problem == "" && len(gpuRequests(podRequests)) > 0 {
				problem = "it asks for GPUs both through the device plugin and through DRA claims, and no node is served by both"
			}
			if len(fromClaims) > 0 {
				viaClaims = true
				// The remembered list is shared: add the claims' devices to a copy.
				podRequests = podRequests.DeepCopy()
				if podRequests == nil {
					podRequests = corev1.ResourceList{}
				}
				addResources(podRequests, fromClaims)
			}
		}
		gpus := gpuRequests(podRequests)
		if len(gpus) == 0 && problem == "" {
			continue
		}
		name := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
		since, reason := pendingSince(pod, now, minPendingAge)
		if reason == "" && problem != "" {
			reason = "asks through a ResourceClaim gpupool cannot map: " + problem
		}
		if reason != "" {
			skipped = append(skipped, Skipped{Pod: name, Reason: reason})
			continue
		}
		r := newRequest(pod, name, since, gpus, podRequests)
		r.ViaClaims = viaClaims
		reqs = append(reqs, r)
	}
	slices.SortFunc(reqs, compareRequests)
	slices.SortFunc(skipped, func(a, b Skipped) int {
		return cmp.Or(
			strings.Compare(a.Pod.Namespace, b.Pod.Namespace),
			strings.Compare(a.Pod.Name, b.Pod.Name),
			strings.Compare(a.Reason, b.Reason))
	})
	return reqs, skipped
}

// RequestsOf gives a pod's requests as PodRequests counts them, from what the caller already
// computed. The list is shared: read it, never write into it.
type RequestsOf func(*corev1.Pod) corev1.ResourceList

func (f RequestsOf) of(pod *corev1.Pod) corev1.ResourceList {
	if f == nil {
		return PodRequests(pod)
	}
	return f(pod)
}

func compareRequests(a, b Request) int {
	return cmp.Or(
		cmp.Compare(b.Priority, a.Priority),
		a.PendingSince.Compare(b.PendingSince),
		strings.Compare(a.Pod.Namespace, b.Pod.Namespace),
		strings.Compare(a.Pod.Name, b.Pod.Name),
		strings.Compare(string(a.UID), string(b.UID)))
}

func newRequest(pod *corev1.Pod, name types.NamespacedName, since time.Time, gpus []GPURequest, requests corev1.ResourceList) Request {
	r := Request{
		Pod:          name,
		UID:          pod.UID,
		PendingSince: since,
		GPUs:         gpus,
		Requests:     requests,
		NodeSelector: maps.Clone(pod.Spec.NodeSelector),
	}
	if pod.Spec.Priority != nil {
		r.Priority = *pod.Spec.Priority
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		r.RequiredAffinity = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.DeepCopy()
	}
	if len(pod.Spec.Tolerations) > 0 {
		r.Tolerations = make([]corev1.Toleration, len(pod.Spec.Tolerations))
		for i := range pod.Spec.Tolerations {
			pod.Spec.Tolerations[i].DeepCopyInto(&r.Tolerations[i])
		}
	}
	return r
}

// MentionsGPU reports whether any container (or the pod overhead) names a GPU resource: a
// cheap pre-check, so that the many pods of a cluster that ask for no GPU never pay for a full
// request computation, and the key of the controllers' pending-GPU-pod index.
func MentionsGPU(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			if namesGPU(cs[i].Resources.Requests) || namesGPU(cs[i].Resources.Limits) {
				return true
			}
		}
	}
	return namesGPU(pod.Spec.Overhead)
}

func namesGPU(l corev1.ResourceList) bool {
	for name := range l {
		if _, _, ok := Classify(name); ok {
			return true
		}
	}
	return false
}

// gpuRequests lists the GPU resources of a pod's effective requests, sorted by resource name.
func gpuRequests(requests corev1.ResourceList) []GPURequest {
	var out []GPURequest
	for name, q := range requests {
		kind, profile, ok := Classify(name)
		if !ok {
			continue
		}
		if n := units(q); n > 0 {
			out = append(out, GPURequest{Resource: name, Kind: kind, Profile: profile, Count: n})
		}
	}
	slices.SortFunc(out, func(a, b GPURequest) int { return strings.Compare(string(a.Resource), string(b.Resource)) })
	return out
}

// pendingSince says since when pod has been GPU demand, or why it is not. The checks run from
// the most final state to the most transient so the reason names what matters most.
func pendingSince(pod *corev1.Pod, now time.Time, minPendingAge time.Duration) (time.Time, string) {
	if pod.DeletionTimestamp != nil {
		return time.Time{}, "terminating: the pod has a deletionTimestamp"
	}
	switch pod.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return time.Time{}, fmt.Sprintf("finished: phase %s", pod.Status.Phase)
	}
	if pod.Spec.NodeName != "" {
		return time.Time{}, fmt.Sprintf("scheduled to node %s", pod.Spec.NodeName)
	}
	if gates := pod.Spec.SchedulingGates; len(gates) > 0 {
		names := make([]string, len(gates))
		for i, g := range gates {
			names[i] = g.Name
		}
		return time.Time{}, fmt.Sprintf("held by scheduling gates %s: the scheduler ignores it until they are removed", strings.Join(names, ", "))
	}
	var cond *corev1.PodCondition
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			cond = &pod.Status.Conditions[i]
			break
		}
	}
	switch {
	case cond == nil:
		return time.Time{}, "not yet tried by the scheduler: no PodScheduled condition"
	case cond.Status == corev1.ConditionTrue:
		return time.Time{}, "placed by the scheduler (PodScheduled=True), binding in progress"
	case cond.Status != corev1.ConditionFalse:
		return time.Time{}, fmt.Sprintf("not marked unschedulable: PodScheduled is %q", cond.Status)
	case cond.Reason == corev1.PodReasonSchedulingGated:
		return time.Time{}, "waiting for the scheduler to retry after its scheduling gates were removed (PodScheduled=False, reason SchedulingGated)"
	case cond.Reason != corev1.PodReasonUnschedulable:
		return time.Time{}, fmt.Sprintf("not marked unschedulable: PodScheduled=False with reason %q, not %q", cond.Reason, corev1.PodReasonUnschedulable)
	}
	if n := pod.Status.NominatedNodeName; n != "" {
		return time.Time{}, fmt.Sprintf("nominated to node %s after preempting pods there; the scheduler expects to place it", n)
	}
	since := cond.LastTransitionTime.Time
	if since.IsZero() {
		since = pod.CreationTimestamp.Time
	}
	if age := max(now.Sub(since), 0); age < minPendingAge {
		return time.Time{}, fmt.Sprintf("pending for %s, less than minPendingAge %s: the scheduler may still place it", roughly(age), minPendingAge)
	}
	return since, ""
}

// roughly prints a duration without sub-second noise, never rounding up to the threshold it
// is compared with.
func roughly(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Truncate(time.Second)
	}
	return d.Truncate(time.Millisecond)
}
