// Package placement plans moves of claim pods on GPUs that NVIDIA's DRA driver serves in its
// DynamicMIG mode. There the driver carves an instance when a claim is allocated and destroys
// it when the claim goes, and the scheduler's allocator takes the first partition device whose
// counters are free (dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/partitions.go publishes one
// device per profile and placement): a live instance never moves, so capacity strands by
// placement (dra-driver-nvidia-gpu#933). Plan opens one placement per node for a pending claim
// by moving only the claim pods in its way, each to a landing that is free before it is
// evicted.
//
// The package is pure and deterministic: its own small model in, a plan out, no client calls
// and no clock, so the policy controller and the fragmentation benchmark call the same
// function. internal/mig owns the geometry (mig.Product placements, exactly NVIDIA's).
package placement

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/mig"
)

// Unlimited, as a Budget bound, means no bound.
const Unlimited = -1

// Input is one planning pass over the DynamicMIG GPUs of a pool.
type Input struct {
	// GPUs are the pool's DynamicMIG GPUs, any order; a node is the set of GPUs naming it.
	GPUs []GPU
	// Pending are the pending claims to open a placement for, any order: Plan serves higher
	// priority first, then larger profiles, then by claim name.
	Pending []Claim
	// Budget bounds the plan as a whole.
	Budget Budget
	// Options tune the search; the zero value is the controller's behaviour.
	Options Options
}

// GPU is one DynamicMIG GPU as the allocator sees it.
type GPU struct {
	// Node is the node's name (the driver's pool); Index the GPU's index as NVML numbers it.
	Node  string
	Index int
	// Product is the GPU's MIG geometry; a GPU without one is never planned on.
	Product *mig.Product
	// Holders are the claims' devices (and instances no claim explains) holding memory
	// slices, any order.
	Holders []Holder
	// Partitions are the partition devices the driver publishes for the GPU, with their
	// device names and the counters each consumes besides memory slices. Nil means every
	// allowed placement of every profile of Product, unnamed and without counters (the
	// benchmark's GPUs); when set, a profile goes only where a partition is published.
	Partitions []Partition
	// FreeCounters are what the allocated devices leave of the GPU's counters other than
	// memory slices (multiprocessors, engines); nil when they are not modelled, and then
	// only memory slices and the product's own limits (mig.Product.Validate) decide.
	FreeCounters map[string]int64
}

// Partition is one device of the driver: one profile at one placement.
type Partition struct {
	Profile   string
	Placement mig.Placement
	// Device is the driver's device name; "" where the caller does not render names.
	Device string
	// Counters are what the device consumes besides memory slices; nil when not modelled.
	Counters map[string]int64
}

// Holder is one claim's device, or an instance no claim explains, holding memory slices.
type Holder struct {
	// Claim is the ResourceClaim ("namespace/name"), "" for an instance no claim explains
	// (which never moves: no eviction frees it).
	Claim     string
	Profile   string
	Placement mig.Placement
	// Device is the partition device allocated, when known.
	Device string
	// Pods are the pods the claim is reserved for. The claim's slices are freed only when
	// every one of them is evicted (the claim is deallocated once nothing reserves it), so a
	// holder moves with all its pods or not at all; a holder without pods never moves.
	Pods []Pod
	// Nodes are where the claim's replacement may be allocated (the pods' node affinity and
	// the claim's selectors); nil means any node of the input.
	Nodes []string
}

// Pod is a pod a moved claim's eviction affects, with what it costs to move it.
type Pod struct {
	Name types.NamespacedName
	UID  types.UID
	// DoNotDisrupt pods are never evicted.
	DoNotDisrupt bool
	// Priority is the pod's priority; lower-priority pods are moved first.
	Priority int32
	// Controlled is true when a controller (ReplicaSet, Job, StatefulSet, ...) recreates the
	// pod after its eviction; a pod without one is gone for good, so it is never moved
	// unless Options.MoveUncontrolled says so.
	Controlled bool
	// Blocker, when set, says why the pod may never be evicted beside DoNotDisrupt and
	// Controlled (an emptyDir whose data would be lost, a claim shared with pods elsewhere,
	// ...), in words for the Unplanned message.
	Blocker string
	// PDBs name the PodDisruptionBudgets selecting the pod (any stable key, e.g.
	// "namespace/name"), each consuming one of Budget.PDBAllowed per pod evicted.
	PDBs []string
}

// Claim is a pending claim that needs one MIG instance of Profile.
type Claim struct {
	// Claim is the ResourceClaim ("namespace/name"); Pod the pod waiting for it.
	Claim string
	Pod   types.NamespacedName
	// Profile is the MIG profile the claim's request selects, in any spelling the product
	// resolves.
	Profile string
	// Nodes are the nodes the pod may run on; nil means any node of the input.
	Nodes []string
	// Priority is the pod's priority.
	Priority int32
}

// Budget bounds the plan as a whole.
type Budget struct {
	// MaxNodes is how many nodes the plan may open a placement on (each is a disrupted node);
	// Unlimited for no bound.
	MaxNodes int
	// MaxEvictions is how many pods the plan may evict in all; Unlimited for no bound.
	MaxEvictions int
	// PDBAllowed is, per PodDisruptionBudget key, how many more pods it allows to be
	// disrupted now; a pod naming a key not in the map is not moved.
	PDBAllowed map[string]int
}

// Options tune the search.
type Options struct {
	// MoveUncontrolled allows moving pods no controller recreates (benchmarks model every pod
	// as recreated). The controller leaves it false.
	MoveUncontrolled bool
	// SameNodeOnly keeps every landing on the node of its opening.
	SameNodeOnly bool
	// MaxMovesPerOpening bounds the claims moved for one opening; 0 means 7, every instance
	// an 8-slice GPU can hold, so that a whole-GPU claim can be opened on a GPU of small
	// ones when the budgets allow it (the budgets, not this bound, limit the disruption).
	MaxMovesPerOpening int
	// MaxWork bounds the landing tries and candidate openings of one call, so that a pass
	// over a large pool takes bounded time; 0 means defaultMaxWork. Claims left when it is
	// spent are answered with WhyBudget.
	MaxWork int
}

// Result is the plan.
type Result struct {
	// Openings are at most one per node, sorted by node.
	Openings []Opening
	// Unplanned are the pending claims the plan opens nothing for, each with why, in the
	// order Plan considered them.
	Unplanned []Unplanned
}

// Opening is the placement the plan frees on one GPU for one pending claim.
type Opening struct {
	Node      string
	GPU       int
	Profile   string // the product's canonical name
	Placement mig.Placement
	// Device is the partition the claim is expected to be allocated ("" when unnamed).
	Device string
	Claim  Claim
	// Moves are the claims moved out of the way, each with its landing, by placement.
	Moves []Move
	// KeepFree are the partitions of the GPU that overlap the opened slices, which must be
	// kept from the allocator while the claims move; never the claim's own partition.
	KeepFree []Partition
	// GPUs are the node's GPUs whose profile counts the plan changes (the opened GPU, and
	// any GPU of the node a moved claim lands on), by index.
	GPUs []GPUChange
}

// Move is a claim moved out of an opening, with all its pods.
type Move struct {
	Holder  Holder
	Landing Landing
	// Reason says why, e.g. "holds 1g.18gb at memory slice 1 of GPU 0, in the way of 3g.71gb".
	Reason string
}

// Landing is where a moved claim's replacement is expected to be allocated: free before the
// eviction, inside no opening of the plan, and used by no other move.
type Landing struct {
	Node      string
	GPU       int
	Placement mig.Placement
	Device    string
}

// GPUChange is one GPU's MIG profile counts before and after the plan.
type GPUChange struct {
	Index    int
	From, To mig.Layout
}

// Why says why a pending claim gets no opening.
type Why string

// Reasons a pending claim gets no opening.
const (
	// WhyFitsNow: a free placement already takes it; the allocator should place it.
	WhyFitsNow Why = "FitsNow"
	// WhyNoProfile: no GPU the pod may use has the profile (or publishes a partition of it).
	WhyNoProfile Why = "NoProfile"
	// WhyProtected: every placement is held by a claim whose pods may not move
	// (do-not-disrupt, a PodDisruptionBudget, no controller) or by an instance no claim
	// explains.
	WhyProtected Why = "Protected"
	// WhyNoLanding: the claims in the way have nowhere free to go.
	WhyNoLanding Why = "NoLanding"
	// WhyBudget: the nodes or evictions the plan may still use do not suffice.
	WhyBudget Why = "Budget"
	// WhyNodeTaken: the only placements are on nodes where the plan already opens one, or
	// overlap a landing of the plan.
	WhyNodeTaken Why = "NodeTaken"
)

// Unplanned is a pending claim without an opening.
type Unplanned struct {
	Claim   Claim
	Why     Why
	Message string
}
