package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/rollout"
)

// reasonCordonReleased is the Event reason when the janitor gives a node back.
const reasonCordonReleased = "OrphanedCordonReleased"

// reasonKeptCordoned is the Event reason when the janitor keeps an orphaned cordon because
// the node's GPUs may be half-configured.
const reasonKeptCordoned = "OrphanedCordonKept"

// annotationKeptCordoned on a node says why the janitor keeps gpupool's orphaned cordon, so
// that the reason is on the node and the Event is sent once per reason.
const annotationKeptCordoned = "gpupool.io/kept-cordoned"

// CordonReconciler makes sure no node stays cordoned by gpupool without a plan that explains
// it. A crash between cordoning and recording, a plan deleted mid-flight, or a failed node that
// someone uncordoned by hand would otherwise leave a node out of service, or an annotation that
// lies, forever. It reconciles every annotated node when the manager starts (the informer's
// initial list), and again whenever such a node or a plan changes.
type CordonReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
}

// SetupWithManager watches nodes carrying gpupool's cordon annotation and the plans that
// explain them.
func (r *CordonReconciler) SetupWithManager(mgr manager.Manager) error {
	annotated := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetAnnotations()[v1alpha1.AnnotationCordonedBy]
		return ok
	})
	return builder.ControllerManagedBy(mgr).
		For(&corev1.Node{}, builder.WithPredicates(annotated)).
		Watches(&v1alpha1.RepartitionPlan{}, handler.EnqueueRequestsFromMapFunc(r.nodesOfPlan)).
		// A kept cordon is released once the agent verifies the node's layout: a GPUNode
		// change looks at its node again (Reconcile ignores nodes without gpupool's annotation).
		Watches(&v1alpha1.GPUNode{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetName()}}}
		})).
		Named("cordon").
		Complete(quietConflicts{r})
}

// nodesOfPlan maps a plan to the nodes whose annotation names it.
func (r *CordonReconciler) nodesOfPlan(ctx context.Context, obj client.Object) []reconcile.Request {
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		logf.FromContext(ctx).Error(err, "listing nodes cordoned by a plan", "plan", obj.GetName())
		return nil
	}
	var out []reconcile.Request
	for _, n := range nodes.Items {
		if n.Annotations[v1alpha1.AnnotationCordonedBy] == obj.GetName() {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: n.Name}})
		}
	}
	return out
}

// Reconcile resolves one annotated node that no live plan explains: uncordon it when gpupool
// cordoned it, else only drop the annotations.
func (r *CordonReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, req.NamespacedName, node); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	owner, ok := node.Annotations[v1alpha1.AnnotationCordonedBy]
	if !ok {
		return reconcile.Result{}, nil
	}
	plan := &v1alpha1.RepartitionPlan{}
	err := r.Client.Get(ctx, types.NamespacedName{Name: owner}, plan)
	switch {
	case apierrors.IsNotFound(err):
		plan = nil
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("reading plan %s that cordoned node %s: %w", owner, node.Name, err)
	}
	if plan != nil && explains(plan, node) {
		return reconcile.Result{}, nil
	}
	if state, _ := nvidia.MIGConfigState(node); state == nvidia.StatePending || state == nvidia.StateRebooting {
		// mig-manager is still at work on the node; reopening it now would hand half-made
		// devices to new pods. Look again once it is done.
		return reconcile.Result{RequeueAfter: 30 * time.Second}, nil
	}

	gpuNode := &v1alpha1.GPUNode{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: node.Name}, gpuNode); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("reading GPUNode %s: %w", node.Name, err)
		}
		gpuNode = nil
	}
	if why := rollout.MayBeHalfConfigured(node, gpuNode); why != "" && (plan == nil || plan.Status.Phase != v1alpha1.PlanFailed) {
		// The plan (or its policy) was deleted mid-flight: never reopen a node whose GPUs may be
		// half-configured. Say once what to check; the node's next change brings it back here.
		gone := "plan " + owner + " no longer exists"
		if plan != nil {
			gone = fmt.Sprintf("plan %s is %s", owner, plan.Status.Phase)
		}
		if node.Annotations[annotationKeptCordoned] != why {
			patch := client.MergeFrom(node.DeepCopy())
			metav1.SetMetaDataAnnotation(&node.ObjectMeta, annotationKeptCordoned, why)
			if err := r.Client.Patch(ctx, node, patch); err != nil {
				return reconcile.Result{}, fmt.Errorf("recording why node %s stays cordoned: %w", node.Name, err)
			}
			r.Recorder.Eventf(node, nil, corev1.EventTypeWarning, reasonKeptCordoned, "Keep",
				"%s while the node was being reconfigured, and %s: check its GPUs (nvidia-smi mig -lgi), then run kubectl uncordon %s",
				gone, why, node.Name)
		}
		return reconcile.Result{}, nil
	}

	patch := client.MergeFrom(node.DeepCopy())
	foreign := node.Annotations[v1alpha1.AnnotationWasUnschedulable] == "true"
	if plan != nil {
		if i := slices.IndexFunc(plan.Status.Nodes, func(s v1alpha1.NodeStepStatus) bool { return s.Node == node.Name }); i >= 0 {
			foreign = foreign || plan.Status.Nodes[i].WasUnschedulable
		}
	}
	uncordon := node.Spec.Unschedulable && !foreign
	if uncordon {
		node.Spec.Unschedulable = false
	}
	delete(node.Annotations, v1alpha1.AnnotationCordonedBy)
	delete(node.Annotations, v1alpha1.AnnotationWasUnschedulable)
	delete(node.Annotations, annotationKeptCordoned)
	if err := r.Client.Patch(ctx, node, patch); err != nil {
		return reconcile.Result{}, fmt.Errorf("releasing gpupool's cordon on node %s: %w", node.Name, err)
	}
	why := "plan " + owner + " no longer exists"
	if plan != nil {
		why = fmt.Sprintf("plan %s is %s and no longer holds the node", owner, plan.Status.Phase)
	}
	what := "dropped gpupool's annotation; the node stays as it is"
	if uncordon {
		what = "uncordoned the node"
	}
	logf.FromContext(ctx).Info("released an orphaned cordon", "node", node.Name, "plan", owner, "uncordoned", uncordon)
	r.Recorder.Eventf(node, nil, corev1.EventTypeNormal, reasonCordonReleased, "Release", "%s: %s", why, what)
	return reconcile.Result{}, nil
}

// explains says whether a plan still accounts for gpupool's cordon on a node: it is running and
// has a step there that is not finished, or the step failed with the node deliberately left
// cordoned (a GPU may be half-configured) and nobody has uncordoned it since.
func explains(plan *v1alpha1.RepartitionPlan, node *corev1.Node) bool {
	if !slices.ContainsFunc(plan.Spec.Steps, func(s v1alpha1.NodeStep) bool { return s.Node == node.Name }) {
		return false
	}
	i := slices.IndexFunc(plan.Status.Nodes, func(s v1alpha1.NodeStepStatus) bool { return s.Node == node.Name })
	switch plan.Status.Phase {
	case "", v1alpha1.PlanAwaitingApproval, v1alpha1.PlanApproved, v1alpha1.PlanExecuting:
		// Only an approved plan cordons; a cached plan that looks unapproved is older than the
		// cordon, and its status update is on its way.
		// A step whose status write was lost after cordoning is not finished either.
		return i < 0 || plan.Status.Nodes[i].State != v1alpha1.NodeDone
	case v1alpha1.PlanFailed:
		return i >= 0 && plan.Status.Nodes[i].State == v1alpha1.NodeFailed && node.Spec.Unschedulable
	}
	return false
}
