package controllers

import (
	"context"
	"fmt"
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
	if err := r.Client.Get(ctx, types.NamespacedName{Name: owner}, plan); apierrors.IsNotFound(err) {
		plan = nil
	} else if err != nil {
		return reconcile.Result{}, fmt.Errorf("reading plan %s that cordoned node %s: %w", owner, node.Name, err)
	}
	gpuNode := &v1alpha1.GPUNode{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: node.Name}, gpuNode); apierrors.IsNotFound(err) {
		gpuNode = nil
	} else if err != nil {
		return reconcile.Result{}, fmt.Errorf("reading GPUNode %s: %w", node.Name, err)
	}
	d := rollout.JudgeCordon(node, owner, plan, gpuNode)
	switch d.Action {
	case rollout.CordonWait:
		return reconcile.Result{RequeueAfter: 30 * time.Second}, nil
	case rollout.CordonKeep:
		return reconcile.Result{}, r.keep(ctx, node, d)
	case rollout.CordonRelease:
		return reconcile.Result{}, r.release(ctx, node, owner, d)
	}
	return reconcile.Result{}, nil
}

// keep leaves the node cordoned and says once what to check; the node's next change brings it
// back here.
func (r *CordonReconciler) keep(ctx context.Context, node *corev1.Node, d rollout.CordonDecision) error {
	if node.Annotations[annotationKeptCordoned] == d.Why {
		return nil
	}
	patch := client.MergeFrom(node.DeepCopy())
	metav1.SetMetaDataAnnotation(&node.ObjectMeta, annotationKeptCordoned, d.Why)
	if err := r.Client.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("recording why node %s stays cordoned: %w", node.Name, err)
	}
	r.Recorder.Eventf(node, nil, corev1.EventTypeWarning, reasonKeptCordoned, "Keep",
		"%s while the node was being reconfigured, and %s: check its GPUs (nvidia-smi mig -lgi), then run kubectl uncordon %s",
		d.Gone, d.Why, node.Name)
	return nil
}

// release drops gpupool's annotations and, unless someone else had cordoned the node, uncordons it.
func (r *CordonReconciler) release(ctx context.Context, node *corev1.Node, owner string, d rollout.CordonDecision) error {
	patch := client.MergeFrom(node.DeepCopy())
	if d.Uncordon {
		node.Spec.Unschedulable = false
	}
	delete(node.Annotations, v1alpha1.AnnotationCordonedBy)
	delete(node.Annotations, v1alpha1.AnnotationWasUnschedulable)
	delete(node.Annotations, annotationKeptCordoned)
	if err := r.Client.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("releasing gpupool's cordon on node %s: %w", node.Name, err)
	}
	what := "dropped gpupool's annotation; the node stays as it is"
	if d.Uncordon {
		what = "uncordoned the node"
	}
	logf.FromContext(ctx).Info("released an orphaned cordon", "node", node.Name, "plan", owner, "uncordoned", d.Uncordon)
	r.Recorder.Eventf(node, nil, corev1.EventTypeNormal, reasonCordonReleased, "Release", "%s: %s", d.Gone, what)
	return nil
}
