// Package inventory turns Nodes, GPUNodes, Pods and PodDisruptionBudgets into a snapshot the
// planner can reason about: per node what is free for every resource, which GPUs it has with
// their current MIG layouts and instance placements, which pod holds which GPU, and whether
// each pod may be evicted. It makes no client calls; the controller and the offline CLI feed it
// the objects they read.
package inventory

import (
	"cmp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/mig"
)

// Options are the policy settings and clock that decide what Build reports.
type Options struct {
	// Now is the time the snapshot is taken at; it judges how stale an agent report is.
	Now time.Time
	// MaxReportAge is how old a GPUNode report may be before its node is not planned;
	// zero disables the check (offline what-if on a saved snapshot).
	MaxReportAge time.Duration
	// Heartbeats are, per node name, when its agent was last known alive: its heartbeat Lease's
	// last renewal, or its pod's readiness (ReadinessHeartbeats). An agent with either writes
	// its report only when the GPUs change, so the report is as old as the last change and the
	// heartbeat says whether the agent still stands by it: a report's age is judged from the
	// later of its observedTime and the node's heartbeat.
	Heartbeats map[string]time.Time
	// EvictEmptyDir allows evicting pods with emptyDir volumes.
	EvictEmptyDir bool
	// EvictUnmanaged allows evicting pods that no controller recreates.
	EvictUnmanaged bool
	// DrainTimeout is the policy's drainTimeout (EvictionRules.DrainTimeout); zero checks nothing.
	DrainTimeout time.Duration
	// DeviceHolders are the devices NVIDIA's DRA driver allocated, by UUID (DRAHolders): such
	// an instance or GPU is busy, held by its claim's pod, whatever the agent attributed.
	DeviceHolders map[string]DeviceHolder
	// DynamicMIGNodes are the nodes where NVIDIA's DRA driver carves MIG instances itself
	// (DynamicMIGNodes): the planner must leave them alone.
	DynamicMIGNodes map[string]bool
	// DRAPublished are, per node, the MIG devices NVIDIA's DRA driver publishes (DRAPublished);
	// a node whose slices disagree with its report gets Node.DRAStale.
	DRAPublished map[string]map[string]bool
}

// Snapshot is the state of the GPU nodes at one moment.
type Snapshot struct {
	// Nodes sorted by name.
	Nodes []*Node
	// DisruptionsAllowed is, per PodDisruptionBudget ("namespace/name"), how many of its pods
	// may be evicted now.
	DisruptionsAllowed map[string]int32
}

// Node is one node as the planner sees it.
type Node struct {
	// Name of the node.
	Name string
	// Object is the Node itself, for label, affinity and taint matching.
	Object *corev1.Node
	// Allocatable is what the scheduler may hand out on the node.
	Allocatable corev1.ResourceList
	// Requested is what the pods bound to the node request, counted as the scheduler does.
	Requested corev1.ResourceList
	// GPUs on the node, by index, from the agent's GPUNode report.
	GPUs []*GPU
	// Pods bound to the node and not finished, sorted by namespace/name.
	Pods []*Pod
	// Blocker says why the planner must leave the node alone; empty when it may plan it.
	Blocker string
	// DRAStale says how the MIG devices NVIDIA's DRA driver publishes for the node differ from
	// what NVML reports (its kubelet plugin has not restarted since a re-carve); "" when they
	// agree or the driver is not there.
	DRAStale string
	// DRA is true when NVIDIA's DRA driver publishes the node's GPUs (ResourceSlices of
	// gpu.nvidia.com for its pool): pods asking through claims can run there, pods asking the
	// device plugin cannot.
	DRA bool
	// Unreported is true when the Blocker is the agent's report: missing, NVML not ready, or
	// older than MaxReportAge. Such nodes are counted in the pool's status, so that a pool whose
	// agents fall silent says so instead of planning a shrinking set of nodes in silence.
	Unreported bool
}

// GPU is one GPU and what runs on it.
type GPU struct {
	// Index as NVML numbers it.
	Index int
	// Product is its MIG geometry; nil when neither the built-in table nor the agent's report
	// describes it.
	Product *mig.Product
	// ProductName as reported.
	ProductName string
	// MIGEnabled is the current MIG mode.
	MIGEnabled bool
	// Instances are the GPU instances, sorted by placement.
	Instances []Instance
	// Pods holding the whole GPU or any of its instances, sorted.
	Pods []types.NamespacedName
	// Error is set when the agent could not read this GPU; such a GPU is never changed.
	Error string
	// TableDiff says where the agent's NVML profile table disagrees with the built-in one for
	// the product (mig.TableDiff, joined); "" when they agree or the agent sent none. Product
	// is the agent's table either way: the device is the authority.
	TableDiff string
	// NoBuiltinTable is set when the agent reported a profile table for a product the
	// built-in table lacks, which is then planned from the report alone.
	NoBuiltinTable bool
	// DRAHeld says why a ResourceClaim holds the GPU although no instance or pod the agent
	// reports shows it: a whole GPU allocated to a claim whose pod has not started, or a
	// device allocated on the GPU that the report does not list (a slice of an older
	// generation, an instance since replaced). Such a GPU is busy and never changed; "" when
	// no claim holds it that way.
	DRAHeld string
}

// Instance is a GPU instance at its real placement.
type Instance struct {
	mig.Instance
	// Pod holding the instance, if any.
	Pod *types.NamespacedName
	// Busy is true when a pod or a process uses it.
	Busy bool
}

// Pod is a pod bound to a node.
type Pod struct {
	// Key is namespace/name.
	Key types.NamespacedName
	// UID of the pod, recorded in a plan's evictions.
	UID types.UID
	// Requests as the scheduler counts them.
	Requests corev1.ResourceList
	// Priority of the pod.
	Priority int32
	// Evictable is true when gpupool may evict the pod.
	Evictable bool
	// Blocker says why the pod may not be evicted; empty when it may.
	Blocker string
	// PDBs covering the pod ("namespace/name"); each eviction spends one of their budgets.
	PDBs []string
	// NodeLocal is true for DaemonSet and static (mirror) pods: they belong to the node, a
	// drain leaves them (kubectl drain ignores them too) and they come back with the node after
	// a reboot. Every other pod dies with the node if mig-manager reboots it (see the planner's
	// Input.MIGManagerReboot).
	NodeLocal bool
	// NodeSelector, RequiredAffinity and Tolerations are the pod's placement rules: the
	// replacement its controller makes from the same template lands only where they hold.
	NodeSelector     map[string]string
	RequiredAffinity *corev1.NodeSelector
	Tolerations      []corev1.Toleration
}

// MayRunOn says whether the pod's placement rules let its replacement run on node (resources
// aside), as demand.Request.Matches judges a pending pod.
func (p *Pod) MayRunOn(node *corev1.Node) bool {
	ok, _ := demand.Request{NodeSelector: p.NodeSelector, RequiredAffinity: p.RequiredAffinity, Tolerations: p.Tolerations}.Matches(node)
	return ok
}

// Layout is the GPU's current multiset of MIG profiles; empty when MIG is off.
func (g *GPU) Layout() mig.Layout {
	l := mig.Layout{}
	for _, in := range g.Instances {
		l[in.Profile]++
	}
	return l
}

// Busy reports whether any pod, process or DRA claim uses the GPU.
func (g *GPU) Busy() bool {
	if len(g.Pods) > 0 || g.DRAHeld != "" {
		return true
	}
	for _, in := range g.Instances {
		if in.Busy {
			return true
		}
	}
	return false
}

// FreeInstances counts, per profile, the instances no pod or process uses.
func (g *GPU) FreeInstances() map[string]int {
	free := map[string]int{}
	for _, in := range g.Instances {
		if !in.Busy && in.Pod == nil {
			free[in.Profile]++
		}
	}
	return free
}

// Pod returns the node's pod with that key, or nil.
func (n *Node) Pod(key types.NamespacedName) *Pod {
	i, found := slices.BinarySearchFunc(n.Pods, key, func(p *Pod, k types.NamespacedName) int {
		return cmp.Or(cmp.Compare(p.Key.Namespace, k.Namespace), cmp.Compare(p.Key.Name, k.Name))
	})
	if !found {
		return nil
	}
	return n.Pods[i]
}

// Free is allocatable minus requested for one resource, never negative.
func (n *Node) Free(name corev1.ResourceName) int64 {
	return max(0, demand.Quantity(n.Allocatable, name)-demand.Quantity(n.Requested, name))
}
