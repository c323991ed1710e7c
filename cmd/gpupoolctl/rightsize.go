package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/podrecord"
	"github.com/gpupool/gpupool/internal/rightsize"
	"github.com/gpupool/gpupool/internal/rightsize/workloads"
)

const rightsizeLong = `List the GPU workloads (Deployments, StatefulSets, Jobs, DaemonSets, bare pods) of a namespace
(-n, or every namespace with -A) with the MIG profile their pods ask for, the GPU memory they use
(p95 and peak, as the node agents publish it in GPUNode status.usage), the smallest profile of
their pool's catalog that holds that use plus headroom, and the memory slices each pod would
give back. Nothing is changed: apply a recommendation by editing the workload's request.

A workload gets no recommendation ("CannotTell", with the reason and what to do) until one of
its pods has run --min-window with --min-samples samples, when its use sits flat at the
instance's size (a framework that preallocates), or when its pods disagree. With
--prometheus-url, each pod's compute (DCGM exporter's DCGM_FI_PROF_GR_ENGINE_ACTIVE) is read
too and a recommendation keeps the compute slices it needs; without it, recommendations cover
memory only and say so.`

// rightsizeOutput is the -o json/yaml document.
type rightsizeOutput struct {
	Workloads []workloadOutput `json:"workloads"`
	// Unreadable lists what the user may not read, with the right that would show it.
	Unreadable []gap `json:"unreadable,omitempty"`
	// ComputeMeasured is true when compute activity was read (--prometheus-url): then it
	// narrows the recommendations too.
	ComputeMeasured bool `json:"computeMeasured,omitempty"`
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
	cmd.Flags().StringVar(&f.basis, "basis", "", "The statistic a profile must hold: p95, or peak for workloads that must never run out (default: the pool's spec.rightsizing.basis, P95 unless set).")
	cmd.Flags().Float64Var(&f.headroom, "headroom", rightsize.DefaultHeadroom, "The fraction added to the basis before a profile is picked.")
	compute := addComputeFlags(cmd)
	cmd.RunE = func(*cobra.Command, []string) error {
		if err := out.check(); err != nil {
			return err
		}
		opts, err := f.options()
		if err != nil {
			return err
		}
		src, err := compute.source()
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
		measured, err := activity(sess.ctx, src)
		if err != nil {
			return err
		}
		doc, err := readRightsize(sess.ctx, sess.client, ns, opts, measured)
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
	if o.Basis != "" && o.Basis != rightsize.BasisP95 && o.Basis != rightsize.BasisPeak {
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
// and the policies, and recommends per workload; compute is each pod's measured activity, nil
// when not measured.
func readRightsize(ctx context.Context, kc client.Client, ns string, opts rightsize.Options, compute rightsize.ComputeActivity) (*rightsizeOutput, error) {
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
	doc.Workloads = recommendAll(workloads.Input{Pods: podrecord.FromPods(podPointers(pods.Items)), ReplicaSets: replicaSets.Items,
		GPUNodes: gpuNodes.Items, Nodes: nodes.Items, Policies: policies.Items, Compute: compute}, opts)
	doc.ComputeMeasured = compute != nil
	return doc, nil
}

// recommendAll groups the GPU pods by workload and recommends for each (workloads.Recommend).
func recommendAll(in workloads.Input, opts rightsize.Options) []workloadOutput {
	results := workloads.Recommend(in, opts)
	out := make([]workloadOutput, 0, len(results))
	for _, r := range results {
		out = append(out, workloadOutput{Namespace: r.Namespace, Kind: r.Kind, Name: r.Name, Pool: r.Pool, Pods: len(r.Pods),
			Requested: r.Requested, P95MiB: r.P95MiB, PeakMiB: r.PeakMiB, Verdict: r.Verdict, Reason: r.Reason,
			Recommended: r.Profile, Message: r.Message, Fix: r.Fix, FreedSlices: r.FreedSlices, Compute: r.ComputeNote})
	}
	return out
}

// podPointers points at pods, as podrecord.FromPods takes them.
func podPointers(pods []corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, len(pods))
	for i := range pods {
		out[i] = &pods[i]
	}
	return out
}
