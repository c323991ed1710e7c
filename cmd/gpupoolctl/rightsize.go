package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
	gpupoolpool "github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/rightsize"
)

const rightsizeLong = `List the GPU workloads (Deployments, StatefulSets, Jobs, DaemonSets, bare pods) of a namespace
(-n, or every namespace with -A) with the MIG profile their pods ask for, the GPU memory they use
(p95 and peak, as the node agents publish it in GPUNode status.usage), the smallest profile of
their pool's catalog that holds that use plus headroom, and the memory slices each pod would
give back. Nothing is changed: apply a recommendation by editing the workload's request.

A workload gets no recommendation ("CannotTell", with the reason and what to do) until one of
its pods has run --min-window with --min-samples samples, when its use sits flat at the
instance's size (a framework that preallocates), or when its pods disagree. Compute is not
measured: recommendations cover memory only.`

// rightsizeOutput is the -o json/yaml document.
type rightsizeOutput struct {
	Workloads []workloadOutput `json:"workloads"`
	// Unreadable lists what the user may not read, with the right that would show it.
	Unreadable []gap `json:"unreadable,omitempty"`
}

// workloadOutput is one workload's recommendation.
type workloadOutput struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	// Pool is the GPUPoolPolicy whose catalog the recommendation chose from; empty when no
	// single policy selects the pods' node (every profile without extras is then allowed).
	Pool string `json:"pool,omitempty"`
	Pods int    `json:"pods"`
	// Requested is the MIG profile each pod asks for, or "whole GPU".
	Requested string `json:"requested"`
	// P95MiB and PeakMiB are the highest across the pods with usage reported.
	P95MiB  int64             `json:"p95MiB"`
	PeakMiB int64             `json:"peakMiB"`
	Verdict rightsize.Verdict `json:"verdict"`
	Reason  rightsize.Reason  `json:"reason"`
	// Recommended is the profile to ask for; empty for CannotTell.
	Recommended string `json:"recommended,omitempty"`
	Message     string `json:"message"`
	Fix         string `json:"fix,omitempty"`
	// FreedSlices is the memory slices the recommendation gives back, over all the pods.
	FreedSlices int    `json:"freedSlices"`
	Compute     string `json:"compute,omitempty"`
}

type rightsizeFlags struct {
	all        bool
	minWindow  time.Duration
	minSamples int64
	basis      string
	headroom   float64
}

func (c *cli) rightsizeCommand() *cobra.Command {
	f := &rightsizeFlags{}
	cmd := &cobra.Command{
		Use:   "rightsize [-n NS | -A]",
		Short: "Recommend the MIG profile each GPU workload needs, from the memory its pods use",
		Long:  rightsizeLong,
		Args:  cobra.NoArgs,
	}
	out := addOutputFlags(cmd)
	cmd.Flags().BoolVarP(&f.all, "all-namespaces", "A", false, "List the workloads of every namespace.")
	cmd.Flags().DurationVar(&f.minWindow, "min-window", rightsize.DefaultMinWindow, "How long a pod must have been measured before its use counts.")
	cmd.Flags().Int64Var(&f.minSamples, "min-samples", rightsize.DefaultMinSamples, "How many samples a pod needs before its use counts.")
	cmd.Flags().StringVar(&f.basis, "basis", string(rightsize.BasisP95), "The statistic a profile must hold: p95, or peak for workloads that must never run out.")
	cmd.Flags().Float64Var(&f.headroom, "headroom", rightsize.DefaultHeadroom, "The fraction added to the basis before a profile is picked.")
	cmd.RunE = func(*cobra.Command, []string) error {
		if err := out.check(); err != nil {
			return err
		}
		opts, err := f.options()
		if err != nil {
			return err
		}
		sess, err := c.open(false)
		if err != nil {
			return err
		}
		defer sess.cancel()
		ns := sess.namespace
		if f.all {
			ns = ""
		}
		doc, err := readRightsize(sess.ctx, sess.client, ns, opts)
		if err != nil {
			return err
		}
		return printRightsize(out, doc, f.all, c.stdout)
	}
	return cmd
}

// options checks the flags and turns them into the recommender's options.
func (f *rightsizeFlags) options() (rightsize.Options, error) {
	o := rightsize.Options{Basis: rightsize.Basis(f.basis), MinWindow: f.minWindow, MinSamples: f.minSamples, Headroom: f.headroom}
	if o.Basis != rightsize.BasisP95 && o.Basis != rightsize.BasisPeak {
		return o, usageError("--basis=%q: want p95 or peak", f.basis)
	}
	if f.minWindow <= 0 || f.minSamples <= 0 {
		return o, usageError("--min-window and --min-samples must be positive")
	}
	if f.headroom < 0 {
		return o, usageError("--headroom=%v: want 0 or more (0.2 is 20%%)", f.headroom)
	}
	if f.headroom == 0 {
		o.Headroom = -1 // the recommender reads 0 as its default and a negative value as none
	}
	return o, nil
}

// readRightsize reads the pods of ns ("" for all), their owners, the GPUNodes' usage, the nodes
// and the policies, and recommends per workload.
func readRightsize(ctx context.Context, kc client.Client, ns string, opts rightsize.Options) (*rightsizeOutput, error) {
	doc := &rightsizeOutput{Workloads: []workloadOutput{}}
	var pods corev1.PodList
	if err := kc.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		if apierrors.IsForbidden(err) && ns == "" {
			return nil, failure(fmt.Errorf("you may not list pods in all namespaces: %s; or name one with -n", rightAllPods))
		}
		return nil, failure(fmt.Errorf("listing pods: %w", err))
	}
	var gpuNodes v1alpha1.GPUNodeList
	if err := kc.List(ctx, &gpuNodes); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, failure(fmt.Errorf("you may not list GPUNodes, where the agents publish usage: %s", rightViewer))
		}
		return nil, failure(fmt.Errorf("listing gpunodes: %w", err))
	}
	var nodes corev1.NodeList
	var policies v1alpha1.GPUPoolPolicyList
	var replicaSets appsv1.ReplicaSetList
	for _, l := range []struct {
		what  string
		list  client.ObjectList
		opts  []client.ListOption
		right string
	}{
		{"nodes", &nodes, nil, rightNodes},
		{"gpupoolpolicies", &policies, nil, rightViewer},
		{"replicasets", &replicaSets, []client.ListOption{client.InNamespace(ns)}, "ask for list on replicasets, to name Deployments"},
	} {
		switch err := kc.List(ctx, l.list, l.opts...); {
		case apierrors.IsForbidden(err):
			doc.Unreadable = append(doc.Unreadable, gap{What: l.what, Error: "forbidden", Right: l.right})
		case err != nil:
			return nil, failure(fmt.Errorf("listing %s: %w", l.what, err))
		}
	}
	doc.Workloads = recommendAll(pods.Items, replicaSets.Items, gpuNodes.Items, nodes.Items, policies.Items, opts)
	return doc, nil
}

// workloadKey names a workload: the pod's controller, through its ReplicaSet to its Deployment.
type workloadKey struct{ namespace, kind, name string }

// ownerOf is the workload a pod belongs to: its controller (a ReplicaSet's own controller when
// it has one, as a Deployment's ReplicaSets do), or the pod itself.
func ownerOf(pod *corev1.Pod, replicaSets map[[2]string]*appsv1.ReplicaSet) workloadKey {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return workloadKey{pod.Namespace, "Pod", pod.Name}
	}
	if ref.Kind == "ReplicaSet" {
		if rs := replicaSets[[2]string{pod.Namespace, ref.Name}]; rs != nil {
			if up := metav1.GetControllerOf(rs); up != nil {
				return workloadKey{pod.Namespace, up.Kind, up.Name}
			}
		}
	}
	return workloadKey{pod.Namespace, ref.Kind, ref.Name}
}

// requestedDevice is the device a pod asks for: a MIG profile's resource or a whole GPU
// (requested ""); ok is false for pods without one, or with a shared one, whose memory NVML
// cannot tell apart from their neighbours'.
func requestedDevice(pod *corev1.Pod) (requested string, ok bool) {
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		for _, r := range slices.Concat(slices.Collect(maps.Keys(c.Resources.Limits)), slices.Collect(maps.Keys(c.Resources.Requests))) {
			name := string(r)
			if profile, isMIG := mig.ProfileFromResource(name); isMIG && !strings.HasSuffix(name, nvidia.SharedSuffix) {
				return profile, true
			}
			if name == nvidia.ResourceGPU {
				ok = true
			}
		}
	}
	return "", ok
}

// recommendAll groups the GPU pods by workload and recommends for each.
func recommendAll(pods []corev1.Pod, replicaSets []appsv1.ReplicaSet, gpuNodes []v1alpha1.GPUNode, nodes []corev1.Node,
	policies []v1alpha1.GPUPoolPolicy, opts rightsize.Options) []workloadOutput {
	rsByName := map[[2]string]*appsv1.ReplicaSet{}
	for i := range replicaSets {
		rsByName[[2]string{replicaSets[i].Namespace, replicaSets[i].Name}] = &replicaSets[i]
	}
	usage := map[[2]string]v1alpha1.PodUsage{}
	for _, g := range gpuNodes {
		for _, u := range g.Status.Usage {
			usage[[2]string{u.Namespace, u.Name}] = u
		}
	}
	inv := inventory.Build(nodes, gpuNodes, nil, nil, inventory.Options{})
	type group struct {
		requested string
		node      string
		pods      []rightsize.PodSummary
		count     int
	}
	groups := map[workloadKey]*group{}
	for i := range pods {
		p := &pods[i]
		requested, ok := requestedDevice(p)
		if !ok || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		key := ownerOf(p, rsByName)
		g := groups[key]
		if g == nil {
			g = &group{requested: requested}
			groups[key] = g
		}
		g.count++
		g.node = cmp.Or(g.node, p.Spec.NodeName)
		if u, ok := usage[[2]string{p.Namespace, p.Name}]; ok {
			g.pods = append(g.pods, rightsize.PodSummary{Pod: p.Namespace + "/" + p.Name, Summary: rightsize.SummaryOf(u)})
		}
	}
	out := []workloadOutput{}
	for key, g := range groups {
		catalog, poolName := catalogFor(g.node, inv, policies)
		w := rightsize.Workload{Name: key.kind + " " + key.namespace + "/" + key.name, Requested: g.requested, Pods: g.pods}
		r := rightsize.Recommend(w, catalog, opts)
		row := workloadOutput{Namespace: key.namespace, Kind: key.kind, Name: key.name, Pool: poolName, Pods: g.count,
			Requested: cmp.Or(r.Requested, g.requested, "whole GPU"), Verdict: r.Verdict, Reason: r.Reason, Message: r.Message, Fix: r.Fix,
			FreedSlices: r.FreedMemorySlices * g.count, Compute: r.ComputeNote}
		if r.Verdict != rightsize.CannotTell {
			row.Recommended = r.Profile
		}
		for _, p := range g.pods {
			row.P95MiB, row.PeakMiB = max(row.P95MiB, p.P95MiB), max(row.PeakMiB, p.PeakMiB)
		}
		out = append(out, row)
	}
	slices.SortFunc(out, func(a, b workloadOutput) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// catalogFor is the catalog of the pool holding node: the GPU product the agent reports there,
// narrowed to the catalog entry of the one policy selecting the node (pool.CatalogEntry, as the
// planner applies it). A node no policy, or several, select gets the product's profiles
// without extras.
func catalogFor(node string, inv *inventory.Snapshot, policies []v1alpha1.GPUPoolPolicy) (rightsize.Catalog, string) {
	i := slices.IndexFunc(inv.Nodes, func(n *inventory.Node) bool { return n.Name == node })
	if i < 0 {
		return rightsize.Catalog{}, ""
	}
	n := inv.Nodes[i]
	j := slices.IndexFunc(n.GPUs, func(g *inventory.GPU) bool { return g.Product != nil })
	if j < 0 {
		return rightsize.Catalog{}, ""
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
		return catalog, ""
	}
	if _, entry := gpupoolpool.CatalogEntry(selecting[0].Spec.Catalog, n, gpu); entry != nil {
		for _, p := range entry.MIGProfiles {
			catalog.Allowed = append(catalog.Allowed, string(p))
		}
	}
	return catalog, selecting[0].Name
}
