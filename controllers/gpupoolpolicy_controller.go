package controllers

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/metrics"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/pool"
)

// The policy controller asks for a plan's supersession with an annotation (patch); the plan
// controller alone writes plan status.
// +kubebuilder:rbac:groups=gpupool.io,resources=repartitionplans,verbs=create;delete;patch
// (delete: finished plans beyond the newest ten of a policy are garbage-collected)
// +kubebuilder:rbac:groups="",resources=nodes;pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch
// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims;resourceslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=nvidia.com,resources=clusterpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=gpupool-agent,resources=leases,verbs=get;list;watch

// Names of gpupool's ConfigMaps that the GPU Operator's ClusterPolicy must point at.
const (
	MIGPartedConfigMap    = "gpupool-mig-parted-config"
	DevicePluginConfigMap = "gpupool-device-plugin-config"
)

// policyRecheckInterval is the longest a policy goes without a pass while time alone may
// change what it would decide.
const policyRecheckInterval = time.Minute

// Reasons the policy controller writes when it cannot use a policy as written: on Ready, and
// for IneffectiveSpec on SpecValid.
const (
	// reasonInvalidSpec: the spec cannot be used as written (a selector that does not parse,
	// a blocking problem); the message says which field to fix.
	reasonInvalidSpec = "InvalidSpec"
	// reasonIneffectiveSpec: the spec is valid but cannot do what it asks (a warning).
	reasonIneffectiveSpec = "IneffectiveSpec"
	// reasonPlanningFailed: the planner returned an error for this policy.
	reasonPlanningFailed = "PlanningFailed"
	// reasonUndecodable: the stored object does not decode into the current API.
	reasonUndecodable = "Undecodable"
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
	// AgentPodSelector selects the node agents' pods in AgentNamespace; when set, a report is
	// also fresh while its node's agent pod is Ready (inventory.ReadinessHeartbeats). nil reads
	// no pod's readiness.
	AgentPodSelector labels.Selector
	// AgentDaemonSet and AgentServiceAccount name the DaemonSet that must control an agent pod
	// and the ServiceAccount it must run as, in AgentNamespace: a pod that only wears the
	// selector's labels vouches for nothing. Readiness is read only when both are set.
	AgentDaemonSet      string
	AgentServiceAccount string
	// Metrics receives each pool's demand and stranded slices; nil records nothing.
	Metrics *metrics.Metrics
	// EventCoalescing is how long the cluster's events (pods, nodes, reports, budgets) gather
	// before the pass they start; 0 starts it at once. See DefaultEventCoalescing.
	EventCoalescing time.Duration
	// ReturnMemoryAfter is how long after its last pass the controller hands the memory its
	// passes used back to the operating system (memoryReturner); 0 leaves it to the runtime.
	ReturnMemoryAfter time.Duration

	// readClaims is set when the API server serves resource.k8s.io/v1: pods that ask NVIDIA's
	// DRA driver for MIG devices are then demand too (demand.PendingWithClaims), and the
	// devices its claims hold are busy (inventory.DRAHolders).
	readClaims bool
	// memory is told of every complete pass; see memoryReturner.
	memory *memoryReturner
	// state is what the controller knows between passes: the pod store, the change stamp and
	// each policy's last pass (clusterState).
	state clusterState
}

// SetupWithManager watches policies, their plans and everything a plan is computed from.
func (r *PolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.MaxReportAge == 0 {
		r.MaxReportAge = pool.DefaultMaxReportAge
	}
	delayed, ok := r.Clock.(clock.WithDelayedExecution)
	if !ok {
		delayed = clock.RealClock{}
	}
	r.memory = newMemoryReturner(delayed, r.ReturnMemoryAfter)
	pods, err := NewPodStore(context.Background(), mgr.GetCache())
	if err != nil {
		return err
	}
	r.state.pods = pods
	// Policy and plan changes (a person's edits and approvals) are acted on at once; the
	// cluster's own events gather for EventCoalescing first.
	all := coalesced(handler.EnqueueRequestsFromMapFunc(r.allPolicies), r.EventCoalescing)
	b := ctrl.NewControllerManagedBy(mgr).
		// Unstructured, decoded per object: see policies.go.
		For(newPolicyObject()).
		// A plan's change reaches only its own policy, and counts as an event for it. (Policy
		// changes are counted by the Watches below.)
		Owns(&v1alpha1.RepartitionPlan{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(client.Object) bool {
			r.state.changed()
			return true
		}))).
		// A policy's selector decides its neighbours' conflicts too.
		Watches(newPolicyObject(), handler.EnqueueRequestsFromMapFunc(r.allPolicies)).
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
	// Clusters older than Kubernetes 1.34 serve no resource.k8s.io/v1; an informer for it would
	// never sync and hold the manager back, so claims are read only where they exist.
	if _, err := mgr.GetRESTMapper().RESTMapping(resourcev1.SchemeGroupVersion.WithKind("ResourceClaim").GroupKind(), resourcev1.SchemeGroupVersion.Version); err == nil {
		r.readClaims = true
		b = b.Watches(&resourcev1.ResourceClaim{}, all).Watches(&resourcev1.ResourceSlice{}, all)
	} else {
		mgr.GetLogger().Info("ResourceClaims are not served; pods asking through DRA claims are not seen as demand", "reason", err.Error())
	}
	// A ClusterPolicy edited to point elsewhere (or back) changes GPUOperatorConfigured and so
	// Ready; without a watch the pool would read Ready until its next full pass. Only where the
	// GPU Operator's CRD is served when the manager starts (an informer for a missing kind
	// would hold the manager back); otherwise each full pass reads it.
	if _, err := mgr.GetRESTMapper().RESTMapping(nvidia.ClusterPolicyGVK.GroupKind(), nvidia.ClusterPolicyGVK.Version); err == nil {
		clusterPolicy := &unstructured.Unstructured{}
		clusterPolicy.SetGroupVersionKind(nvidia.ClusterPolicyGVK)
		b = b.Watches(clusterPolicy, all)
	}
	if r.ConfigNamespace != "" {
		// GPUOperatorConfigured says whether gpupool's ConfigMaps exist; the writer
		// (OperatorConfigReconciler) creating or losing one changes it.
		b = b.Watches(&corev1.ConfigMap{}, all, builder.WithPredicates(operatorConfigMapExists(r.ConfigNamespace)))
	}
	return b.Named("gpupoolpolicy").Complete(quietConflicts{r})
}

// allPolicies maps any change in the cluster to every policy: pools are few, and a pod or a
// node may move demand or capacity into any of them.
func (r *PolicyReconciler) allPolicies(ctx context.Context, _ client.Object) []reconcile.Request {
	r.state.changed()
	// Every stored policy, undecodable ones too (their condition must be written once, and
	// kept), so only the names are read: this runs for every event of every pod and node, and
	// decoding each policy per event was most of the manager's work while a fleet's caches fill.
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(policyGVK.GroupVersion().WithKind(policyGVK.Kind + "List"))
	if err := r.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		logf.FromContext(ctx).Error(err, "listing policies to requeue")
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: list.Items[i].GetName()}})
	}
	return out
}

// Reconcile observes the policy's pool, proposes a plan when pending demand needs one, and
// writes the policy's status. A policy the controller cannot use (it cannot be decoded, or the
// planner cannot plan for it) still gets its status written, with a condition saying what to fix.
func (r *PolicyReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	policy, problems, done, err := r.observePolicy(ctx, req.Name)
	if done || err != nil {
		return reconcile.Result{}, err
	}
	// Read before the cluster: an event after this point makes the next reconcile pass again.
	events := r.state.now()
	// One instant for the whole pass: the heartbeats read, the facts time changes and the
	// decision are all judged at it.
	now := r.Clock.Now()
	took := passClock{start: now, clock: r.Clock}
	cluster, err := r.read(ctx, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	minPendingAge := pool.DurationOr(policy.Spec.Planning.MinPendingAge, pool.DefaultMinPendingAge)
	window := pool.DurationOr(policy.Spec.Planning.StabilizationWindow, pool.DefaultStabilizationWindow)
	inputs := passInputs{generation: policy.Generation, events: events,
		facts: pool.TimeFactsOf(policy, cluster, now, r.MaxReportAge), at: now}
	// A plan under review leaves the window with time alone, and the planner then looks again.
	if young := youngAwaitingPlan(policy, pool.OwnPlans(policy, cluster.Plans), now, window); young != nil {
		inputs.young = young.Name
	}
	if r.state.unchanged(policy.Name, inputs) {
		// Nothing changed but the time, and not what time changes: the pass would repeat the
		// last one. Check again when a pending pod may have come of age.
		r.Metrics.CountPass(policy.Name, false)
		return reconcile.Result{RequeueAfter: recheckAfter(minPendingAge)}, nil
	}
	took.lap("read")
	pass, err := pool.NewPass(policy, cluster, now, pool.Options{MaxReportAge: r.MaxReportAge})
	took.lap("assemble")
	if err != nil {
		// pool.Problems reports every selector that does not parse; this is a safety net.
		return reconcile.Result{}, r.reportUnusable(ctx, policy, reasonInvalidSpec, err.Error())
	}
	young := youngAwaitingPlan(policy, pass.Own, now, pass.Window)
	res := r.state.remembered(policy, young, frozenKey(pass.Frozen), pass.Pending)
	if res == nil {
		// Within the size the API server stores: a larger change becomes several plans in turn.
		if res, err = planner.PlanWithin(pass.Input()); err != nil {
			return reconcile.Result{RequeueAfter: policyRecheckInterval},
				r.reportUnusable(ctx, policy, reasonPlanningFailed, fmt.Sprintf("the planner cannot plan for this policy: %v", err))
		}
		took.lap("planner")
	}
	// DynamicMIG nodes: claim pods moved out of the way of a pending claim (policy_placement.go),
	// and headroom held for large profiles with device taints (policy_reserve.go).
	taintRules, taintRulesServed, err := r.deviceTaintRules(ctx, cluster)
	if err != nil {
		return reconcile.Result{}, err
	}
	pp := planPlacements(pass, cluster, res, taintRules)
	if taintRulesServed {
		if err := r.reconcileReserve(ctx, pass, cluster, pp, taintRules); err != nil {
			return reconcile.Result{}, err
		}
	}
	shown := servedWith(res, pp)
	proposal, err := r.propose(ctx, policy, pass.Own, res, pp, pass.Pending, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	current := proposal.Current
	took.lap("propose")
	r.tellPods(pass, shown, pp, proposal)
	r.state.remember(policy, current, res, frozenKey(pass.Frozen), pass.Pending)
	if err := r.collectPlans(ctx, policy, pass.Own, now); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.report(ctx, pass, cluster, current, shown, problems); err != nil {
		return reconcile.Result{}, err
	}
	took.lap("report")
	r.state.passed(policy.Name, inputs)
	r.Metrics.CountPass(policy.Name, true)
	r.Metrics.ObservePass(policy.Name, took.total())
	r.memory.passed()
	// Where a slow pass spends its time, for whoever asks why new demand waited.
	logf.FromContext(ctx).V(1).Info("pass complete", append(took.keysAndValues(), "nodes", len(pass.Snapshot.Nodes),
		"pending", len(pass.Pending), "plan", planNameOf(current))...)
	// Time alone moves pods past minPendingAge, reports past maxReportAge and plans out of the
	// window.
	after := recheckAfter(pass.MinPendingAge)
	if young != nil {
		after = min(after, max(time.Second, young.CreationTimestamp.Add(pass.Window).Sub(now)))
	}
	return reconcile.Result{RequeueAfter: after}, nil
}

// observePolicy reads the policy. done is true when the pass ends here: the policy is gone,
// being deleted, cannot be decoded or its spec cannot be used (both reported in its status).
func (r *PolicyReconciler) observePolicy(ctx context.Context, name string) (*v1alpha1.GPUPoolPolicy, []pool.Problem, bool, error) {
	policy, bad, err := getPolicy(ctx, r.Client, name)
	switch {
	case err != nil:
		return nil, nil, true, err
	case bad != nil:
		return nil, nil, true, r.reportUndecodable(ctx, bad)
	case policy == nil:
		r.Metrics.ForgetPolicy(name)
		r.state.forget(name)
		return nil, nil, true, nil
	case !policy.DeletionTimestamp.IsZero():
		return nil, nil, true, nil
	}
	problems := pool.Problems(&policy.Spec)
	if len(problems) > 0 && problems[0].Blocking {
		return nil, nil, true, r.reportUnusable(ctx, policy, reasonInvalidSpec, pool.Message(problems, 5))
	}
	return policy, problems, false, nil
}
