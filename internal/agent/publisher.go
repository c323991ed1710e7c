package agent

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/rightsize"
)

// FieldManager is the server-side-apply field manager the agent writes as; it
// owns GPUNode status (its GPUs and its conditions) and nothing in spec.
const FieldManager = "gpupool-agent"

// Defaults of the Publisher.
const (
	// DefaultRefreshPeriod is how often NVML is re-read and how old observedTime may get.
	DefaultRefreshPeriod = 30 * time.Second
	// DefaultInitialBackoff is the first retry delay after a failed NVML read; it
	// doubles per failure up to the refresh period.
	DefaultInitialBackoff = time.Second
)

// ConditionPodResourcesReady reports whether the kubelet's PodResources API
// answered, i.e. whether the pods in status.gpus are known or simply absent.
// It is the agent's own addition to NVMLReady and LayoutVerified and is only
// published when the agent is given a pod-owner lookup.
const ConditionPodResourcesReady = "PodResourcesReady"

// Reasons of the PodResourcesReady condition.
const (
	// ReasonPodsListed: the kubelet answered and every assigned device was matched (True).
	ReasonPodsListed = "Listed"
	// ReasonUnmatchedDevices: the kubelet answered but assigned device IDs that no GPU or
	// MIG device has, which points at a device plugin with another deviceIDStrategy (True).
	ReasonUnmatchedDevices = "UnmatchedDevices"
	// ReasonPodResourcesUnavailable: the kubelet's socket did not answer (False).
	ReasonPodResourcesUnavailable = "Unavailable"
)

// ReadFunc reads the node's GPUs; Read through a go-nvml library is the production one.
type ReadFunc func(context.Context) ([]v1alpha1.GPUStatus, error)

// OwnersFunc maps device IDs (GPU-... and MIG-... UUIDs) to the pods holding them.
type OwnersFunc func(context.Context) (map[string][]v1alpha1.PodReference, error)

// NVMLReader adapts Read to a ReadFunc. NVML calls take no context; Read
// initialises NVML and shuts it down per call, so the agent holds no device
// handle between reads and never stands in the way of a driver reload.
func NVMLReader(lib NVML) ReadFunc {
	return func(context.Context) ([]v1alpha1.GPUStatus, error) { return Read(lib) }
}

// PodResourcesOwners adapts DeviceOwners to an OwnersFunc, bounding each call
// so that a hung kubelet cannot stall the publisher.
func PodResourcesOwners(c *PodResourcesClient, timeout time.Duration) OwnersFunc {
	return func(ctx context.Context) (map[string][]v1alpha1.PodReference, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return DeviceOwners(ctx, c)
	}
}

// Publisher keeps GPUNode/<NodeName>'s status equal to what NVML and the
// kubelet report. It is a reconciler for that one object: a spec change
// (spec.expectedLayout) triggers a reconcile at once, and each reconcile asks
// to run again when the next refresh is due.
//
// Write policy: status is written (server-side apply, field manager
// FieldManager, status subresource only, so spec is never touched) when the
// agent starts and when the published GPUs or the agent's conditions differ
// from what the API server holds. The agent's heartbeat, which tells the
// controller a live agent whose node did not change from a dead one, is one of
// three (Heartbeat): the agent pod's readiness, which writes nothing while the
// GPUs do not change; a Lease renewed every refresh period (LeaseNamespace); or
// observedTime, rewritten once a period.
//
// When NVML cannot be read, status.gpus is cleared rather than left at the
// last values: a GPUNode must not list GPUs that nobody can see any more,
// or the planner would plan on them. NVMLReady=False says why, and reads are
// retried with exponential backoff from InitialBackoff up to Period.
type Publisher struct {
	// Client reads the GPUNode (a cache restricted to it, in the agent) and writes it.
	Client client.Client
	// NodeName is the node, and the GPUNode's name.
	NodeName string
	// Read reads the GPUs.
	Read ReadFunc
	// Owners, when set, attributes devices to pods; nil publishes no pods.
	Owners OwnersFunc
	// Clock stamps observedTime and condition transitions and drives the requeue
	// timer; tests inject a fake one. Default: the real clock.
	Clock clock.WithTicker
	// Period between reads, and the heartbeat interval. Default DefaultRefreshPeriod.
	Period time.Duration
	// InitialBackoff is the first retry delay after a failed read. Default DefaultInitialBackoff.
	InitialBackoff time.Duration
	// Heartbeat is how the manager learns that this agent is alive and stands by its report.
	// Empty means HeartbeatLease when LeaseNamespace is set, HeartbeatStatus otherwise (the
	// meaning of earlier versions, which had only those two).
	Heartbeat Heartbeat
	// LeaseNamespace is where the agent renews a Lease named after its node every Period
	// (renewLease) when its heartbeat is HeartbeatLease. It must be empty for the others.
	LeaseNamespace string
	// Usage, when set, reads the memory each device has in use every pass; the pods holding a
	// device alone get a decaying histogram each, summarised in status.usage whenever a
	// summary changes materially (rightsize.PublishRule). Nil publishes no usage.
	Usage UsageFunc
	// UsageRule says when a pod's summary is worth a write; the zero value is the defaults. Its
	// MinWindow and MinSamples should match the recommender's (a summary is written the pass
	// it crosses them), which tests and demos shorten from a day.
	UsageRule rightsize.PublishRule

	mu        sync.Mutex // serialises reconciles: NVML reads and the failure count
	failures  int
	published atomic.Bool
	// refreshed is when the last pass that published (or found published) the agent's view
	// ended, in Unix nanoseconds on Clock: ReadyCheck fails once it is older than readyFor.
	refreshed atomic.Int64
	// wroteStatus is set once this process has written the status: a report written before a
	// restart (a reboot, say) must never be taken for a fresh one, so the first pass writes.
	wroteStatus bool
	// renewed is when this process last renewed the Lease, and lease the Lease it wrote.
	renewed time.Time
	lease   *coordinationv1.Lease
	// usage holds the pods' histograms between passes.
	usage usageSampler
}

// setDefaults fills unset fields and rejects a Publisher that cannot work.
func (p *Publisher) setDefaults() error {
	switch {
	case p.Client == nil:
		return errors.New("gpupool agent publisher: no API client")
	case p.NodeName == "":
		return errors.New("gpupool agent publisher: no node name")
	case p.Read == nil:
		return errors.New("gpupool agent publisher: no GPU reader")
	}
	if p.Clock == nil {
		p.Clock = clock.RealClock{}
	}
	if p.Period <= 0 {
		p.Period = DefaultRefreshPeriod
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = DefaultInitialBackoff
	}
	p.InitialBackoff = min(p.InitialBackoff, p.Period)
	if p.Heartbeat == "" {
		p.Heartbeat = HeartbeatStatus
		if p.LeaseNamespace != "" {
			p.Heartbeat = HeartbeatLease
		}
	}
	switch p.Heartbeat {
	case HeartbeatLease:
		if p.LeaseNamespace == "" {
			return errors.New("gpupool agent publisher: the lease heartbeat needs the Lease's namespace")
		}
	case HeartbeatReadiness, HeartbeatStatus:
		if p.LeaseNamespace != "" {
			return fmt.Errorf("gpupool agent publisher: the %s heartbeat renews no Lease, yet a Lease namespace (%s) is set", p.Heartbeat, p.LeaseNamespace)
		}
	default:
		return fmt.Errorf("gpupool agent publisher: unknown heartbeat %q (want %s, %s or %s)", p.Heartbeat, HeartbeatReadiness, HeartbeatLease, HeartbeatStatus)
	}
	return nil
}

// Request is the one request the Publisher reconciles.
func (p *Publisher) Request() reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Name: p.NodeName}}
}

// SetupWithManager registers the Publisher with mgr. The manager's cache should
// hold only this node's GPUNode (see NewManager). Besides watching it, the
// controller enqueues the node once at start, because a GPUNode that does not
// exist yet produces no event. The work queue runs on the Publisher's clock, so
// a test stepping a fake clock fires the periodic refresh.
func (p *Publisher) SetupWithManager(mgr ctrl.Manager) error {
	if err := p.setDefaults(); err != nil {
		return err
	}
	ours := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == p.NodeName })
	kick := source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(p.Request())
		return nil
	})
	err := ctrl.NewControllerManagedBy(mgr).
		Named("gpunode-publisher").
		// Spec changes bump the generation; status-only updates (most of them
		// our own writes) need no NVML read and are left to the heartbeat.
		// Create and delete events pass, so a deleted GPUNode is recreated.
		For(&v1alpha1.GPUNode{}, builder.WithPredicates(ours, predicate.GenerationChangedPredicate{})).
		WatchesRawSource(kick).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: 1,
			// API errors back off like NVML errors do, capped at the period.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](p.InitialBackoff, p.Period),
			NewQueue: func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
				return workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{
					Name:  name,
					Clock: p.Clock,
				})
			},
		}).
		Complete(p)
	if err != nil {
		return fmt.Errorf("setting up the GPUNode publisher for node %s: %w", p.NodeName, err)
	}
	return nil
}

// ReadyCheck is a healthz.Checker: ready while the API server holds the
// status this agent last read (its last write, if one was due, succeeded),
// whatever NVML said. A node without a driver is a state the agent reports,
// not a failure of the agent; an agent that cannot write its GPUNode (API
// server unreachable, RBAC or the admission policy refusing it) is.
//
// It also fails when no pass has refreshed the agent's view for readyFor (two periods): an
// agent stuck in an NVML call, or whose work queue stopped, must not stay ready, since its
// readiness may be the very heartbeat the manager trusts its report by (HeartbeatReadiness).
func (p *Publisher) ReadyCheck(*http.Request) error {
	// published is stored after setDefaults, in the reconciling goroutine: once it reads true
	// here, Clock and Period are set and never written again.
	if !p.published.Load() {
		return fmt.Errorf("GPUNode %s status not published yet, or its last write failed", p.NodeName)
	}
	if age := p.Clock.Since(time.Unix(0, p.refreshed.Load())); age > p.readyFor() {
		return fmt.Errorf("GPUNode %s not refreshed for %s (refresh period %s): the agent is stuck", p.NodeName, age.Round(time.Second), p.Period)
	}
	return nil
}

// readyFor is how long a refresh keeps the agent ready: one refresh may be missed, not two.
func (p *Publisher) readyFor() time.Duration { return 2 * p.Period }

// Reconcile reads the GPUs, publishes GPUNode/<NodeName> status when it
// changed or its heartbeat is due, and asks to run again when the next
// refresh (or, after a failed read, the next retry) is due. It never sleeps.
func (p *Publisher) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if req.Name != p.NodeName {
		return reconcile.Result{}, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.setDefaults(); err != nil {
		return reconcile.Result{}, err
	}
	log := logf.FromContext(ctx).WithValues("gpunode", p.NodeName)

	node, err := p.getOrCreate(ctx)
	if err != nil || node == nil {
		return reconcile.Result{}, err
	}

	now := p.Clock.Now()
	gpus, readErr := p.Read(ctx)
	desired := p.desiredStatus(ctx, node, gpus, readErr, now)

	observed := time.Time{}
	if node.Status.ObservedTime != nil {
		observed = node.Status.ObservedTime.Time
	}
	changed := !sameStatus(desired, node.Status)
	heartbeatDue := p.Heartbeat == HeartbeatStatus && now.Sub(observed) >= p.Period
	if changed || heartbeatDue || !p.wroteStatus {
		desired.ObservedTime = &metav1.Time{Time: now}
		if err := p.apply(ctx, desired); err != nil {
			p.published.Store(false)
			return reconcile.Result{}, err
		}
		observed = now
		p.wroteStatus = true
		if changed {
			nvmlReady := meta.FindStatusCondition(desired.Conditions, v1alpha1.ConditionNVMLReady)
			layout := meta.FindStatusCondition(desired.Conditions, v1alpha1.ConditionLayoutVerified)
			log.Info("published GPUNode status", "gpus", len(desired.GPUs),
				"nvmlReady", nvmlReady.Reason, "nvmlMessage", nvmlReady.Message,
				"layoutVerified", layout.Reason, "layoutMessage", layout.Message)
		}
	}
	// lastBeat is when the heartbeat was last given: the next pass is due a period after it.
	lastBeat := observed
	switch p.Heartbeat {
	case HeartbeatLease:
		if now.Sub(p.renewed) >= p.Period {
			if err := p.renewLease(ctx, now); err != nil {
				p.published.Store(false)
				return reconcile.Result{}, err
			}
			p.renewed = now
		}
		lastBeat = p.renewed
	case HeartbeatReadiness:
		// The kubelet probes ReadyCheck locally; this pass is the beat it sees.
		lastBeat = now
	}
	p.refreshed.Store(now.UnixNano())
	p.published.Store(true)

	next := p.Period - now.Sub(lastBeat)
	if readErr != nil {
		p.failures++
		log.V(1).Info("NVML read failed, retrying", "error", readErr.Error(), "failures", p.failures)
		next = min(next, p.backoff())
	} else {
		p.failures = 0
	}
	return reconcile.Result{RequeueAfter: max(next, time.Millisecond)}, nil
}

// backoff is InitialBackoff doubled per consecutive failure, capped at Period.
func (p *Publisher) backoff() time.Duration {
	d := p.InitialBackoff
	for i := 1; i < p.failures && d < p.Period; i++ {
		d *= 2
	}
	return min(d, p.Period)
}

// getOrCreate returns the node's GPUNode, creating it with an empty spec (the
// controller's to fill) when it is missing. It returns nil, nil when the
// object exists on the server but not yet in the cache: the cache's add event
// will reconcile again.
func (p *Publisher) getOrCreate(ctx context.Context) (*v1alpha1.GPUNode, error) {
	node := &v1alpha1.GPUNode{}
	err := p.Client.Get(ctx, types.NamespacedName{Name: p.NodeName}, node)
	if err == nil {
		return node, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading GPUNode %s: %w", p.NodeName, err)
	}
	// Sent without spec and status keys (a typed GPUNode always carries both),
	// so that the agent's field manager owns no part of spec, not even its root.
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "GPUNode",
		"metadata":   map[string]any{"name": p.NodeName},
	}}
	if err := p.Client.Create(ctx, u, client.FieldOwner(FieldManager)); err != nil {
		if apierrors.IsAlreadyExists(err) {
			logf.FromContext(ctx).V(1).Info("GPUNode exists but the cache has not seen it yet", "gpunode", p.NodeName)
			return nil, nil
		}
		return nil, fmt.Errorf("creating GPUNode %s: %w", p.NodeName, err)
	}
	node = &v1alpha1.GPUNode{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, node); err != nil {
		return nil, fmt.Errorf("decoding the created GPUNode %s: %w", p.NodeName, err)
	}
	logf.FromContext(ctx).Info("created GPUNode", "gpunode", p.NodeName)
	return node, nil
}

// desiredStatus is what the agent publishes: the GPUs read (none when NVML
// failed) and its conditions, whose transition times carry over from the
// current status when their status did not change.
func (p *Publisher) desiredStatus(ctx context.Context, node *v1alpha1.GPUNode, gpus []v1alpha1.GPUStatus, readErr error, now time.Time) v1alpha1.GPUNodeStatus {
	st := v1alpha1.GPUNodeStatus{Conditions: ownConditions(node.Status.Conditions)}
	set := func(c metav1.Condition) {
		c.ObservedGeneration = node.Generation
		c.LastTransitionTime = metav1.Time{Time: now}
		meta.SetStatusCondition(&st.Conditions, c)
	}
	set(NVMLReadyCondition(gpus, readErr))
	if readErr != nil {
		set(metav1.Condition{
			Type:    v1alpha1.ConditionLayoutVerified,
			Status:  metav1.ConditionUnknown,
			Reason:  ReasonNVMLNotReady,
			Message: "NVML cannot be read, so the layout cannot be verified",
		})
	} else {
		st.GPUs = gpus
		set(VerifyLayout(node.Spec.ExpectedLayout, gpus))
		set(TablesCondition(gpus))
	}
	var owners map[string][]v1alpha1.PodReference
	if p.Owners == nil {
		meta.RemoveStatusCondition(&st.Conditions, ConditionPodResourcesReady)
	} else {
		var c metav1.Condition
		c, owners = p.attributePods(ctx, st.GPUs, readErr == nil)
		set(c)
	}
	st.Usage = p.sampleUsage(ctx, node.Status.Usage, st.GPUs, readErr == nil, owners, now)
	return st
}

// maxListedDevices bounds the device IDs a condition message names.
const maxListedDevices = 8

// attributePods records pods in gpus and returns the PodResourcesReady
// condition, with the kubelet's device owners (nil when it did not answer).
// Unmatched devices are reported only when the GPUs are known.
func (p *Publisher) attributePods(ctx context.Context, gpus []v1alpha1.GPUStatus, gpusKnown bool) (metav1.Condition, map[string][]v1alpha1.PodReference) {
	c := metav1.Condition{Type: ConditionPodResourcesReady}
	owners, err := p.Owners(ctx)
	if err != nil {
		c.Status, c.Reason = metav1.ConditionFalse, ReasonPodResourcesUnavailable
		c.Message = "pods using the GPUs are unknown: " + err.Error()
		return c, nil
	}
	if owners == nil {
		owners = map[string][]v1alpha1.PodReference{}
	}
	c.Status, c.Reason = metav1.ConditionTrue, ReasonPodsListed
	c.Message = fmt.Sprintf("the kubelet assigns %d NVIDIA device(s) to pods", len(owners))
	if !gpusKnown {
		return c, owners
	}
	if unmatched := Attribute(gpus, owners); len(unmatched) > 0 {
		c.Reason = ReasonUnmatchedDevices
		shown := unmatched[:min(len(unmatched), maxListedDevices)]
		c.Message += fmt.Sprintf("; %d match no GPU or MIG device (is the device plugin's deviceIDStrategy uuid?): %s",
			len(unmatched), strings.Join(shown, ", "))
		if len(unmatched) > len(shown) {
			c.Message += fmt.Sprintf(" and %d more", len(unmatched)-len(shown))
		}
	}
	return c, owners
}

// ownConditions copies the conditions the agent owns; others, written by
// other field managers, are neither compared nor applied.
func ownConditions(conds []metav1.Condition) []metav1.Condition {
	var out []metav1.Condition
	for _, c := range conds {
		switch c.Type {
		case v1alpha1.ConditionNVMLReady, v1alpha1.ConditionLayoutVerified, v1alpha1.ConditionMIGTablesMatch, ConditionPodResourcesReady:
			out = append(out, c)
		}
	}
	return out
}

// sameStatus compares what the agent publishes, ignoring observedTime and
// others' conditions. Both sides go through JSON, the form the API server
// stores, so nil and empty lists and sub-second times compare equal.
func sameStatus(desired, current v1alpha1.GPUNodeStatus) bool {
	norm := func(st v1alpha1.GPUNodeStatus) []byte {
		st.ObservedTime = nil
		st.Conditions = ownConditions(st.Conditions)
		slices.SortFunc(st.Conditions, func(a, b metav1.Condition) int { return strings.Compare(a.Type, b.Type) })
		st.GPUs = slices.Clone(st.GPUs)
		slices.SortFunc(st.GPUs, func(a, b v1alpha1.GPUStatus) int { return cmp.Compare(a.Index, b.Index) })
		b, err := json.Marshal(st)
		if err != nil {
			return nil // unreachable for these types; nil never equals a marshalled status
		}
		return b
	}
	a, b := norm(desired), norm(current)
	return a != nil && bytes.Equal(a, b)
}

// apply writes status with server-side apply on the status subresource. The
// agent owns every field it sends, so fields it stops sending (a GPU that
// disappeared, a condition it no longer sets) are removed, while spec and
// other managers' conditions stay as they are. Ownership is forced: status is
// the agent's, and a stray `kubectl edit` must not block it.
func (p *Publisher) apply(ctx context.Context, st v1alpha1.GPUNodeStatus) error {
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		return fmt.Errorf("encoding GPUNode %s status: %w", p.NodeName, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "GPUNode",
		"metadata":   map[string]any{"name": p.NodeName},
		"status":     status,
	}}
	err = p.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner(FieldManager), client.ForceOwnership)
	if err != nil {
		return fmt.Errorf("applying GPUNode %s status: %w", p.NodeName, err)
	}
	return nil
}
