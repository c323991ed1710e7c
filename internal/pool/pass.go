package pool

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/podrecord"
	"github.com/gpupool/gpupool/internal/rollout"
)

// Defaults of spec.planning, as the CRD markers default them; objects that no API server
// defaulted (a saved snapshot, an old object) read the same values here.
const (
	DefaultMinPendingAge       = 30 * time.Second
	DefaultStabilizationWindow = 2 * time.Minute
)

// Cluster is everything one planning pass reads: the controller lists it from its cache, the
// CLI from the API server or a saved snapshot, so that what-if and controller cannot disagree.
type Cluster struct {
	Policies []v1alpha1.GPUPoolPolicy
	Nodes    []corev1.Node
	GPUNodes []v1alpha1.GPUNode
	// Pods are the pods as the manager's informer keeps them (podrecord.FromPods makes them
	// from Pods): a pass reads them and never writes into them, so a fleet's pods are never
	// copied for a pass.
	Pods  []*podrecord.Record
	PDBs  []policyv1.PodDisruptionBudget
	Plans []v1alpha1.RepartitionPlan
	// Claims are the ResourceClaims pending pods may ask through (NVIDIA's DRA driver, see
	// demand.PendingWithClaims); nil when the caller does not read claims, which leaves pods'
	// claims unread.
	Claims []resourcev1.ResourceClaim
	// Slices are the ResourceSlices NVIDIA's DRA driver publishes, which name the devices its
	// allocated claims hold (inventory.DRAHolders); nil when not read.
	Slices []resourcev1.ResourceSlice
	// Heartbeats are, per node, when its agent last renewed its Lease; nil when unknown.
	Heartbeats map[string]time.Time
	// MIGManagerReboot is what the GPU Operator's ClusterPolicy says of mig-manager rebooting
	// nodes (nvidia.MIGManagerWithReboot); RebootUnknown when no ClusterPolicy was read.
	MIGManagerReboot planner.MIGManagerReboot
}

// Unbound are the pods not bound to a node that may ask for GPUs, with their records'
// requests, for demand.PendingWithClaims.
func (c *Cluster) Unbound() ([]*corev1.Pod, demand.RequestsOf) {
	var pods []*corev1.Pod
	requests := map[*corev1.Pod]corev1.ResourceList{}
	for _, r := range c.Pods {
		if r.Unbound != nil {
			pods = append(pods, r.Unbound)
			requests[r.Unbound] = r.Requests
		}
	}
	return pods, func(p *corev1.Pod) corev1.ResourceList {
		if l, ok := requests[p]; ok {
			return l
		}
		return demand.PodRequests(p)
	}
}

// ClaimLookup finds the cluster's ResourceClaims by namespace and name; nil when the cluster
// holds none, so that pods' claims are read only where claims were listed.
func (c *Cluster) ClaimLookup() demand.ClaimLookup {
	if c.Claims == nil {
		return nil
	}
	byKey := make(map[types.NamespacedName]*resourcev1.ResourceClaim, len(c.Claims))
	for i := range c.Claims {
		byKey[types.NamespacedName{Namespace: c.Claims[i].Namespace, Name: c.Claims[i].Name}] = &c.Claims[i]
	}
	return func(namespace, name string) *resourcev1.ResourceClaim {
		return byKey[types.NamespacedName{Namespace: namespace, Name: name}]
	}
}

// Options are the manager's settings that shape a pass.
type Options struct {
	// MaxReportAge is how old an agent's heartbeat may be before its node is left out; zero
	// keeps every report (a saved snapshot is judged as of its own time).
	MaxReportAge time.Duration
	// KeepUnplaceable keeps pending pods that no node of the pool may host, so that the
	// planner explains them (NotInPool); the controller leaves them to their own pool.
	KeepUnplaceable bool
}

// InFlight counts the pool's nodes that executing plans are changing now, by budget.
type InFlight struct {
	Disrupting, Reconfiguring int
}

// Pass is one policy's planning pass: what the planner is given and what it was built from.
type Pass struct {
	Policy   *v1alpha1.GPUPoolPolicy
	Selector labels.Selector
	Snapshot *inventory.Snapshot
	// Pending are the pending GPU pods past minPendingAge that the pool could host.
	Pending []demand.Request
	// Conflicts are the pool's nodes another policy selects too, with that policy's name.
	Conflicts map[string]string
	// Frozen are the nodes the planner must leave alone now, with why.
	Frozen   map[string]string
	InFlight InFlight
	// Own are the plans the policy controls, newest first.
	Own           []v1alpha1.RepartitionPlan
	MinPendingAge time.Duration
	Window        time.Duration
	Now           time.Time
	// MIGManagerReboot is the cluster's, for the planner.
	MIGManagerReboot planner.MIGManagerReboot
}

// NewPass assembles a policy's pass over the cluster at now. The policy's nodeSelector must
// parse (Problems reports it when it does not); an empty one makes an empty pool.
func NewPass(policy *v1alpha1.GPUPoolPolicy, c *Cluster, now time.Time, opts Options) (*Pass, error) {
	selector, err := policy.Spec.NodeSelector.Selector()
	if err != nil {
		return nil, fmt.Errorf("spec.nodeSelector: %w", err)
	}
	p := &Pass{Policy: policy, Selector: selector, Now: now, MIGManagerReboot: c.MIGManagerReboot,
		MinPendingAge: DurationOr(policy.Spec.Planning.MinPendingAge, DefaultMinPendingAge),
		Window:        DurationOr(policy.Spec.Planning.StabilizationWindow, DefaultStabilizationWindow)}
	p.Conflicts = conflictingNodes(policy, selector, c)
	p.Frozen, p.InFlight = frozenNodes(policy, c, p.Conflicts, p.Window, now)
	p.Snapshot = inventory.BuildFromRecords(c.Nodes, c.GPUNodes, c.Pods, c.PDBs, inventory.Options{
		Now: now, MaxReportAge: opts.MaxReportAge, Heartbeats: c.Heartbeats,
		EvictEmptyDir: policy.Spec.Disruption.EvictEmptyDir, EvictUnmanaged: policy.Spec.Disruption.EvictUnmanaged,
		DrainTimeout:  DurationOr(policy.Spec.Disruption.DrainTimeout, rollout.DefaultDrainTimeout),
		DeviceHolders: inventory.DRAHolders(c.Claims, c.Slices), DynamicMIGNodes: inventory.DynamicMIGNodes(c.Slices),
		DRAPublished: inventory.DRAPublished(c.Slices),
	})
	unbound, requests := c.Unbound()
	p.Pending, _ = demand.PendingWithClaims(unbound, c.ClaimLookup(), requests, now, p.MinPendingAge)
	if !opts.KeepUnplaceable {
		p.Pending = placeable(p.Pending, selector, c.Nodes)
	}
	p.Own = OwnPlans(policy, c.Plans)
	return p, nil
}

// Input is the planner's input for the pass.
func (p *Pass) Input() planner.Input {
	return planner.Input{Snapshot: p.Snapshot, Pending: p.Pending, Policy: p.Policy, Frozen: p.Frozen,
		InFlightDisrupting: p.InFlight.Disrupting, InFlightReconfiguring: p.InFlight.Reconfiguring,
		EvictionsPaused: EvictionsPaused(p.Policy, p.Own, p.Now), DisruptiveStepsLeft: ptr.To(DisruptiveStepsLeft(p.Policy, p.Own, p.Now)),
		MIGManagerReboot: p.MIGManagerReboot, Now: p.Now}
}

// DurationOr is the duration, or def when it is unset. Zero is a value, not "unset":
// minPendingAge: 0s plans at once. The API server bounds every duration (see
// v1alpha1.GPUPoolPolicySpec.Durations), and Problems stops planning for a stored policy whose
// durations are out of bounds.
func DurationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

// OwnPlans are the plans the policy controls, newest first. A plan that only names the policy
// in spec.policy is someone else's: the plan controller refuses it, and planning ignores it.
func OwnPlans(policy *v1alpha1.GPUPoolPolicy, plans []v1alpha1.RepartitionPlan) []v1alpha1.RepartitionPlan {
	var out []v1alpha1.RepartitionPlan
	for _, p := range plans {
		if p.Spec.Policy == policy.Name && metav1.IsControlledBy(&p, policy) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b v1alpha1.RepartitionPlan) int {
		return cmp.Or(b.CreationTimestamp.Compare(a.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// conflictingNodes are the pool's nodes another policy selects too, with that policy's name.
func conflictingNodes(policy *v1alpha1.GPUPoolPolicy, selector labels.Selector, c *Cluster) map[string]string {
	out := map[string]string{}
	for _, other := range c.Policies {
		if other.Name == policy.Name {
			continue
		}
		sel, err := other.Spec.NodeSelector.Selector()
		if err != nil {
			continue
		}
		for _, n := range c.Nodes {
			set := labels.Set(n.Labels)
			if selector.Matches(set) && sel.Matches(set) {
				out[n.Name] = other.Name
			}
		}
	}
	return out
}

// ConflictMessage is the Conflict condition's message: the nodes two policies select.
func ConflictMessage(conflicts map[string]string) string {
	names := make([]string, 0, len(conflicts))
	for n, p := range conflicts {
		names = append(names, n+" (also policy "+p+")")
	}
	slices.Sort(names)
	if len(names) > 5 {
		names = append(names[:5], fmt.Sprintf("and %d more", len(names)-5))
	}
	return "nodes selected by two policies are left alone by both: " + strings.Join(names, ", ")
}

// frozenNodes are the nodes the planner must not change now, and how many of the pool's
// nodes executing plans are changing.
func frozenNodes(policy *v1alpha1.GPUPoolPolicy, c *Cluster, conflicts map[string]string, window time.Duration,
	now time.Time) (map[string]string, InFlight) {
	frozen := map[string]string{}
	for n, other := range conflicts {
		frozen[n] = "also selected by policy " + other
	}
	var flying InFlight
	for _, p := range c.Plans {
		for _, step := range p.Spec.Steps {
			// A node whose step failed waits, longer after each failure, before it is planned
			// again: a node mig-manager cannot configure is not drained again and again.
			if until, failures := FailureBackoff(c.Plans, step.Node, window, now); !until.IsZero() {
				frozen[step.Node] = fmt.Sprintf("its reconfiguration failed %d time(s) in the last day; next try after %s",
					failures, until.UTC().Format(time.RFC3339))
			}
		}
	}
	for _, p := range c.Plans {
		running := p.Status.Phase.Running()
		for _, step := range p.Spec.Steps {
			var st *v1alpha1.NodeStepStatus
			for i := range p.Status.Nodes {
				if p.Status.Nodes[i].Node == step.Node {
					st = &p.Status.Nodes[i]
				}
			}
			switch {
			case running && (st == nil || (st.State != v1alpha1.NodeDone && st.State != v1alpha1.NodeFailed)):
				frozen[step.Node] = "plan " + p.Name + " is changing it"
				if p.Spec.Policy == policy.Name && step.Disruptive {
					flying.Disrupting++
				} else if p.Spec.Policy == policy.Name {
					flying.Reconfiguring++
				}
			case st != nil && st.State == v1alpha1.NodeDone && st.LastTransitionTime != nil &&
				now.Sub(st.LastTransitionTime.Time) < window:
				frozen[step.Node] = fmt.Sprintf("changed by plan %s %s ago, within the stabilization window %s",
					p.Name, now.Sub(st.LastTransitionTime.Time).Round(time.Second), window)
			}
		}
	}
	return frozen, flying
}

// placeable keeps the pending pods that could run on some node of the pool: demand elsewhere
// is another policy's (or nobody's) business.
func placeable(reqs []demand.Request, selector labels.Selector, nodes []corev1.Node) []demand.Request {
	var out []demand.Request
	for _, r := range reqs {
		for i := range nodes {
			if !selector.Matches(labels.Set(nodes[i].Labels)) {
				continue
			}
			if ok, _ := r.Matches(&nodes[i]); ok {
				out = append(out, r)
				break
			}
		}
	}
	return out
}
