package controllers

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/intern"
	"github.com/gpupool/gpupool/internal/podrecord"
)

// The manager caches every Pod and Node of the cluster, so what it keeps of each is most of
// its memory at fleet scale. Pods are kept as podrecord.Records: the facts the planner, the
// plan's observation and pending demand read, computed once as the pod enters the cache (a
// pod that is unbound and may ask for GPUs also keeps its slimmed object). Nodes are slimmed
// to their metadata, spec, allocatable and conditions. Nothing the manager writes is built from
// a cached Pod or Node by Update (node changes are patches against the cached object, which
// send only the fields they change), and the drain reads each pod from the API server before
// evicting it, so a slimmed object is never written back or acted on. GPUNodes of one GPU
// model share one copy of its profile table.

// SlimCache is the cache configuration for the kinds that grow with the fleet: Nodes are
// slimmed and GPUNodes share their profile tables here; Pods become records where they are
// read (PodStore, recordPod).
func SlimCache() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Node{}:      {Transform: slimNode},
		&v1alpha1.GPUNode{}: {Transform: shareProfileTables(intern.NewTable[[]v1alpha1.GPUInstanceProfile](maxProfileTables))},
	}
}

// shareProfileTables is the GPUNode transform. Each GPU's report carries its model's MIG
// profile table (about 1 KB decoded for an H200, 40 MB over a 5,000-node fleet of 8 GPUs a
// node), and every GPU of one model and driver reports the same table: reports hold one copy
// per distinct table. Objects in an informer's cache are read-only (the pass reads them in
// place, and every other read deep-copies them), so sharing is safe.
func shareProfileTables(tables *intern.Table[[]v1alpha1.GPUInstanceProfile]) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		g, ok := obj.(*v1alpha1.GPUNode)
		if !ok {
			return obj, nil
		}
		// A transform of its own replaces the cache's default, which strips managedFields.
		g.ManagedFields = nil
		for i := range g.Status.GPUs {
			if table := g.Status.GPUs[i].Profiles; len(table) > 0 {
				g.Status.GPUs[i].Profiles = tables.Share(profileTableKey(table), table)
			}
		}
		return g, nil
	}
}

// maxProfileTables bounds the distinct profile tables shared (a model, a driver and a MIG
// mode make one; a fleet has a few).
const maxProfileTables = 256

// profileTableKey identifies a profile table by every field it holds.
func profileTableKey(table []v1alpha1.GPUInstanceProfile) string {
	var key strings.Builder
	for _, p := range table {
		fmt.Fprintf(&key, "%d|%q|%d|%d|%d|", p.ID, p.Name, p.MemoryMiB, p.Slices, p.MaxCount)
		for _, pl := range p.Placements {
			fmt.Fprintf(&key, "%d+%d,", pl.Start, pl.Size)
		}
		key.WriteByte(';')
	}
	return key.String()
}

// recordPod is the pod informer's transform: the cache holds each pod as a podrecord.Record,
// about a fifth of a slimmed Pod, and keeps the whole (slimmed) pod only while it is unbound
// and may ask for GPUs.
func recordPod(shared *podrecord.Interner) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil // a tombstone of a deleted object passes as it is
		}
		slimPod(p, shared)
		return podrecord.New(p, shared), nil
	}
}

// slimPod drops what pending demand never reads from a pod that its record may keep.
func slimPod(p *corev1.Pod, shared *podrecord.Interner) {
	slimMeta(&p.ManagedFields, p.Annotations)
	slimContainers(p.Spec.Containers, shared)
	slimContainers(p.Spec.InitContainers, shared)
	p.Spec.EphemeralContainers = nil
	p.Status.ContainerStatuses, p.Status.InitContainerStatuses, p.Status.EphemeralContainerStatuses = nil, nil, nil
	p.Status.PodIPs, p.Status.HostIPs, p.Status.Message = nil, nil, ""
}

// slimContainers keeps a container's name, resources and restart policy (a sidecar's counts
// for the pod's requests): image, command, environment, ports and probes go.
func slimContainers(cs []corev1.Container, shared *podrecord.Interner) {
	for i, c := range cs {
		c.Resources.Requests, c.Resources.Limits = shared.Resources(c.Resources.Requests), shared.Resources(c.Resources.Limits)
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
