package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

const planLong = `List the cluster's RepartitionPlans, or show one node by node: each GPU's layout from -> to,
the pods it evicts, why and where they land, the pods it serves, and each node's progress.

With --watch, the list prints a row (or a shown plan prints again) each time a plan changes.
-o json|yaml|name|jsonpath prints the RepartitionPlan objects as kubectl get does.

"plan -f SNAPSHOT" is the offline what-if, as "what-if -f SNAPSHOT".`

func (c *cli) planCommand() *cobra.Command {
	var watchFlag bool
	cmd := &cobra.Command{
		Use:               "plan [PLAN]",
		Short:             "List the RepartitionPlans, or show one node by node",
		Long:              planLong,
		Args:              atMostOne("plan name"),
		ValidArgsFunction: c.complete(func() client.ObjectList { return &v1alpha1.RepartitionPlanList{} }, false),
	}
	out := addOutputFlags(cmd)
	wf := addWhatIfFlags(cmd)
	cmd.Flags().BoolVarP(&watchFlag, "watch", "w", false, "After listing or showing, print each change of the plans.")
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		if err := out.check(); err != nil {
			return err
		}
		if wf.file != "" {
			// "plan -f FILE" was the offline what-if before the live commands; it stays one.
			if len(args) > 0 {
				return usageError("unexpected argument %q: name the snapshot with -f (see %s what-if --help)", args[0], c.name)
			}
			return c.whatIf(wf, out)
		}
		sess, err := c.open(watchFlag)
		if err != nil {
			return err
		}
		defer sess.cancel()
		if len(args) == 1 {
			return c.showPlan(sess, out, args[0], watchFlag)
		}
		return c.listPlans(sess, out, watchFlag)
	}
	return cmd
}

func (c *cli) showPlan(sess *session, out *outputFlags, name string, watchFlag bool) error {
	plan := &v1alpha1.RepartitionPlan{}
	if err := sess.client.Get(sess.ctx, types.NamespacedName{Name: name}, plan); err != nil {
		return failure(fmt.Errorf("reading plan %s: %w (%s plan lists them)", name, err, c.name))
	}
	show := func(plan *v1alpha1.RepartitionPlan) error {
		if !out.table() {
			return out.printObject(plan, c.stdout)
		}
		ew := &errWriter{w: c.stdout}
		writeLivePlan(ew, plan, c.name)
		if ew.err != nil {
			return failure(ew.err)
		}
		return nil
	}
	if err := show(plan); err != nil || !watchFlag {
		return err
	}
	// From the version shown on, this plan only.
	from := &v1alpha1.RepartitionPlanList{ListMeta: metav1.ListMeta{ResourceVersion: plan.ResourceVersion}}
	byName := client.MatchingFields{"metadata.name": name}
	return follow(sess.ctx, sess.client, []watched{{list: from, opts: []client.ListOption{byName}}}, func(ev watch.Event) error {
		plan, ok := ev.Object.(*v1alpha1.RepartitionPlan)
		if !ok {
			return nil
		}
		if ev.Type == watch.Deleted {
			fmt.Fprintf(c.stderr, "%s plan: plan %s was deleted\n", c.name, plan.Name)
			return nil
		}
		if out.table() {
			fmt.Fprintln(c.stdout)
		}
		return show(plan)
	})
}

func (c *cli) listPlans(sess *session, out *outputFlags, watchFlag bool) error {
	var plans v1alpha1.RepartitionPlanList
	if err := sess.client.List(sess.ctx, &plans); err != nil {
		return failure(fmt.Errorf("listing plans: %w", err))
	}
	items := slices.Clone(plans.Items)
	slices.SortFunc(items, func(a, b v1alpha1.RepartitionPlan) int {
		return cmp.Or(b.CreationTimestamp.Compare(a.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	if out.table() {
		if len(items) == 0 && !watchFlag {
			fmt.Fprintf(c.stdout, "No RepartitionPlan exists.\n")
			return nil
		}
		planHeader(tw, out.wide())
		for i := range items {
			planRow(tw, &items[i], out.wide())
		}
		if err := tw.Flush(); err != nil {
			return failure(err)
		}
	} else {
		objs := make([]client.Object, len(items))
		for i := range items {
			objs[i] = &items[i]
		}
		list, err := listOf(objs)
		if err != nil {
			return failure(err)
		}
		if err := out.printObject(list, c.stdout); err != nil {
			return failure(err)
		}
	}
	if !watchFlag {
		return nil
	}
	return follow(sess.ctx, sess.client, []watched{{list: &plans}}, func(ev watch.Event) error {
		plan, ok := ev.Object.(*v1alpha1.RepartitionPlan)
		if !ok {
			return nil
		}
		if !out.table() {
			return out.printObject(plan, c.stdout)
		}
		planRow(tw, plan, out.wide())
		return tw.Flush()
	})
}

func planHeader(w io.Writer, wide bool) {
	head := "NAME\tPOLICY\tPHASE\tNODES\tDISRUPTIVE\tHASH\tAGE"
	if wide {
		head += "\tGPUS\tEVICTIONS\tSERVES"
	}
	fmt.Fprintln(w, head)
}

func planRow(w io.Writer, p *v1alpha1.RepartitionPlan, wide bool) {
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%t\t%s\t%s", p.Name, p.Spec.Policy, cmp.Or(string(p.Status.Phase), "-"),
		cmp.Or(p.Status.Progress, fmt.Sprintf("0/%d", len(p.Spec.Steps))), p.Spec.Disruptive, p.Spec.Hash,
		duration.HumanDuration(time.Since(p.CreationTimestamp.Time)))
	if wide {
		gpus, evictions := 0, 0
		for _, s := range p.Spec.Steps {
			gpus += len(s.GPUs)
			evictions += len(s.Evictions)
		}
		fmt.Fprintf(w, "\t%d\t%d\t%d", gpus, evictions, len(p.Spec.Expected.Pods))
	}
	fmt.Fprintln(w)
}

func writeLivePlan(ew *errWriter, plan *v1alpha1.RepartitionPlan, program string) {
	ew.printf("Plan %s of policy %s: %s, %s nodes done, hash %s\n", plan.Name, plan.Spec.Policy,
		cmp.Or(string(plan.Status.Phase), "new"), cmp.Or(plan.Status.Progress, fmt.Sprintf("0/%d", len(plan.Spec.Steps))), plan.Spec.Hash)
	// Who decided, as the API server recorded it (status.approvedBy / rejectedBy).
	if plan.Status.ApprovedBy != "" {
		ew.printf("  Approved by %s at %s\n", plan.Status.ApprovedBy, approvedAt(plan))
	}
	if plan.Status.RejectedBy != "" {
		ew.printf("  Rejected by %s\n", plan.Status.RejectedBy)
	}
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

func approvedAt(plan *v1alpha1.RepartitionPlan) string {
	if plan.Status.ApprovedTime == nil {
		return "an unrecorded time"
	}
	return plan.Status.ApprovedTime.UTC().Format(time.RFC3339)
}

const approveLong = `Approve a RepartitionPlan: annotate it %[2]s=<its spec.hash>, read from the plan itself,
so that the approval binds to exactly the steps shown by "%[1]s plan PLAN".`

const rejectLong = `Reject a RepartitionPlan: annotate it %[2]s=<reason>; it ends Rejected before it starts.`

// decideCommand is approve and reject: one annotation on the plan, written with an optimistic
// lock so that an approval never lands on a plan that changed since it was read.
func (c *cli) decideCommand(verb string) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:               verb + " PLAN",
		Short:             "Approve a plan, bound to its hash",
		Long:              fmt.Sprintf(approveLong, c.name, v1alpha1.AnnotationApprove),
		Args:              exactlyOne(fmt.Sprintf("want exactly one plan name (%s plan lists them)", c.name)),
		ValidArgsFunction: c.complete(func() client.ObjectList { return &v1alpha1.RepartitionPlanList{} }, false),
	}
	if verb == "reject" {
		cmd.Use, cmd.Short = "reject PLAN --reason TEXT", "Reject a plan"
		cmd.Long = fmt.Sprintf(rejectLong, c.name, v1alpha1.AnnotationReject)
		cmd.Flags().StringVar(&reason, "reason", "", "why the plan is rejected, shown in its status and events (required)")
	}
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		if verb == "reject" && strings.TrimSpace(reason) == "" {
			return usageError("--reason is required: say why, it is shown in the plan's status and events")
		}
		sess, err := c.open(false)
		if err != nil {
			return err
		}
		defer sess.cancel()
		return c.decide(sess, verb, args[0], reason)
	}
	return cmd
}

func (c *cli) decide(sess *session, verb, name, reason string) error {
	ctx, kc := sess.ctx, sess.client
	plan := &v1alpha1.RepartitionPlan{}
	if err := kc.Get(ctx, types.NamespacedName{Name: name}, plan); err != nil {
		return failure(fmt.Errorf("reading plan %s: %w", name, err))
	}
	switch plan.Status.Phase {
	case "", v1alpha1.PlanAwaitingApproval:
	default:
		return failure(fmt.Errorf("plan %s is %s: only a plan awaiting approval can be %sd", plan.Name, plan.Status.Phase, verb))
	}
	patch := client.MergeFromWithOptions(plan.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if verb == "approve" {
		metav1.SetMetaDataAnnotation(&plan.ObjectMeta, v1alpha1.AnnotationApprove, plan.Spec.Hash)
	} else {
		metav1.SetMetaDataAnnotation(&plan.ObjectMeta, v1alpha1.AnnotationReject, reason)
	}
	if err := kc.Patch(ctx, plan, patch); err != nil {
		return failure(fmt.Errorf("annotating plan %s: %w (if it changed meanwhile, review it again)", plan.Name, err))
	}
	if verb == "approve" {
		fmt.Fprintf(c.stdout, "plan %s approved (hash %s); follow it with: %s status %s --watch\n", plan.Name, plan.Spec.Hash, c.name, plan.Spec.Policy)
	} else {
		fmt.Fprintf(c.stdout, "plan %s rejected: %s\n", plan.Name, reason)
	}
	return nil
}
