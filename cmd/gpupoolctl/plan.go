package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/rollout"
	"github.com/gpupool/gpupool/internal/snapshot"
)

const whatIfLong = `What if: the RepartitionPlans gpupool would propose now, for a saved cluster snapshot or for
the live cluster. Nothing is written. ("plan -f FILE" is the same as "what-if -f FILE".)

Take the snapshot with:
  kubectl get nodes,pods,pdb,gpunodes,gpupoolpolicies -A -o yaml > snapshot.yaml

FILE is that List (YAML or JSON), a stream of YAML documents or JSON objects, or a single
object; "-" reads stdin. Nodes, Pods, PodDisruptionBudgets, GPUNodes and GPUPoolPolicies are
read; other kinds are counted and ignored. Each policy is planned on the nodes its
nodeSelector picks; a node two policies select is left alone by both.

Output: a table by default; -o json (or yaml, jsonpath...) prints one object
  {"plans": [RepartitionPlan...], "unserved": [{"pod", "policy", "reason", "message"}...],
   "stranded": {"before": {profile: count}, "after": {profile: count}}}
and -o name the plans.

With --rightsized, the output also says, per pool, how many GPUs and nodes the running GPU pods
would free if every Shrink and Grow recommendation of "kubectl gpupool rightsize" were applied:
the pods' devices packed afresh onto the pool's GPUs as they ask and as recommended (the
difference is the recommendations', not a better packing's), and "rightsized" in -o json. It
needs the usage the node agents publish in GPUNode status.usage, which a snapshot carries only
if it was taken where the agents publish it; without usage it says so and recommends nothing.

Exit status: 0 on success, also when nothing needs to change; 2 when the input is unreadable
or invalid, with one line naming the object ("item N" is .items[N]) and the field.`

// whatIfFlags are what-if's own flags, which "plan -f" shares.
type whatIfFlags struct {
	file, nowText, policy string
	live                  bool
	agents                liveFlags
	// rightsized adds the right-sized packing (whatif_rightsized.go); what-if only.
	rightsized bool
	evidence   rightsizedEvidence
}

func addWhatIfFlags(cmd *cobra.Command) *whatIfFlags {
	w := &whatIfFlags{}
	cmd.Flags().StringVarP(&w.file, "filename", "f", "", "snapshot FILE to plan, or - for stdin")
	cmd.Flags().StringVar(&w.nowText, "now", "", "planning time (RFC 3339); default: the newest timestamp in the input, else the current time")
	cmd.Flags().StringVar(&w.policy, "policy", "", "plan only the GPUPoolPolicy of this NAME; default: every policy in the input")
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
	return w
}

func (c *cli) whatIfCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "what-if (-f SNAPSHOT | --live)",
		Short: "The plans gpupool would propose now, for a snapshot or the live cluster; nothing is written",
		Long:  whatIfLong,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError("unexpected argument %q: name the snapshot with -f (see %s what-if --help)", args[0], c.name)
			}
			return nil
		},
	}
	out := addOutputFlags(cmd)
	wf := addWhatIfFlags(cmd)
	addLiveFlags(cmd, wf)
	addRightsizedFlag(cmd, wf)
	addRightsizedEvidenceFlags(cmd, &wf.evidence)
	cmd.RunE = func(_ *cobra.Command, _ []string) error {
		switch {
		case wf.file == "" && !wf.live:
			return usageError("-f FILE or --live is required: the snapshot to plan (- for stdin), or the live cluster (see %s what-if --help)", c.name)
		case wf.file != "" && wf.live:
			return usageError("-f and --live exclude each other: plan either a snapshot or the live cluster")
		}
		if err := out.check(); err != nil {
			return err
		}
		return c.whatIf(wf, out)
	}
	return cmd
}

// whatIf runs the planner on a snapshot file or on the live cluster.
func (c *cli) whatIf(wf *whatIfFlags, out *outputFlags) error {
	var override time.Time
	if wf.nowText != "" {
		t, err := time.Parse(time.RFC3339, wf.nowText)
		if err != nil {
			return usageError("--now %q: want an RFC 3339 time such as 2026-11-29T12:00:00Z", wf.nowText)
		}
		override = t.UTC()
	}
	var snap *snapshot.Snapshot
	var err error
	opts := snapshot.Options{Policy: wf.policy}
	if wf.live {
		// Planned at the time it is read, as the controller's pass is; reports are judged fresh
		// or stale as the manager judges them.
		if override.IsZero() {
			override = time.Now().UTC()
		}
		if snap, err = c.readLive(&wf.agents, override); err != nil {
			return err
		}
		opts.MaxReportAge = wf.agents.maxReportAge
	} else if snap, err = readSnapshot(wf.file, c.stdin); err != nil {
		return usageError("%v", err)
	}
	for _, w := range snap.Warnings {
		fmt.Fprintf(c.stderr, "%s: warning: %s\n", c.name, w)
	}
	opts.Now = snap.PlanningTime(override, time.Now)
	rep, err := snap.Plan(opts)
	if err != nil {
		return usageError("%v", err)
	}
	var rs *rightsizedOutput
	if wf.rightsized {
		ro, err := wf.evidence.options()
		if err != nil {
			return err
		}
		var replicaSets []appsv1.ReplicaSet
		if wf.live {
			replicaSets = c.liveReplicaSets()
		}
		rs = rightsized(snap, replicaSets, wf.live, ro)
	}
	if !out.table() {
		doc := document(rep)
		doc.Rightsized = rs
		names := make([]runtime.Object, 0, len(doc.Plans))
		for _, p := range doc.Plans {
			names = append(names, p)
		}
		err = out.printDocument(doc, names, c.stdout)
	} else {
		err = writeTable(c.stdout, rep, snap, override.IsZero())
		if err == nil && rs != nil {
			ew := &errWriter{w: c.stdout}
			writeRightsized(ew, rs)
			err = ew.err
		}
	}
	if err != nil {
		return failure(fmt.Errorf("writing the plan: %w", err))
	}
	return nil
}

func readSnapshot(file string, stdin io.Reader) (*snapshot.Snapshot, error) {
	if file == "-" {
		return snapshot.Read(stdin)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("reading the snapshot: %w", err)
	}
	defer f.Close()
	snap, err := snapshot.Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return snap, nil
}

// tableWidth is where long messages wrap, so the table reads in a 100-column terminal.
const tableWidth = 96

// listLimit is how many pod names a line lists before summarising the rest.
const listLimit = 8

// writeTable renders the report for a person.
func writeTable(w io.Writer, rep *snapshot.Report, snap *snapshot.Snapshot, defaultNow bool) error {
	ew := &errWriter{w: w}
	for i, pr := range rep.Policies {
		if i > 0 {
			ew.printf("\n")
		}
		writePolicy(ew, &pr, rep.Unserved)
	}
	ew.printf("\n")
	when := rep.Now.UTC().Format(time.RFC3339)
	switch {
	case !defaultNow:
		ew.printf("Planned at %s (--now).\n", when)
	case snap.Newest.Equal(rep.Now):
		ew.printf("Planned at %s, the newest timestamp in the input (set --now to change it).\n", when)
	default:
		ew.printf("Planned at %s, the current time: the input carries no timestamp.\n", when)
	}
	if n := snap.IgnoredCount(); n > 0 {
		kinds := make([]string, 0, len(snap.Ignored))
		for _, k := range slices.Sorted(maps.Keys(snap.Ignored)) {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, snap.Ignored[k]))
		}
		ew.printf("Ignored %d objects of other kinds (%s).\n", n, strings.Join(kinds, ", "))
	}
	return ew.err
}

func writePolicy(ew *errWriter, pr *snapshot.PolicyReport, unserved []snapshot.UnservedPod) {
	res := pr.Result
	approval := pr.Policy.Spec.Disruption.Approval
	if approval == "" {
		approval = v1alpha1.ApprovalManual
	}
	ew.printf("Policy %s: %s, %s pending, approval %s\n", pr.Policy.Name,
		plural(res.PoolNodes, "node"), plural(pr.Pending, "pod"), approval)
	ew.printf("  Budgets: %s may evict pods, %s may only re-carve idle GPUs\n",
		plural(res.Budget, "node"), plural(res.ReconfigureBudget, "node"))
	if res.StepBound > 0 {
		ew.printf("  Cut to %s so that the plan fits in the API server; the demand it leaves is planned once it has run.\n",
			plural(res.StepBound, "node"))
	}
	if pr.Unusable != "" {
		ew.wrap("  ", "    ", "The controller plans nothing for this policy until its spec is fixed: "+pr.Unusable+".")
		return
	}
	if pr.Policy.Spec.Planning.Paused {
		ew.printf("  Planning is paused (spec.planning.paused): no plan is proposed.\n")
	}
	if pr.Plan == nil {
		ew.printf("  No change: %s.\n", noChangeReason(pr))
	} else {
		writePlan(ew, pr)
	}
	writeProposal(ew, pr)
	for _, node := range slices.Sorted(maps.Keys(pr.Frozen)) {
		ew.printf("  Left alone: node %s (%s).\n", node, pr.Frozen[node])
	}
	if len(res.Served) > 0 {
		ew.wrap("  ", "    ", fmt.Sprintf("Served once the plan is done: %s: %s.", plural(len(res.Served), "pod"), podList(res.Served)))
	}
	if len(res.FitsNow) > 0 {
		ew.wrap("  ", "    ", fmt.Sprintf("Fit the current layout, no change needed (the scheduler should place them): %s: %s.",
			plural(len(res.FitsNow), "pod"), podList(res.FitsNow)))
	}
	var mine []snapshot.UnservedPod
	for _, u := range unserved {
		if u.Policy == pr.Policy.Name {
			mine = append(mine, u)
		}
	}
	if len(mine) == 0 {
		ew.printf("  Unserved: none.\n")
	} else {
		ew.printf("  Unserved: %s.\n", plural(len(mine), "pod"))
		for _, u := range mine {
			ew.printf("    %s  %s\n", u.Pod, u.Reason)
			ew.wrap("      ", "      ", u.Message)
		}
	}
	if len(pr.Waiting) > 0 {
		ew.printf("  Not demand yet: %s.\n", plural(len(pr.Waiting), "pod"))
		for _, sk := range pr.Waiting {
			ew.wrap("    ", "      ", fmt.Sprintf("%s: %s", sk.Pod, sk.Reason))
		}
	}
	writeStranded(ew, res)
}

func noChangeReason(pr *snapshot.PolicyReport) string {
	res := pr.Result
	switch {
	case pr.Policy.Spec.Planning.Paused:
		return "planning is paused"
	case pr.Pending == 0:
		return "no pending GPU pod needs this pool"
	case len(res.Unserved) == 0:
		return "every pending pod fits the current layout"
	case res.Budget == 0 && res.ReconfigureBudget == 0:
		return "maxDisruptedNodes and maxReconfiguringNodes allow no node to change"
	}
	return "no change the policy allows serves a pending pod (see Unserved)"
}

func writePlan(ew *errWriter, pr *snapshot.PolicyReport) {
	plan := pr.Plan
	gpus, evictions := 0, 0
	for _, s := range plan.Spec.Steps {
		gpus += len(s.GPUs)
		evictions += len(s.Evictions)
	}
	evicts := "evicts no pod"
	if evictions > 0 {
		evicts = "evicts " + plural(evictions, "pod")
	}
	gate := "waits for approval"
	// The plan controller's own rule (the plan records the mode it is made under, here the
	// policy's), so that what-if never promises what the controller would not do.
	if _, ok := rollout.ModeApproves(plan, pr.Policy); ok {
		gate = "applies without approval"
	}
	ew.wrap("  ", "    ", fmt.Sprintf("Plan %s (hash %s): %s on %s, %s; %s.", plan.Name, plan.Spec.Hash,
		plural(gpus, "GPU"), plural(len(plan.Spec.Steps), "node"), evicts, gate))
	writeSteps(ew, plan)
}

// writeProposal says what the controller would do with the policy's plans, where that is
// more than creating the plan shown (pool.Decide).
func writeProposal(ew *errWriter, pr *snapshot.PolicyReport) {
	d := pr.Proposal
	for _, s := range d.Supersede {
		ew.wrap("  ", "    ", fmt.Sprintf("The controller retires plan %s: %s.", s.Plan.Name, s.Why))
	}
	switch {
	case d.Refused != nil:
		ew.wrap("  ", "    ", fmt.Sprintf("The controller does not propose this change: it was %s in plan %s, and is not proposed again before %s.",
			refusedAs(d.Refused.Phase), d.Refused.Plan, d.Refused.Until.UTC().Format(time.RFC3339)))
	case d.Create == nil && d.Current != nil:
		ew.wrap("  ", "    ", fmt.Sprintf("The controller keeps plan %s (%s).", d.Current.Name,
			cmp.Or(string(d.Current.Status.Phase), string(v1alpha1.PlanAwaitingApproval))))
	}
}

func refusedAs(phase v1alpha1.PlanPhase) string {
	if phase == v1alpha1.PlanExpired {
		return "not approved within planTTL"
	}
	return "rejected"
}

// writeSteps lists a plan's GPU changes node by node, then its evictions with where each pod
// lands and why it must go.
func writeSteps(ew *errWriter, plan *v1alpha1.RepartitionPlan) {
	evictions := 0
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "    NODE\tGPU\tFROM\tTO\n")
	for _, s := range plan.Spec.Steps {
		evictions += len(s.Evictions)
		node := s.Node
		for _, g := range s.GPUs {
			fmt.Fprintf(tw, "    %s\t%d\t%s\t%s\n", node, g.Index, layoutText(g.From), layoutText(g.To))
			node = ""
		}
		if s.SharingConfig != nil {
			fmt.Fprintf(tw, "    %s\t-\tsharing\t%s\n", node, s.SharingConfigName)
		}
	}
	_ = tw.Flush()
	if evictions == 0 {
		return
	}
	ew.printf("    Evictions (each pod's controller recreates it; it runs again where LANDS ON says):\n")
	tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "      POD\tNODE\tLANDS ON\tWHY\n")
	for _, s := range plan.Spec.Steps {
		for _, e := range s.Evictions {
			// The plan's reason ends "; moves to <node>" for a pod that lands elsewhere; LANDS ON
			// already says where, and the repeat pushed the table past 100 columns.
			why := strings.TrimSuffix(e.Reason, "; moves to "+e.LandingNode)
			fmt.Fprintf(tw, "      %s/%s\t%s\t%s\t%s\n", e.Namespace, e.Name, s.Node, cmp.Or(e.LandingNode, s.Node), why)
		}
	}
	_ = tw.Flush()
}

// layoutText renders a GPU's multiset as mig-parted's config does, larger profiles first.
func layoutText(c v1alpha1.ProfileCounts) string {
	if len(c) == 0 {
		return "(MIG off)"
	}
	return mig.LayoutOf(c).String()
}

func writeStranded(ew *errWriter, res *planner.Result) {
	profiles := map[string]bool{}
	for k, v := range res.StrandedBefore {
		profiles[k] = profiles[k] || v > 0
	}
	for k, v := range res.StrandedAfter {
		profiles[k] = profiles[k] || v > 0
	}
	names := make([]string, 0, len(profiles))
	for k, used := range profiles {
		if used {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		ew.printf("  Stranded free instances: none before or after.\n")
		return
	}
	slices.SortFunc(names, mig.CompareProfileNames)
	ew.printf("  Stranded free instances (no pending pod or standby shape can use them):\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "    PROFILE\tBEFORE\tAFTER\n")
	for _, n := range names {
		fmt.Fprintf(tw, "    %s\t%d\t%d\n", n, res.StrandedBefore[n], res.StrandedAfter[n])
	}
	_ = tw.Flush()
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func podList(pods []types.NamespacedName) string {
	names := make([]string, 0, min(len(pods), listLimit))
	for i, p := range pods {
		if i == listLimit {
			names = append(names, fmt.Sprintf("and %d more", len(pods)-listLimit))
			break
		}
		names = append(names, p.String())
	}
	return strings.Join(names, ", ")
}

// errWriter remembers the first write error so the renderer can write freely and check once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, a ...any) { fmt.Fprintf(e, format, a...) }

// wrap writes text in words, first line after first, continuation lines after rest, so that
// the planner's long explanations stay inside tableWidth.
func (e *errWriter) wrap(first, rest, text string) {
	line := first
	empty := true
	for _, word := range strings.Fields(text) {
		if !empty && len(line)+1+len(word) > tableWidth {
			e.printf("%s\n", line)
			line, empty = rest, true
		}
		if !empty {
			line += " "
		}
		line += word
		empty = false
	}
	e.printf("%s\n", line)
}
