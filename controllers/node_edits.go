package controllers

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/rollout"
)

// editNode cordons, relabels or reopens a node. Uncordoning only ever undoes gpupool's own
// cordon, as the cordon ledger records it: a node someone else cordoned keeps
// spec.unschedulable. Cordon and uncordon are applied to the node version they were judged on
// (optimistic concurrency), so a concurrent cordon by someone else is never recorded as ours.
func (r *PlanReconciler) editNode(ctx context.Context, plan *v1alpha1.RepartitionPlan, step v1alpha1.NodeStep, action rollout.Action) error {
	switch action {
	case rollout.ActionCordon:
		return r.cordon(ctx, plan, step.Node)
	case rollout.ActionUncordon, rollout.ActionReleaseCordon:
		return r.uncordon(ctx, plan.Name, step.Node, action == rollout.ActionUncordon)
	}
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: step.Node}, node); err != nil {
		return err
	}
	patch := client.MergeFrom(node.DeepCopy())
	switch action {
	case rollout.ActionRelabel:
		nvidia.RequestMIGConfig(node, step.MIGConfigName)
	case rollout.ActionRelabelSharing:
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		node.Labels[nvidia.LabelDevicePluginConfig] = step.SharingConfigName
	}
	return r.Client.Patch(ctx, node, patch)
}

// relabels says whether actions change nvidia.com/mig.config.
func relabels(actions []rollout.Action) bool {
	return slices.ContainsFunc(actions, func(a rollout.Action) bool {
		return a == rollout.ActionRelabel || a == rollout.ActionRestoreLabel
	})
}

// planIsCurrent says whether the cached plan is the API server's latest version.
func (r *PlanReconciler) planIsCurrent(ctx context.Context, plan *v1alpha1.RepartitionPlan) (bool, error) {
	latest := &v1alpha1.RepartitionPlan{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(plan), latest); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return latest.ResourceVersion == plan.ResourceVersion, nil
}

// restoreLabel sets nvidia.com/mig.config back to the entry the node had before the step.
func (r *PlanReconciler) restoreLabel(ctx context.Context, name, previous string) error {
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
		return err
	}
	patch := client.MergeFrom(node.DeepCopy())
	nvidia.RequestMIGConfig(node, previous)
	return r.Client.Patch(ctx, node, patch)
}

// ledger is the cordon ledger in gpupool's config namespace.
func (r *PlanReconciler) ledger() cordonLedger {
	return cordonLedger{client: r.Client, reader: r.APIReader, namespace: r.Namespace}
}

// cordon records the plan's cordon in the ledger, then cordons the node version it judged.
func (r *PlanReconciler) cordon(ctx context.Context, plan *v1alpha1.RepartitionPlan, name string) error {
	node := &corev1.Node{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
		return err
	}
	rec, err := r.ledger().get(ctx, name)
	if err != nil {
		return err
	}
	intent := rollout.CordonIntent(node, plan.Name, string(plan.UID), plan.Spec.Policy, rec)
	if err := r.ledger().put(ctx, name, intent); err != nil {
		return err
	}
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if intent.WasUnschedulable {
		// Said on the node too, for people: the ledger is what gpupool goes by.
		metav1.SetMetaDataAnnotation(&node.ObjectMeta, v1alpha1.AnnotationWasUnschedulable, "true")
	}
	node.Spec.Unschedulable = true
	metav1.SetMetaDataAnnotation(&node.ObjectMeta, v1alpha1.AnnotationCordonedBy, plan.Name)
	if err := r.Client.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("cordoning node %s: %w", name, err)
	}
	return nil
}

// uncordon gives a node back after the plan's step: it drops gpupool's annotations and, when
// reopen is set and the ledger shows the plan's own cordon (nobody else's before it), clears
// spec.unschedulable; then it removes the ledger's record. A cordon the ledger does not back
// is not gpupool's, and is left as it is.
func (r *PlanReconciler) uncordon(ctx context.Context, plan, name string, reopen bool) error {
	node := &corev1.Node{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
		if apierrors.IsNotFound(err) {
			return r.ledger().drop(ctx, name, plan)
		}
		return err
	}
	rec, err := r.ledger().get(ctx, name)
	if err != nil {
		return err
	}
	if rollout.CordonedByPlan(node, rec) != plan {
		if node.Annotations[v1alpha1.AnnotationCordonedBy] == plan {
			logf.FromContext(ctx).Info("left a cordon gpupool's ledger does not record alone", "node", name, "plan", plan)
		}
		return r.ledger().drop(ctx, name, plan)
	}
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if reopen && rollout.MayUncordon(node, plan, rec) {
		node.Spec.Unschedulable = false
	}
	delete(node.Annotations, v1alpha1.AnnotationCordonedBy)
	delete(node.Annotations, v1alpha1.AnnotationWasUnschedulable)
	if err := r.Client.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("giving node %s back: %w", name, err)
	}
	return r.ledger().drop(ctx, name, plan)
}
