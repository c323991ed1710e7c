package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/rollout"
)

// +kubebuilder:rbac:groups="",namespace=gpu-operator,resources=configmaps,verbs=get;list;watch;create;update

// OperatorConfigReconciler is the one writer of gpupool's two ConfigMaps in the GPU
// Operator's namespace, MIGPartedConfigMap and DevicePluginConfigMap. It is level-triggered:
// on any change to the live plans, to the nodes' config labels or cordons, or to the
// ConfigMaps themselves, it computes their whole content (nvidia.DesiredOperatorConfig) and
// writes what differs. A plan's step never writes an entry; it waits until its entry is there.
//
// The ConfigMaps exist from the manager's start, before any policy or plan: the operator mounts
// the ConfigMaps its ClusterPolicy names into mig-manager, the device plugin and GFD as volumes
// that are not optional, and creates none it does not own (gpu-operator
// controllers/object_controls.go, handleDevicePluginConfig and createConfigMapVolume), so a
// ClusterPolicy pointed at a ConfigMap nobody wrote yet keeps those pods from starting on every
// GPU node. A ConfigMap deleted later is created again at once.
type OperatorConfigReconciler struct {
	Client client.Client
	// Namespace is the GPU Operator's namespace, where the ConfigMaps live.
	Namespace string

	mu sync.Mutex
	// told is the last set of problems logged, so that a problem is logged when it appears,
	// not on every reconcile while it lasts.
	told string
}

// operatorConfigRecheck is how soon the writer looks again while a step asks for an entry it
// cannot write: the step's GPUNode report, which it does not watch, may still catch up.
const operatorConfigRecheck = 30 * time.Second

// request is the one request the writer works on: the content of both ConfigMaps is a
// function of the whole cluster, so every event asks for the same recomputation.
func (r *OperatorConfigReconciler) request() reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: r.Namespace, Name: MIGPartedConfigMap}}
}

// SetupWithManager watches what the ConfigMaps' content depends on and runs once at start.
func (r *OperatorConfigReconciler) SetupWithManager(mgr ctrl.Manager) error {
	one := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{r.request()}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("operatorconfig").
		Watches(&v1alpha1.RepartitionPlan{}, one, builder.WithPredicates(planConfigChanged())).
		Watches(&corev1.Node{}, one, builder.WithPredicates(nodeConfigChanged())).
		Watches(&corev1.ConfigMap{}, one, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == r.Namespace && slices.Contains(
				[]string{MIGPartedConfigMap, DevicePluginConfigMap, nvidia.DefaultMIGPartedConfigMap, CordonLedgerConfigMap}, o.GetName())
		}))).
		// Once at start, so that the ConfigMaps exist in a cluster with nothing else to watch yet.
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			q.Add(r.request())
			return nil
		})).
		Complete(quietConflicts{r})
}

// planConfigChanged passes the plan events that can change the ConfigMaps: creation,
// deletion, and an update of the steps, the phase, or a step's state or previous entry, not
// the messages a drain rewrites on every pass.
func planConfigChanged() predicate.Predicate {
	key := func(o client.Object) string {
		p, ok := o.(*v1alpha1.RepartitionPlan)
		if !ok {
			return ""
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%d|%s|", p.Generation, p.Status.Phase)
		for _, n := range p.Status.Nodes {
			fmt.Fprintf(&b, "%s=%s/%s;", n.Node, n.State, n.PreviousMIGConfig)
		}
		return b.String()
	}
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool { return key(e.ObjectOld) != key(e.ObjectNew) }}
}

// nodeConfigChanged passes node events that can change the ConfigMaps: creation, deletion, and
// a change of the two config labels or of gpupool's cordon annotation (which says whether a
// step asks for its entry).
func nodeConfigChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld, e.ObjectNew
		return o.GetLabels()[nvidia.LabelMIGConfig] != n.GetLabels()[nvidia.LabelMIGConfig] ||
			o.GetLabels()[nvidia.LabelDevicePluginConfig] != n.GetLabels()[nvidia.LabelDevicePluginConfig] ||
			o.GetAnnotations()[v1alpha1.AnnotationCordonedBy] != n.GetAnnotations()[v1alpha1.AnnotationCordonedBy]
	}}
}

// Reconcile reads what the ConfigMaps depend on, computes their content and writes what differs.
func (r *OperatorConfigReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	in, mp, dp, err := r.observe(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	want, err := nvidia.DesiredOperatorConfig(in)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("ConfigMap %s/%s: %w; gpupool writes neither ConfigMap until it can read this one again: "+
			"fix or delete it (gpupool recreates it with every entry a node or a running plan needs)", r.Namespace, MIGPartedConfigMap, err)
	}
	r.tell(ctx, want.Problems)
	migData := map[string]string{}
	if mp != nil {
		maps.Copy(migData, mp.Data) // other keys are not gpupool's to drop
	}
	migData[nvidia.ConfigMapKey] = string(want.MIGParted)
	if err := r.write(ctx, MIGPartedConfigMap, mp, migData); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.write(ctx, DevicePluginConfigMap, dp, want.DevicePlugin); err != nil {
		return reconcile.Result{}, err
	}
	if want.StepsWaiting {
		return reconcile.Result{RequeueAfter: operatorConfigRecheck}, nil
	}
	return reconcile.Result{}, nil
}

// observe reads the ConfigMaps (nil where missing) and everything their content depends on.
func (r *OperatorConfigReconciler) observe(ctx context.Context) (nvidia.OperatorConfigInput, *corev1.ConfigMap, *corev1.ConfigMap, error) {
	var in nvidia.OperatorConfigInput
	get := func(name string) (*corev1.ConfigMap, error) {
		cm := &corev1.ConfigMap{}
		switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: name}, cm); {
		case apierrors.IsNotFound(err):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", r.Namespace, name, err)
		}
		return cm, nil
	}
	mp, err := get(MIGPartedConfigMap)
	if err != nil {
		return in, nil, nil, err
	}
	dp, err := get(DevicePluginConfigMap)
	if err != nil {
		return in, nil, nil, err
	}
	defaults, err := get(nvidia.DefaultMIGPartedConfigMap)
	if err != nil {
		return in, nil, nil, err
	}
	if mp != nil {
		in.MIGParted = []byte(mp.Data[nvidia.ConfigMapKey])
	}
	if dp != nil {
		in.DevicePlugin = dp.Data
	}
	if defaults != nil {
		in.Defaults = []byte(defaults.Data[nvidia.ConfigMapKey])
	}

	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return in, nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	byName := make(map[string]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		n := &nodes.Items[i]
		byName[n.Name] = n
		if v := n.Labels[nvidia.LabelMIGConfig]; v != "" {
			in.MIGConfigLabels = append(in.MIGConfigLabels, v)
		}
		if v := n.Labels[nvidia.LabelDevicePluginConfig]; v != "" {
			in.SharingLabels = append(in.SharingLabels, v)
		}
	}
	var plans v1alpha1.RepartitionPlanList
	if err := r.Client.List(ctx, &plans, client.UnsafeDisableDeepCopy); err != nil {
		return in, nil, nil, fmt.Errorf("listing plans: %w", err)
	}
	// Read from the cache, which watches the ledger: a step's cordon is recorded long before
	// it reaches Configuring, and a record arriving late triggers another reconcile.
	_, ledger, err := cordonLedger{client: r.Client, reader: r.Client, namespace: r.Namespace}.read(ctx)
	if err != nil {
		return in, nil, nil, err
	}
	exists := map[string]bool{}
	for i := range plans.Items {
		exists[plans.Items[i].Name] = true
	}
	for i := range nodes.Items {
		// A cordon whose plan was deleted mid-change (the cordon janitor keeps it while the
		// node's GPUs may be half-configured): drop no entry until it is released.
		if by := nodes.Items[i].Annotations[v1alpha1.AnnotationCordonedBy]; by != "" && !exists[by] {
			in.KeepExisting = true
		}
	}
	for i := range plans.Items {
		plan := &plans.Items[i]
		if !plan.Status.Phase.Running() {
			continue
		}
		for _, step := range plan.Spec.Steps {
			s := nvidia.StepConfig{Plan: plan.Name, Node: step.Node, MIGConfigName: step.MIGConfigName,
				SharingConfigName: step.SharingConfigName, Sharing: step.SharingConfig}
			st := stepStatus(plan, step.Node)
			s.PreviousMIGConfig = st.PreviousMIGConfig
			if s.Write = asksForEntry(plan, st, byName[step.Node], ledger); s.Write {
				gpuNode := &v1alpha1.GPUNode{}
				switch err := r.Client.Get(ctx, types.NamespacedName{Name: step.Node}, gpuNode); {
				case err == nil:
					s.Targets = inventory.NodeTarget(byName[step.Node], gpuNode, step.GPUs)
				case !apierrors.IsNotFound(err):
					return in, nil, nil, fmt.Errorf("reading GPUNode %s: %w", step.Node, err)
				}
			}
			in.Steps = append(in.Steps, s)
		}
	}
	return in, mp, dp, nil
}

// stepStatus is the plan's status of its step on node; the zero status when it has none yet.
func stepStatus(plan *v1alpha1.RepartitionPlan, node string) v1alpha1.NodeStepStatus {
	for _, st := range plan.Status.Nodes {
		if st.Node == node {
			return st
		}
	}
	return v1alpha1.NodeStepStatus{}
}

// asksForEntry says whether a step asks for its entry and key now: it is configuring or
// verifying its node, the point where the step used to write them, and the node carries this
// plan's cordon as the ledger records it. A step state is plan status, which gpupool never takes
// as progress on its own (where the admission policies are missing anyone may write it); the
// cordon only the manager records is what says the step really got past its drain.
func asksForEntry(plan *v1alpha1.RepartitionPlan, st v1alpha1.NodeStepStatus, node *corev1.Node, ledger map[string]rollout.CordonRecord) bool {
	if node == nil || (st.State != v1alpha1.NodeConfiguring && st.State != v1alpha1.NodeVerifying) {
		return false
	}
	rec, ok := ledger[node.Name]
	if !ok {
		return false
	}
	return rollout.CordonedByPlan(node, &rec) == plan.Name
}

// write creates the ConfigMap with data, or updates it when its data differs. The update
// carries the resourceVersion read, so a concurrent edit makes it conflict and the next
// reconcile recomputes from what is there.
func (r *OperatorConfigReconciler) write(ctx context.Context, name string, cur *corev1.ConfigMap, data map[string]string) error {
	log := logf.FromContext(ctx)
	if cur == nil {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: name,
			Labels: map[string]string{"app.kubernetes.io/name": "gpupool"}}, Data: data}
		if err := r.Client.Create(ctx, cm); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), name, err) // the cache lags: read again
			}
			return fmt.Errorf("creating ConfigMap %s/%s, which the GPU Operator mounts into mig-manager and the device plugin: %w", r.Namespace, name, err)
		}
		log.Info("created a ConfigMap the GPU Operator mounts", "namespace", r.Namespace, "configMap", name)
		return nil
	}
	if maps.Equal(cur.Data, data) {
		return nil
	}
	next := cur.DeepCopy()
	next.Data = data
	if err := r.Client.Update(ctx, next); err != nil {
		return fmt.Errorf("writing ConfigMap %s/%s: %w", r.Namespace, name, err)
	}
	var added, removed []string
	for k := range data {
		if _, ok := cur.Data[k]; !ok {
			added = append(added, k)
		}
	}
	for k := range cur.Data {
		if _, ok := data[k]; !ok {
			removed = append(removed, k)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	log.V(1).Info("updated a ConfigMap the GPU Operator mounts", "namespace", r.Namespace, "configMap", name,
		"keysAdded", added, "keysRemoved", removed)
	return nil
}

// tell logs the problems when they differ from the last ones logged.
func (r *OperatorConfigReconciler) tell(ctx context.Context, problems []string) {
	key := strings.Join(problems, "\n")
	r.mu.Lock()
	changed := key != r.told
	r.told = key
	r.mu.Unlock()
	if changed && len(problems) > 0 {
		logf.FromContext(ctx).Info("gpupool's ConfigMaps for the GPU Operator cannot hold every entry asked for", "namespace", r.Namespace,
			"problems", problems)
	}
}

// operatorConfigMapsMissing names gpupool's ConfigMaps that do not exist. The policy pass
// reports them in GPUOperatorConfigured; the writer above is what creates them.
func operatorConfigMapsMissing(ctx context.Context, c client.Reader, namespace string) ([]string, error) {
	var missing []string
	for _, name := range []string{MIGPartedConfigMap, DevicePluginConfigMap} {
		err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &corev1.ConfigMap{})
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, name)
		case err != nil:
			return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", namespace, name, err)
		}
	}
	return missing, nil
}

// operatorConfigMapExists passes the creation and deletion of gpupool's two ConfigMaps in
// namespace: what GPUOperatorConfigured reads of them. Their updates, which every step of a
// plan makes, change nothing a pass reads.
func operatorConfigMapExists(namespace string) predicate.Predicate {
	ours := func(o client.Object) bool {
		return o.GetNamespace() == namespace && (o.GetName() == MIGPartedConfigMap || o.GetName() == DevicePluginConfigMap)
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return ours(e.Object) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return ours(e.Object) },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// operatorConfigMapWritten passes the creation and every change of gpupool's two ConfigMaps
// in namespace: a step waiting for its entry reads them.
func operatorConfigMapWritten(namespace string) predicate.Predicate {
	ours := func(o client.Object) bool {
		return o.GetNamespace() == namespace && (o.GetName() == MIGPartedConfigMap || o.GetName() == DevicePluginConfigMap)
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return ours(e.Object) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		UpdateFunc:  func(e event.UpdateEvent) bool { return ours(e.ObjectNew) },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
