package controllers

import (
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The manager caches every Pod and Node of the cluster, so what it keeps of each is most of
// its memory at fleet scale. The transforms below drop, as objects enter the cache, what no
// decision reads: the planner and the drain read a pod's metadata, its placement constraints,
// its containers' names, resources and restart policies, its volumes, and its phase and
// conditions; a node's metadata, spec and allocatable. Nothing the manager writes is built from
// a cached Pod or Node by Update (node changes are patches against the cached object, which
// send only the fields they change), so a slimmed object is never written back.

// SlimCache is the cache configuration for the kinds that grow with the fleet.
func SlimCache() map[client.Object]cache.ByObject {
	lists := &resourceLists{}
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}:  {Transform: func(obj any) (any, error) { return slimPod(obj, lists) }},
		&corev1.Node{}: {Transform: slimNode},
	}
}

// slimPod keeps of a Pod what the planner, the triage of pending demand and the drain read.
func slimPod(obj any, lists *resourceLists) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone of a deleted object passes as it is
	}
	slimMeta(&p.ManagedFields, p.Annotations)
	slimContainers(p.Spec.Containers, lists)
	slimContainers(p.Spec.InitContainers, lists)
	p.Spec.EphemeralContainers = nil
	p.Status.ContainerStatuses, p.Status.InitContainerStatuses, p.Status.EphemeralContainerStatuses = nil, nil, nil
	p.Status.PodIPs, p.Status.HostIPs, p.Status.Message = nil, nil, ""
	return p, nil
}

// slimContainers keeps a container's name, resources and restart policy (a sidecar's counts
// for the pod's requests): image, command, environment, ports and probes go.
func slimContainers(cs []corev1.Container, lists *resourceLists) {
	for i, c := range cs {
		c.Resources.Requests, c.Resources.Limits = lists.shared(c.Resources.Requests), lists.shared(c.Resources.Limits)
		cs[i] = corev1.Container{Name: c.Name, Resources: c.Resources, RestartPolicy: c.RestartPolicy}
	}
}

// resourceLists hands out one shared map per distinct resource list. A fleet's pods come from
// few workloads, so most of their containers ask for the same few lists; as decoded, each
// holds its own map of Quantities (about 1.2 KB a pod, 65 MB at 55,000 pods). Objects in an
// informer's cache are read-only to every reader (client reads deep-copy them; the pass reads
// them in place and never writes, pool's TestAPassLeavesItsInputAlone), so sharing is safe.
// The table is bounded: past maxSharedLists distinct lists it starts afresh, and the lists
// already handed out stay with their pods.
type resourceLists struct {
	mu     sync.Mutex
	byText map[string]corev1.ResourceList
}

const maxSharedLists = 4096

func (r *resourceLists) shared(l corev1.ResourceList) corev1.ResourceList {
	if len(l) == 0 {
		return l
	}
	names := make([]string, 0, len(l))
	for name := range l {
		names = append(names, string(name))
	}
	slices.Sort(names)
	var key strings.Builder
	for _, name := range names {
		q := l[corev1.ResourceName(name)]
		key.WriteString(name)
		key.WriteByte('=')
		key.WriteString(q.String())
		key.WriteByte(';')
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.byText[key.String()]; ok {
		return s
	}
	if r.byText == nil || len(r.byText) >= maxSharedLists {
		r.byText = make(map[string]corev1.ResourceList)
	}
	r.byText[key.String()] = l
	return l
}

// slimNode keeps of a Node its metadata, spec, allocatable and conditions: the images a
// kubelet lists (often the largest part of a GPU node's object) and the attached volumes go.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	slimMeta(&n.ManagedFields, n.Annotations)
	n.Status.Images, n.Status.VolumesInUse, n.Status.VolumesAttached = nil, nil, nil
	n.Status.NodeInfo, n.Status.Features = corev1.NodeSystemInfo{}, nil
	return n, nil
}

// slimMeta drops managedFields and kubectl's copy of the last applied object.
func slimMeta(managed *[]metav1.ManagedFieldsEntry, annotations map[string]string) {
	*managed = nil
	delete(annotations, corev1.LastAppliedConfigAnnotation)
}
