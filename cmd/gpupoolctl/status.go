package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nvidia"
)

const statusLong = `Show each pool: its nodes, GPUs and MIG layouts, pending demand per request shape with
feasible/eligible nodes, stranded MIG instances per profile, and the current plan's progress.

With --watch, the status is printed again each time a GPUPoolPolicy or RepartitionPlan changes.
-o json|yaml prints the same as a document, GPU layouts as structured fields; -o name names the
policies.`

// statusOutput is the -o json/yaml document.
type statusOutput struct {
	Pools []poolOutput `json:"pools"`
	// Unreadable lists what the user may not read (nodes, GPUNode reports, plans), with the
	// right that would show it.
	Unreadable []gap `json:"unreadable,omitempty"`
}

type poolOutput struct {
	Policy     string                       `json:"policy"`
	Approval   v1alpha1.ApprovalMode        `json:"approval"`
	Status     v1alpha1.GPUPoolPolicyStatus `json:"status"`
	Nodes      []nodeOutput                 `json:"nodes"`
	Plan       *planProgress                `json:"plan,omitempty"`
	Conditions []string                     `json:"-"`
}

type nodeOutput struct {
	Node  string      `json:"node"`
	State string      `json:"state"`
	GPUs  []gpuOutput `json:"gpus"`
}

// gpuOutput is one GPU's layout as data: what the table writes as "3g.71gb x2, 1g.18gb".
type gpuOutput struct {
	Index   int32  `json:"index"`
	Product string `json:"product,omitempty"`
	// MIG is true when MIG mode is enabled now.
	MIG bool `json:"mig"`
	// Instances counts the GPU's MIG instances per profile.
	Instances v1alpha1.ProfileCounts `json:"instances,omitempty"`
	// Sharing is the device plugin's sharing mode of a whole GPU.
	Sharing string `json:"sharing,omitempty"`
	Error   string `json:"error,omitempty"`
}

type planProgress struct {
	Name string `json:"name"`
	// Current is true for the policy's current plan, false for its most recent one, shown
	// when no plan is current.
	Current  bool                      `json:"current"`
	Phase    v1alpha1.PlanPhase        `json:"phase"`
	Progress string                    `json:"progress,omitempty"`
	Nodes    []v1alpha1.NodeStepStatus `json:"nodes,omitempty"`
	Waiting  []v1alpha1.NodeWait       `json:"waiting,omitempty"`
}

// nodeLimit is how many nodes a pool's table lists; -o wide and -o json have them all.
const nodeLimit = 30

func (c *cli) statusCommand() *cobra.Command {
	var watchFlag bool
	cmd := &cobra.Command{
		Use:               "status [POLICY]",
		Short:             "Show each pool's nodes, layouts, demand, stranded MIG instances and plan",
		Long:              statusLong,
		Args:              atMostOne("policy name"),
		ValidArgsFunction: c.complete(func() client.ObjectList { return &v1alpha1.GPUPoolPolicyList{} }, false),
	}
	out := addOutputFlags(cmd)
	cmd.Flags().BoolVarP(&watchFlag, "watch", "w", false, "After printing the status, print it again each time a policy or plan changes.")
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		if err := out.check(); err != nil {
			return err
		}
		sess, err := c.open(watchFlag)
		if err != nil {
			return err
		}
		defer sess.cancel()
		policy := ""
		if len(args) == 1 {
			policy = args[0]
		}
		var policies v1alpha1.GPUPoolPolicyList
		var plans v1alpha1.RepartitionPlanList
		show := func() error {
			doc, err := readStatus(sess.ctx, sess.client, policy, &policies, &plans)
			if err != nil {
				return err
			}
			return printStatus(out, doc, c.stdout)
		}
		if err := show(); err != nil || !watchFlag {
			return err
		}
		return follow(sess.ctx, sess.client, []watched{{list: &policies}, {list: &plans}}, func(watch.Event) error {
			if out.table() {
				fmt.Fprintln(c.stdout)
			}
			return show()
		})
	}
	return cmd
}

// readStatus reads what status shows, into policies and plans (whose resourceVersions a watch
// starts from). Policies are required; nodes, GPUNode reports and plans the user may not read
// are listed as such.
func readStatus(ctx context.Context, kc client.Client, policy string, policies *v1alpha1.GPUPoolPolicyList,
	plans *v1alpha1.RepartitionPlanList) (*statusOutput, error) {
	if err := kc.List(ctx, policies); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, failure(fmt.Errorf("you may not list GPUPoolPolicies: %s", rightViewer))
		}
		return nil, failure(fmt.Errorf("listing gpupoolpolicies: %w", err))
	}
	doc := &statusOutput{Pools: []poolOutput{}}
	var nodes corev1.NodeList
	var gpuNodes v1alpha1.GPUNodeList
	for _, l := range []struct {
		what  string
		list  client.ObjectList
		right string
	}{{"repartitionplans", plans, rightViewer}, {"nodes", &nodes, rightNodes}, {"gpunodes", &gpuNodes, rightViewer}} {
		switch err := kc.List(ctx, l.list); {
		case apierrors.IsForbidden(err):
			doc.Unreadable = append(doc.Unreadable, gap{What: l.what, Error: "forbidden", Right: l.right})
		case err != nil:
			return nil, failure(fmt.Errorf("listing %s: %w", l.what, err))
		}
	}
	items := slices.Clone(policies.Items)
	slices.SortFunc(items, func(a, b v1alpha1.GPUPoolPolicy) int { return cmp.Compare(a.Name, b.Name) })
	if policy != "" {
		items = slices.DeleteFunc(items, func(p v1alpha1.GPUPoolPolicy) bool { return p.Name != policy })
		if len(items) == 0 {
			return nil, failure(fmt.Errorf("no GPUPoolPolicy named %q: kubectl get gpupoolpolicies lists them", policy))
		}
	}
	for i := range items {
		doc.Pools = append(doc.Pools, pool(&items[i], nodes.Items, gpuNodes.Items, plans.Items))
	}
	return doc, nil
}

func printStatus(out *outputFlags, doc *statusOutput, w io.Writer) error {
	if !out.table() {
		var names []runtime.Object
		for _, p := range doc.Pools {
			names = append(names, named(&v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: p.Policy}}))
		}
		return out.printDocument(doc, names, w)
	}
	ew := &errWriter{w: w}
	if len(doc.Pools) == 0 {
		ew.printf("No GPUPoolPolicy exists: gpupool plans nothing until one selects GPU nodes (see config/samples).\n")
	}
	for i, p := range doc.Pools {
		if i > 0 {
			ew.printf("\n")
		}
		writePool(ew, &p, out.wide())
	}
	for _, g := range doc.Unreadable {
		ew.wrap("Not seen: ", "  ", g.String())
	}
	if ew.err != nil {
		return failure(ew.err)
	}
	return nil
}

func pool(p *v1alpha1.GPUPoolPolicy, nodes []corev1.Node, gpuNodes []v1alpha1.GPUNode, plans []v1alpha1.RepartitionPlan) poolOutput {
	out := poolOutput{Policy: p.Name, Approval: cmp.Or(p.Spec.Disruption.Approval, v1alpha1.ApprovalManual), Status: p.Status, Nodes: []nodeOutput{}}
	for _, c := range p.Status.Conditions {
		out.Conditions = append(out.Conditions, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Reason))
	}
	plan, current := policyPlan(p, plans)
	if plan != nil {
		out.Plan = &planProgress{Name: plan.Name, Current: current, Phase: plan.Status.Phase,
			Progress: cmp.Or(plan.Status.Progress, fmt.Sprintf("0/%d", len(plan.Spec.Steps))), Nodes: plan.Status.Nodes, Waiting: plan.Status.Waiting}
	}
	sel, err := p.Spec.NodeSelector.Selector()
	if err != nil {
		return out
	}
	reports := map[string]*v1alpha1.GPUNode{}
	for i := range gpuNodes {
		reports[gpuNodes[i].Name] = &gpuNodes[i]
	}
	for i := range nodes {
		n := &nodes[i]
		if !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		row := nodeOutput{Node: n.Name, GPUs: []gpuOutput{}, State: "ready"}
		if n.Spec.Unschedulable {
			row.State = "cordoned"
			if by := n.Annotations[v1alpha1.AnnotationCordonedBy]; by != "" {
				row.State = "cordoned by " + by
			}
		}
		if plan != nil {
			if j := slices.IndexFunc(plan.Status.Nodes, func(s v1alpha1.NodeStepStatus) bool { return s.Node == n.Name }); j >= 0 &&
				plan.Status.Nodes[j].State != v1alpha1.NodeDone {
				row.State = strings.ToLower(string(plan.Status.Nodes[j].State)) + " (" + plan.Name + ")"
			}
		}
		if g := reports[n.Name]; g == nil {
			row.State += ", no agent report"
		} else {
			for _, gpu := range g.Status.GPUs {
				row.GPUs = append(row.GPUs, gpuOf(gpu, n.Labels[nvidia.LabelGPUProduct]))
			}
		}
		out.Nodes = append(out.Nodes, row)
	}
	slices.SortFunc(out.Nodes, func(a, b nodeOutput) int { return cmp.Compare(a.Node, b.Node) })
	return out
}

// policyPlan is the policy's current plan, or else its most recent one.
func policyPlan(p *v1alpha1.GPUPoolPolicy, plans []v1alpha1.RepartitionPlan) (plan *v1alpha1.RepartitionPlan, current bool) {
	for i := range plans {
		rp := &plans[i]
		if rp.Spec.Policy != p.Name {
			continue
		}
		if rp.Name == p.Status.CurrentPlan {
			return rp, true
		}
		if plan == nil || rp.CreationTimestamp.After(plan.CreationTimestamp.Time) {
			plan = rp
		}
	}
	return plan, false
}

// gpuOf is what a GPU holds: its MIG instances by profile, or whole / shared. The product is
// named as a policy's catalog names it (inventory.ProductLabel), as the policy status does.
func gpuOf(gpu v1alpha1.GPUStatus, nodeLabel string) gpuOutput {
	out := gpuOutput{Index: gpu.Index, Product: inventory.ProductLabel(gpu.Product, nodeLabel), Error: gpu.Error, Sharing: string(gpu.Sharing),
		MIG: gpu.MIGMode != nil && gpu.MIGMode.Current == "Enabled"}
	if out.MIG {
		out.Sharing = ""
		out.Instances = gpu.ProfileCounts()
	}
	return out
}

// gpuLayout writes a GPU's layout for the table, e.g. "0: 3g.71gb x2, 1g.18gb".
func gpuLayout(g gpuOutput) string {
	var layout string
	switch {
	case g.Error != "":
		layout = "error: " + g.Error
	case !g.MIG && g.Sharing != "":
		layout = "whole GPU, " + g.Sharing
	case !g.MIG:
		layout = "whole GPU (MIG off)"
	default:
		layout = layoutText(g.Instances)
	}
	return fmt.Sprintf("%d: %s", g.Index, layout)
}

func writePool(ew *errWriter, p *poolOutput, wide bool) {
	st := p.Status
	ew.printf("Policy %s: %s, %s, approval %s\n", p.Policy, plural(int(st.Pool.Nodes), "node"), plural(int(st.Pool.GPUs), "GPU"), p.Approval)
	if len(p.Conditions) > 0 {
		ew.wrap("  Conditions: ", "    ", strings.Join(p.Conditions, ", "))
	}
	if st.Pool.UnreportedNodes > 0 {
		ew.printf("  %s left out of planning: no fresh agent report\n", plural(int(st.Pool.UnreportedNodes), "node"))
	}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	if wide {
		fmt.Fprintf(tw, "  NODE\tSTATE\tPRODUCT\tGPU LAYOUTS\n")
	} else {
		fmt.Fprintf(tw, "  NODE\tSTATE\tGPU LAYOUTS\n")
	}
	for i, n := range p.Nodes {
		if i == nodeLimit && !wide {
			break
		}
		layouts := make([]string, 0, len(n.GPUs))
		products := []string{}
		for _, g := range n.GPUs {
			layouts = append(layouts, gpuLayout(g))
			if g.Product != "" && !slices.Contains(products, g.Product) {
				products = append(products, g.Product)
			}
		}
		if wide {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", n.Node, n.State, orDash(strings.Join(products, ", ")), orDash(strings.Join(layouts, " | ")))
		} else {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", n.Node, n.State, orDash(strings.Join(layouts, " | ")))
		}
	}
	_ = tw.Flush()
	if n := len(p.Nodes) - nodeLimit; n > 0 && !wide {
		ew.printf("  ... and %d more nodes (-o wide or -o json lists them all)\n", n)
	}
	if len(st.Demand) == 0 {
		ew.printf("  Demand: no GPU pod pending.\n")
	} else {
		tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  SHAPE\tPENDING\tFEASIBLE/ELIGIBLE NODES\n")
		for _, d := range st.Demand {
			fmt.Fprintf(tw, "  %s\t%d\t%d/%d\n", d.Resource, d.PendingPods, d.FeasibleNodes, d.EligibleNodes)
		}
		_ = tw.Flush()
	}
	if len(st.Pool.Slices) > 0 {
		tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  PROFILE\tTOTAL\tUSED\tFREE\tSTRANDED\n")
		for _, s := range st.Pool.Slices {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\n", s.Profile, s.Total, s.Used, s.Free, s.Stranded)
		}
		_ = tw.Flush()
	}
	if p.Plan == nil {
		ew.printf("  Plan: none in progress.\n")
		return
	}
	label := "Plan"
	if !p.Plan.Current {
		label = "Last plan"
	}
	ew.printf("  %s %s: %s, %s nodes done\n", label, p.Plan.Name, p.Plan.Phase, p.Plan.Progress)
	writeStepStates(ew, p.Plan.Nodes, p.Plan.Waiting)
	if p.Plan.Phase == v1alpha1.PlanAwaitingApproval {
		ew.printf("    Review it with: kubectl gpupool plan %s; approve it with: kubectl gpupool approve %s\n", p.Plan.Name, p.Plan.Name)
	}
}

// writeStepStates lists each started step's state and message, and what pending steps wait for.
func writeStepStates(ew *errWriter, nodes []v1alpha1.NodeStepStatus, waiting []v1alpha1.NodeWait) {
	if len(nodes) == 0 && len(waiting) == 0 {
		return
	}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "    NODE\tSTEP\tMESSAGE\n")
	for _, n := range nodes {
		fmt.Fprintf(tw, "    %s\t%s\t%s\n", n.Node, n.State, orDash(n.Message))
	}
	for _, w := range waiting {
		fmt.Fprintf(tw, "    %s\tPending\twaits for %s\n", w.Node, strings.Join(w.For, ", "))
	}
	_ = tw.Flush()
}
