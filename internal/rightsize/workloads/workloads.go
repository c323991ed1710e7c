// Package workloads turns a cluster's objects into right-sizing recommendations: it groups the
// GPU pods by the workload that owns them (a Deployment through its ReplicaSet, a StatefulSet,
// a Job, ... or the bare pod), joins the usage the node agents publish in GPUNode
// status.usage and the compute a ComputeSource measured, finds the catalog of the pool each
// workload runs in, and asks rightsize.Recommend. It is pure (no client, no clock), so the
// manager's recommendation pass, kubectl gpupool rightsize and what-if --rightsized give the
// same answer for the same objects.
//
// It is a package of its own, rather than files of package rightsize, because it needs the
// inventory and the pool's catalog rules (internal/pool, which pulls in the planner), and the
// node agent, which imports rightsize for its histogram, must stay small.
package workloads

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/podrecord"
	gpupoolpool "github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/rightsize"
)

// WholeGPU is what Result.Requested says of pods that ask for a whole GPU.
const WholeGPU = "whole GPU"

// Input is what Recommend reads. Only Pods and GPUNodes are required: without ReplicaSets a
// Deployment's pods are grouped by the Deployment their pod-template-hash label names, else by
// their ReplicaSet; without Nodes no pool's catalog is found (every workload is then
// CannotTell, UnknownCatalog); without Policies each node's product's profiles without extras
// are allowed.
type Input struct {
	// Pods as the manager's cache keeps them (podrecord.FromPods makes them of Pods).
	Pods        []*podrecord.Record
	ReplicaSets []appsv1.ReplicaSet
	GPUNodes    []v1alpha1.GPUNode
	Nodes       []corev1.Node
	Policies    []v1alpha1.GPUPoolPolicy
	// Compute is the measured activity per pod; nil when compute was not measured.
	Compute rightsize.ComputeActivity
}

// Key names a workload: the pod's controller, through its ReplicaSet to its Deployment.
type Key struct{ Namespace, Kind, Name string }

func (k Key) String() string { return k.Kind + " " + k.Namespace + "/" + k.Name }

// Result is one workload's recommendation with what it is drawn from.
type Result struct {
	Key
	// Pool is the GPUPoolPolicy whose catalog the recommendation chose from; empty when no
	// single policy selects the pods' node.
	Pool string
	// Pods are the workload's GPU pods that have not finished, sorted.
	Pods []types.NamespacedName
	// Requested is the MIG profile each pod asks for, or WholeGPU.
	Requested string
	// P95MiB and PeakMiB are the highest across the pods with usage reported.
	P95MiB, PeakMiB int64
	// RequestedMiB and UsedMiB sum, over the pods with usage reported, the memory of the
	// device each runs on and its p95 use: what the workload holds against what it uses.
	RequestedMiB, UsedMiB int64
	// Measured is how many pods have usage reported.
	Measured int
	rightsize.Recommendation
	// FreedSlices is the memory slices the recommendation gives back over all the pods.
	FreedSlices int
}

// Confident reports whether the recommendation changes the request and may be applied: a
// Shrink or a Grow. Keep changes nothing and CannotTell says nothing.
func (r *Result) Confident() bool {
	return (r.Verdict == rightsize.Shrink || r.Verdict == rightsize.Grow) && r.Profile != "" && r.Profile != r.Requested
}

// Recommend groups in's GPU pods by workload and recommends for each, sorted by namespace,
// kind and name.
func Recommend(in Input, opts rightsize.Options) []Result {
	rsByName := map[types.NamespacedName]*appsv1.ReplicaSet{}
	for i := range in.ReplicaSets {
		rsByName[types.NamespacedName{Namespace: in.ReplicaSets[i].Namespace, Name: in.ReplicaSets[i].Name}] = &in.ReplicaSets[i]
	}
	usage := map[types.NamespacedName]v1alpha1.PodUsage{}
	for _, g := range in.GPUNodes {
		for _, u := range g.Status.Usage {
			usage[types.NamespacedName{Namespace: u.Namespace, Name: u.Name}] = u
		}
	}
	inv := inventory.Build(in.Nodes, in.GPUNodes, nil, nil, inventory.Options{})
	type group struct {
		requested string
		node      string
		summaries []rightsize.PodSummary
		pods      []types.NamespacedName
	}
	groups := map[Key]*group{}
	for _, p := range in.Pods {
		requested, ok := RequestedDevice(p.Requests)
		if !ok || p.Phase == corev1.PodSucceeded || p.Phase == corev1.PodFailed {
			continue
		}
		key := ownerOf(p, rsByName)
		g := groups[key]
		if g == nil {
			g = &group{requested: requested}
			groups[key] = g
		}
		name := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
		g.pods = append(g.pods, name)
		g.node = cmp.Or(g.node, p.NodeName)
		if u, ok := usage[name]; ok {
			g.summaries = append(g.summaries, rightsize.PodSummary{Pod: name.String(), Summary: rightsize.SummaryOf(u)})
		}
	}
	out := make([]Result, 0, len(groups))
	for key, g := range groups {
		catalog, policy := catalogFor(g.node, inv, in.Policies)
		poolName := ""
		o := opts
		if policy != nil {
			poolName = policy.Name
			// The pool's policy says which statistic to hold, unless the caller chose one.
			if o.Basis == "" && policy.Spec.Rightsizing.Basis == v1alpha1.RightsizePeak {
				o.Basis = rightsize.BasisPeak
			}
		}
		slices.SortFunc(g.pods, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
		w := rightsize.Workload{Name: key.String(), Requested: g.requested, Pods: g.summaries, ComputeActivity: in.Compute.Of(g.pods)}
		r := rightsize.Recommend(w, catalog, o)
		res := Result{Key: key, Pool: poolName, Pods: g.pods, Recommendation: r, Measured: len(g.summaries),
			Requested: cmp.Or(r.Requested, g.requested, WholeGPU), FreedSlices: r.FreedMemorySlices * len(g.pods)}
		if r.Verdict == rightsize.CannotTell {
			res.Profile, res.ProfileMiB = "", 0
		}
		for _, s := range g.summaries {
			res.P95MiB, res.PeakMiB = max(res.P95MiB, s.P95MiB), max(res.PeakMiB, s.PeakMiB)
			res.RequestedMiB += s.CeilingMiB
			res.UsedMiB += s.P95MiB
		}
		out = append(out, res)
	}
	slices.SortFunc(out, func(a, b Result) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// ownerOf is the workload a pod belongs to: its controller (a ReplicaSet's own controller when
// it has one, as a Deployment's ReplicaSets do), or the pod itself.
func ownerOf(pod *podrecord.Record, replicaSets map[types.NamespacedName]*appsv1.ReplicaSet) Key {
	if pod.Controller == "" {
		return Key{pod.Namespace, "Pod", pod.Name}
	}
	if pod.Controller == "ReplicaSet" && pod.ControllerGroup == appsv1.GroupName {
		if rs := replicaSets[types.NamespacedName{Namespace: pod.Namespace, Name: pod.ControllerName}]; rs != nil {
			if up := metav1.GetControllerOf(rs); up != nil {
				return Key{pod.Namespace, up.Kind, up.Name}
			}
			return Key{pod.Namespace, "ReplicaSet", rs.Name}
		}
		// The manager caches no ReplicaSets, and a snapshot holds none: the Deployment
		// controller names each of its ReplicaSets <deployment>-<pod-template-hash> and labels
		// its pods with the hash (kubernetes pkg/controller/deployment/sync.go,
		// getNewReplicaSet), a label only it sets.
		if hash := pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; hash != "" {
			if d, ok := strings.CutSuffix(pod.ControllerName, "-"+hash); ok && d != "" {
				return Key{pod.Namespace, "Deployment", d}
			}
		}
	}
	return Key{pod.Namespace, pod.Controller, pod.ControllerName}
}

// RequestedDevice is the device a pod's requests (podrecord.Record.Requests) ask for: a MIG
// profile's resource or a whole GPU (requested ""); ok is false for pods without one, or with a
// shared one, whose memory NVML cannot tell apart from their neighbours'.
func RequestedDevice(requests corev1.ResourceList) (requested string, ok bool) {
	for _, r := range slices.Sorted(maps.Keys(requests)) {
		q := requests[r]
		device, isDevice := deviceOf(r)
		switch {
		case !isDevice || q.Sign() <= 0:
		case device != "":
			return device, true
		default:
			ok = true
		}
	}
	return "", ok
}

// deviceOf reads a resource name as a device: a MIG profile ("3g.71gb") or a whole GPU ("");
// ok is false for any other resource, and for a shared device, whose pods hold a share.
func deviceOf(r corev1.ResourceName) (device string, ok bool) {
	name := string(r)
	if name == nvidia.ResourceGPU {
		return "", true
	}
	if profile, isMIG := mig.ProfileFromResource(name); isMIG && strings.HasPrefix(name, mig.ResourcePrefix) && !strings.HasSuffix(name, nvidia.SharedSuffix) {
		return profile, true
	}
	return "", false
}

// catalogFor is the catalog of the pool holding node: the GPU product the agent reports there,
// narrowed to the catalog entry of the one policy selecting the node (pool.CatalogEntry, as the
// planner applies it), with that policy (whose spec.rightsizing applies). A node no policy, or
// several, select gets the product's profiles without extras, and no policy.
func catalogFor(node string, inv *inventory.Snapshot, policies []v1alpha1.GPUPoolPolicy) (rightsize.Catalog, *v1alpha1.GPUPoolPolicy) {
	i := slices.IndexFunc(inv.Nodes, func(n *inventory.Node) bool { return n.Name == node })
	if i < 0 {
		return rightsize.Catalog{}, nil
	}
	n := inv.Nodes[i]
	j := slices.IndexFunc(n.GPUs, func(g *inventory.GPU) bool { return g.Product != nil })
	if j < 0 {
		return rightsize.Catalog{}, nil
	}
	gpu := n.GPUs[j]
	catalog := rightsize.Catalog{Product: gpu.Product}
	var selecting []*v1alpha1.GPUPoolPolicy
	for k := range policies {
		sel, err := policies[k].Spec.NodeSelector.Selector()
		if err == nil && n.Object != nil && sel.Matches(labels.Set(n.Object.Labels)) {
			selecting = append(selecting, &policies[k])
		}
	}
	if len(selecting) != 1 {
		return catalog, nil
	}
	if _, entry := gpupoolpool.CatalogEntry(selecting[0].Spec.Catalog, n, gpu); entry != nil {
		for _, p := range entry.MIGProfiles {
			catalog.Allowed = append(catalog.Allowed, string(p))
		}
	}
	return catalog, selecting[0]
}
