package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

const planLiveHelp = `List the cluster's RepartitionPlans, or show one node by node: each GPU's layout from -> to,
the pods it evicts, why and where they land, the pods it serves, and each node's progress.

Usage:
  %[1]s plan [PLAN] [-o table|json|yaml] [--kubeconfig FILE] [--context NAME]
  %[1]s plan -f SNAPSHOT ...   the offline what-if, as "%[1]s what-if -f SNAPSHOT"

Flags:
`

func runPlanLive(program string, args []string, stdout, stderr io.Writer) int {
	c := newCommand(program, "plan", stdout, stderr, true)
	return c.live(args, fmt.Sprintf(planLiveHelp, program), atMostOne("plan name"), func(sess *session) int {
		ctx, kc, positional := sess.ctx, sess.client, sess.args
		if len(positional) == 1 {
			plan := &v1alpha1.RepartitionPlan{}
			if err := kc.Get(ctx, types.NamespacedName{Name: positional[0]}, plan); err != nil {
				return c.failed(fmt.Errorf("reading plan %s: %w (%s plan lists them)", positional[0], err, program))
			}
			if c.output != "table" {
				return c.emit(plan)
			}
			ew := &errWriter{w: stdout}
			writeLivePlan(ew, plan, program)
			if ew.err != nil {
				return c.failed(ew.err)
			}
			return exitOK
		}
		var plans v1alpha1.RepartitionPlanList
		if err := kc.List(ctx, &plans); err != nil {
			return c.failed(fmt.Errorf("listing plans: %w", err))
		}
		slices.SortFunc(plans.Items, func(a, b v1alpha1.RepartitionPlan) int {
			return cmp.Or(b.CreationTimestamp.Compare(a.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
		})
		if c.output != "table" {
			return c.emit(plans.Items)
		}
		ew := &errWriter{w: stdout}
		if len(plans.Items) == 0 {
			ew.printf("No RepartitionPlan exists.\n")
			return exitOK
		}
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "NAME\tPOLICY\tPHASE\tNODES\tDISRUPTIVE\tHASH\tAGE\n")
		for _, p := range plans.Items {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%s\t%s\n", p.Name, p.Spec.Policy, cmp.Or(string(p.Status.Phase), "-"),
				cmp.Or(p.Status.Progress, fmt.Sprintf("0/%d", len(p.Spec.Steps))), p.Spec.Disruptive, p.Spec.Hash,
				time.Since(p.CreationTimestamp.Time).Round(time.Second))
		}
		_ = tw.Flush()
		if ew.err != nil {
			return c.failed(ew.err)
		}
		return exitOK
	})
}

func writeLivePlan(ew *errWriter, plan *v1alpha1.RepartitionPlan, program string) {
	ew.printf("Plan %s of policy %s: %s, %s nodes done, hash %s\n", plan.Name, plan.Spec.Policy,
		cmp.Or(string(plan.Status.Phase), "new"), cmp.Or(plan.Status.Progress, fmt.Sprintf("0/%d", len(plan.Spec.Steps))), plan.Spec.Hash)
	for _, c := range plan.Status.Conditions {
		ew.wrap("  ", "    ", fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	writeSteps(ew, plan)
	if len(plan.Spec.Expected.Pods) > 0 {
		pods := make([]types.NamespacedName, len(plan.Spec.Expected.Pods))
		for i, p := range plan.Spec.Expected.Pods {
			pods[i] = types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
		}
		ew.wrap("  ", "    ", fmt.Sprintf("Serves once done: %s: %s.", plural(len(pods), "pod"), podList(pods)))
	}
	writeStepStates(ew, plan.Status.Nodes, plan.Status.Waiting)
	if plan.Status.Phase == v1alpha1.PlanAwaitingApproval {
		ew.printf("  Approve: %s approve %s    Reject: %s reject %s --reason \"...\"\n", program, plan.Name, program, plan.Name)
	}
}

const approveHelp = `Approve a RepartitionPlan: annotate it %[2]s=<its spec.hash>, read from the plan itself,
so that the approval binds to exactly the steps shown by "%[1]s plan PLAN".

Usage:
  %[1]s approve PLAN [--kubeconfig FILE] [--context NAME]

Flags:
`

const rejectHelp = `Reject a RepartitionPlan: annotate it %[2]s=<reason>; it ends Rejected before it starts.

Usage:
  %[1]s reject PLAN --reason TEXT [--kubeconfig FILE] [--context NAME]

Flags:
`

// runDecide is approve and reject: one annotation on the plan, written with an optimistic
// lock so that an approval never lands on a plan that changed since it was read.
func runDecide(program, verb string, args []string, stdout, stderr io.Writer) int {
	c := newCommand(program, verb, stdout, stderr, false)
	var reason string
	help := fmt.Sprintf(approveHelp, program, v1alpha1.AnnotationApprove)
	if verb == "reject" {
		c.fs.StringVar(&reason, "reason", "", "why the plan is rejected, shown in its status (required)")
		help = fmt.Sprintf(rejectHelp, program, v1alpha1.AnnotationReject)
	}
	return c.live(args, help, func(p []string) string {
		switch {
		case len(p) != 1:
			return fmt.Sprintf("want exactly one plan name (%s plan lists them)", program)
		case verb == "reject" && strings.TrimSpace(reason) == "":
			return "--reason is required: say why, it is shown in the plan's status and events"
		}
		return ""
	}, func(sess *session) int {
		ctx, kc := sess.ctx, sess.client
		plan := &v1alpha1.RepartitionPlan{}
		if err := kc.Get(ctx, types.NamespacedName{Name: sess.args[0]}, plan); err != nil {
			return c.failed(fmt.Errorf("reading plan %s: %w", sess.args[0], err))
		}
		switch plan.Status.Phase {
		case "", v1alpha1.PlanAwaitingApproval:
		default:
			return c.failed(fmt.Errorf("plan %s is %s: only a plan awaiting approval can be %sd", plan.Name, plan.Status.Phase, verb))
		}
		patch := client.MergeFromWithOptions(plan.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if verb == "approve" {
			metav1.SetMetaDataAnnotation(&plan.ObjectMeta, v1alpha1.AnnotationApprove, plan.Spec.Hash)
		} else {
			metav1.SetMetaDataAnnotation(&plan.ObjectMeta, v1alpha1.AnnotationReject, reason)
		}
		if err := kc.Patch(ctx, plan, patch); err != nil {
			return c.failed(fmt.Errorf("annotating plan %s: %w (if it changed meanwhile, review it again)", plan.Name, err))
		}
		if verb == "approve" {
			fmt.Fprintf(stdout, "plan %s approved (hash %s); follow it with: %s status %s\n", plan.Name, plan.Spec.Hash, program, plan.Spec.Policy)
		} else {
			fmt.Fprintf(stdout, "plan %s rejected: %s\n", plan.Name, reason)
		}
		return exitOK
	})
}
