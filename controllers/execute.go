package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	resourcev1 "k8s.io/api/resource/v1"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/drain"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/rollout"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=patch
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups="",namespace=gpu-operator,resources=configmaps,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=gpupool.io,resources=gpunodes,verbs=patch

// DefaultConfigPropagation is how long the plan controller waits after writing the mig-parted
// ConfigMap before flipping a node's label: the kubelet refreshes mounted ConfigMaps lazily,
// and mig-manager reads the entry from its mounted copy when the label changes.
const DefaultConfigPropagation = 90 * time.Second

// execute advances an approved plan: it starts node steps within the budget, takes each active
// step one decision further (rollout.Step) and performs the decision's actions.
func (r *PlanReconciler) execute(ctx context.Context, plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy,
	status *v1alpha1.RepartitionPlanStatus, now time.Time) (time.Duration, error) {
	budgets, err := r.budgets(ctx, policy)
	if err != nil {
		return 0, err
	}
	// Steps in flight always finish (stopping half-way could leave a GPU half-configured); a
	// new node starts only while the plan's approval holds now and the budget allows it.
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
		return 0, err
	}
	budgets.HourlyCapped, budgets.HourlyLeft = true, hourly.left
	// An evicting step starts only inside one of the policy's maintenance windows (windows.go).
	window, ungated := maintenanceWindow(policy, now), budgets
	budgets = window.gate(budgets)
	start, _, _, _ := rollout.Progress(plan.Spec.Steps, status.Nodes, budgets)
	timeouts := rollout.Timeouts{
		Drain:              pool.DurationOr(policy.Spec.Disruption.DrainTimeout, rollout.DefaultDrainTimeout),
		Configure:          pool.DurationOr(policy.Spec.Disruption.ConfigureTimeout, rollout.DefaultConfigureTimeout),
		Propagation:        r.ConfigPropagation,
		KeepFailedCordoned: policy.Spec.Disruption.KeepFailedNodesCordoned,
	}
	requeue := time.Duration(0)
	for _, step := range plan.Spec.Steps {
		i := slices.IndexFunc(status.Nodes, func(s v1alpha1.NodeStepStatus) bool { return s.Node == step.Node })
		if i < 0 {
			if !slices.Contains(start, step.Node) {
				continue
			}
			// Every node is revalidated just before its first disruptive action, not only the
			// plan's first: an earlier node may have taken minutes, and this one's GPUs or pods
			// may have moved on since.
			why, err := r.revalidateStep(ctx, plan, step)
			if err != nil {
				return 0, err
			}
			if why != "" {
				failed := v1alpha1.NodeStepStatus{Node: step.Node, State: v1alpha1.NodeFailed,
					Message: "cancelled before any disruption: " + why, LastTransitionTime: &metav1.Time{Time: now}}
				status.Nodes = append(status.Nodes, failed)
				r.recordStep(ctx, plan, step, failed, now)
				continue
			}
			status.Nodes = append(status.Nodes, v1alpha1.NodeStepStatus{Node: step.Node, State: v1alpha1.NodePending})
			i = len(status.Nodes) - 1
		}
		cur := status.Nodes[i]
		if cur.State == v1alpha1.NodeDone || cur.State == v1alpha1.NodeFailed {
			continue
		}
		targets, obs, err := r.observe(ctx, plan.Name, policy, step)
		if err != nil {
			return 0, err
		}
		if cur.State == v1alpha1.NodeDraining {
			// After each drain pass the step's message is what the pass said (act returns it),
			// e.g. which pods a PodDisruptionBudget still protects: the drain timeout says it too.
			obs.DrainMessage = cur.Message
			// A drain held by PodDisruptionBudgets may take long; the landing of the pods still
			// to go is checked again before each pass.
			if movesOut(step) {
				// The step alone, as at its start: by now every landing, the ones other steps
				// carved included, must have room.
				one := stepOnly(plan, step)
				facts, err := r.facts(ctx, one)
				if err != nil {
					return 0, err
				}
				obs.LandingGone = rollout.LandingGone(one, step, facts)
			}
		}
		if cur.State == v1alpha1.NodeDraining || (cur.State == v1alpha1.NodeConfiguring && obs.MIGConfig != step.MIGConfigName) {
			// A ResourceClaim allocated on the step's GPUs since the step started (the
			// scheduler can place a pod that tolerates the cordon, or one it had chosen the node
			// for just before) is looked for again on every drain pass and up to the relabel:
			// past it, mig-manager carves the GPUs under the claim.
			facts, err := r.facts(ctx, stepOnly(plan, step))
			if err != nil {
				return 0, err
			}
			obs.Claimed = rollout.ClaimOnStep(step, facts.GPUs[step.Node], facts.Claimed)
		}
		res := rollout.Step(plan.Name, step, cur, obs, timeouts, now)
		if relabels(res.Actions) {
			// A relabel is not undone by doing it twice: decided on a cached status older than
			// the plan's last write (a node event can come before the plan's own), it would
			// set back a label the step has since moved on from. Act only on the current plan.
			current, err := r.planIsCurrent(ctx, plan)
			if err != nil {
				return 0, err
			}
			if !current {
				return time.Second, nil
			}
		}
		for _, action := range res.Actions {
			if action == rollout.ActionRestoreLabel {
				if err := r.restoreLabel(ctx, step.Node, res.Status.PreviousMIGConfig); err != nil {
					return 0, fmt.Errorf("plan %s, node %s, %s: %w", plan.Name, step.Node, action, err)
				}
				continue
			}
			msg, err := r.act(ctx, plan, policy, step, targets, action)
			if err != nil {
				return 0, fmt.Errorf("plan %s, node %s, %s: %w", plan.Name, step.Node, action, err)
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
		status.Nodes[i] = res.Status
		if res.Transition {
			r.recordStep(ctx, plan, step, res.Status, now)
		}
		if res.RequeueAfter > 0 && (requeue == 0 || res.RequeueAfter < requeue) {
			requeue = res.RequeueAfter
		}
	}
	_, waiting, phase, progress := rollout.Progress(plan.Spec.Steps, status.Nodes, budgets)
	status.Waiting = waiting
	if phase == v1alpha1.PlanFailed && hourly.holds(plan, policy, status, budgets) {
		// Only the hour's cap keeps the next evicting step from starting: wait for it, with the
		// time on the plan, rather than stop a plan whose approval and budgets still hold.
		phase = v1alpha1.PlanExecuting
		msg := fmt.Sprintf("waiting: the policy's maxDisruptiveStepsPerHour (%d) is spent; the next step that evicts pods may start at %s",
			pool.HourlyBound(policy), hourly.freed.UTC().Format(time.RFC3339))
		if !meta.IsStatusConditionFalse(status.Conditions, conditionHourlyCap) {
			planEvent(ctx, r.Recorder, plan, policyRef(policy), corev1.EventTypeNormal, reasonHourlyCapSpent, "Wait", msg)
		}
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: conditionHourlyCap, Status: metav1.ConditionFalse,
			Reason: reasonHourlyCapSpent, Message: msg, ObservedGeneration: plan.Generation})
		requeue = max(time.Second, hourly.freed.Sub(now))
	} else if meta.IsStatusConditionFalse(status.Conditions, conditionHourlyCap) {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: conditionHourlyCap, Status: metav1.ConditionTrue,
			Reason: "WithinHourlyCap", Message: "the policy's maxDisruptiveStepsPerHour allows the plan's steps", ObservedGeneration: plan.Generation})
	}
	phase, requeue = r.reportWindow(ctx, plan, policy, status, window, ungated, phase, requeue, now)
	if phase == v1alpha1.PlanFailed && stopped != "" && !slices.ContainsFunc(status.Nodes, func(n v1alpha1.NodeStepStatus) bool {
		return n.State == v1alpha1.NodeFailed
	}) {
		reason := rollout.ReasonNotApproved
		if rollout.Approved(plan, policy) {
			reason = "BudgetExhausted"
		}
		if !meta.IsStatusConditionFalse(status.Conditions, "Ready") {
			planEvent(ctx, r.Recorder, plan, policyRef(policy), corev1.EventTypeWarning, reason, "Stop", stopped)
		}
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse,
			Reason: reason, Message: stopped, ObservedGeneration: plan.Generation})
	}
	status.Phase, status.Progress = phase, progress
	if phase == v1alpha1.PlanExecuting && requeue == 0 {
		requeue = time.Second
	}
	return requeue, nil
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

// movesOut says whether a step evicts pods whose replacements land on another node: landings
// that can be taken while the step drains.
func movesOut(step v1alpha1.NodeStep) bool {
	return slices.ContainsFunc(step.Evictions, func(e v1alpha1.Eviction) bool {
		return e.LandingNode != "" && e.LandingNode != step.Node
	})
}

// revalidateStep is revalidation for one node's step, just before it starts: the step's GPUs
// still have the layouts it was made for, no pod it does not evict runs on them, and no pod it
// evicts became do-not-disrupt ("" when it still holds). Whether anyone is still pending is
// the plan's question, asked before its first node.
func (r *PlanReconciler) revalidateStep(ctx context.Context, plan *v1alpha1.RepartitionPlan, step v1alpha1.NodeStep) (string, error) {
	if step.RebootRisk != "" {
		// A reboot kills every pod of the node: one the scheduler placed there since planning
		// cancels the step before the cordon (after it, nothing new is placed there).
		recs, err := r.pods.onNode(nil, step.Node)
		if err != nil {
			return "", fmt.Errorf("listing the pods on node %s: %w", step.Node, err)
		}
		pods := make([]rollout.NodePod, 0, len(recs))
		for _, p := range recs {
			pods = append(pods, rollout.NodePod{Namespace: p.Namespace, Name: p.Name,
				NodeLocal: p.Mirror || p.Controller == "DaemonSet",
				Gone:      !p.DeletionTimestamp.IsZero() || p.Phase == corev1.PodSucceeded || p.Phase == corev1.PodFailed})
		}
		if why := rollout.RebootVictims(step, pods); why != "" {
			return why, nil
		}
	}
	return r.revalidate(ctx, stepOnly(plan, step))
}

// stepOnly is the plan reduced to one step, without the pending pods it was made for: what a
// node's own checks judge.
func stepOnly(plan *v1alpha1.RepartitionPlan, step v1alpha1.NodeStep) *v1alpha1.RepartitionPlan {
	one := plan.DeepCopy()
	one.Spec.Steps, one.Spec.Expected.Pods = []v1alpha1.NodeStep{step}, nil
	return one
}

// budgets are the policy's maxDisruptedNodes and maxReconfiguringNodes resolved against its
// pool's size now.
func (r *PlanReconciler) budgets(ctx context.Context, policy *v1alpha1.GPUPoolPolicy) (rollout.Budgets, error) {
	nodes, err := r.poolNodes(ctx, policy)
	if err != nil {
		return rollout.Budgets{}, err
	}
	d := &policy.Spec.Disruption
	return rollout.Budgets{Disrupting: planner.Budget(d.MaxDisruptedNodes, len(nodes)),
		Reconfiguring: planner.ReconfigureBudget(d.MaxReconfiguringNodes, len(nodes))}, nil
}

// poolNodes lists the nodes the policy's selector selects now.
func (r *PlanReconciler) poolNodes(ctx context.Context, policy *v1alpha1.GPUPoolPolicy) ([]corev1.Node, error) {
	selector, err := policy.Spec.NodeSelector.AsSelector()
	if err != nil {
		return nil, fmt.Errorf("policy %s: spec.nodeSelector: %w", policy.Name, err)
	}
	if selector.Empty() {
		// A stored policy from before the API refused empty selectors: its pool is empty, not
		// the whole cluster (the policy reports the problem).
		return nil, nil
	}
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes, client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, fmt.Errorf("listing the nodes of policy %s: %w", policy.Name, err)
	}
	return nodes.Items, nil
}

// observe reads what a step's decision depends on, and the node's complete target layout.
func (r *PlanReconciler) observe(ctx context.Context, plan string, policy *v1alpha1.GPUPoolPolicy,
	step v1alpha1.NodeStep) ([]mig.GPUTarget, rollout.Observation, error) {
	var obs rollout.Observation
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: step.Node}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, obs, nil
		}
		return nil, obs, fmt.Errorf("reading node %s: %w", step.Node, err)
	}
	obs.NodeExists = true
	obs.Unschedulable = node.Spec.Unschedulable
	// The annotation counts only where gpupool's own ledger backs it: anyone who may patch
	// nodes can write an annotation naming this plan.
	rec, err := r.ledger().get(ctx, step.Node)
	if err != nil {
		return nil, obs, err
	}
	obs.CordonedBy = rollout.CordonedByPlan(node, rec)
	obs.MIGConfig = node.Labels[v1alpha1.LabelMIGConfig]
	obs.MIGState, _ = nvidia.MIGConfigState(node)
	for _, e := range step.Evictions {
		pod, err := r.pods.Get(types.NamespacedName{Namespace: e.Namespace, Name: e.Name})
		switch {
		case err != nil:
			return nil, obs, fmt.Errorf("reading pod %s/%s: %w", e.Namespace, e.Name, err)
		case pod == nil:
		case string(pod.UID) != e.UID || pod.NodeName != step.Node:
			// Not the pod the plan recorded: it is gone, and its replacement is not evicted.
		default:
			obs.PodsLeft++
			// The planner's rules again, now: a pod that became unsafe to evict since planning
			// (or that a plan should never have named) cancels the step before any eviction.
			if why := inventory.SafetyBlocker(pod, evictionRules(policy)); why != "" && pod.DeletionTimestamp.IsZero() && obs.Unsafe == "" {
				obs.Unsafe = fmt.Sprintf("pod %s/%s may not be evicted now: %s", e.Namespace, e.Name, why)
			}
		}
	}

	gpuNode := &v1alpha1.GPUNode{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: step.Node}, gpuNode); err != nil {
		if apierrors.IsNotFound(err) {
			// The step fails with a message; the rest of the plan and its status go on.
			obs.ReportMissing = true
			return nil, obs, nil
		}
		return nil, obs, fmt.Errorf("reading GPUNode %s: %w", step.Node, err)
	}
	if t := gpuNode.Status.ObservedTime; t != nil {
		obs.ReportTime = t.Time
	}
	targets := inventory.NodeTarget(node, gpuNode, step.GPUs)
	obs.TargetDrifted = nvidia.StepEntryName(targets, plan) != step.MIGConfigName
	obs.LayoutExpected = slices.EqualFunc(gpuNode.Spec.ExpectedLayout, expectedLayout(targets), layoutEqual)
	obs.GPUsWhole = gpusWhole(step, gpuNode)
	obs.GPUsAtFrom, obs.GPUsAtTarget = gpusAt(step, gpuNode, false), gpusAt(step, gpuNode, true)
	if c := meta.FindStatusCondition(gpuNode.Status.Conditions, v1alpha1.ConditionLayoutVerified); c != nil &&
		c.ObservedGeneration == gpuNode.Generation {
		obs.Verified, obs.VerifyMessage = c.Status, c.Message
	}
	cm := &corev1.ConfigMap{}
	err = r.Client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: MIGPartedConfigMap}, cm)
	switch {
	case err == nil:
		obs.ConfigWritten = nvidia.HasEntry([]byte(cm.Data[nvidia.ConfigMapKey]), step.MIGConfigName)
	case !apierrors.IsNotFound(err):
		return nil, obs, fmt.Errorf("reading ConfigMap %s/%s: %w", r.Namespace, MIGPartedConfigMap, err)
	}
	// Time-sliced devices are advertised as replicas, which the sharing check counts.
	obs.ExclusiveAdvertised = true
	if !rollout.TimeSliced(step) {
		obs.ExclusiveAdvertised, obs.ExclusiveResources = rollout.AdvertisesLayout(targets, node.Status.Allocatable)
	}
	if r.readSlices {
		var list resourcev1.ResourceSliceList
		if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return nil, obs, fmt.Errorf("listing ResourceSlices: %w", err)
		}
		if published, ok := inventory.DRAPublished(list.Items)[step.Node]; ok {
			// NVIDIA's DRA driver serves the node's GPUs, not the device plugin.
			obs.DRADriver, obs.DRAStale = true, inventory.DRAStale(gpuNode, published)
		}
	}
	if step.SharingConfigName != "" {
		obs.SharingConfig = node.Labels[v1alpha1.LabelDevicePluginConfig]
		obs.SharingAdvertised, obs.SharedResource = rollout.AdvertisesSharing(step, targets, node.Status.Allocatable)
		dp := &corev1.ConfigMap{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: DevicePluginConfigMap}, dp)
		switch {
		case err == nil:
			_, written := dp.Data[step.SharingConfigName]
			obs.ConfigWritten = obs.ConfigWritten && written
		case apierrors.IsNotFound(err):
			obs.ConfigWritten = false
		default:
			return nil, obs, fmt.Errorf("reading ConfigMap %s/%s: %w", r.Namespace, DevicePluginConfigMap, err)
		}
	}
	return targets, obs, nil
}

// gpusWhole says whether the agent reports every GPU the step changes with a whole layout:
// its old multiset or its new one, with no MIG mode change pending. Anything else (an
// instance missing, a mode switch waiting for a reset, no report) counts as half-configured.
func gpusWhole(step v1alpha1.NodeStep, gpuNode *v1alpha1.GPUNode) bool {
	return gpusMatch(step, gpuNode, func(have mig.Layout, change v1alpha1.GPUChange) bool {
		return have.Equal(mig.LayoutOf(change.From)) || have.Equal(mig.LayoutOf(change.To))
	})
}

// gpusAt says whether the agent reports every GPU the step changes whole at its new layout
// (target) or at its old one, with no MIG mode change pending.
func gpusAt(step v1alpha1.NodeStep, gpuNode *v1alpha1.GPUNode, target bool) bool {
	return gpusMatch(step, gpuNode, func(have mig.Layout, change v1alpha1.GPUChange) bool {
		if target {
			return have.Equal(mig.LayoutOf(change.To))
		}
		return have.Equal(mig.LayoutOf(change.From))
	})
}

// gpusMatch says whether the agent reports every GPU the step changes, readable and with no
// MIG mode change pending, with a multiset of instances that ok accepts.
func gpusMatch(step v1alpha1.NodeStep, gpuNode *v1alpha1.GPUNode, ok func(mig.Layout, v1alpha1.GPUChange) bool) bool {
	for _, change := range step.GPUs {
		i := slices.IndexFunc(gpuNode.Status.GPUs, func(g v1alpha1.GPUStatus) bool { return g.Index == change.Index })
		if i < 0 {
			return false
		}
		g := gpuNode.Status.GPUs[i]
		if g.Error != "" || (g.MIGMode != nil && g.MIGMode.Pending != "" && g.MIGMode.Pending != g.MIGMode.Current) {
			return false
		}
		have := mig.Layout{}
		for _, in := range g.Instances {
			have[in.Profile]++
		}
		if !ok(have, change) {
			return false
		}
	}
	return true
}

func expectedLayout(targets []mig.GPUTarget) []v1alpha1.GPULayout {
	out := make([]v1alpha1.GPULayout, 0, len(targets))
	for _, t := range targets {
		l := v1alpha1.GPULayout{Index: int32(t.Index)}
		if len(t.Layout) > 0 {
			l.Profiles = v1alpha1.ProfileCounts{}
			for p, n := range t.Layout {
				l.Profiles[p] = int32(n)
			}
		}
		out = append(out, l)
	}
	return out
}

func layoutEqual(a, b v1alpha1.GPULayout) bool {
	if a.Index != b.Index || len(a.Profiles) != len(b.Profiles) {
		return false
	}
	for p, n := range a.Profiles {
		if b.Profiles[p] != n {
			return false
		}
	}
	return true
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
	case rollout.ActionWriteConfig:
		if err := r.writeConfig(ctx, step, targets); err != nil {
			return "", err
		}
		return "", r.writeSharing(ctx, step)
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

// writeConfig adds the step's immutable entry to gpupool's mig-parted ConfigMap, keeping every
// entry a node's label or a live plan still names and garbage-collecting gpupool's other entries.
func (r *PlanReconciler) writeConfig(ctx context.Context, step v1alpha1.NodeStep, targets []mig.GPUTarget) error {
	inUse, err := r.namesInUse(ctx, v1alpha1.LabelMIGConfig, func(s v1alpha1.NodeStep) string { return s.MIGConfigName })
	if err != nil {
		return err
	}
	defaults, err := nvidiaDefaultMIGConfig(ctx, r.Client, r.Namespace)
	if err != nil {
		return err
	}
	return r.updateConfigMap(ctx, MIGPartedConfigMap, func(data map[string]string) (map[string]string, error) {
		next, err := nvidia.UpdateConfig([]byte(data[nvidia.ConfigMapKey]),
			map[string][]mig.GPUTarget{step.MIGConfigName: targets}, inUse, defaults)
		if err != nil {
			return nil, err
		}
		if data == nil {
			data = map[string]string{}
		}
		data[nvidia.ConfigMapKey] = string(next)
		return data, nil
	})
}

// nvidiaDefaultMIGConfig is NVIDIA's default mig-parted config, which the ClusterPolicy named
// before it named gpupool's: nodes outside the pool still carry labels such as all-1g.10gb,
// whose entries come from it. Nil when the operator has none.
func nvidiaDefaultMIGConfig(ctx context.Context, c client.Reader, namespace string) ([]byte, error) {
	defaults := &corev1.ConfigMap{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: nvidia.DefaultMIGPartedConfigMap}, defaults); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading NVIDIA's ConfigMap %s/%s: %w", namespace, nvidia.DefaultMIGPartedConfigMap, err)
	}
	return []byte(defaults.Data[nvidia.ConfigMapKey]), nil
}

// writeSharing adds the step's device-plugin sharing key to gpupool's device-plugin ConfigMap,
// keeping every key a node's label or a live plan still names and collecting gpupool's others.
func (r *PlanReconciler) writeSharing(ctx context.Context, step v1alpha1.NodeStep) error {
	if step.SharingConfig == nil || step.SharingConfigName == "" {
		return nil
	}
	if name := nvidia.DevicePluginConfigName(*step.SharingConfig); name != step.SharingConfigName {
		return fmt.Errorf("step on %s names sharing key %s for %s %d, which gpupool names %s",
			step.Node, step.SharingConfigName, step.SharingConfig.Mode, step.SharingConfig.Replicas, name)
	}
	inUse, err := r.namesInUse(ctx, v1alpha1.LabelDevicePluginConfig, func(s v1alpha1.NodeStep) string { return s.SharingConfigName })
	if err != nil {
		return err
	}
	return r.updateConfigMap(ctx, DevicePluginConfigMap, func(data map[string]string) (map[string]string, error) {
		return nvidia.UpdateDevicePluginConfigMap(data, []v1alpha1.SharingConfig{*step.SharingConfig}, inUse)
	})
}

// namesInUse lists the config names that garbage collection must keep: every value of label on
// a node, and the name every step of a live plan will set, because with a budget above one a
// step's write would otherwise collect an entry another step has written but not relabelled yet.
func (r *PlanReconciler) namesInUse(ctx context.Context, label string, ofStep func(v1alpha1.NodeStep) string) ([]string, error) {
	return namesInUse(ctx, r.Client, label, ofStep)
}

func namesInUse(ctx context.Context, c client.Reader, label string, ofStep func(v1alpha1.NodeStep) string) ([]string, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	var inUse []string
	for _, n := range nodes.Items {
		if v := n.Labels[label]; v != "" {
			inUse = append(inUse, v)
		}
	}
	var plans v1alpha1.RepartitionPlanList
	if err := c.List(ctx, &plans); err != nil {
		return nil, fmt.Errorf("listing plans: %w", err)
	}
	for _, p := range plans.Items {
		if p.Status.Phase.Running() {
			for _, s := range p.Spec.Steps {
				if v := ofStep(s); v != "" {
					inUse = append(inUse, v)
				}
			}
			// The entry a failed step may set back (Restoring) must still be there to apply.
			for _, st := range p.Status.Nodes {
				if label == v1alpha1.LabelMIGConfig && st.PreviousMIGConfig != "" {
					inUse = append(inUse, st.PreviousMIGConfig)
				}
			}
		}
	}
	return inUse, nil
}

// updateConfigMap creates or updates one of gpupool's ConfigMaps with the data next computes
// from the current data (nil when the ConfigMap does not exist yet).
func (r *PlanReconciler) updateConfigMap(ctx context.Context, name string, next func(map[string]string) (map[string]string, error)) error {
	cm := &corev1.ConfigMap{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: name}, cm)
	create := apierrors.IsNotFound(err)
	if err != nil && !create {
		return fmt.Errorf("reading ConfigMap %s/%s: %w", r.Namespace, name, err)
	}
	data, err := next(cm.Data)
	if err != nil {
		return fmt.Errorf("ConfigMap %s/%s: %w", r.Namespace, name, err)
	}
	if create {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: name,
			Labels: map[string]string{"app.kubernetes.io/name": "gpupool"}}}
	}
	cm.Data = data
	if create {
		err = r.Client.Create(ctx, cm)
	} else {
		err = r.Client.Update(ctx, cm)
	}
	if err != nil {
		return fmt.Errorf("writing ConfigMap %s/%s: %w", r.Namespace, name, err)
	}
	return nil
}

// evictionRules are the policy's choices about which pods may be evicted at all.
func evictionRules(policy *v1alpha1.GPUPoolPolicy) inventory.EvictionRules {
	return inventory.EvictionRules{EvictEmptyDir: policy.Spec.Disruption.EvictEmptyDir,
		EvictUnmanaged: policy.Spec.Disruption.EvictUnmanaged,
		DrainTimeout:   pool.DurationOr(policy.Spec.Disruption.DrainTimeout, rollout.DefaultDrainTimeout)}
}
