package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/snapshot"
	"github.com/gpupool/gpupool/internal/triage"
)

const whyLong = `Explain why a GPU pod is pending (or, for a running pod, whether it holds the device it
asked for and whether its containers hit CUDA out-of-memory), from the live cluster.

The answer names the layer that holds the pod and the dimension that blocks it:
  NotInPool         no GPUPoolPolicy's pool has a node the pod may run on (nodeSelector, affinity, taints)
  Placement         nodes whose GPUs could host it lack CPU, memory or other resources; or, on GPUs
                    NVIDIA's DRA driver serves in DynamicMIG mode, enough memory slices are free but at no
                    placement its MIG profile allows (shown as each GPU's slice map), or a DeviceTaintRule
                    taints the free one; "reserve headroom" when the policy's standby shapes hold it,
                    for which gpupool moves no claim
  PartitionShape    capacity exists under other MIG profiles; a plan re-carves it (or the catalog forbids the shape)
  Capacity          every suitable GPU is taken
  DisruptionBudget  serving it needs a disruption a PodDisruptionBudget or the policy's budgets forbid now
  Scheduling        it fits now; the scheduler or device plugin has to catch up
  NotYetDemand      the planner does not count it yet (minPendingAge, scheduling gates)
  Running           it runs on the device it asked for
  Allocator         it runs, but a container reports CUDA out-of-memory: the allocator, not the partitioning
and a node matrix: per node, placement and free/needed for each resource the pod asks for
(the first 20 nodes; -o wide or -o json lists them all). The planner runs read-only, as the
controller would now; nothing is written.

A user who may read only their namespace gets what it shows: the scheduler's message, gpupool's
Events on the pod, the plan that serves it and the pools' demand (with ClusterRole
gpupool-viewer), and the list of what they could not read, with the right to ask for.`

func (c *cli) whyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:               "why POD",
		Short:             "Explain why a GPU pod is pending, or what a running one holds",
		Long:              whyLong,
		Example:           "  " + c.name + " why trainer-0 -n team-a\n  " + c.name + " why trainer-0 -n team-a -o jsonpath='{.layer}'",
		Args:              exactlyOne("want exactly one pod name, e.g. " + c.name + " why trainer-0 -n team-a"),
		ValidArgsFunction: c.complete(func() client.ObjectList { return &corev1.PodList{} }, true),
	}
	out := addOutputFlags(cmd)
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		if err := out.check(); err != nil {
			return err
		}
		sess, err := c.open(false)
		if err != nil {
			return err
		}
		defer sess.cancel()
		v, err := explain(sess.ctx, sess.client, types.NamespacedName{Namespace: sess.namespace, Name: args[0]})
		if err != nil {
			return failure(err)
		}
		if !out.table() {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: v.Pod.Namespace, Name: v.Pod.Name}}
			return out.printDocument(v, []runtime.Object{named(pod)}, c.stdout)
		}
		ew := &errWriter{w: c.stdout}
		writeWhy(ew, v, out.wide())
		if ew.err != nil {
			return failure(ew.err)
		}
		return nil
	}
	return cmd
}

// explain triages the pod with what the user may read: the planner's answer when they may read
// everything it plans on, else the answer limitedVerdict makes of their namespace and of what
// gpupool recorded, with what they could not read.
func explain(ctx context.Context, c client.Client, key types.NamespacedName) (*whyOutput, error) {
	v, err := readVisible(ctx, c, key.Namespace)
	if err != nil {
		return nil, err
	}
	pod, err := podOf(ctx, c, v, key)
	if err != nil {
		return nil, err
	}
	var events corev1.EventList
	switch err := c.List(ctx, &events, client.InNamespace(key.Namespace), client.MatchingFields{"involvedObject.name": key.Name}); {
	case apierrors.IsForbidden(err):
		v.gaps = append(v.gaps, gap{What: "events in namespace " + key.Namespace, Error: "forbidden",
			Right: "ask for the view ClusterRole, bound with a RoleBinding in namespace " + key.Namespace})
	case err != nil:
		return nil, fmt.Errorf("listing the events of pod %s: %w", key, err)
	}
	events.Items = slices.DeleteFunc(events.Items, func(e corev1.Event) bool { return e.InvolvedObject.Kind != "Pod" || e.InvolvedObject.UID != pod.UID })
	if !v.complete() {
		return limitedVerdict(pod, v, events.Items)
	}
	rep, err := v.snap.Plan(snapshot.Options{Now: time.Now()})
	if err != nil {
		return nil, fmt.Errorf("planning: %w", err)
	}
	verdict, err := triage.Explain(v.snap, rep, v.plans, key)
	if err != nil {
		return nil, err
	}
	return &whyOutput{Verdict: verdict, Pod: podRef{Namespace: key.Namespace, Name: key.Name}, Complete: true,
		Scheduler: schedulerMessage(pod), Events: gpupoolEvents(events.Items), Unreadable: v.gaps}, nil
}

// podOf is the pod from the pods read, or read alone for a user who may get it but not list.
func podOf(ctx context.Context, c client.Client, v *visible, key types.NamespacedName) (*corev1.Pod, error) {
	if i := slices.IndexFunc(v.snap.Pods, func(p corev1.Pod) bool { return p.Namespace == key.Namespace && p.Name == key.Name }); i >= 0 {
		return &v.snap.Pods[i], nil
	}
	pod := &corev1.Pod{}
	switch err := c.Get(ctx, key, pod); {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("pod %s not found: check the name and namespace (-n)", key)
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("you may not read pod %s: ask for the view ClusterRole, bound with a RoleBinding in namespace %s", key, key.Namespace)
	case err != nil:
		return nil, fmt.Errorf("reading pod %s: %w", key, err)
	}
	return pod, nil
}

// writeWhy writes the verdict, then what the answer rests on.
func writeWhy(ew *errWriter, out *whyOutput, wide bool) {
	writeVerdict(ew, out.Verdict, wide)
	if out.Scheduler != "" {
		ew.wrap("  Scheduler: ", "             ", out.Scheduler)
	}
	for _, e := range out.Events {
		ew.wrap("  gpupool:   ", "             ", e.Reason+": "+e.Message)
	}
	for _, d := range out.Demand {
		ew.wrap("  Pool:      ", "             ", fmt.Sprintf("%s counts %s pending for %s, %d/%d feasible/eligible nodes", d.Policy,
			plural(int(d.PendingPods), "pod"), d.Resource, d.FeasibleNodes, d.EligibleNodes))
	}
	if len(out.Unreadable) == 0 {
		return
	}
	if !out.Complete {
		ew.printf("\n  This answer rests on what you may read: the planner did not run here.\n")
	}
	for i, g := range out.Unreadable {
		label := "             "
		if i == 0 {
			label = "  Not seen:  "
		}
		ew.wrap(label+"- ", "               ", g.String())
	}
}

// matrixLimit is how many node rows the table shows; -o json has them all.
const matrixLimit = 20

func writeVerdict(ew *errWriter, v *triage.Verdict, wide bool) {
	ew.printf("Pod %s (%s) asks for %s\n", v.Pod, v.Phase, v.Asks)
	ew.printf("  Layer:     %s\n", v.Layer)
	ew.printf("  Blocking:  %s\n", v.Blocking)
	if v.Policy != "" {
		ew.printf("  Pool:      %s\n", v.Policy)
	}
	ew.wrap("  Why:       ", "             ", v.Reason)
	if v.Plan != nil {
		progress := ""
		if v.Plan.Progress != "" {
			progress = ", " + v.Plan.Progress + " nodes done"
		}
		ew.printf("  Plan:      %s (%s%s)\n", v.Plan.Name, v.Plan.Phase, progress)
	}
	ew.wrap("  Next:      ", "             ", v.Next)
	for i, e := range v.Evidence {
		label := "             "
		if i == 0 {
			label = "  Collect:   "
		}
		ew.wrap(label+"- ", "               ", e)
	}
	writeSliceMaps(ew, v.SliceMaps)
	if len(v.Nodes) == 0 {
		return
	}
	ew.printf("\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	head := []string{"NODE", "POOL"}
	for _, d := range v.Nodes[0].Resources {
		head = append(head, strings.ToUpper(d.Name)+" FREE/NEED")
	}
	head = append(head, "FITS", "PLACEMENT")
	fmt.Fprintln(tw, "  "+strings.Join(head, "\t"))
	for i, row := range v.Nodes {
		if i == matrixLimit && !wide {
			break
		}
		cells := []string{row.Node, orDash(row.Policy)}
		for _, d := range row.Resources {
			mark := ""
			if !d.OK {
				mark = " !"
			}
			cells = append(cells, d.Free+"/"+d.Need+mark)
		}
		fits := "no"
		if row.Fits {
			fits = "yes"
		}
		cells = append(cells, fits, row.Placement)
		fmt.Fprintln(tw, "  "+strings.Join(cells, "\t"))
	}
	_ = tw.Flush()
	if n := len(v.Nodes) - matrixLimit; n > 0 && !wide {
		ew.printf("  ... and %d more nodes (-o wide or -o json lists them all)\n", n)
	}
}

// writeSliceMaps draws each DynamicMIG GPU's memory slices with a legend of who holds them,
// the evidence behind a Placement verdict there.
func writeSliceMaps(ew *errWriter, maps []triage.SliceMap) {
	for i, m := range maps {
		label := "             "
		if i == 0 {
			label = "  Slices:    "
		}
		ew.printf("%s%s gpu %d: %s  %s\n", label, m.Node, m.GPU, m.Map, m.Fit)
		for _, l := range m.Legend {
			ew.wrap("               ", "                   ", l)
		}
		for _, n := range m.Notes {
			ew.wrap("               note: ", "                     ", n)
		}
	}
	if len(maps) > 0 {
		ew.printf("               (. = free memory slice; the letters are the claims holding the others)\n")
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
