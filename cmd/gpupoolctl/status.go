package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

const statusHelp = `Show each pool: its nodes, GPUs and MIG layouts, pending demand per request shape with
feasible/eligible nodes, stranded slices per profile, and the current plan's progress.

Usage:
  %[1]s status [POLICY] [-o table|json|yaml] [--kubeconfig FILE] [--context NAME]

Flags:
`

// statusOutput is the -o json/yaml document.
type statusOutput struct {
	Pools []poolOutput `json:"pools"`
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
	Node   string   `json:"node"`
	GPUs   []string `json:"gpus"`
	State  string   `json:"state"`
	Layout string   `json:"-"`
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

// nodeLimit is how many nodes a pool's table lists; -o json has them all.
const nodeLimit = 30

func runStatus(program string, args []string, stdout, stderr io.Writer) int {
	c := newCommand(program, "status", stdout, stderr, true)
	return c.live(args, fmt.Sprintf(statusHelp, program), atMostOne("policy name"), func(sess *session) int {
		positional := sess.args
		snap, plans, err := readCluster(sess.ctx, sess.client)
		if err != nil {
			return c.failed(err)
		}
		policies := snap.Policies
		slices.SortFunc(policies, func(a, b v1alpha1.GPUPoolPolicy) int { return cmp.Compare(a.Name, b.Name) })
		if len(positional) == 1 {
			policies = slices.DeleteFunc(slices.Clone(policies), func(p v1alpha1.GPUPoolPolicy) bool { return p.Name != positional[0] })
			if len(policies) == 0 {
				return c.failed(fmt.Errorf("no GPUPoolPolicy named %q: kubectl get gpupoolpolicies lists them", positional[0]))
			}
		}
		out := statusOutput{Pools: []poolOutput{}}
		for i := range policies {
			out.Pools = append(out.Pools, pool(&policies[i], snap.Nodes, snap.GPUNodes, plans))
		}
		if c.output != "table" {
			return c.emit(out)
		}
		ew := &errWriter{w: stdout}
		if len(out.Pools) == 0 {
			ew.printf("No GPUPoolPolicy exists: gpupool plans nothing until one selects GPU nodes (see config/samples).\n")
		}
		for i, p := range out.Pools {
			if i > 0 {
				ew.printf("\n")
			}
			writePool(ew, &p)
		}
		if ew.err != nil {
			return c.failed(ew.err)
		}
		return exitOK
	})
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
	sel, err := p.Spec.NodeSelector.AsSelector()
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
		row := nodeOutput{Node: n.Name, GPUs: []string{}, State: "ready"}
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
				row.GPUs = append(row.GPUs, fmt.Sprintf("%d: %s", gpu.Index, gpuLayout(gpu)))
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

// gpuLayout writes what a GPU holds: its MIG instances by profile, or whole / shared.
func gpuLayout(gpu v1alpha1.GPUStatus) string {
	if gpu.Error != "" {
		return "error: " + gpu.Error
	}
	if gpu.MIGMode == nil || gpu.MIGMode.Current != "Enabled" {
		if gpu.Sharing != "" {
			return "whole GPU, " + string(gpu.Sharing)
		}
		return "whole GPU (MIG off)"
	}
	counts := v1alpha1.ProfileCounts{}
	for _, in := range gpu.Instances {
		counts[in.Profile]++
	}
	return layoutText(counts)
}

func writePool(ew *errWriter, p *poolOutput) {
	st := p.Status
	ew.printf("Policy %s: %s, %s, approval %s\n", p.Policy, plural(int(st.Pool.Nodes), "node"), plural(int(st.Pool.GPUs), "GPU"), p.Approval)
	if len(p.Conditions) > 0 {
		ew.wrap("  Conditions: ", "    ", strings.Join(p.Conditions, ", "))
	}
	if st.Pool.UnreportedNodes > 0 {
		ew.printf("  %s left out of planning: no fresh agent report\n", plural(int(st.Pool.UnreportedNodes), "node"))
	}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  NODE\tSTATE\tGPU LAYOUTS\n")
	for i, n := range p.Nodes {
		if i == nodeLimit {
			break
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", n.Node, n.State, orDash(strings.Join(n.GPUs, " | ")))
	}
	_ = tw.Flush()
	if n := len(p.Nodes) - nodeLimit; n > 0 {
		ew.printf("  ... and %d more nodes (-o json lists them all)\n", n)
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
