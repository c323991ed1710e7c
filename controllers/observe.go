package controllers

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/rollout"
)

// Everything the plan controller reads to decide lives here: what one node step's decision
// depends on (observeStep, for rollout.Step), the fresh look revalidation takes at a plan
// (facts, for rollout.Revalidate), and the policy's pool and budgets as they are now. The
// decisions themselves are internal/rollout's; nothing here writes.

// observeStep reads what the decision of a step in its current state depends on, and the node's
// complete target layout (what the step writes).
func (r *PlanReconciler) observeStep(ctx context.Context, plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy,
	step v1alpha1.NodeStep, cur v1alpha1.NodeStepStatus) ([]mig.GPUTarget, rollout.Observation, error) {
	targets, obs, err := r.observe(ctx, plan.Name, policy, step)
	if err != nil {
		return nil, obs, err
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
				return nil, obs, err
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
			return nil, obs, err
		}
		obs.Claimed = rollout.ClaimOnStep(step, facts.GPUs[step.Node], facts.Claimed)
	}
	return targets, obs, nil
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
	obs.MIGConfig = node.Labels[nvidia.LabelMIGConfig]
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
		obs.SharingConfig = node.Labels[nvidia.LabelDevicePluginConfig]
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

// revalidate takes a fresh look at what an approved plan changes, just before its first
// disruptive step, and says why it must be cancelled ("" when it still holds).
func (r *PlanReconciler) revalidate(ctx context.Context, plan *v1alpha1.RepartitionPlan) (string, error) {
	facts, err := r.facts(ctx, plan)
	if err != nil {
		return "", err
	}
	return rollout.Revalidate(plan, facts), nil
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

// movesOut says whether a step evicts pods whose replacements land on another node: landings
// that can be taken while the step drains.
func movesOut(step v1alpha1.NodeStep) bool {
	return slices.ContainsFunc(step.Evictions, func(e v1alpha1.Eviction) bool {
		return e.LandingNode != "" && e.LandingNode != step.Node
	})
}

// facts reads what revalidation judges a plan by: the GPU reports and nodes of its steps and
// landings, the ResourceClaims holding devices on its steps' nodes, and the pods it evicts or
// was made for.
func (r *PlanReconciler) facts(ctx context.Context, plan *v1alpha1.RepartitionPlan) (rollout.Facts, error) {
	facts := rollout.Facts{GPUs: map[string][]v1alpha1.GPUStatus{}, Pods: map[string]rollout.PodFact{},
		Cordoned: map[string]bool{}, Unavailable: map[string]string{}}
	var refs []v1alpha1.PodReference
	var nodes []string
	for _, step := range plan.Spec.Steps {
		nodes = append(nodes, step.Node)
		for _, e := range step.Evictions {
			refs = append(refs, e.PodReference)
			if e.LandingNode != "" && !slices.Contains(nodes, e.LandingNode) {
				nodes = append(nodes, e.LandingNode)
			}
		}
	}
	for _, name := range nodes {
		gpuNode := &v1alpha1.GPUNode{}
		err := r.Client.Get(ctx, types.NamespacedName{Name: name}, gpuNode)
		switch {
		case err == nil:
			facts.GPUs[name] = gpuNode.Status.GPUs
		case !apierrors.IsNotFound(err):
			return facts, fmt.Errorf("reading GPUNode %s: %w", name, err)
		}
		node := &corev1.Node{}
		err = r.Client.Get(ctx, types.NamespacedName{Name: name}, node)
		switch {
		case err == nil:
			facts.Cordoned[name] = node.Spec.Unschedulable
			if why := rollout.NodeUnavailable(node); why != "" {
				facts.Unavailable[name] = why
			}
		case !apierrors.IsNotFound(err):
			return facts, fmt.Errorf("reading node %s: %w", name, err)
		}
	}
	var changed []string
	for _, step := range plan.Spec.Steps {
		changed = append(changed, step.Node)
	}
	claimed, err := r.claimed(ctx, changed)
	if err != nil {
		return facts, err
	}
	facts.Claimed = claimed
	refs = append(refs, plan.Spec.Expected.Pods...)
	for _, ref := range refs {
		pod, err := r.pods.Get(types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name})
		if err != nil {
			return facts, fmt.Errorf("reading pod %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		if pod == nil || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		fact := rollout.PodFact{Node: pod.NodeName, MIG: map[string]int64{}, DoNotDisrupt: pod.DoNotDisrupt}
		for name, q := range pod.Requests {
			switch kind, profile, isGPU := demand.Classify(name); {
			case isGPU && kind == demand.KindMIG:
				fact.MIG[profile] += q.Value()
			case isGPU && kind == demand.KindGPU:
				fact.WholeGPUs += q.Value()
			}
		}
		facts.Pods[ref.Namespace+"/"+ref.Name] = fact
	}
	return facts, nil
}

// poolNodes lists the nodes the policy's pool holds now (PoolSelector.Selector: none for an
// empty selector, never the whole cluster).
func (r *PlanReconciler) poolNodes(ctx context.Context, policy *v1alpha1.GPUPoolPolicy) ([]corev1.Node, error) {
	if policy.Spec.NodeSelector.IsEmpty() {
		// A stored policy from before the API refused empty selectors: its pool is empty (the
		// policy reports the problem), and there is nothing to list.
		return nil, nil
	}
	selector, err := policy.Spec.NodeSelector.Selector()
	if err != nil {
		return nil, fmt.Errorf("policy %s: spec.nodeSelector: %w", policy.Name, err)
	}
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes, client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, fmt.Errorf("listing the nodes of policy %s: %w", policy.Name, err)
	}
	return nodes.Items, nil
}

// poolMembers lists the policy's pool as it is now, for Authenticate.
func (r *PlanReconciler) poolMembers(ctx context.Context, policy *v1alpha1.GPUPoolPolicy) (func(string) bool, error) {
	nodes, err := r.poolNodes(ctx, policy)
	if err != nil {
		return nil, err
	}
	names := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		names[n.Name] = true
	}
	return func(node string) bool { return names[node] }, nil
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
		if !ok(mig.LayoutOf(g.ProfileCounts()), change) {
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
