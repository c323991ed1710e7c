package sim

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// FieldManager is the field manager of every write the simulator makes.
const FieldManager = "gpusim"

// conflictRetry is how soon a reconcile whose write met a newer node runs again.
const conflictRetry = 100 * time.Millisecond

// podNodeNameField indexes the pod cache by spec.nodeName.
const podNodeNameField = "spec.nodeName"

// reconciler is the simulated GPU Operator for the nodes it knows. One reconcile per node plays,
// in order, the kubelet's device manager (hand devices to the pods bound to the node),
// mig-manager (apply a changed nvidia.com/mig.config) and the device plugin (advertise the
// current devices under the sharing config nvidia.com/device-plugin.config names). Doing all
// three in one reconcile keyed by node serialises them per node, as they are on a real node,
// without locks across controllers.
type reconciler struct {
	client    client.Client
	apiReader client.Reader
	// recorder reports as mig-manager, devicePluginRecorder as the device plugin.
	recorder             events.EventRecorder
	devicePluginRecorder events.EventRecorder
	nodes                map[string]*Node
	// clusterPolicy names the GPU Operator's ClusterPolicy; "" means the only one.
	clusterPolicy string
	clock         clock.Clock
	// retryPeriod is how soon pods that could not get devices are tried again.
	retryPeriod time.Duration
	// agents is true when the simulator runs the nodes' agents.
	agents bool
}

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	n, ok := r.nodes[req.Name]
	if !ok {
		return ctrl.Result{}, nil
	}
	var node corev1.Node
	if err := r.client.Get(ctx, req.NamespacedName, &node); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	annotated, err := ParseFaultAnnotations(node.Annotations)
	if err != nil {
		logf.FromContext(ctx).Error(err, "ignoring the node's fault annotations")
		annotated = Faults{}
	}
	n.agentState.set(agentDownFault, annotated.AgentDown || n.peekFaults().AgentDown)

	n.mu.Lock()
	starved, err := r.syncLocked(ctx, n)
	n.mu.Unlock()
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("assigning devices on node %s: %w", n.name, err)
	}

	// The operands exist only once the GPU Operator has rendered them from its ClusterPolicy;
	// until then nothing but the kubelet's part happens (a ClusterPolicy event requeues).
	op, err := readClusterPolicy(ctx, r.client, r.clusterPolicy)
	if err != nil {
		logf.FromContext(ctx).Info("no GPU Operator operands yet", "reason", err.Error())
		if len(starved) > 0 {
			return ctrl.Result{RequeueAfter: r.retryPeriod}, nil
		}
		return ctrl.Result{}, nil
	}
	var result ctrl.Result
	if !n.dynamicMIG { // no mig-manager beside the driver's DynamicMIG mode
		if result, err = r.migManager(ctx, n, &node, op, annotated); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.devicePlugin(ctx, n, &node, op, annotated); err != nil {
		if apierrors.IsConflict(err) {
			// The node changed since it was read (see patchCapacity): its watch event brings the
			// newer node; the requeue is only a safety net.
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		return ctrl.Result{}, err
	}
	if err := r.draPlugin(ctx, n, node.Labels); err != nil {
		return ctrl.Result{}, err
	}
	if len(starved) > 0 && (result.RequeueAfter == 0 || result.RequeueAfter > r.retryPeriod) {
		result.RequeueAfter = r.retryPeriod
	}
	return result, nil
}

// syncLocked reads the node's GPUs and brings the device assignment up to date with the pods
// the cache holds for the node. n.mu must be held.
func (r *reconciler) syncLocked(ctx context.Context, n *Node) ([]types.NamespacedName, error) {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.MatchingFields{podNodeNameField: n.name}); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	gpus, err := n.GPUs()
	if err != nil {
		return nil, err
	}
	list := make([]*corev1.Pod, len(pods.Items))
	for i := range pods.Items {
		list[i] = &pods.Items[i]
	}
	starved := n.syncAssignmentsLocked(list, gpus)
	if len(starved) > 0 {
		logf.FromContext(ctx).Info("pods ask for more devices than are free; retrying", "pods", podList(starved))
	}
	return starved, nil
}

// nodeEvents queues a reconcile for every event of a simulated node and, on the way, lets
// mig-manager record the node's label changes (and its restarts) in the order the informer
// delivers them.
func (r *reconciler) nodeEvents() handler.Funcs {
	observe := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		n, ok := r.nodes[o.GetName()]
		if !ok {
			return
		}
		n.migManager.labelChanged(o.GetLabels()[LabelMIGConfig])
		n.draPlugin.clientLabelChanged(o.GetLabels()[labelDeployClient])
		// A restarted mig-manager applies the label's value again; its reconcile logs that.
		n.migManager.restarted(o.GetAnnotations()[AnnotationRestartMIGManager])
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: o.GetName()}})
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			observe(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			observe(e.ObjectNew, q)
		},
	}
}

// nodesForClusterPolicy maps a ClusterPolicy event to a reconcile of every simulated node: the
// operator re-renders its operands from it.
func (r *reconciler) nodesForClusterPolicy(_ context.Context, o client.Object) []ctrl.Request {
	if r.clusterPolicy != "" && o.GetName() != r.clusterPolicy {
		return nil
	}
	return r.allNodes()
}

// nodeForPod maps a pod event to its node's reconcile, when the node is simulated.
func (r *reconciler) nodeForPod(_ context.Context, o client.Object) []ctrl.Request {
	pod, ok := o.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return nil
	}
	if _, sim := r.nodes[pod.Spec.NodeName]; !sim {
		return nil
	}
	return []ctrl.Request{{NamespacedName: types.NamespacedName{Name: pod.Spec.NodeName}}}
}
