// Package podrecord is what gpupool keeps of a Pod between decisions: the few facts the
// planner, the pending demand and the drain read, computed once when the informer receives
// the pod. A fleet's pods are most of what a controller caches; a corev1.Pod, slimmed to the
// fields those decisions read, still costs about 2.8 KB (its struct alone is 1.2 KB), and a
// Record of a pod bound to a node about a fifth of that. A pod not yet bound keeps its whole
// (slimmed) object too, because pending demand reads most of it.
//
// A Record is a client.Object so that it can live in controller-runtime's informer cache and
// reach event handlers; it is never written to the API server.
package podrecord

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
)

// Record is one pod as gpupool decides on it. Its ObjectMeta keeps the name, namespace, UID,
// resourceVersion, labels (PodDisruptionBudgets select by them) and the creation and deletion
// timestamps; annotations and owner references are reduced to the facts below.
type Record struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	// NodeName is spec.nodeName: "" while the pod is not bound.
	NodeName string
	// Phase is status.phase.
	Phase corev1.PodPhase
	// Ready is the pod's Ready condition: true only while it is True, and UnreadySince when it
	// last turned otherwise (zero while ready, or without the condition). The manager reads
	// them of the node agents' own pods, whose readiness is their heartbeat.
	Ready        bool
	UnreadySince metav1.Time
	// Priority is spec.priority, 0 when unset, as the scheduler resolves it.
	Priority int32
	// Requests is what the pod needs free on a node, as the scheduler counts it
	// (demand.PodRequests). Shared between records: read it, never write into it.
	Requests corev1.ResourceList
	// NodeSelector, RequiredAffinity and Tolerations are the pod's placement rules: where a
	// replacement from the same template may land.
	NodeSelector     map[string]string
	RequiredAffinity *corev1.NodeSelector
	Tolerations      []corev1.Toleration
	// Controller is the kind of the pod's controlling owner ("" when nothing recreates it).
	Controller string
	// ControllerGroup is that owner's API group: with the kind it tells a controller known to
	// recreate pods from any other of the same kind (inventory.RecreatesPods). Interned.
	ControllerGroup string
	// ControllerName is that owner's name and ServiceAccount is spec.serviceAccountName: with
	// the namespace and the group they tell the node agents' own pods, controlled by the agent
	// DaemonSet and run by its ServiceAccount, from pods that only wear its labels
	// (inventory.AgentPods). Interned: most pods share a few of each.
	ControllerName string
	ServiceAccount string
	// DoNotDisrupt is true when the pod is annotated gpupool.io/do-not-disrupt=true.
	DoNotDisrupt bool
	// Mirror is true for the API server's copy of a kubelet's static pod.
	Mirror bool
	// EmptyDirVolume names the pod's first emptyDir volume, whose data eviction would lose;
	// "" when it has none.
	EmptyDirVolume string
	// EphemeralVolume names the pod's first generic ephemeral volume (spec.volumes[].ephemeral);
	// "" when it has none. Its PersistentVolumeClaim is created for the pod and owned by it, so
	// the garbage collector deletes it with the pod and a replacement starts on a new, empty
	// claim (kubernetes pkg/controller/volume/ephemeral/controller.go): eviction loses its data
	// as it loses an emptyDir's.
	EphemeralVolume string
	// GracePeriod is spec.terminationGracePeriodSeconds (the API server's default, 30s, when
	// unset): how long the kubelet may let an evicted pod terminate, since an eviction without
	// its own grace period uses the pod's.
	GracePeriod time.Duration
	// Unbound is the pod itself, slimmed, while it is not bound to a node and may ask for GPUs
	// (through the device plugin or through ResourceClaims): pending demand reads its
	// containers, conditions, scheduling gates and claims. nil once bound.
	Unbound *corev1.Pod
}

// New is the record of p. shared, when not nil, lets records hold one copy of equal labels,
// placement rules and requests. p is not modified, and the record may hold p's own maps and
// lists (Unbound is p itself): neither is written once the record exists.
func New(p *corev1.Pod, shared *Interner) *Record {
	r := &Record{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:              p.Name,
			Namespace:         shared.String(p.Namespace),
			UID:               p.UID,
			ResourceVersion:   p.ResourceVersion,
			Generation:        p.Generation,
			Labels:            shared.Labels(p.Labels),
			CreationTimestamp: p.CreationTimestamp,
			DeletionTimestamp: p.DeletionTimestamp,
		},
		NodeName:     shared.String(p.Spec.NodeName),
		Phase:        corev1.PodPhase(shared.String(string(p.Status.Phase))),
		Requests:     shared.Resources(demand.PodRequests(p)),
		NodeSelector: shared.Labels(p.Spec.NodeSelector),
		Tolerations:  shared.Tolerations(p.Spec.Tolerations),
		DoNotDisrupt: p.Annotations[v1alpha1.AnnotationDoNotDisrupt] == "true",
	}
	if p.Spec.Priority != nil {
		r.Priority = *p.Spec.Priority
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			r.Ready = c.Status == corev1.ConditionTrue
			if !r.Ready {
				r.UnreadySince = c.LastTransitionTime
			}
		}
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		r.RequiredAffinity = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	if owner := metav1.GetControllerOf(p); owner != nil {
		r.Controller = shared.String(owner.Kind)
		r.ControllerName = shared.String(owner.Name)
		// An apiVersion that does not parse names no group a check could expect.
		if gv, err := schema.ParseGroupVersion(owner.APIVersion); err == nil {
			r.ControllerGroup = shared.String(gv.Group)
		}
	}
	r.GracePeriod = time.Duration(ptr.Deref(p.Spec.TerminationGracePeriodSeconds, corev1.DefaultTerminationGracePeriodSeconds)) * time.Second
	r.ServiceAccount = shared.String(p.Spec.ServiceAccountName)
	_, r.Mirror = p.Annotations[corev1.MirrorPodAnnotationKey]
	for _, v := range p.Spec.Volumes {
		if v.EmptyDir != nil && r.EmptyDirVolume == "" {
			r.EmptyDirVolume = v.Name
		}
		if v.Ephemeral != nil && r.EphemeralVolume == "" {
			r.EphemeralVolume = v.Name
		}
	}
	if p.Spec.NodeName == "" && (demand.MentionsGPU(p) || len(p.Spec.ResourceClaims) > 0) {
		r.Unbound = p
	}
	return r
}

// FromPods is the record of each pod, sharing equal parts between them.
func FromPods(pods []*corev1.Pod) []*Record {
	shared := &Interner{}
	out := make([]*Record, len(pods))
	for i, p := range pods {
		out[i] = New(p, shared)
	}
	return out
}

// Bound reports whether the pod is bound to a node and has not finished: it takes a share of
// that node's resources.
func (r *Record) Bound() bool {
	return r.NodeName != "" && r.Phase != corev1.PodSucceeded && r.Phase != corev1.PodFailed
}

// DeepCopyObject is DeepCopy, as runtime.Object.
func (r *Record) DeepCopyObject() runtime.Object {
	if c := r.DeepCopy(); c != nil {
		return c
	}
	return nil
}

// DeepCopy is a copy that shares nothing with r. (Without it and DeepCopyInto, ObjectMeta's
// would be promoted and copy only the metadata.)
func (r *Record) DeepCopy() *Record {
	if r == nil {
		return nil
	}
	out := new(Record)
	r.DeepCopyInto(out)
	return out
}

// DeepCopyInto writes a copy of r into out that shares nothing with r.
func (r *Record) DeepCopyInto(out *Record) {
	*out = *r
	r.ObjectMeta.DeepCopyInto(&out.ObjectMeta) // ObjectMeta's own, not the record's
	out.Requests = r.Requests.DeepCopy()
	if r.NodeSelector != nil {
		out.NodeSelector = make(map[string]string, len(r.NodeSelector))
		for k, v := range r.NodeSelector {
			out.NodeSelector[k] = v
		}
	}
	out.RequiredAffinity = r.RequiredAffinity.DeepCopy()
	if r.Tolerations != nil {
		out.Tolerations = make([]corev1.Toleration, len(r.Tolerations))
		for i := range r.Tolerations {
			r.Tolerations[i].DeepCopyInto(&out.Tolerations[i])
		}
	}
	out.Unbound = r.Unbound.DeepCopy()
}
