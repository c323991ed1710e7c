package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/snapshot"
	"github.com/gpupool/gpupool/internal/triage"
)

const whyHelp = `Explain why a GPU pod is pending (or, for a running pod, whether it holds the device it
asked for and whether its containers hit CUDA out-of-memory), from the live cluster.

Usage:
  %[1]s why POD [-n NAMESPACE] [-o table|json|yaml] [--kubeconfig FILE] [--context NAME]

The answer names the layer that holds the pod and the dimension that blocks it:
  NotInPool         no GPUPoolPolicy's pool has a node the pod may run on (nodeSelector, affinity, taints)
  Placement         nodes whose GPUs could host it lack CPU, memory or other resources
  PartitionShape    capacity exists under other MIG profiles; a plan re-carves it (or the catalog forbids the shape)
  Capacity          every suitable GPU is taken
  DisruptionBudget  serving it needs a disruption a PodDisruptionBudget or the policy's budgets forbid now
  Scheduling        it fits now; the scheduler or device plugin has to catch up
  NotYetDemand      the planner does not count it yet (minPendingAge, scheduling gates)
  Running           it runs on the device it asked for
  Allocator         it runs, but a container reports CUDA out-of-memory: the allocator, not the partitioning
and a node matrix: per node, placement and free/needed for each resource the pod asks for.
The planner runs read-only, as the controller would now; nothing is written.

Flags:
`

func runWhy(program string, args []string, stdout, stderr io.Writer) int {
	c := newCommand(program, "why", stdout, stderr, true)
	return c.live(args, fmt.Sprintf(whyHelp, program), func(p []string) string {
		if len(p) != 1 {
			return fmt.Sprintf("want exactly one pod name, e.g. %s why trainer-0 -n team-a", program)
		}
		return ""
	}, func(sess *session) int {
		snap, plans, err := readCluster(sess.ctx, sess.client)
		if err != nil {
			return c.failed(err)
		}
		rep, err := snap.Plan(snapshot.Options{Now: time.Now()})
		if err != nil {
			return c.failed(fmt.Errorf("planning: %w", err))
		}
		v, err := triage.Explain(snap, rep, plans, types.NamespacedName{Namespace: sess.namespace, Name: sess.args[0]})
		if err != nil {
			return c.failed(err)
		}
		if c.output != "table" {
			return c.emit(v)
		}
		ew := &errWriter{w: stdout}
		writeVerdict(ew, v)
		if ew.err != nil {
			return c.failed(ew.err)
		}
		return exitOK
	})
}

// matrixLimit is how many node rows the table shows; -o json has them all.
const matrixLimit = 20

func writeVerdict(ew *errWriter, v *triage.Verdict) {
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
		if i == matrixLimit {
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
	if n := len(v.Nodes) - matrixLimit; n > 0 {
		ew.printf("  ... and %d more nodes (-o json lists them all)\n", n)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
