package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	resourcev1 "k8s.io/api/resource/v1"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/metrics"
	"github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/rollout"
)

// PlanReconciler takes RepartitionPlans through the approval gate (rollout.Gate): approval by
// annotation bound to the plan's hash, rejection, approval by the policy's mode, expiry; then
// executes approved plans node by node within the budget (rollout.Step): cordon, drain through
// the Eviction API, write the mig-parted entry, set the expected layout, relabel, wait for
// mig-manager and the agent's verification, uncordon. Every state lives in the plan's status,
// so any replica resumes where another stopped; every transition is an Event.
type PlanReconciler struct {
	Client client.Client
	// APIReader reads from the API server itself: the drain reads each pod there just before
	// evicting it. The manager's when nil.
	APIReader client.Reader
	Clock     clock.Clock
	Recorder  events.EventRecorder
	// Namespace holds gpupool's ConfigMaps: the GPU Operator's namespace, where the operator
	// mounts them into its mig-manager and device-plugin DaemonSets.
	Namespace string
	// ConfigPropagation is the wait between writing the ConfigMap and flipping the label;
	// DefaultConfigPropagation when zero.
	ConfigPropagation time.Duration
	// Metrics receives plan phases, evictions and node step durations; nil records nothing.
	Metrics *metrics.Metrics

	// readSlices is set when the API server serves resource.k8s.io/v1: a step on a node whose
	// GPUs NVIDIA's DRA driver serves then waits for the driver's ResourceSlices.
	readSlices bool
	// taintRules is set when the API server serves DeviceTaintRules (resource.k8s.io/v1,
	// Kubernetes 1.37): a placement step keeps devices free with them, and runs only then.
	taintRules bool
	// pods reads the informer's pod records.
	pods *PodStore
}

// SetupWithManager watches plans, and policies for changes of their approval mode.
func (r *PlanReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.ConfigPropagation == 0 {
		r.ConfigPropagation = DefaultConfigPropagation
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	pods, err := NewPodStore(context.Background(), mgr.GetCache())
	if err != nil {
		return err
	}
	r.pods = pods
	onNode := handler.EnqueueRequestsFromMapFunc(r.plansOnNode)
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.RepartitionPlan{}).
		// A step waits on its node's labels and on its GPUNode's verification.
		Watches(&corev1.Node{}, onNode).
		Watches(&v1alpha1.GPUNode{}, onNode).
		// A policy's approval mode and planTTL decide its waiting plans.
		Watches(newPolicyObject(), handler.EnqueueRequestsFromMapFunc(r.plansOfPolicy))
	if r.Namespace != "" {
		// A step in Configuring waits for the ConfigMap writer to add its entry
		// (rollout.awaitEntry): the write wakes it instead of its next look a second later.
		b = b.Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.runningPlans),
			builder.WithPredicates(operatorConfigMapWritten(r.Namespace)))
	}
	// As the policy controller: slices are read only where the API server serves them.
	if _, err := mgr.GetRESTMapper().RESTMapping(resourcev1.SchemeGroupVersion.WithKind("ResourceSlice").GroupKind(), resourcev1.SchemeGroupVersion.Version); err == nil {
		r.readSlices = true
		// NVIDIA's DRA driver names its pool after the node (cmd/gpu-kubelet-plugin/driver.go).
		b = b.Watches(&resourcev1.ResourceSlice{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			s, ok := o.(*resourcev1.ResourceSlice)
			if !ok || s.Spec.NodeName == nil {
				return nil
			}
			return r.plansOnNode(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: *s.Spec.NodeName}})
		}))
		// A placement step ends when its pending claim is allocated: the allocation wakes it.
		b = b.Watches(&resourcev1.ResourceClaim{}, handler.EnqueueRequestsFromMapFunc(r.plansOfClaim))
		_, err := mgr.GetRESTMapper().RESTMapping(resourcev1.SchemeGroupVersion.WithKind("DeviceTaintRule").GroupKind(), resourcev1.SchemeGroupVersion.Version)
		r.taintRules = err == nil
	}
	return b.Named("repartitionplan").Complete(quietConflicts{r})
}

// plansOfPolicy maps a policy to its plans.
func (r *PlanReconciler) plansOfPolicy(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.plansWhere(ctx, func(p *v1alpha1.RepartitionPlan) bool { return p.Spec.Policy == obj.GetName() })
}

// runningPlans maps a change of gpupool's ConfigMaps to the plans being carried out.
func (r *PlanReconciler) runningPlans(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.plansWhere(ctx, func(p *v1alpha1.RepartitionPlan) bool { return p.Status.Phase.Running() })
}

// plansOnNode maps a Node or GPUNode to the live plans with a step on it.
func (r *PlanReconciler) plansOnNode(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.plansWhere(ctx, func(p *v1alpha1.RepartitionPlan) bool {
		live := p.Status.Phase.Running()
		return live && slices.ContainsFunc(p.Spec.Steps, func(s v1alpha1.NodeStep) bool { return s.Node == obj.GetName() })
	})
}

// plansWhere lists the cached plans and asks for a reconcile of those that match.
func (r *PlanReconciler) plansWhere(ctx context.Context, match func(*v1alpha1.RepartitionPlan) bool) []reconcile.Request {
	var plans v1alpha1.RepartitionPlanList
	if err := r.Client.List(ctx, &plans); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range plans.Items {
		if match(&plans.Items[i]) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: plans.Items[i].Name}})
		}
	}
	return out
}

// Reconcile takes one plan one pass further. Observe: the plan and its policy. Decide: a plan
// that must not run is refused and ends there; else the approval gate, and revalidation just
// before an approved plan's first node. Act: execute the approved plan's steps (each step
// observed, decided by rollout.Step, acted on), write the status, then tell the pass's Events.
func (r *PlanReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	plan, policy, done, err := r.observePlan(ctx, req)
	if done || err != nil {
		return reconcile.Result{RequeueAfter: waitForPolicy(plan, policy, err)}, err
	}
	now := r.Clock.Now()
	ctx, held := holdEvents(ctx)

	refusal, err := r.authenticate(ctx, plan, policy)
	if err != nil {
		return reconcile.Result{}, err
	}
	if refusal.Refused() {
		if err := r.refuse(ctx, plan, policy, refusal); err != nil {
			return reconcile.Result{}, err
		}
		held.flush(logf.FromContext(ctx))
		return reconcile.Result{}, nil
	}
	d, status, err := r.decide(ctx, plan, policy, now)
	if err != nil {
		return reconcile.Result{}, err
	}

	var requeue time.Duration
	if policy != nil && status.Phase.Running() {
		if requeue, err = r.execute(ctx, plan, policy, &status, now); err != nil {
			return reconcile.Result{}, err
		}
	}
	if err := r.writePlanStatus(ctx, plan, status, now); errors.Is(err, errPlanGone) {
		return reconcile.Result{}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	held.flush(logf.FromContext(ctx))
	if requeue == 0 && d.Phase == v1alpha1.PlanAwaitingApproval && policy != nil {
		// Wake up when the plan would expire; approvals arrive as watch events.
		ttl := pool.DurationOr(policy.Spec.Disruption.PlanTTL, rollout.DefaultPlanTTL)
		requeue = max(time.Second, plan.CreationTimestamp.Add(ttl).Sub(now))
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// authenticate says whether a live plan is one the manager made for its policy's pool as it is
// now (rollout.Authenticate); a plan without a policy, or finished, is not judged.
func (r *PlanReconciler) authenticate(ctx context.Context, plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy) (rollout.Refusal, error) {
	if policy == nil || plan.Status.Phase.Finished() {
		return rollout.Refusal{}, nil
	}
	inPool, err := r.poolMembers(ctx, policy)
	if err != nil {
		return rollout.Refusal{}, err
	}
	return rollout.Authenticate(plan, policy, inPool), nil
}

// decide applies the approval gate's decision to a copy of the plan's status and, just before
// an approved plan's first node, revalidates it (a stale plan is cancelled); the decision's
// Event is told when it changed the plan.
func (r *PlanReconciler) decide(ctx context.Context, plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy,
	now time.Time) (rollout.Decision, v1alpha1.RepartitionPlanStatus, error) {
	d := rollout.Gate(plan, policy, now)
	status, changed := r.gateStatus(ctx, plan, d, now)
	if policy != nil && status.Phase == v1alpha1.PlanApproved && len(status.Nodes) == 0 {
		why, err := r.revalidate(ctx, plan)
		if err != nil {
			return d, status, err
		}
		if why != "" {
			d, changed = cancelStale(plan, &status, why), true
		}
	}
	if changed && d.Reason != "" {
		r.recordDecision(ctx, plan, policy, d)
	}
	return d, status, nil
}

// observePlan reads the plan and its policy (nil when the policy is gone). done is true when
// the pass ends here: the plan is gone, or its policy cannot be decoded (the policy reports
// why, and the plan waits for it to be fixed).
func (r *PlanReconciler) observePlan(ctx context.Context, req reconcile.Request) (*v1alpha1.RepartitionPlan, *v1alpha1.GPUPoolPolicy, bool, error) {
	plan := &v1alpha1.RepartitionPlan{}
	if err := r.Client.Get(ctx, req.NamespacedName, plan); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.ForgetPlan(req.Name)
		}
		return nil, nil, true, client.IgnoreNotFound(err)
	}
	policy, bad, err := getPolicy(ctx, r.Client, plan.Spec.Policy)
	if err != nil {
		return plan, nil, true, fmt.Errorf("plan %s: %w", plan.Name, err)
	}
	return plan, policy, bad != nil, nil
}

// waitForPolicy is how long a pass that ended early waits: a minute for a plan whose policy
// cannot be decoded, nothing otherwise (a gone plan, or an error the workqueue backs off).
func waitForPolicy(plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy, err error) time.Duration {
	if err != nil || plan == nil || policy != nil {
		return 0
	}
	return time.Minute
}

// gateStatus applies the approval gate's decision to a copy of the plan's status, and reports
// whether the decision changed the plan. An approval that names another hash is reported once
// as a Warning Event.
func (r *PlanReconciler) gateStatus(ctx context.Context, plan *v1alpha1.RepartitionPlan, d rollout.Decision, now time.Time) (v1alpha1.RepartitionPlanStatus, bool) {
	status := *plan.Status.DeepCopy()
	status.ObservedGeneration = plan.Generation
	if status.Progress == "" {
		status.Progress = fmt.Sprintf("0/%d", len(plan.Spec.Steps))
	}
	changed := d.Changed(plan) || status.Phase == ""
	status.Phase = d.Phase
	if d.Phase == v1alpha1.PlanApproved && !status.Approved {
		status.Approved, status.ApprovedTime, status.ApprovedBy = true, &metav1.Time{Time: now}, d.By
	}
	if d.Phase == v1alpha1.PlanRejected && status.RejectedBy == "" {
		status.RejectedBy = d.By
	}
	if d.Reason == "" {
		return status, changed
	}
	reason := d.Reason
	if d.IgnoredApproval != "" && d.Phase == v1alpha1.PlanAwaitingApproval {
		reason = rollout.ReasonHashMismatch
	}
	reported := markApproval(plan, &status, d.Phase == v1alpha1.PlanApproved, reason, d.Message)
	if d.IgnoredApproval != "" && reported != rollout.ReasonHashMismatch {
		planEvent(ctx, r.Recorder, plan, nil, corev1.EventTypeWarning, rollout.ReasonHashMismatch, "Approve",
			fmt.Sprintf("ignored %s=%q: this plan's hash is %s", v1alpha1.AnnotationApprove, d.IgnoredApproval, plan.Spec.Hash))
	}
	if d.Phase == v1alpha1.PlanSuperseded {
		// The policy controller asked for it (AnnotationSupersede): the plan is no longer live.
		markEnded(plan, &status, d.Reason, d.Message)
	}
	return status, changed
}

// cancelStale supersedes an approved plan that revalidation found stale before any
// disruption, and returns the decision to report.
func cancelStale(plan *v1alpha1.RepartitionPlan, status *v1alpha1.RepartitionPlanStatus, why string) rollout.Decision {
	msg := "cancelled before any disruption: " + why
	status.Phase = v1alpha1.PlanSuperseded
	markEnded(plan, status, rollout.ReasonStale, msg)
	return rollout.Decision{Phase: v1alpha1.PlanSuperseded, Reason: rollout.ReasonStale, Message: msg}
}

// recordDecision emits the Event of a gate decision. It comes before execution's own Events,
// so that a plan's events read in order: approved, then cordoned. Like them it goes out once
// the status recording it is written (heldEvents).
func (r *PlanReconciler) recordDecision(ctx context.Context, plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy, d rollout.Decision) {
	eventType := corev1.EventTypeNormal
	// A plan superseded by a newer one is routine; one cancelled as stale, rejected or expired is not.
	if d.Phase == v1alpha1.PlanExpired || d.Phase == v1alpha1.PlanRejected || d.Reason == rollout.ReasonStale {
		eventType = corev1.EventTypeWarning
	}
	planEvent(ctx, r.Recorder, plan, policyRef(policy), eventType, d.Reason, string(d.Phase), d.Message)
}

// errPlanGone: the plan was deleted while a pass worked on it, an expected race.
var errPlanGone = errors.New("plan deleted")

// writePlanStatus writes the status when it changed, and the plan's metrics.
func (r *PlanReconciler) writePlanStatus(ctx context.Context, plan *v1alpha1.RepartitionPlan, status v1alpha1.RepartitionPlanStatus, now time.Time) error {
	if !equality.Semantic.DeepEqual(plan.Status, status) {
		ended := plan.Status.Phase != status.Phase && (status.Phase == v1alpha1.PlanSucceeded || status.Phase == v1alpha1.PlanFailed)
		plan.Status = status
		if err := r.Client.Status().Update(ctx, plan); err != nil {
			if apierrors.IsNotFound(err) {
				// Deleted meanwhile (its policy's deletion takes its plans along): nothing to
				// record, and nothing to tell.
				logf.FromContext(ctx).V(1).Info("plan deleted before its status was written", "plan", plan.Name)
				return errPlanGone
			}
			return fmt.Errorf("writing status of plan %s: %w", plan.Name, err)
		}
		if ended && status.ApprovedTime != nil {
			r.Metrics.ObservePlanEnd(plan.Spec.Policy, status.Phase, now.Sub(status.ApprovedTime.Time))
		}
	}
	r.Metrics.ObservePlan(plan.Spec.Policy, plan.Name, status)
	return nil
}

// refuse ends a plan that must not run, before it touches anything: phase Failed, Ready=False
// with the reason, and a Warning Event. It acts on no node; a node that a forged status claims
// the plan cordoned is the cordon janitor's to judge.
func (r *PlanReconciler) refuse(ctx context.Context, plan *v1alpha1.RepartitionPlan, policy *v1alpha1.GPUPoolPolicy, refusal rollout.Refusal) error {
	status := *plan.Status.DeepCopy()
	status.Phase, status.ObservedGeneration = v1alpha1.PlanFailed, plan.Generation
	markEnded(plan, &status, refusal.Reason, "refused: "+refusal.Message)
	if equality.Semantic.DeepEqual(plan.Status, status) {
		return nil
	}
	plan.Status = status
	if err := r.Client.Status().Update(ctx, plan); err != nil {
		return fmt.Errorf("writing status of refused plan %s: %w", plan.Name, err)
	}
	// After the write, as every plan Event (heldEvents): a stale pass whose write fails tells nothing.
	planEvent(ctx, r.Recorder, plan, policyRef(policy), corev1.EventTypeWarning, refusal.Reason, "Refuse", "refused: "+refusal.Message)
	r.Metrics.ObservePlan(plan.Spec.Policy, plan.Name, status)
	return nil
}

// policyRef makes the policy the Event's related object when it exists; a nil interface, not
// a typed nil pointer, when it does not.
func policyRef(policy *v1alpha1.GPUPoolPolicy) runtime.Object {
	if policy == nil {
		return nil
	}
	return policy
}
