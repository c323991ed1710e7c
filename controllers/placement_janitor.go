package controllers

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// reasonTaintRemoved is the Event reason when the device-taint janitor deletes a DeviceTaintRule of
// gpupool's that no live plan explains.
const reasonTaintRemoved = "OrphanedDeviceTaintRemoved"

// DeviceTaintJanitor makes sure no device stays tainted by gpupool without a live plan's step
// that explains it, as CordonReconciler does for cordons: a crash between a step's end and its
// untainting, a plan deleted, superseded or rejected mid-step, or a status write lost would
// otherwise keep a partition from every claim for good. It reconciles every rule labelled as
// gpupool's when the manager starts (the informer's initial list), and again whenever such a
// rule or a plan changes.
//
// It deletes only rules gpupool made (ownRule): labelled as gpupool's, owned by a
// RepartitionPlan, and named exactly as gpupool names the rule for the device the rule's
// selector names under that plan's UID. A rule's name is fixed at creation, so whoever may
// only patch rules cannot make someone else's rule read as gpupool's by copying the label and
// an ownerReference onto it.
type DeviceTaintJanitor struct {
	Client client.Client
	// APIReader reads the rule and its plan afresh before a deletion; the manager's when nil.
	APIReader client.Reader
	Recorder  events.EventRecorder
}

// SetupWithManager watches gpupool's DeviceTaintRules and the plans that explain them.
func (j *DeviceTaintJanitor) SetupWithManager(mgr manager.Manager) error {
	if j.APIReader == nil {
		j.APIReader = mgr.GetAPIReader()
	}
	labelled := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetLabels()[labelDeviceTaint]
		return ok
	})
	return builder.ControllerManagedBy(mgr).
		For(&resourcev1.DeviceTaintRule{}, builder.WithPredicates(labelled)).
		Watches(&v1alpha1.RepartitionPlan{}, handler.EnqueueRequestsFromMapFunc(j.rulesOfPlan)).
		Named("devicetaint").
		Complete(quietConflicts{j})
}

// rulesOfPlan maps a plan to the rules that name it as their owner.
func (j *DeviceTaintJanitor) rulesOfPlan(ctx context.Context, obj client.Object) []reconcile.Request {
	var rules resourcev1.DeviceTaintRuleList
	if err := j.Client.List(ctx, &rules, client.HasLabels{labelDeviceTaint}); err != nil {
		logf.FromContext(ctx).Error(err, "listing gpupool's DeviceTaintRules", "plan", obj.GetName())
		return nil
	}
	var out []reconcile.Request
	for i := range rules.Items {
		if slices.ContainsFunc(rules.Items[i].OwnerReferences, func(o metav1.OwnerReference) bool { return o.Name == obj.GetName() }) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: rules.Items[i].Name}})
		}
	}
	return out
}

// Reconcile deletes one of gpupool's rules when no live plan's step explains it; the cache's
// verdict is checked against the API server before anything is deleted.
func (j *DeviceTaintJanitor) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	rule := &resourcev1.DeviceTaintRule{}
	if err := j.Client.Get(ctx, req.NamespacedName, rule); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if why, err := j.orphaned(ctx, j.Client, rule); err != nil || why == "" {
		return reconcile.Result{}, err
	}
	// Judged again on what the API server says now: the step that made the rule may have
	// written its plan's status a moment ago.
	fresh := &resourcev1.DeviceTaintRule{}
	if err := j.APIReader.Get(ctx, req.NamespacedName, fresh); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	why, err := j.orphaned(ctx, j.APIReader, fresh)
	if err != nil || why == "" {
		return reconcile.Result{}, err
	}
	if err := deleteRule(ctx, j.Client, fresh); err != nil {
		return reconcile.Result{}, err
	}
	sel := fresh.Spec.DeviceSelector
	logf.FromContext(ctx).Info("removed an orphaned device taint", "rule", fresh.Name, "node", *sel.Pool, "device", *sel.Device, "why", why)
	j.Recorder.Eventf(fresh, nil, corev1.EventTypeNormal, reasonTaintRemoved, "Untaint",
		"removed gpupool's NoSchedule taint of device %s in pool %s: %s", *sel.Device, *sel.Pool, why)
	return reconcile.Result{}, nil
}

// orphaned says why one of gpupool's rules is explained by no live plan ("" when it is
// explained, or when the rule is not gpupool's at all).
func (j *DeviceTaintJanitor) orphaned(ctx context.Context, reader client.Reader, rule *resourcev1.DeviceTaintRule) (string, error) {
	owner, ours := ownRule(rule)
	if !ours {
		return "", nil
	}
	plan := &v1alpha1.RepartitionPlan{}
	if err := reader.Get(ctx, types.NamespacedName{Name: owner.Name}, plan); apierrors.IsNotFound(err) {
		plan = nil
	} else if err != nil {
		return "", fmt.Errorf("reading plan %s of DeviceTaintRule %s: %w", owner.Name, rule.Name, err)
	}
	return taintOrphaned(rule, owner.UID, plan), nil
}

// taintOrphaned decides whether plan (nil when gone) explains one of gpupool's rules, whose
// owner reference carries ownerUID: the plan is that very plan, it is live (Approved or
// Executing: a step taints in the pass that records the plan Executing), and one of its
// placement steps, not finished, keeps the rule's device free on the rule's node. It returns
// why not ("" when explained).
func taintOrphaned(rule *resourcev1.DeviceTaintRule, ownerUID types.UID, plan *v1alpha1.RepartitionPlan) string {
	sel := rule.Spec.DeviceSelector
	switch {
	case plan == nil || plan.UID != ownerUID:
		return "its plan is gone"
	case !plan.Status.Phase.Running():
		return fmt.Sprintf("its plan %s is %s", plan.Name, plan.Status.Phase)
	}
	for _, step := range plan.Spec.Steps {
		p := step.Placement
		if p == nil || step.Node != *sel.Pool || p.Driver != *sel.Driver || !slices.Contains(p.KeepFree, *sel.Device) {
			continue
		}
		i := slices.IndexFunc(plan.Status.Nodes, func(s v1alpha1.NodeStepStatus) bool { return s.Node == step.Node })
		if i >= 0 && (plan.Status.Nodes[i].State == v1alpha1.NodeDone || plan.Status.Nodes[i].State == v1alpha1.NodeFailed) {
			return fmt.Sprintf("the step of plan %s on node %s is %s", plan.Name, step.Node, plan.Status.Nodes[i].State)
		}
		return ""
	}
	return fmt.Sprintf("no step of plan %s keeps device %s of node %s free", plan.Name, *sel.Device, *sel.Pool)
}
