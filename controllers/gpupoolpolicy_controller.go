package controllers

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/metrics"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/rollout"
)

// +kubebuilder:rbac:groups=gpupool.io,resources=repartitionplans,verbs=create;delete
// (delete: finished plans beyond the newest ten of a policy are garbage-collected)
// +kubebuilder:rbac:groups="",resources=nodes;pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch
// +kubebuilder:rbac:groups=nvidia.com,resources=clusterpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=gpupool-agent,resources=leases,verbs=get;list;watch

// Names of gpupool's ConfigMaps that the GPU Operator's ClusterPolicy must point at.
const (
	MIGPartedConfigMap     = "gpupool-mig-parted-config"
	DevicePluginConfigMap  = "gpupool-device-plugin-config"
	defaultMinPendingAge   = 30 * time.Second
	defaultStabilization   = 2 * time.Minute
	defaultMaxReportAge    = 2 * time.Minute
	policyRecheckInterval  = time.Minute
	reasonObserving        = "Observing"
	reasonPlanProposed     = "PlanProposed"
	reasonPlanSuperseded   = "PlanSuperseded"
	reasonConflictDetected = "NodesSelectedTwice"
	reasonInvalidSpec      = "InvalidSpec"
	reasonIneffectiveSpec  = "IneffectiveSpec"
	reasonPlanningFailed   = "PlanningFailed"
	reasonUndecodable      = "Undecodable"
)

// PolicyReconciler observes a pool, runs the planner and proposes RepartitionPlans. It never
// changes a node: executing approved plans is the plan controller's job.
type PolicyReconciler struct {
	Client client.Client
	// APIReader reads around the cache, for the plan this manager has just created while the
	// cache may not show it yet; the Client when nil.
	APIReader client.Reader
	Clock     clock.Clock
	Recorder  events.EventRecorder
	// ConfigNamespace is where the plan controller writes gpupool's ConfigMaps: the GPU
	// Operator's namespace. The ClusterPolicy check reports when the operator says otherwise.
	ConfigNamespace string
	// MaxReportAge is how old a GPUNode report may be before its node is not planned.
	MaxReportAge time.Duration
	// AgentNamespace is where the node agents renew their heartbeat Leases; empty reads none,
	// and a report is then judged by its observedTime alone.
	AgentNamespace string
	// Metrics receives each pool's demand and stranded slices; nil records nothing.
	Metrics *metrics.Metrics

	mu sync.Mutex
	// lastPlan is, per policy, the planner's last result and the plan it proposed, so that
	// while that plan waits for approval inside the stabilisation window the planner does not
	// run again on every pod event only to be told to keep it.
	lastPlan map[string]plannedResult
}

// plannedResult is one planner pass remembered.
type plannedResult struct {
	generation int64
	// frozen lists the nodes the planner was told not to change: a conflict or another plan
	// taking a node changes what may be planned at all, so it always plans again.
	frozen string
	plan   string
	res    *planner.Result
	// pending are the pods that were pending when the planner ran: a pod pending now that is
	// not among them is new demand, which the remembered result knows nothing about.
	pending map[types.NamespacedName]bool
}

// SetupWithManager watches policies, their plans and everything a plan is computed from.
func (r *PolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.MaxReportAge == 0 {
		r.MaxReportAge = defaultMaxReportAge
	}
	if err := setupIndexes(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	all := handler.EnqueueRequestsFromMapFunc(r.allPolicies)
	b := ctrl.NewControllerManagedBy(mgr).
		// Unstructured, decoded per object: see policies.go.
		For(newPolicyObject()).
		Owns(&v1alpha1.RepartitionPlan{}).
		// A policy's selector decides its neighbours' conflicts too.
		Watches(newPolicyObject(), all).
		Watches(&corev1.Node{}, all).
		Watches(&corev1.Pod{}, all).
		// A report rewritten only to say the agent is alive changes no plan (agents without a Lease).
		Watches(&v1alpha1.GPUNode{}, all, builder.WithPredicates(reportChanged(r.MaxReportAge))).
		Watches(&policyv1.PodDisruptionBudget{}, all)
	if r.AgentNamespace != "" {
		// A heartbeat changes no plan; only an agent coming back after a silence does. The
		// manager's cache holds only the agents' Leases (AgentLeaseCache).
		b = b.Watches(&coordinationv1.Lease{}, all, builder.WithPredicates(agentReturned(r.MaxReportAge)))
	}
	return b.Named("gpupoolpolicy").Complete(quietConflicts{r})
}

// allPolicies maps any change in the cluster to every policy: pools are few, and a pod or a
// node may move demand or capacity into any of them.
func (r *PolicyReconciler) allPolicies(ctx context.Context, _ client.Object) []reconcile.Request {
	policies, bad, err := listPolicies(ctx, r.Client)
	if err != nil {
		logf.FromContext(ctx).Error(err, "listing policies to requeue")
		return nil
	}
	out := make([]reconcile.Request, 0, len(policies)+len(bad))
	for _, p := range policies {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
	}
	// Undecodable ones too: their condition must be written once, and kept.
	for _, b := range bad {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: b.object.GetName()}})
	}
	return out
}

// world is everything one pass reads.
type world struct {
	policies []v1alpha1.GPUPoolPolicy
	nodes    []corev1.Node
	gpuNodes []v1alpha1.GPUNode
	pods     []corev1.Pod
	pdbs     []policyv1.PodDisruptionBudget
	plans    []v1alpha1.RepartitionPlan
	// heartbeats are, per node, when its agent last renewed its Lease.
	heartbeats map[string]time.Time
}

func (r *PolicyReconciler) read(ctx context.Context) (*world, error) {
	var (
		nodes    corev1.NodeList
		gpuNodes v1alpha1.GPUNodeList
		pods     corev1.PodList
		pdbs     policyv1.PodDisruptionBudgetList
		plans    v1alpha1.RepartitionPlanList
	)
	// Policies that cannot be decoded take no part in conflicts: each reports its own problem.
	policies, _, err := listPolicies(ctx, r.Client)
	if err != nil {
		return nil, err
	}
	for _, l := range []client.ObjectList{&nodes, &gpuNodes, &pdbs, &plans} {
		if err := r.Client.List(ctx, l); err != nil {
			return nil, fmt.Errorf("listing %T: %w", l, err)
		}
	}
	// Only pending GPU pods and the pods of GPU nodes matter; the cache's indexes spare a
	// pass from walking every pod of a large cluster.
	if err := r.Client.List(ctx, &pods, client.MatchingFields{indexPendingGPU: "true"}); err != nil {
		return nil, fmt.Errorf("listing pending GPU pods: %w", err)
	}
	reported := map[string]bool{}
	for _, g := range gpuNodes.Items {
		reported[g.Name] = true
	}
	for _, n := range nodes.Items {
		if !reported[n.Name] && n.Labels[v1alpha1.LabelGPUPresent] != "true" {
			continue
		}
		var onNode corev1.PodList
		if err := r.Client.List(ctx, &onNode, client.MatchingFields{indexPodNode: n.Name}); err != nil {
			return nil, fmt.Errorf("listing pods of node %s: %w", n.Name, err)
		}
		pods.Items = append(pods.Items, onNode.Items...)
	}
	heartbeats, err := r.heartbeats(ctx)
	if err != nil {
		return nil, err
	}
	return &world{policies: policies, nodes: nodes.Items, gpuNodes: gpuNodes.Items,
		pods: pods.Items, pdbs: pdbs.Items, plans: plans.Items, heartbeats: heartbeats}, nil
}

// heartbeats reads the agents' Leases: per node, when its agent last renewed. A Lease counts
// only when it is held by that node's agent (v1alpha1.AgentLeaseHolder).
func (r *PolicyReconciler) heartbeats(ctx context.Context) (map[string]time.Time, error) {
	if r.AgentNamespace == "" {
		return nil, nil
	}
	var leases coordinationv1.LeaseList
	if err := r.Client.List(ctx, &leases, client.InNamespace(r.AgentNamespace),
		client.MatchingLabels{v1alpha1.LabelAgentLease: "true"}); err != nil {
		return nil, fmt.Errorf("listing the agents' heartbeat Leases in %s: %w", r.AgentNamespace, err)
	}
	out := make(map[string]time.Time, len(leases.Items))
	for _, l := range leases.Items {
		if l.Spec.RenewTime != nil && ptr.Deref(l.Spec.HolderIdentity, "") == v1alpha1.AgentLeaseHolder(l.Name) {
			out[l.Name] = l.Spec.RenewTime.Time
		}
	}
	return out, nil
}

// Reconcile observes the policy's pool, proposes a plan when pending demand needs one, and
// writes the policy's status. A policy the controller cannot use (it cannot be decoded, or the
// planner cannot plan for it) still gets its status written, with a condition saying what to fix.
func (r *PolicyReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	policy, bad, err := getPolicy(ctx, r.Client, req.Name)
	switch {
	case err != nil:
		return reconcile.Result{}, err
	case bad != nil:
		return reconcile.Result{}, r.reportUndecodable(ctx, bad)
	case policy == nil:
		r.Metrics.ForgetPolicy(req.Name)
		return reconcile.Result{}, nil
	}
	if !policy.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	now := r.Clock.Now()
	problems := pool.Problems(&policy.Spec)
	if len(problems) > 0 && problems[0].Blocking {
		return reconcile.Result{}, r.reportUnusable(ctx, policy, reasonInvalidSpec, pool.Message(problems, 5))
	}
	selector, err := policy.Spec.NodeSelector.AsSelector()
	if err != nil {
		// pool.Problems reports every selector that does not parse; this is a safety net.
		return reconcile.Result{}, r.reportUnusable(ctx, policy, reasonInvalidSpec, "spec.nodeSelector: "+err.Error())
	}
	w, err := r.read(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	conflicts := conflictingNodes(policy, selector, w)
	frozen, inFlight := frozenNodes(policy, w, conflicts, now)
	minAge := durationOr(policy.Spec.Planning.MinPendingAge, defaultMinPendingAge)
	snap := inventory.Build(w.nodes, w.gpuNodes, w.pods, w.pdbs, inventory.Options{
		Now: now, MaxReportAge: r.MaxReportAge, Heartbeats: w.heartbeats,
		EvictEmptyDir: policy.Spec.Disruption.EvictEmptyDir, EvictUnmanaged: policy.Spec.Disruption.EvictUnmanaged,
	})
	pending, _ := demand.Pending(w.pods, now, minAge)
	pending = inPool(pending, selector, w.nodes)

	window := durationOr(policy.Spec.Planning.StabilizationWindow, defaultStabilization)
	own := ownPlans(policy, w.plans)
	young := youngAwaitingPlan(policy, own, now, window)
	res := r.remembered(policy, young, frozenKey(frozen), pending)
	if res == nil {
		// Within the size the API server stores: a larger change becomes several plans in turn.
		if res, err = planner.PlanWithin(planner.Input{Snapshot: snap, Pending: pending, Policy: policy,
			Frozen: frozen, InFlightDisrupting: inFlight.disrupting, InFlightReconfiguring: inFlight.reconfiguring, EvictionsPaused: pool.EvictionsPaused(policy, own, now), Now: now}); err != nil {
			return reconcile.Result{RequeueAfter: policyRecheckInterval},
				r.reportUnusable(ctx, policy, reasonPlanningFailed, fmt.Sprintf("the planner cannot plan for this policy: %v", err))
		}
	}
	current, err := r.propose(ctx, policy, own, res, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	r.remember(policy, current, res, frozenKey(frozen), pending)
	if err := r.collectPlans(ctx, policy, own); err != nil {
		return reconcile.Result{}, err
	}

	status := poolStatus(policy, selector, snap, pending, res)
	status.CurrentPlan = ""
	if current != nil {
		status.CurrentPlan = current.Name
	}
	// A copy: SetStatusCondition edits in place, and the old status is compared below.
	status.Conditions = slices.Clone(policy.Status.Conditions)
	r.setConditions(ctx, policy, &status, w, conflicts, current, res, pending, pool.Unreported(poolNodes(snap, selector)))
	setSpecCondition(policy, &status, problems)
	if err := r.writeStatus(ctx, policy, status); err != nil {
		return reconcile.Result{}, err
	}
	r.Metrics.ObservePolicy(policy.Name, observation(policy, status, pending, res))
	log.V(1).Info("observed pool", "nodes", status.Pool.Nodes, "pending", status.PendingPods,
		"plan", status.CurrentPlan)
	// Time alone moves pods past minPendingAge, plans past their TTL and out of the window.
	after := min(max(minAge, time.Second), policyRecheckInterval)
	if young != nil {
		after = min(after, max(time.Second, young.CreationTimestamp.Add(window).Sub(now)))
	}
	return reconcile.Result{RequeueAfter: after}, nil
}

// setSpecCondition reports the policy's problems that do not stop planning (a catalog profile
// its product lacks, an entry another shadows) as SpecValid=False, so that an ineffective part
// of the policy is never ignored in silence.
func setSpecCondition(policy *v1alpha1.GPUPoolPolicy, status *v1alpha1.GPUPoolPolicyStatus, problems []pool.Problem) {
	cond := metav1.Condition{Type: v1alpha1.ConditionSpecValid, Status: metav1.ConditionTrue, Reason: "Valid",
		Message: "every part of the spec is usable", ObservedGeneration: policy.Generation}
	if len(problems) > 0 {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, reasonIneffectiveSpec, pool.Message(problems, 5)
	}
	meta.SetStatusCondition(&status.Conditions, cond)
}

// reportUnusable writes the status of a policy the controller cannot plan for: Ready=False
// (and SpecValid=False for a spec problem) with what to fix. The rest of the status is kept
// as last observed.
func (r *PolicyReconciler) reportUnusable(ctx context.Context, policy *v1alpha1.GPUPoolPolicy, reason, msg string) error {
	status := *policy.Status.DeepCopy()
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: reason, Message: msg, ObservedGeneration: policy.Generation})
	if reason == reasonInvalidSpec {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionSpecValid, Status: metav1.ConditionFalse,
			Reason: reason, Message: msg, ObservedGeneration: policy.Generation})
	}
	if !meta.IsStatusConditionFalse(policy.Status.Conditions, v1alpha1.ConditionReady) ||
		meta.FindStatusCondition(policy.Status.Conditions, v1alpha1.ConditionReady).Message != msg {
		r.Recorder.Eventf(policy, nil, corev1.EventTypeWarning, reason, "Plan", "%s", msg)
	}
	return r.writeStatus(ctx, policy, status)
}

// reportUndecodable writes Ready=False on a stored policy that the manager cannot decode,
// through a merge patch of the raw object's status, so that the other policies and the plan
// and cordon controllers carry on.
func (r *PolicyReconciler) reportUndecodable(ctx context.Context, bad *undecodable) error {
	u := bad.object
	var conditions []metav1.Condition
	if raw, ok, _ := unstructured.NestedSlice(u.Object, "status", "conditions"); ok {
		for _, c := range raw {
			var cond metav1.Condition
			if m, ok := c.(map[string]any); ok && runtime.DefaultUnstructuredConverter.FromUnstructured(m, &cond) == nil {
				conditions = append(conditions, cond)
			}
		}
	}
	msg := bad.err.Error() + ": fix the field with kubectl edit gpupoolpolicy " + u.GetName() +
		" (the API server's rules now refuse such a value)"
	before := meta.FindStatusCondition(conditions, v1alpha1.ConditionReady)
	if before != nil && before.Reason == reasonUndecodable && before.Message == msg && before.ObservedGeneration == u.GetGeneration() {
		return nil
	}
	cond := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reasonUndecodable,
		Message: msg, ObservedGeneration: u.GetGeneration()}
	meta.SetStatusCondition(&conditions, cond)
	logf.FromContext(ctx).Info("policy cannot be decoded; it is left alone", "policy", u.GetName(), "error", bad.err.Error())
	r.Recorder.Eventf(u, nil, corev1.EventTypeWarning, reasonUndecodable, "Decode", "%s", msg)
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conditions}})
	if err != nil {
		return fmt.Errorf("encoding the status of policy %s: %w", u.GetName(), err)
	}
	if err := r.Client.Status().Patch(ctx, u, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("writing the status of undecodable policy %s: %w", u.GetName(), err)
	}
	return nil
}

// youngAwaitingPlan is the policy's plan that waits for approval and is younger than the
// stabilisation window: propose keeps such a plan whatever the planner says, unless the demand
// is gone, which revalidation at approval catches too.
func youngAwaitingPlan(policy *v1alpha1.GPUPoolPolicy, plans []v1alpha1.RepartitionPlan, now time.Time, window time.Duration) *v1alpha1.RepartitionPlan {
	for i := range plans {
		if rollout.Gate(&plans[i], policy, now).Phase == v1alpha1.PlanAwaitingApproval &&
			now.Sub(plans[i].CreationTimestamp.Time) < window {
			return &plans[i]
		}
	}
	return nil
}

// remembered returns the planner result that proposed plan, when neither the policy nor the
// frozen nodes have changed since and no pod has started pending since; nil means the planner
// must run. New demand always runs it, so that it can extend the plan under review (propose).
func (r *PolicyReconciler) remembered(policy *v1alpha1.GPUPoolPolicy, plan *v1alpha1.RepartitionPlan, frozen string,
	pending []demand.Request) *planner.Result {
	if plan == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.lastPlan[policy.Name]
	if !ok || last.generation != policy.Generation || last.plan != plan.Name || last.frozen != frozen {
		return nil
	}
	for _, p := range pending {
		if !last.pending[p.Pod] {
			return nil
		}
	}
	return last.res
}

// frozenKey is a stable text of the frozen nodes, for comparison.
func frozenKey(frozen map[string]string) string {
	return strings.Join(slices.Sorted(maps.Keys(frozen)), ",")
}

func (r *PolicyReconciler) remember(policy *v1alpha1.GPUPoolPolicy, current *v1alpha1.RepartitionPlan, res *planner.Result, frozen string,
	pending []demand.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastPlan == nil {
		r.lastPlan = map[string]plannedResult{}
	}
	if current == nil {
		delete(r.lastPlan, policy.Name)
		return
	}
	known := make(map[types.NamespacedName]bool, len(pending))
	for _, p := range pending {
		known[p.Pod] = true
	}
	r.lastPlan[policy.Name] = plannedResult{generation: policy.Generation, frozen: frozen, plan: current.Name, res: res, pending: known}
}

// propose keeps, replaces or retires the policy's unapproved plan so that at most one plan of
// a policy is live, and returns that plan. A plan younger than the stabilisation window is
// kept while it still helps, so that every pod event does not churn a new plan under the
// eyes of the person asked to approve it. A plan past the gate (approved or executing) is
// never touched: the planner waits for it.
func (r *PolicyReconciler) propose(ctx context.Context, policy *v1alpha1.GPUPoolPolicy,
	plans []v1alpha1.RepartitionPlan, res *planner.Result, now time.Time) (*v1alpha1.RepartitionPlan, error) {
	plans, err := r.withJustCreated(ctx, policy, plans)
	if err != nil {
		return nil, err
	}
	var awaiting *v1alpha1.RepartitionPlan
	for i := range plans {
		// The gate's verdict, not only the recorded phase: an approval annotation the plan
		// controller has not acted on yet still protects the plan from being superseded.
		switch rollout.Gate(&plans[i], policy, now).Phase {
		case v1alpha1.PlanApproved, v1alpha1.PlanExecuting:
			return &plans[i], nil
		case v1alpha1.PlanAwaitingApproval:
			if awaiting == nil {
				awaiting = &plans[i]
			}
		}
	}
	want := res.RepartitionPlan(policy, now)
	window := durationOr(policy.Spec.Planning.StabilizationWindow, defaultStabilization)
	switch {
	case want == nil && awaiting == nil:
		return nil, nil
	case want == nil:
		return nil, r.supersede(ctx, awaiting, "pending demand no longer needs it")
	case awaiting != nil && hashAs(want, awaiting.Name) == awaiting.Spec.Hash:
		return awaiting, nil
	case awaiting != nil && now.Sub(awaiting.CreationTimestamp.Time) < window && !pool.Extends(want, awaiting):
		// Inside the window a plan under review is replaced only to serve demand it does not.
		return awaiting, nil
	case refusedRecently(plans, want, now):
		// A human's no (or nobody's yes within planTTL) is not overridden by proposing the very
		// same change again the same day. A plan that failed or was superseded does not count:
		// retrying an identical change is allowed.
		if awaiting != nil {
			return awaiting, nil
		}
		return nil, nil
	case awaiting != nil:
		why := "superseded by a new plan"
		if pool.Extends(want, awaiting) {
			why = "superseded by a new plan that also serves pods pending since it was proposed"
		}
		if err := r.supersede(ctx, awaiting, why); err != nil {
			return nil, err
		}
	}
	if err := r.create(ctx, want, now); err != nil {
		return nil, err
	}
	cut := ""
	if res.StepBound > 0 {
		cut = fmt.Sprintf(" (cut to %d node(s) so that the plan fits in the API server; the demand it leaves is planned once it has run)", res.StepBound)
	}
	r.Recorder.Eventf(want, policy, corev1.EventTypeNormal, reasonPlanProposed, "Propose",
		"plan %s changes %d node(s)%s, evicts %d pod(s), serves %d pending pod(s); approve with: kubectl annotate repartitionplan %s %s=%s",
		want.Name, len(want.Spec.Steps), cut, evictions(want), len(want.Spec.Expected.Pods), want.Name, v1alpha1.AnnotationApprove, want.Spec.Hash)
	return want, nil
}

// withJustCreated adds the plan this manager last created for the policy when the cache does
// not show it yet, read from the API server: otherwise the pass after a create would see no
// plan, report none in the status and might propose a second one.
func (r *PolicyReconciler) withJustCreated(ctx context.Context, policy *v1alpha1.GPUPoolPolicy,
	plans []v1alpha1.RepartitionPlan) ([]v1alpha1.RepartitionPlan, error) {
	r.mu.Lock()
	last, ok := r.lastPlan[policy.Name]
	r.mu.Unlock()
	if !ok || slices.ContainsFunc(plans, func(p v1alpha1.RepartitionPlan) bool { return p.Name == last.plan }) {
		return plans, nil
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	live := &v1alpha1.RepartitionPlan{}
	err := reader.Get(ctx, types.NamespacedName{Name: last.plan}, live)
	switch {
	case apierrors.IsNotFound(err):
		return plans, nil
	case err != nil:
		return nil, fmt.Errorf("reading plan %s: %w", last.plan, err)
	case !metav1.IsControlledBy(live, policy):
		return plans, nil
	}
	return append([]v1alpha1.RepartitionPlan{*live}, plans...), nil
}

// refusalMemory is how long a rejected or expired change is not proposed again.
const refusalMemory = 24 * time.Hour

// refusedRecently reports whether a plan with this hash was rejected or expired within
// refusalMemory.
func refusedRecently(plans []v1alpha1.RepartitionPlan, want *v1alpha1.RepartitionPlan, now time.Time) bool {
	for _, p := range plans {
		if (p.Status.Phase == v1alpha1.PlanRejected || p.Status.Phase == v1alpha1.PlanExpired) &&
			now.Sub(p.CreationTimestamp.Time) < refusalMemory && hashAs(want, p.Name) == p.Spec.Hash {
			return true
		}
	}
	return false
}

// hashAs is the hash the planner's plan want would have had if it had been created under
// name: plans differ in their entry names only (see create), so this tells whether an
// existing plan makes the very same change.
func hashAs(want *v1alpha1.RepartitionPlan, name string) string {
	steps := slices.Clone(want.Spec.Steps)
	for i := range steps {
		steps[i].MIGConfigName = planner.PlanEntryName(steps[i].MIGConfigName, name)
	}
	return v1alpha1.HashSteps(steps)
}

// create creates the plan under a fresh name that nobody can guess: a policy's next plan name
// must not be something another user can create first and so block planning. A name already
// taken (by chance, or by a squatter) is never adopted; another one is tried.
func (r *PolicyReconciler) create(ctx context.Context, plan *v1alpha1.RepartitionPlan, now time.Time) error {
	policy := plan.Spec.Policy
	layoutNames := make([]string, len(plan.Spec.Steps))
	for i, s := range plan.Spec.Steps {
		layoutNames[i] = s.MIGConfigName
	}
	for attempt := 0; ; attempt++ {
		plan.Name = planName(policy, now)
		// Each plan gets its own mig-parted entry names: mig-manager applies an entry only when
		// the node's nvidia.com/mig.config changes (NVIDIA/mig-parted cmd/nvidia-mig-manager
		// main.go), so a plan that retries a layout an earlier plan failed to apply must name a
		// new entry, or the node would never be relabelled and the stale "failed" state would be
		// read as this plan's result.
		for i := range plan.Spec.Steps {
			plan.Spec.Steps[i].MIGConfigName = planner.PlanEntryName(layoutNames[i], plan.Name)
		}
		plan.Spec.Hash = v1alpha1.HashSteps(plan.Spec.Steps)
		err := r.Client.Create(ctx, plan)
		switch {
		case err == nil:
			return nil
		case apierrors.IsAlreadyExists(err) && attempt < 3:
			continue
		default:
			return fmt.Errorf("creating plan %s: %w", plan.Name, err)
		}
	}
}

// planName is <policy>-<yyyymmdd>-<8 random hex digits>, cut to fit an object name.
func planName(policy string, now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	suffix := fmt.Sprintf("-%s-%s", now.UTC().Format("20060102"), hex.EncodeToString(b[:]))
	prefix := policy
	if max := validation.DNS1123SubdomainMaxLength - len(suffix); len(prefix) > max {
		prefix = strings.TrimRight(prefix[:max], "-.")
	}
	return prefix + suffix
}

// keepFinishedPlans is how many finished plans of a policy are kept for their history; older
// ones are deleted, so plans do not pile up in etcd.
const keepFinishedPlans = 10

// collectPlans deletes a policy's finished plans beyond the newest keepFinishedPlans. Plans
// are listed newest first.
func (r *PolicyReconciler) collectPlans(ctx context.Context, policy *v1alpha1.GPUPoolPolicy, plans []v1alpha1.RepartitionPlan) error {
	kept := 0
	for i := range plans {
		p := &plans[i]
		if !finished(p.Status.Phase) || !metav1.IsControlledBy(p, policy) {
			continue
		}
		if kept++; kept <= keepFinishedPlans {
			continue
		}
		err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting finished plan %s: %w", p.Name, err)
		}
	}
	return nil
}

// finished reports whether a plan in this phase will never act again.
func finished(phase v1alpha1.PlanPhase) bool {
	switch phase {
	case v1alpha1.PlanSucceeded, v1alpha1.PlanFailed, v1alpha1.PlanRolledBack, v1alpha1.PlanRejected,
		v1alpha1.PlanExpired, v1alpha1.PlanSuperseded:
		return true
	}
	return false
}

func (r *PolicyReconciler) supersede(ctx context.Context, plan *v1alpha1.RepartitionPlan, why string) error {
	patch := client.MergeFrom(plan.DeepCopy())
	plan.Status.Phase = v1alpha1.PlanSuperseded
	meta.SetStatusCondition(&plan.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse,
		Reason: reasonPlanSuperseded, Message: why, ObservedGeneration: plan.Generation})
	if err := r.Client.Status().Patch(ctx, plan, patch); err != nil {
		return fmt.Errorf("superseding plan %s: %w", plan.Name, err)
	}
	r.Recorder.Eventf(plan, nil, corev1.EventTypeNormal, reasonPlanSuperseded, "Supersede", "%s", why)
	return nil
}

func (r *PolicyReconciler) writeStatus(ctx context.Context, policy *v1alpha1.GPUPoolPolicy, status v1alpha1.GPUPoolPolicyStatus) error {
	status.ObservedGeneration = policy.Generation
	if equality.Semantic.DeepEqual(policy.Status, status) {
		return nil
	}
	// An update, not a merge patch: a merge patch computed from the cached copy omits fields
	// whose value is zero on both sides, so a count of 0 would never reach the server.
	policy.Status = status
	if err := r.Client.Status().Update(ctx, policy); err != nil {
		return fmt.Errorf("writing status of policy %s: %w", policy.Name, err)
	}
	return nil
}

// setConditions computes every condition of the policy from what this pass saw.
func (r *PolicyReconciler) setConditions(ctx context.Context, policy *v1alpha1.GPUPoolPolicy, status *v1alpha1.GPUPoolPolicyStatus,
	w *world, conflicts map[string]string, current *v1alpha1.RepartitionPlan, res *planner.Result, pending []demand.Request, unreported string) {
	set := func(t string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason,
			Message: msg, ObservedGeneration: policy.Generation})
	}
	set(v1alpha1.ConditionReady, true, reasonObserving, fmt.Sprintf("observing %d node(s)", status.Pool.Nodes))
	if len(conflicts) > 0 {
		set(v1alpha1.ConditionConflict, true, reasonConflictDetected, conflictMessage(conflicts))
	} else {
		set(v1alpha1.ConditionConflict, false, "NoConflict", "no other policy selects these nodes")
	}
	demanded := pool.DemandSatisfied(pending, res, current)
	set(v1alpha1.ConditionDemandSatisfied, demanded.True, demanded.Reason, demanded.Message)
	awaiting := current != nil && rollout.Gate(current, policy, r.Clock.Now()).Phase == v1alpha1.PlanAwaitingApproval
	if awaiting {
		set(v1alpha1.ConditionAwaitingApproval, true, reasonPlanProposed, fmt.Sprintf(
			"approve with: kubectl annotate repartitionplan %s %s=%s", current.Name, v1alpha1.AnnotationApprove, current.Spec.Hash))
	} else {
		set(v1alpha1.ConditionAwaitingApproval, false, "NoPlanWaiting", "no plan waits for approval")
	}
	executing := current != nil && !awaiting
	if executing {
		phase := rollout.Gate(current, policy, r.Clock.Now()).Phase
		set(v1alpha1.ConditionReconfiguring, true, string(phase), "plan "+current.Name+" is "+strings.ToLower(string(phase)))
	} else {
		set(v1alpha1.ConditionReconfiguring, false, "Idle", "no plan is executing")
	}
	failed := lastFailedPlan(policy, w.plans)
	switch {
	case unreported != "":
		set(v1alpha1.ConditionDegraded, true, "NodesNotPlannable", unreported)
	case failed != "":
		set(v1alpha1.ConditionDegraded, true, "PlanFailed", failed)
	default:
		set(v1alpha1.ConditionDegraded, false, "AllNodesReporting", "every pool node's agent reports its GPUs")
	}
	r.setOperatorCondition(ctx, policy, status, set)
}

// setOperatorCondition checks that NVIDIA's ClusterPolicy points mig-manager and the device
// plugin at gpupool's ConfigMaps, and says exactly what to set when it does not.
func (r *PolicyReconciler) setOperatorCondition(ctx context.Context, policy *v1alpha1.GPUPoolPolicy,
	status *v1alpha1.GPUPoolPolicyStatus, set func(string, bool, string, string)) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(nvidia.ClusterPolicyGVK.GroupVersion().WithKind(nvidia.ClusterPolicyGVK.Kind + "List"))
	err := r.Client.List(ctx, list)
	switch {
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		set(v1alpha1.ConditionGPUOperatorConfigured, false, "GPUOperatorNotFound",
			"the ClusterPolicy CRD of NVIDIA's GPU Operator is not installed; plans are proposed but mig-manager will not apply them")
		return
	case err != nil:
		set(v1alpha1.ConditionGPUOperatorConfigured, false, "ClusterPolicyUnreadable", err.Error())
		return
	case len(list.Items) == 0:
		set(v1alpha1.ConditionGPUOperatorConfigured, false, "NoClusterPolicy", "no ClusterPolicy object exists")
		return
	}
	problems := nvidia.CheckClusterPolicy(&list.Items[0], r.ConfigNamespace, MIGPartedConfigMap, DevicePluginConfigMap)
	if len(problems) > 0 {
		set(v1alpha1.ConditionGPUOperatorConfigured, false, "ClusterPolicyMisconfigured", nvidia.ProblemsMessage(problems))
		return
	}
	set(v1alpha1.ConditionGPUOperatorConfigured, true, "Configured", "ClusterPolicy "+list.Items[0].GetName()+
		" uses gpupool's config maps, which gpupool writes into the operator's namespace "+r.ConfigNamespace)
}

// durationOr is the duration, or def when it is unset. Zero is a value, not "unset":
// minPendingAge: 0s plans at once. The API server bounds every duration (see
// v1alpha1.GPUPoolPolicySpec.Durations), and pool.Problems stops planning for a stored policy
// whose durations are out of bounds.
func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

func evictions(p *v1alpha1.RepartitionPlan) int {
	n := 0
	for _, s := range p.Spec.Steps {
		n += len(s.Evictions)
	}
	return n
}

// ownPlans are the plans the policy controls, newest first. A plan that only names the policy
// in spec.policy is someone else's: the plan controller refuses it, and planning ignores it.
func ownPlans(policy *v1alpha1.GPUPoolPolicy, plans []v1alpha1.RepartitionPlan) []v1alpha1.RepartitionPlan {
	var out []v1alpha1.RepartitionPlan
	for _, p := range plans {
		if p.Spec.Policy == policy.Name && metav1.IsControlledBy(&p, policy) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b v1alpha1.RepartitionPlan) int {
		return cmp.Or(b.CreationTimestamp.Compare(a.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// conflictingNodes are the pool's nodes another policy selects too, with that policy's name.
func conflictingNodes(policy *v1alpha1.GPUPoolPolicy, selector labels.Selector, w *world) map[string]string {
	out := map[string]string{}
	for _, other := range w.policies {
		if other.Name == policy.Name {
			continue
		}
		sel, err := other.Spec.NodeSelector.AsSelector()
		if err != nil || sel.Empty() {
			continue
		}
		for _, n := range w.nodes {
			set := labels.Set(n.Labels)
			if selector.Matches(set) && sel.Matches(set) {
				out[n.Name] = other.Name
			}
		}
	}
	return out
}

func conflictMessage(conflicts map[string]string) string {
	names := make([]string, 0, len(conflicts))
	for n, p := range conflicts {
		names = append(names, n+" (also policy "+p+")")
	}
	slices.Sort(names)
	if len(names) > 5 {
		names = append(names[:5], fmt.Sprintf("and %d more", len(names)-5))
	}
	return "nodes selected by two policies are left alone by both: " + strings.Join(names, ", ")
}

// inFlight counts the pool's nodes that executing plans are changing now, by budget.
type inFlight struct {
	disrupting, reconfiguring int
}

// frozenNodes are the nodes the planner must not change now, and how many of the pool's
// nodes executing plans are changing.
func frozenNodes(policy *v1alpha1.GPUPoolPolicy, w *world, conflicts map[string]string, now time.Time) (map[string]string, inFlight) {
	frozen := map[string]string{}
	for n, other := range conflicts {
		frozen[n] = "also selected by policy " + other
	}
	window := durationOr(policy.Spec.Planning.StabilizationWindow, defaultStabilization)
	var flying inFlight
	for _, p := range w.plans {
		for _, step := range p.Spec.Steps {
			// A node whose step failed waits, longer after each failure, before it is planned
			// again: a node mig-manager cannot configure is not drained again and again.
			if until, failures := pool.FailureBackoff(w.plans, step.Node, window, now); !until.IsZero() {
				frozen[step.Node] = fmt.Sprintf("its reconfiguration failed %d time(s) in the last day; next try after %s",
					failures, until.UTC().Format(time.RFC3339))
			}
		}
	}
	for _, p := range w.plans {
		running := p.Status.Phase == v1alpha1.PlanApproved || p.Status.Phase == v1alpha1.PlanExecuting
		for _, step := range p.Spec.Steps {
			var st *v1alpha1.NodeStepStatus
			for i := range p.Status.Nodes {
				if p.Status.Nodes[i].Node == step.Node {
					st = &p.Status.Nodes[i]
				}
			}
			switch {
			case running && (st == nil || (st.State != v1alpha1.NodeDone && st.State != v1alpha1.NodeFailed)):
				frozen[step.Node] = "plan " + p.Name + " is changing it"
				if p.Spec.Policy == policy.Name && step.Disruptive {
					flying.disrupting++
				} else if p.Spec.Policy == policy.Name {
					flying.reconfiguring++
				}
			case st != nil && st.State == v1alpha1.NodeDone && st.LastTransitionTime != nil &&
				now.Sub(st.LastTransitionTime.Time) < window:
				frozen[step.Node] = fmt.Sprintf("changed by plan %s %s ago, within the stabilization window %s",
					p.Name, now.Sub(st.LastTransitionTime.Time).Round(time.Second), window)
			}
		}
	}
	return frozen, flying
}

// inPool keeps the pending pods that could run on some node of the pool: demand elsewhere
// is another policy's (or nobody's) business.
func inPool(reqs []demand.Request, selector labels.Selector, nodes []corev1.Node) []demand.Request {
	var out []demand.Request
	for _, r := range reqs {
		for i := range nodes {
			if !selector.Matches(labels.Set(nodes[i].Labels)) {
				continue
			}
			if ok, _ := r.Matches(&nodes[i]); ok {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// lastFailedPlan says what failed when the policy's newest finished plan failed ("" when it
// did not): a failed reconfiguration degrades the pool until a later plan finishes.
func lastFailedPlan(policy *v1alpha1.GPUPoolPolicy, plans []v1alpha1.RepartitionPlan) string {
	for _, p := range ownPlans(policy, plans) {
		if !finished(p.Status.Phase) {
			continue
		}
		if p.Status.Phase != v1alpha1.PlanFailed {
			return ""
		}
		msg := "plan " + p.Name + " failed"
		if c := meta.FindStatusCondition(p.Status.Conditions, "Ready"); c != nil && c.Status == metav1.ConditionFalse {
			msg += ": " + c.Message
		}
		for _, n := range p.Status.Nodes {
			if n.State == v1alpha1.NodeFailed {
				msg += "; node " + n.Node + ": " + n.Message
				break
			}
		}
		return msg
	}
	return ""
}

// AgentLeaseCache is how the manager's cache must hold Leases for the policy controller: only
// the agents' heartbeat Leases, in their namespace (RBAC grants no more), never the
// leader-election Leases of other components.
func AgentLeaseCache(agentNamespace string) cache.ByObject {
	return cache.ByObject{
		Namespaces: map[string]cache.Config{agentNamespace: {}},
		Label:      labels.SelectorFromSet(labels.Set{v1alpha1.LabelAgentLease: "true"}),
	}
}

// observation is what the metrics record of one pass over a pool.
func observation(policy *v1alpha1.GPUPoolPolicy, status v1alpha1.GPUPoolPolicyStatus, pending []demand.Request,
	res *planner.Result) metrics.PolicyObservation {
	obs := metrics.PolicyObservation{Status: status, Unserved: map[metrics.ShapeReason]int{},
		DrainTimeout:     durationOr(policy.Spec.Disruption.DrainTimeout, rollout.DefaultDrainTimeout),
		ConfigureTimeout: durationOr(policy.Spec.Disruption.ConfigureTimeout, rollout.DefaultConfigureTimeout)}
	for k, n := range pool.UnservedByShape(pending, res) {
		obs.Unserved[metrics.ShapeReason{Shape: k.Shape, Reason: string(k.Reason)}] = n
	}
	return obs
}
