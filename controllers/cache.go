package controllers

import (
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
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}:  {Transform: slimPod},
		&corev1.Node{}: {Transform: slimNode},
	}
}

// slimPod keeps of a Pod what the planner, the triage of pending demand and the drain read.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone of a deleted object passes as it is
	}
	slimMeta(&p.ManagedFields, p.Annotations)
	slimContainers(p.Spec.Containers)
	slimContainers(p.Spec.InitContainers)
	p.Spec.EphemeralContainers = nil
	p.Status.ContainerStatuses, p.Status.InitContainerStatuses, p.Status.EphemeralContainerStatuses = nil, nil, nil
	p.Status.PodIPs, p.Status.HostIPs, p.Status.Message = nil, nil, ""
	return p, nil
}

// slimContainers keeps a container's name, resources and restart policy (a sidecar's counts
// for the pod's requests): image, command, environment, ports and probes go.
func slimContainers(cs []corev1.Container) {
	for i, c := range cs {
		cs[i] = corev1.Container{Name: c.Name, Resources: c.Resources, RestartPolicy: c.RestartPolicy}
	}
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
