package controllers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
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
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
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
	defaultMaxReportAge   = 2 * time.Minute
	policyRecheckInterval = time.Minute
	reasonInvalidSpec     = "InvalidSpec"
	reasonIneffectiveSpec = "IneffectiveSpec"
	reasonPlanningFailed  = "PlanningFailed"
	reasonUndecodable     = "Undecodable"
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
	// pods reads the informer's pod records without copying them.
	pods *PodStore
	// memory is told of every complete pass; see memoryReturner.
	memory *memoryReturner
	// events counts the watched changes that can alter a pass (those past their predicates):
	// a pass remembers the count it started from, and a later reconcile that finds the same
	// count and the same TimeFacts skips the pass it would repeat.
	events atomic.Int64

	mu sync.Mutex
	// lastPlan is, per policy, the planner's last result and the plan it proposed, so that
	// while that plan waits for approval inside the stabilisation window the planner does not
	// run again on every pod event only to be told to keep it.
	lastPlan map[string]plannedResult
	// lastInputs is, per policy, what its last complete pass started from.
	lastInputs map[string]passInputs
	// told is, per policy and pending pod, the PodNote.Key of the last Event written on the pod.
	told map[string]map[types.UID]string
}

// passInputs is what a complete pass started from, as far as a reconcile can tell without
// making the pass again: the policy's generation, the event count, and the facts time alone
// changes.
type passInputs struct {
	generation int64
	events     int64
	facts      pool.TimeFacts
	// young is the plan under review inside the stabilization window, "" when none.
	young string
	at    time.Time
}

// fullPassInterval bounds how long a policy goes without a complete pass when nothing seems to
// change: a safety net for rules that follow the clock beyond TimeFacts (a refused plan may be
// proposed again after pool.RefusalMemory). At 5,000 nodes a pass costs a few seconds of one core,
// so this costs well under 1% of a core.
const fullPassInterval = 10 * time.Minute

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
	delayed, ok := r.Clock.(clock.WithDelayedExecution)
	if !ok {
		delayed = clock.RealClock{}
	}
	r.memory = newMemoryReturner(delayed, r.ReturnMemoryAfter)
	pods, err := NewPodStore(context.Background(), mgr.GetCache())
	if err != nil {
		return err
	}
	r.pods = pods
	// Policy and plan changes (a person's edits and approvals) are acted on at once; the
	// cluster's own events gather for EventCoalescing first.
	all := coalesced(handler.EnqueueRequestsFromMapFunc(r.allPolicies), r.EventCoalescing)
	b := ctrl.NewControllerManagedBy(mgr).
		// Unstructured, decoded per object: see policies.go.
		For(newPolicyObject()).
		// A plan's change reaches only its own policy, and counts as an event for it. (Policy
		// changes are counted by the Watches below.)
		Owns(&v1alpha1.RepartitionPlan{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(client.Object) bool {
			r.events.Add(1)
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
		// The GPU Operator's ConfigMaps exist from the manager's start, before any policy: a
		// user points the ClusterPolicy at them right after installing gpupool (see
		// ensureOperatorConfigMaps). Each pass over a pool checks again.
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			if err := ensureOperatorConfigMaps(logf.IntoContext(ctx, mgr.GetLogger()), r.Client, r.ConfigNamespace); err != nil {
				mgr.GetLogger().Info("gpupool's ConfigMaps for the GPU Operator are not created yet; each pass over a pool tries again",
					"namespace", r.ConfigNamespace, "reason", err.Error())
			}
			return nil
		})); err != nil {
			return err
		}
	}
	return b.Named("gpupoolpolicy").Complete(quietConflicts{r})
}

// allPolicies maps any change in the cluster to every policy: pools are few, and a pod or a
// node may move demand or capacity into any of them.
func (r *PolicyReconciler) allPolicies(ctx context.Context, _ client.Object) []reconcile.Request {
	r.events.Add(1)
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

// read lists everything one pass reads.
func (r *PolicyReconciler) read(ctx context.Context) (*pool.Cluster, error) {
	var (
		nodes    corev1.NodeList
		gpuNodes v1alpha1.GPUNodeList
		pdbs     policyv1.PodDisruptionBudgetList
		plans    v1alpha1.RepartitionPlanList
	)
	// Policies that cannot be decoded take no part in conflicts: each reports its own problem.
	policies, err := listPolicies(ctx, r.Client)
	if err != nil {
		return nil, err
	}
	// A pass reads the cache's own objects instead of deep copies of every one: the pass and
	// the planner never write into their input (pool's TestAPassLeavesItsInputAlone), and at
	// fleet scale the copies were most of the manager's memory and allocation.
	shared := client.UnsafeDisableDeepCopy
	for _, l := range []client.ObjectList{&nodes, &gpuNodes, &pdbs, &plans} {
		if err := r.Client.List(ctx, l, shared); err != nil {
			return nil, fmt.Errorf("listing %T: %w", l, err)
		}
	}
	// Only pending GPU pods and the pods of GPU nodes matter; the cache's indexes spare a
	// pass from walking every pod of a large cluster.
	pods, err := r.pods.pendingGPU(nil)
	if err != nil {
		return nil, err
	}
	reported := map[string]bool{}
	for _, g := range gpuNodes.Items {
		reported[g.Name] = true
	}
	for _, n := range nodes.Items {
		if !reported[n.Name] && n.Labels[v1alpha1.LabelGPUPresent] != "true" {
			continue
		}
		if pods, err = r.pods.onNode(pods, n.Name); err != nil {
			return nil, err
		}
	}
	heartbeats, err := r.heartbeats(ctx)
	if err != nil {
		return nil, err
	}
	if r.AgentPodSelector != nil {
		// The agents' pods run on the GPU nodes, so they are among the nodes' pods read above.
		heartbeats = inventory.ReadinessHeartbeats(heartbeats, pods, nodes.Items,
			inventory.AgentPods{Namespace: r.AgentNamespace, Selector: r.AgentPodSelector,
				DaemonSet: r.AgentDaemonSet, ServiceAccount: r.AgentServiceAccount}, r.Clock.Now())
	}
	var claims []resourcev1.ResourceClaim
	var resourceSlices resourcev1.ResourceSliceList
	if r.readClaims {
		var list resourcev1.ResourceClaimList
		if err := r.Client.List(ctx, &list, shared); err != nil {
			return nil, fmt.Errorf("listing ResourceClaims: %w", err)
		}
		claims = list.Items
		if claims == nil {
			claims = []resourcev1.ResourceClaim{} // listed: pods' claims are read, none exist
		}
		if err := r.Client.List(ctx, &resourceSlices, shared); err != nil {
			return nil, fmt.Errorf("listing ResourceSlices: %w", err)
		}
	}
	return &pool.Cluster{Policies: policies, Nodes: nodes.Items, GPUNodes: gpuNodes.Items,
		Pods: pods, PDBs: pdbs.Items, Plans: plans.Items, Claims: claims, Slices: resourceSlices.Items, Heartbeats: heartbeats,
		MIGManagerReboot: r.migManagerReboot(ctx)}, nil
}

// migManagerReboot reads from NVIDIA's ClusterPolicy whether mig-manager may reboot a node
// whose MIG mode change fails, so that the planner keeps such changes off nodes where a reboot
// would kill pods. Without a readable ClusterPolicy it is unknown, which the planner treats
// as a reboot wherever a toggle needs a GPU reset.
func (r *PolicyReconciler) migManagerReboot(ctx context.Context) planner.MIGManagerReboot {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(nvidia.ClusterPolicyGVK.GroupVersion().WithKind(nvidia.ClusterPolicyGVK.Kind + "List"))
	if err := r.Client.List(ctx, list); err != nil || len(list.Items) == 0 {
		return planner.RebootUnknown
	}
	if nvidia.MIGManagerWithReboot(&list.Items[0]) {
		return planner.RebootOnFailure
	}
	return planner.RebootNever
}

// heartbeats reads the agents' Leases: per node, when its agent last renewed. A Lease counts
// only when it is held by that node's agent (v1alpha1.AgentLeaseHolder).
func (r *PolicyReconciler) heartbeats(ctx context.Context) (map[string]time.Time, error) {
	if r.AgentNamespace == "" {
		return nil, nil
	}
	var leases coordinationv1.LeaseList
	if err := r.Client.List(ctx, &leases, client.InNamespace(r.AgentNamespace),
		client.MatchingLabels{v1alpha1.LabelAgentLease: "true"}, client.UnsafeDisableDeepCopy); err != nil {
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
	policy, problems, done, err := r.observePolicy(ctx, req.Name)
	if done || err != nil {
		return reconcile.Result{}, err
	}
	// Read before the cluster: an event after this point makes the next reconcile pass again.
	events := r.events.Load()
	took := passClock{start: r.Clock.Now(), clock: r.Clock}
	cluster, err := r.read(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	now := r.Clock.Now()
	minPendingAge := pool.DurationOr(policy.Spec.Planning.MinPendingAge, pool.DefaultMinPendingAge)
	window := pool.DurationOr(policy.Spec.Planning.StabilizationWindow, pool.DefaultStabilizationWindow)
	inputs := passInputs{generation: policy.Generation, events: events,
		facts: pool.TimeFactsOf(policy, cluster, now, r.MaxReportAge), at: now}
	// A plan under review leaves the window with time alone, and the planner then looks again.
	if young := youngAwaitingPlan(policy, pool.OwnPlans(policy, cluster.Plans), now, window); young != nil {
		inputs.young = young.Name
	}
	if r.unchanged(policy.Name, inputs) {
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
	res := r.remembered(policy, young, frozenKey(pass.Frozen), pass.Pending)
	if res == nil {
		// Within the size the API server stores: a larger change becomes several plans in turn.
		if res, err = planner.PlanWithin(pass.Input()); err != nil {
			return reconcile.Result{RequeueAfter: policyRecheckInterval},
				r.reportUnusable(ctx, policy, reasonPlanningFailed, fmt.Sprintf("the planner cannot plan for this policy: %v", err))
		}
		took.lap("planner")
	}
	current, err := r.propose(ctx, policy, pass.Own, res, pass.Pending, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	took.lap("propose")
	r.tellPods(pass, res, current)
	r.remember(policy, current, res, frozenKey(pass.Frozen), pass.Pending)
	if err := r.collectPlans(ctx, policy, pass.Own, now); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.report(ctx, pass, cluster, current, res, problems); err != nil {
		return reconcile.Result{}, err
	}
	took.lap("report")
	r.noteInputs(policy.Name, inputs)
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

// tellPods writes an Event on each pending pod of the pool whose story changed: which plan
// serves it and where that plan stands, or why gpupool cannot help (pool.PodNotes). The pod's
// owner, often confined to a namespace, reads it with kubectl describe pod.
func (r *PolicyReconciler) tellPods(pass *pool.Pass, res *planner.Result, current *v1alpha1.RepartitionPlan) {
	policy, now := pass.Policy, pass.Now
	phase := v1alpha1.PlanPhase("")
	var refused *pool.Refusal
	var wanted *v1alpha1.RepartitionPlan
	if current != nil {
		phase = rollout.Gate(current, policy, now).Phase
	} else if wanted = res.RepartitionPlan(policy, now); wanted != nil {
		refused = pool.RefusedChange(pass.Own, wanted, policy, now)
	}
	notes := pool.PodNotes(pass.Pending, res, current, phase, refused, wanted)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.told == nil {
		r.told = map[string]map[types.UID]string{}
	}
	before := r.told[policy.Name]
	told := make(map[types.UID]string, len(notes))
	for pod, note := range notes {
		told[note.UID] = note.Key
		if before[note.UID] == note.Key {
			continue
		}
		eventType := corev1.EventTypeNormal
		if note.Reason == pool.PodReasonCannotHelp || note.Reason == pool.PodReasonRefused {
			eventType = corev1.EventTypeWarning
		}
		var related runtime.Object = policy
		if current != nil && note.Reason != pool.PodReasonCannotHelp {
			related = current
		}
		regarding := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: note.UID}}
		r.Recorder.Eventf(regarding, related, eventType, note.Reason, "Plan", "%s", note.Message)
	}
	r.told[policy.Name] = told
}

// passClock times the phases of one pass.
type passClock struct {
	clock clock.Clock
	start time.Time
	last  time.Time
	laps  []any
}

// lap ends the phase named name.
func (t *passClock) lap(name string) {
	now := t.clock.Now()
	if t.last.IsZero() {
		t.last = t.start
	}
	t.laps = append(t.laps, name, now.Sub(t.last).Round(time.Millisecond).String())
	t.last = now
}

// total is the time from the pass's start to its last lap.
func (t *passClock) total() time.Duration { return t.last.Sub(t.start) }

// keysAndValues are the total and each phase, for a log line.
func (t *passClock) keysAndValues() []any {
	return append([]any{"took", t.total().Round(time.Millisecond).String()}, t.laps...)
}

func planNameOf(p *v1alpha1.RepartitionPlan) string {
	if p == nil {
		return ""
	}
	return p.Name
}

// recheckAfter is when to look again at what time alone changes.
func recheckAfter(minPendingAge time.Duration) time.Duration {
	return min(max(minPendingAge, time.Second), policyRecheckInterval)
}

// unchanged reports whether the policy's last complete pass started from the same inputs.
func (r *PolicyReconciler) unchanged(policy string, in passInputs) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.lastInputs[policy]
	return ok && last.generation == in.generation && last.events == in.events && last.facts.Equal(in.facts) &&
		last.young == in.young && in.at.Sub(last.at) < fullPassInterval
}

// noteInputs remembers what the policy's complete pass started from.
func (r *PolicyReconciler) noteInputs(policy string, in passInputs) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastInputs == nil {
		r.lastInputs = map[string]passInputs{}
	}
	r.lastInputs[policy] = in
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
		r.mu.Lock()
		delete(r.told, name)
		r.mu.Unlock()
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

// report writes the policy's status and metrics from what the pass saw and decided.
func (r *PolicyReconciler) report(ctx context.Context, pass *pool.Pass, cluster *pool.Cluster, current *v1alpha1.RepartitionPlan,
	res *planner.Result, problems []pool.Problem) error {
	policy := pass.Policy
	status := poolStatus(policy, pass.Selector, pass.Snapshot, pass.Pending, res)
	status.CurrentPlan = ""
	if current != nil {
		status.CurrentPlan = current.Name
	}
	// A copy: SetStatusCondition edits in place, and the old status is compared below.
	status.Conditions = slices.Clone(policy.Status.Conditions)
	nodes := poolNodes(pass.Snapshot, pass.Selector)
	r.setConditions(ctx, policy, &status, cluster, pass.Conflicts, current, res, pass.Pending,
		pool.Unreported(nodes), pool.MIGTablesMatch(nodes), pool.DRASlicesCurrent(nodes))
	setSpecCondition(policy, &status, problems)
	// Last: Ready sums up the conditions above.
	ready := pool.Ready(status.Pool.Nodes, policy.Spec.Planning.Paused, status.Conditions)
	setCondition(policy, &status, v1alpha1.ConditionReady, ready)
	if err := r.writeStatus(ctx, policy, status); err != nil {
		return err
	}
	if err := r.reportDRASlices(ctx, nodes, cluster.GPUNodes); err != nil {
		return err
	}
	r.Metrics.ObservePolicy(policy.Name, observation(policy, status, pass.Pending, res))
	return nil
}

// setCondition sets one condition decided in internal/pool.
func setCondition(policy *v1alpha1.GPUPoolPolicy, status *v1alpha1.GPUPoolPolicyStatus, kind string, c pool.Condition) {
	s := metav1.ConditionFalse
	if c.True {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: kind, Status: s, Reason: c.Reason,
		Message: c.Message, ObservedGeneration: policy.Generation})
}

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
	if err := r.writeStatus(ctx, policy, status); err != nil {
		return err
	}
	// A policy no pass can use is the one an alert must see not Ready.
	r.Metrics.ObserveConditions(policy.Name, status.Conditions)
	return nil
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
		r.Metrics.ObserveConditions(u.GetName(), conditions)
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
	r.Metrics.ObserveConditions(u.GetName(), conditions)
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
// frozen nodes have changed since and the same pods are pending; nil means the planner must
// run. New demand always runs it, so that it can extend the plan under review (propose), and
// so does demand that went away, so that a plan nobody needs any more is withdrawn.
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
	// New demand, or demand gone: a pod that started pending since, or one that no longer is
	// (scheduled, deleted), changes what the plan under review is for.
	if len(pending) != len(last.pending) {
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
	plans []v1alpha1.RepartitionPlan, res *planner.Result, pending []demand.Request, now time.Time) (*v1alpha1.RepartitionPlan, error) {
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
	window := pool.DurationOr(policy.Spec.Planning.StabilizationWindow, pool.DefaultStabilizationWindow)
	if awaiting != nil && want != nil && hashAs(want, awaiting.Name) != awaiting.Spec.Hash {
		// Whatever the window says: nobody is asked to approve a plan for pods that no longer wait.
		if why := pool.DemandGone(awaiting, pending); why != "" {
			if err := r.supersede(ctx, awaiting, why); err != nil {
				return nil, err
			}
			awaiting = nil
		}
	}
	switch {
	case want == nil && awaiting == nil:
		return nil, nil
	case want == nil:
		why := pool.DemandGone(awaiting, pending)
		if why == "" {
			why = pool.WithdrawPrefix + "the pending demand no longer needs it"
		}
		return nil, r.supersede(ctx, awaiting, why)
	case awaiting != nil && rollout.RecordedApproval(awaiting) != want.Spec.Approval:
		// The plan under review was made under another approval mode, and no later mode
		// approves it (rollout.ModeApproves): replace it with the same change made under the
		// policy's mode now, so that a mode its approvers chose applies to what is proposed.
		if err := r.supersede(ctx, awaiting, fmt.Sprintf("superseded: the policy's approval is now %s, this plan was made under %s",
			want.Spec.Approval, rollout.RecordedApproval(awaiting))); err != nil {
			return nil, err
		}
		if pool.RefusedChange(plans, want, policy, now) != nil {
			// A new mode does not override a human's no either.
			return nil, nil
		}
	case awaiting != nil && hashAs(want, awaiting.Name) == awaiting.Spec.Hash:
		return awaiting, nil
	case awaiting != nil && now.Sub(awaiting.CreationTimestamp.Time) < window && !pool.Extends(want, awaiting):
		// Inside the window a plan under review is replaced only to serve demand it does not.
		return awaiting, nil
	case pool.RefusedChange(plans, want, policy, now) != nil:
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
	r.Recorder.Eventf(want, policy, corev1.EventTypeNormal, pool.ReasonPlanProposed, "Propose",
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

// hashAs is the hash the planner's plan want would have had if it had been created under
// name: plans differ in their entry names only (see create), so this tells whether an
// existing plan makes the very same change.
func hashAs(want *v1alpha1.RepartitionPlan, name string) string {
	steps := slices.Clone(want.Spec.Steps)
	for i := range steps {
		steps[i].MIGConfigName = nvidia.PlanEntryName(steps[i].MIGConfigName, name)
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
			plan.Spec.Steps[i].MIGConfigName = nvidia.PlanEntryName(layoutNames[i], plan.Name)
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

// collectPlans deletes a policy's finished plans beyond the newest keepFinishedPlans, except
// those the hourly eviction bound and the failure backoff still read (pool.InHistory). Plans
// are listed newest first.
func (r *PolicyReconciler) collectPlans(ctx context.Context, policy *v1alpha1.GPUPoolPolicy, plans []v1alpha1.RepartitionPlan, now time.Time) error {
	kept := 0
	for i := range plans {
		p := &plans[i]
		if !pool.Finished(p.Status.Phase) || !metav1.IsControlledBy(p, policy) {
			continue
		}
		if kept++; kept <= keepFinishedPlans || pool.InHistory(p, now) {
			continue
		}
		err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting finished plan %s: %w", p.Name, err)
		}
	}
	return nil
}

// supersede asks the plan controller, the only writer of a plan's status, to supersede a plan
// that still awaits approval (rollout.Gate carries it out; a plan approved meanwhile ignores it).
func (r *PolicyReconciler) supersede(ctx context.Context, cached *v1alpha1.RepartitionPlan, why string) error {
	// The pass holds the cache's own objects (read): the patch is built on a copy.
	plan := cached.DeepCopy()
	patch := client.MergeFrom(cached)
	metav1.SetMetaDataAnnotation(&plan.ObjectMeta, v1alpha1.AnnotationSupersede, why)
	if err := r.Client.Patch(ctx, plan, patch); err != nil {
		return fmt.Errorf("asking to supersede plan %s: %w", plan.Name, err)
	}
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
		if apierrors.IsNotFound(err) {
			// Deleted while the pass ran: an expected race, not an error.
			logf.FromContext(ctx).V(1).Info("policy deleted before its status was written", "policy", policy.Name)
			return nil
		}
		return fmt.Errorf("writing status of policy %s: %w", policy.Name, err)
	}
	return nil
}

// setConditions sets every condition of the policy from what this pass saw; each is decided
// by its own function in internal/pool.
func (r *PolicyReconciler) setConditions(ctx context.Context, policy *v1alpha1.GPUPoolPolicy, status *v1alpha1.GPUPoolPolicyStatus,
	cluster *pool.Cluster, conflicts map[string]string, current *v1alpha1.RepartitionPlan, res *planner.Result, pending []demand.Request,
	unreported string, tables, draSlices pool.Condition) {
	set := func(t string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason,
			Message: msg, ObservedGeneration: policy.Generation})
	}
	phase := v1alpha1.PlanPhase("")
	if current != nil {
		phase = rollout.Gate(current, policy, r.Clock.Now()).Phase
	}
	for _, c := range []struct {
		kind string
		pool.Condition
	}{
		{v1alpha1.ConditionPaused, pool.Paused(policy.Spec.Planning.Paused)},
		{v1alpha1.ConditionConflict, pool.Conflict(conflicts)},
		{v1alpha1.ConditionDemandSatisfied, pool.DemandSatisfied(pending, res, current)},
		{v1alpha1.ConditionAwaitingApproval, pool.AwaitingApproval(current, phase)},
		{v1alpha1.ConditionReconfiguring, pool.Reconfiguring(current, phase)},
		{v1alpha1.ConditionDegraded, pool.Degraded(unreported, pool.LastFailedPlan(policy, cluster.Plans))},
		{v1alpha1.ConditionMIGTablesMatch, tables},
		{v1alpha1.ConditionDRASlicesCurrent, draSlices},
	} {
		set(c.kind, c.True, c.Reason, c.Message)
	}
	r.setOperatorCondition(ctx, set)
}

// setOperatorCondition checks that NVIDIA's ClusterPolicy points mig-manager and the device
// plugin at gpupool's ConfigMaps, and says exactly what to set when it does not.
func (r *PolicyReconciler) setOperatorCondition(ctx context.Context, set func(string, bool, string, string)) {
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
	if err := ensureOperatorConfigMaps(ctx, r.Client, r.ConfigNamespace); err != nil {
		set(v1alpha1.ConditionGPUOperatorConfigured, false, "ConfigMapsNotWritten", fmt.Sprintf(
			"gpupool cannot create the ConfigMaps the GPU Operator mounts into mig-manager and the device plugin (%s, %s in %s): %v; "+
				"until they exist those pods cannot start where the ClusterPolicy names them: check the manager's ConfigMap Role in %s",
			MIGPartedConfigMap, DevicePluginConfigMap, r.ConfigNamespace, err, r.ConfigNamespace))
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

func evictions(p *v1alpha1.RepartitionPlan) int {
	n := 0
	for _, s := range p.Spec.Steps {
		n += len(s.Evictions)
	}
	return n
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
		DrainTimeout:     pool.DurationOr(policy.Spec.Disruption.DrainTimeout, rollout.DefaultDrainTimeout),
		ConfigureTimeout: pool.DurationOr(policy.Spec.Disruption.ConfigureTimeout, rollout.DefaultConfigureTimeout)}
	for k, n := range pool.UnservedByShape(pending, res) {
		obs.Unserved[metrics.ShapeReason{Shape: k.Shape, Reason: string(k.Reason)}] = n
	}
	return obs
}
