package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

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
	"github.com/gpupool/gpupool/internal/metrics"
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
//
// It goes by gpupool's cordon ledger (CordonLedgerConfigMap), which only the manager writes, not
// by the node's annotation alone: an annotation naming a plan that the ledger does not back is
// not gpupool's cordon, and the janitor never touches such a node. Nor does it reopen a node
// that no policy selects any more.
type CordonReconciler struct {
	Client client.Client
	// APIReader reads the ledger from the API server; the manager's when nil.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Namespace holds the cordon ledger: gpupool's config namespace, as the plan controller's.
	Namespace string
	// Metrics receives gpupool_cordoned_nodes; nil records nothing.
	Metrics *metrics.Metrics

	mu sync.Mutex
	// held is why each node gpupool holds cordoned is held, for gpupool_cordoned_nodes.
	held map[string]string
}

// SetupWithManager watches nodes carrying gpupool's cordon annotation and the plans that
// explain them.
func (r *CordonReconciler) SetupWithManager(mgr manager.Manager) error {
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	r.held = map[string]string{}
	r.Metrics.SetCordoned(nil)
	// The same janitor's work for the device taints of placement steps, where the API server
	// serves DeviceTaintRules (resource.k8s.io/v1, Kubernetes 1.37).
	if _, err := mgr.GetRESTMapper().RESTMapping(resourcev1.SchemeGroupVersion.WithKind("DeviceTaintRule").GroupKind(),
		resourcev1.SchemeGroupVersion.Version); err == nil {
		if err := (&DeviceTaintJanitor{Client: r.Client, APIReader: r.APIReader, Recorder: r.Recorder}).SetupWithManager(mgr); err != nil {
			return err
		}
	}
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
		// Every node the ledger names, so that a record whose cordon was never applied (a
		// crash between the two writes) is dropped, and a policy edit looks at pool membership.
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.nodesOfLedger)).
		Watches(newPolicyObject(), handler.EnqueueRequestsFromMapFunc(r.nodesOfLedger)).
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

// nodesOfLedger maps the ledger (or any change that may change its verdicts) to the nodes it
// names.
func (r *CordonReconciler) nodesOfLedger(ctx context.Context, obj client.Object) []reconcile.Request {
	if cm, ok := obj.(*corev1.ConfigMap); ok && (cm.Name != CordonLedgerConfigMap || cm.Namespace != r.Namespace) {
		return nil
	}
	_, recs, err := r.ledger().read(ctx)
	if err != nil {
		logf.FromContext(ctx).Error(err, "reading gpupool's cordon ledger")
		return nil
	}
	out := make([]reconcile.Request, 0, len(recs))
	for node := range recs {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: node}})
	}
	return out
}

func (r *CordonReconciler) ledger() cordonLedger {
	return cordonLedger{client: r.Client, reader: r.APIReader, namespace: r.Namespace}
}

// track records why node is held cordoned ("" when it is not) and updates the gauge.
func (r *CordonReconciler) track(node, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if reason == "" {
		delete(r.held, node)
	} else {
		r.held[node] = reason
	}
	counts := map[string]int{}
	for _, why := range r.held {
		counts[why]++
	}
	r.Metrics.SetCordoned(counts)
}

// leftItsPool says whether node was taken out of every pool while gpupool held it cordoned: no
// policy selects it now, though the policy it was cordoned for still exists. A node whose
// policy was deleted (gpupool being removed from it) is given back as its cordon was taken.
func (r *CordonReconciler) leftItsPool(ctx context.Context, node *corev1.Node, rec *rollout.CordonRecord) (bool, error) {
	policies, err := listPolicies(ctx, r.Client)
	if err != nil {
		return false, err
	}
	policyExists := false
	for i := range policies {
		if policies[i].Spec.NodeSelector.Selects(node.Labels) {
			return false, nil
		}
		policyExists = policyExists || policies[i].Name == rec.Policy
	}
	return policyExists || rec.Policy == "", nil
}

// Reconcile resolves one annotated node that no live plan explains: uncordon it when gpupool
// cordoned it, else only drop the annotations.
func (r *CordonReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	res, reason, err := r.judge(ctx, req.Name)
	if err == nil {
		r.track(req.Name, reason)
	}
	return res, err
}

// judge decides and acts for one node, and says why gpupool still holds it cordoned ("" when
// it does not).
func (r *CordonReconciler) judge(ctx context.Context, name string) (reconcile.Result, string, error) {
	rec, err := r.ledger().get(ctx, name)
	if err != nil {
		return reconcile.Result{}, "", err
	}
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
		if apierrors.IsNotFound(err) && rec != nil {
			return reconcile.Result{}, "", r.ledger().drop(ctx, name, rec.Plan)
		}
		return reconcile.Result{}, "", client.IgnoreNotFound(err)
	}
	if rec == nil {
		// An annotation gpupool's ledger does not back: not gpupool's cordon (forged, or left by
		// hand). gpupool neither reopens the node nor edits it.
		return reconcile.Result{}, "", nil
	}
	plan := &v1alpha1.RepartitionPlan{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: rec.Plan}, plan); apierrors.IsNotFound(err) {
		plan = nil
	} else if err != nil {
		return reconcile.Result{}, "", fmt.Errorf("reading plan %s that cordoned node %s: %w", rec.Plan, name, err)
	}
	if plan != nil && rec.PlanUID != "" && string(plan.UID) != rec.PlanUID {
		plan = nil // a later plan of the same name
	}
	if rollout.StaleRecord(node, *rec, plan) {
		// Judged again on what the API server says now, not on the cache: a record dropped
		// while its cordon is being applied would make the plan's own cordon read as somebody
		// else's.
		fresh := &v1alpha1.RepartitionPlan{}
		if err := r.APIReader.Get(ctx, types.NamespacedName{Name: rec.Plan}, fresh); apierrors.IsNotFound(err) {
			fresh = nil
		} else if err != nil {
			return reconcile.Result{}, "", fmt.Errorf("reading plan %s that recorded a cordon of node %s: %w", rec.Plan, name, err)
		}
		current := &corev1.Node{}
		if err := r.APIReader.Get(ctx, types.NamespacedName{Name: name}, current); apierrors.IsNotFound(err) {
			current = nil
		} else if err != nil {
			return reconcile.Result{}, "", fmt.Errorf("reading node %s: %w", name, err)
		}
		if rollout.StaleRecord(current, *rec, fresh) {
			return reconcile.Result{}, "", r.ledger().drop(ctx, name, rec.Plan)
		}
		return reconcile.Result{RequeueAfter: 30 * time.Second}, "", nil
	}
	if rollout.CordonedByPlan(node, rec) == "" {
		// Written ahead of a cordon the plan's step has yet to apply.
		return reconcile.Result{}, "", nil
	}
	gpuNode := &v1alpha1.GPUNode{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: node.Name}, gpuNode); apierrors.IsNotFound(err) {
		gpuNode = nil
	} else if err != nil {
		return reconcile.Result{}, "", fmt.Errorf("reading GPUNode %s: %w", node.Name, err)
	}
	d := rollout.JudgeCordon(node, rec.Plan, plan, gpuNode)
	switch d.Action {
	case rollout.CordonHeld:
		if plan.Status.Phase == v1alpha1.PlanFailed {
			return reconcile.Result{}, metrics.CordonFailedStep, nil
		}
		return reconcile.Result{}, metrics.CordonExecuting, nil
	case rollout.CordonWait:
		return reconcile.Result{RequeueAfter: 30 * time.Second}, metrics.CordonMIGManagerBusy, nil
	case rollout.CordonKeep:
		return reconcile.Result{}, metrics.CordonOrphaned, r.keep(ctx, node, d)
	}
	if d.Uncordon {
		keep, err := r.leftItsPool(ctx, node, rec)
		if err != nil {
			return reconcile.Result{}, "", err
		}
		if keep {
			// gpupool reopens only nodes of its pools: one its policy no longer selects was
			// taken out of the pool by someone, and is theirs to reopen.
			d = rollout.CordonDecision{Action: rollout.CordonKeep, Gone: d.Gone,
				Why: "no GPUPoolPolicy selects the node any more, so gpupool does not reopen it"}
			return reconcile.Result{}, metrics.CordonOutsidePool, r.keep(ctx, node, d)
		}
	}
	return reconcile.Result{}, "", r.release(ctx, node, rec, d)
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

// release drops gpupool's annotations and record and, unless someone else had cordoned the
// node, uncordons it, on the node version it judged.
func (r *CordonReconciler) release(ctx context.Context, node *corev1.Node, rec *rollout.CordonRecord, d rollout.CordonDecision) error {
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	uncordon := d.Uncordon && rollout.MayUncordon(node, rec.Plan, rec)
	if uncordon {
		node.Spec.Unschedulable = false
	}
	delete(node.Annotations, v1alpha1.AnnotationCordonedBy)
	delete(node.Annotations, v1alpha1.AnnotationWasUnschedulable)
	delete(node.Annotations, annotationKeptCordoned)
	if err := r.Client.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("releasing gpupool's cordon on node %s: %w", node.Name, err)
	}
	if err := r.ledger().drop(ctx, node.Name, rec.Plan); err != nil {
		return err
	}
	what := "dropped gpupool's annotation; the node stays as it is"
	if uncordon {
		what = "uncordoned the node"
	}
	logf.FromContext(ctx).Info("released an orphaned cordon", "node", node.Name, "plan", rec.Plan, "uncordoned", uncordon)
	r.Recorder.Eventf(node, nil, corev1.EventTypeNormal, reasonCordonReleased, "Release", "%s: %s", d.Gone, what)
	return nil
}
