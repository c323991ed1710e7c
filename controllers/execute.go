package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/drain"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/rollout"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=patch
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups=gpupool.io,resources=gpunodes,verbs=patch

// DefaultConfigPropagation is how long the plan controller waits, from a step's move to
// Configuring (gpupool's ConfigMap writer, OperatorConfigReconciler, adds the step's entry a
// watch round-trip later) and once the entry is seen, before flipping the node's label: the
// kubelet refreshes mounted ConfigMaps lazily, and mig-manager reads the entry from its mounted
// copy when the label changes.
const DefaultConfigPropagation = 90 * time.Second

// execute advances an approved plan: it starts node steps within the budget, takes each active
// step one decision further (rollout.Step) and performs the decision's actions; then it says
// where the plan stands (finish).
func (r *PlanReconciler) execute(ctx context.Context, plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy,
	status *v1alpha1.RepartitionPlanStatus, now time.Time) (time.Duration, error) {
	lim, err := r.limits(ctx, plan, policy, status, now)
	if err != nil {
		return 0, err
	}
	start, _, _, _ := rollout.Progress(plan.Spec.Steps, status.Nodes, lim.budgets)
	requeue := time.Duration(0)
	for _, step := range plan.Spec.Steps {
		after, stale, err := r.advance(ctx, plan, policy, status, step, slices.Contains(start, step.Node), lim.timeouts, now)
		if err != nil {
			return 0, err
		}
		if stale {
			return time.Second, nil
		}
		if after > 0 && (requeue == 0 || after < requeue) {
			requeue = after
		}
	}
	return r.finish(ctx, plan, policy, status, lim, requeue, now), nil
}

// passLimits are what bounds one pass of a plan: the budgets for new nodes (the policy's, the
// hour's cap and the maintenance windows), the timeouts of each step, and why no new node may
// start when none may.
type passLimits struct {
	budgets, ungated rollout.Budgets
	hourly           hourlyState
	window           windowState
	timeouts         rollout.Timeouts
	stopped          string
}

// limits reads what bounds this pass. Steps in flight always finish (stopping half-way could
// leave a GPU half-configured); a new node starts only while the plan's approval holds now and
// the budget allows it.
func (r *PlanReconciler) limits(ctx context.Context, plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy,
	status *v1alpha1.RepartitionPlanStatus, now time.Time) (passLimits, error) {
	budgets, err := r.budgets(ctx, policy)
	if err != nil {
		return passLimits{}, err
	}
	stopped := ""
	switch {
	case !rollout.Approved(plan, policy):
		budgets, stopped = rollout.Budgets{}, fmt.Sprintf("stopped: its approval no longer holds (no %s=%s, and approval %s, the stricter of the mode it was made under and the policy's, does not approve it)",
			v1alpha1.AnnotationApprove, plan.Spec.Hash, rollout.Stricter(rollout.RecordedApproval(plan), rollout.EffectiveApproval(policy)))
	default:
		stopped = "stopped: the policy's maxDisruptedNodes and maxReconfiguringNodes allow none of its remaining nodes to change now"
	}
	// maxDisruptiveStepsPerHour is a cap on what runs, checked before each evicting step starts:
	// the plan was made within it, but other plans may have spent it since.
	hourly, err := r.hourlyCap(ctx, plan, policy, status, now)
	if err != nil {
		return passLimits{}, err
	}
	budgets.HourlyCapped, budgets.HourlyLeft = true, hourly.left
	// An evicting step starts only inside one of the policy's maintenance windows (windows.go).
	window := maintenanceWindow(policy, now)
	return passLimits{budgets: window.gate(budgets), ungated: budgets, hourly: hourly, window: window, stopped: stopped,
		timeouts: rollout.Timeouts{
			Drain:              pool.DurationOr(policy.Spec.Disruption.DrainTimeout, rollout.DefaultDrainTimeout),
			Configure:          pool.DurationOr(policy.Spec.Disruption.ConfigureTimeout, rollout.DefaultConfigureTimeout),
			Propagation:        r.ConfigPropagation,
			KeepFailedCordoned: policy.Spec.Disruption.KeepFailedNodesCordoned,
		}}, nil
}

// advance takes one node's step one decision further: observe, decide (rollout.Step), act. A
// step not started yet starts only when mayStart, once revalidated. stale is true when the
// pass must end now because it decided on a plan older than the API server's.
func (r *PlanReconciler) advance(ctx context.Context, plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy,
	status *v1alpha1.RepartitionPlanStatus, step v1alpha1.NodeStep, mayStart bool, timeouts rollout.Timeouts,
	now time.Time) (requeue time.Duration, stale bool, err error) {
	i := slices.IndexFunc(status.Nodes, func(s v1alpha1.NodeStepStatus) bool { return s.Node == step.Node })
	if i < 0 {
		if !mayStart {
			return 0, false, nil
		}
		// Every node is revalidated just before its first disruptive action, not only the
		// plan's first: an earlier node may have taken minutes, and this one's GPUs or pods
		// may have moved on since.
		why, err := r.revalidateStep(ctx, plan, step)
		if err != nil {
			return 0, false, err
		}
		if why != "" {
			failed := v1alpha1.NodeStepStatus{Node: step.Node, State: v1alpha1.NodeFailed,
				Message: "cancelled before any disruption: " + why, LastTransitionTime: &metav1.Time{Time: now}}
			status.Nodes = append(status.Nodes, failed)
			r.recordStep(ctx, plan, step, failed, now)
			return 0, false, nil
		}
		status.Nodes = append(status.Nodes, v1alpha1.NodeStepStatus{Node: step.Node, State: v1alpha1.NodePending})
		i = len(status.Nodes) - 1
	}
	cur := status.Nodes[i]
	if cur.State == v1alpha1.NodeDone || cur.State == v1alpha1.NodeFailed {
		return 0, false, nil
	}
	var targets []mig.GPUTarget
	var obs rollout.Observation
	if step.Placement != nil {
		// A DynamicMIG placement: taints and evictions only (placement_step.go).
		obs, err = r.observePlacement(ctx, plan, policy, step, cur)
	} else {
		targets, obs, err = r.observeStep(ctx, plan, policy, step, cur)
	}
	if err != nil {
		return 0, false, err
	}
	res := rollout.StepFor(step).Step(plan.Name, step, cur, obs, timeouts, now)
	if stale, err := r.perform(ctx, plan, policy, step, cur, targets, &res); err != nil || stale {
		return 0, stale, err
	}
	status.Nodes[i] = res.Status
	if res.Transition {
		r.recordStep(ctx, plan, step, res.Status, now)
	}
	return res.RequeueAfter, false, nil
}

// perform carries out a step's decision, in order; an action's message, when it has one,
// becomes the step's (a drain pass says who still blocks). stale is true, with nothing done,
// when the decision relabels but was made on a plan older than the API server's.
func (r *PlanReconciler) perform(ctx context.Context, plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy,
	step v1alpha1.NodeStep, cur v1alpha1.NodeStepStatus, targets []mig.GPUTarget, res *rollout.StepResult) (bool, error) {
	if relabels(res.Actions) {
		// A relabel is not undone by doing it twice: decided on a cached status older than
		// the plan's last write (a node event can come before the plan's own), it would
		// set back a label the step has since moved on from. Act only on the current plan.
		current, err := r.planIsCurrent(ctx, plan)
		if err != nil || !current {
			return err == nil, err
		}
	}
	for _, action := range res.Actions {
		if action == rollout.ActionRestoreLabel {
			if err := r.restoreLabel(ctx, step.Node, res.Status.PreviousMIGConfig); err != nil {
				return false, fmt.Errorf("plan %s, node %s, %s: %w", plan.Name, step.Node, action, err)
			}
			continue
		}
		msg, err := r.act(ctx, plan, policy, step, targets, action)
		if err != nil {
			return false, fmt.Errorf("plan %s, node %s, %s: %w", plan.Name, step.Node, action, err)
		}
		if msg != "" {
			res.Status.Message = msg
		}
		if action == rollout.ActionEvict && msg != "" && msg != cur.Message && strings.Contains(msg, "blocked by PodDisruptionBudgets") {
			// Once per change of the blockers, not once per pass.
			node := &corev1.Node{}
			if err := r.Client.Get(ctx, types.NamespacedName{Name: step.Node}, node); err != nil {
				node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: step.Node}}
			}
			planEvent(ctx, r.Recorder, plan, node, corev1.EventTypeWarning, "DrainBlocked", "Evict", step.Node+": "+msg)
		}
	}
	return false, nil
}

// finish says where the plan stands after the pass: its phase and progress, which steps wait
// for which, and the conditions that say why no new node starts; it returns when to look again.
func (r *PlanReconciler) finish(ctx context.Context, plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy,
	status *v1alpha1.RepartitionPlanStatus, lim passLimits, requeue time.Duration, now time.Time) time.Duration {
	_, waiting, phase, progress := rollout.Progress(plan.Spec.Steps, status.Nodes, lim.budgets)
	status.Waiting = waiting
	if phase == v1alpha1.PlanFailed && lim.hourly.holds(plan, policy, status, lim.budgets) {
		// Only the hour's cap keeps the next evicting step from starting: wait for it, with the
		// time on the plan, rather than stop a plan whose approval and budgets still hold.
		phase = v1alpha1.PlanExecuting
		r.markWaiting(ctx, plan, policy, status, conditionHourlyCap, reasonHourlyCapSpent,
			fmt.Sprintf("waiting: the policy's maxDisruptiveStepsPerHour (%d) is spent; the next step that evicts pods may start at %s",
				pool.HourlyBound(policy), lim.hourly.freed.UTC().Format(time.RFC3339)))
		requeue = max(time.Second, lim.hourly.freed.Sub(now))
	} else {
		clearWaiting(plan, status, conditionHourlyCap, "WithinHourlyCap", "the policy's maxDisruptiveStepsPerHour allows the plan's steps")
	}
	phase, requeue = r.reportWindow(ctx, plan, policy, status, lim.window, lim.ungated, phase, requeue, now)
	if phase == v1alpha1.PlanFailed && lim.stopped != "" && !slices.ContainsFunc(status.Nodes, func(n v1alpha1.NodeStepStatus) bool {
		return n.State == v1alpha1.NodeFailed
	}) {
		reason := rollout.ReasonNotApproved
		if rollout.Approved(plan, policy) {
			reason = "BudgetExhausted"
		}
		r.markStopped(ctx, plan, policy, status, reason, lim.stopped)
	}
	status.Phase, status.Progress = phase, progress
	if phase == v1alpha1.PlanExecuting && requeue == 0 {
		requeue = time.Second
	}
	return requeue
}

// recordStep reports a step's new state as an Event on the plan and on the node, and its
// duration once it is finished.
func (r *PlanReconciler) recordStep(ctx context.Context, plan *v1alpha1.RepartitionPlan, step v1alpha1.NodeStep, st v1alpha1.NodeStepStatus, now time.Time) {
	eventType := corev1.EventTypeNormal
	if st.State == v1alpha1.NodeFailed {
		eventType = corev1.EventTypeWarning
	}
	// The Node as read, with its UID: kubectl describe node finds a node's Events by its UID
	// (k8s.io/kubectl describe.go, searchEvents), so an Event about a name alone never shows.
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: step.Node}, node); err != nil {
		node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: step.Node}}
	}
	reason := "Node" + string(st.State)
	planEvent(ctx, r.Recorder, plan, node, eventType, reason, string(st.State), step.Node+": "+st.Message)
	// The node's own events tell whoever runs kubectl describe node why it is cordoned.
	nodeEvent(ctx, r.Recorder, node, plan, eventType, reason, string(st.State), "plan "+plan.Name+": "+st.Message)
	if finished := st.State == v1alpha1.NodeDone || st.State == v1alpha1.NodeFailed; finished && st.StartedTime != nil {
		// Once, as the Events: with the status that records the step's end.
		later(ctx, func(logr.Logger) { r.Metrics.ObserveNodeStep(plan.Spec.Policy, st.State, now.Sub(st.StartedTime.Time)) })
	}
}

// act performs one action of a step's decision; the message, when not empty, replaces the
// step's status message (the drain pass says which pods still block).
func (r *PlanReconciler) act(ctx context.Context, plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy,
	step v1alpha1.NodeStep, targets []mig.GPUTarget, action rollout.Action) (string, error) {
	switch action {
	case rollout.ActionCordon, rollout.ActionRelabel, rollout.ActionRelabelSharing, rollout.ActionUncordon, rollout.ActionReleaseCordon:
		return "", r.editNode(ctx, plan, step, action)
	case rollout.ActionEvict:
		pods := make([]types.NamespacedName, 0, len(step.Evictions))
		uids := make(map[types.NamespacedName]types.UID, len(step.Evictions))
		for _, e := range step.Evictions {
			key := types.NamespacedName{Namespace: e.Namespace, Name: e.Name}
			pods, uids[key] = append(pods, key), types.UID(e.UID)
		}
		res, err := drain.Pass(ctx, r.Client, step.Node, pods, drain.Options{UIDs: uids, Rules: evictionRules(policy), Reader: r.APIReader})
		if err != nil {
			return "", err
		}
		for _, outcome := range []drain.Outcome{drain.Evicted, drain.Blocked, drain.Refused, drain.Failed} {
			r.Metrics.CountEvictions(plan.Spec.Policy, string(outcome), res.Count(outcome))
		}
		if res.Done() {
			return "", nil
		}
		return res.Message(), nil
	case rollout.ActionTaint:
		return r.taintDevices(ctx, plan, step)
	case rollout.ActionUntaint:
		return "", r.untaintDevices(ctx, plan, step)
	case rollout.ActionExpectLayout:
		gpuNode := &v1alpha1.GPUNode{}
		if err := r.Client.Get(ctx, types.NamespacedName{Name: step.Node}, gpuNode); err != nil {
			return "", err
		}
		patch := client.MergeFrom(gpuNode.DeepCopy())
		gpuNode.Spec.ExpectedLayout = expectedLayout(targets)
		return "", r.Client.Patch(ctx, gpuNode, patch)
	}
	return "", fmt.Errorf("unknown action %q", action)
}

// evictionRules are the policy's choices about which pods may be evicted at all.
func evictionRules(policy *v1alpha1.GPUPoolPolicy) inventory.EvictionRules {
	return inventory.EvictionRules{EvictEmptyDir: policy.Spec.Disruption.EvictEmptyDir,
		EvictUnmanaged: policy.Spec.Disruption.EvictUnmanaged,
		DrainTimeout:   pool.DurationOr(policy.Spec.Disruption.DrainTimeout, rollout.DefaultDrainTimeout)}
}
