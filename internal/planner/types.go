// Package planner decides new MIG layouts for a pool of GPU nodes from pending demand, running
// pods and a policy. It is pure and deterministic: a snapshot in, a plan out, no client calls,
// no clock reads and no globals, so that the controller, the offline CLI and the trace-driven
// benchmark all call the same function.
//
// Objectives, in order (docs/architecture.md, "The planner's objectives"):
// safety (every target layout has a valid slot
// placement; no GPU with a pod changes unless that pod may be evicted; budgets and PDBs hold),
// most pending demand served (higher priority first, whole-pod fit), standby shapes, least
// disruption (pods evicted, then GPUs changed, then nodes touched), least stranded capacity.
package planner

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
)

// Input is everything one planning pass looks at.
type Input struct {
	// Snapshot is the state of the nodes (all nodes the caller read; the policy's
	// nodeSelector picks the pool).
	Snapshot *inventory.Snapshot
	// Pending is the pending GPU demand, as demand.Pending returns it.
	Pending []demand.Request
	// Policy is the pool's policy; its spec decides the pool, catalog, shapes and budget.
	Policy *v1alpha1.GPUPoolPolicy
	// Frozen names nodes the planner must not change, with why: nodes another policy also
	// selects, nodes inside the stabilisation window, nodes an executing plan is changing.
	Frozen map[string]string
	// InFlightDisrupting is how many of the pool's nodes executing plans are changing now with
	// evictions; they count against maxDisruptedNodes.
	InFlightDisrupting int
	// InFlightReconfiguring is how many of the pool's nodes executing plans are re-carving now
	// without evicting; they count against maxReconfiguringNodes.
	InFlightReconfiguring int
	// EvictionsPaused, when set, says why the planner may evict no pod in this pass (the
	// policy's hourly bound on disruptive steps is spent); plans then only re-carve idle GPUs.
	EvictionsPaused string
	// DisruptiveStepsLeft, when set, caps how many node steps that evict pods the plan may hold:
	// what is left of the policy's maxDisruptiveStepsPerHour (pool.DisruptiveStepsLeft). Nil
	// means no hourly cap beyond maxDisruptedNodes.
	DisruptiveStepsLeft *int
	// MIGManagerReboot is what the GPU Operator's ClusterPolicy says of mig-manager rebooting
	// a node whose MIG mode change fails; the zero value, RebootUnknown, assumes a reboot
	// wherever a toggle needs a GPU reset. A step that toggles MIG mode where a reboot may
	// follow is planned only while nothing but the step's evictions and DaemonSet or static
	// pods runs on the node: a reboot kills every pod there, not only those on changed GPUs.
	MIGManagerReboot MIGManagerReboot
	// AllowMPS lets the planner share whole GPUs with MPS where the catalog allows it. Leave it
	// false on clusters of NVIDIA's GPU Operator with the mixed MIG strategy, which gpupool needs:
	// the operator passes the strategy to every device plugin, and the device plugin refuses to
	// start with MPS under it ("using --mig-strategy=mixed is not supported with MPS",
	// NVIDIA/k8s-device-plugin cmd/nvidia-device-plugin/main.go validateFlags), so the node would
	// advertise no GPU at all. Time-slicing is used instead where the catalog allows it.
	AllowMPS bool
	// NoMoves makes every evicted pod come back on its own node, as planners before cross-node
	// moves did. The controller never sets it; benchmarks set it to measure what moves add.
	NoMoves bool
	// MaxSteps bounds how many nodes the plan changes in all, beside both budgets; 0 means no
	// bound beyond them. PlanWithin sets it to keep a plan within what the API server stores.
	MaxSteps int
	// Now is the planning time (carried into the result, never read from a clock).
	Now time.Time
}

// MIGManagerReboot says whether NVIDIA's mig-manager reboots a node when it cannot change a
// GPU's MIG mode. mig-manager (mig-parted pkg/mig/reconfigure/reconfigure.go, Run) runs
// "mig-parted apply --mode-only" and, when that or the assertion after it fails for any reason
// and it runs with --with-reboot (env WITH_REBOOT, cmd/nvidia-mig-manager/main.go), labels
// the node rebooting and reboots the host. The mode apply fails whenever a GPU the change
// must clear or reset is in use: it destroys every MIG instance of every MIG-enabled GPU of
// the node and, when a mode change stays pending (GPUs that need a reset to toggle: Ampere,
// A100 and A30), resets every GPU of the node with nvidia-smi -r
// (cmd/nvidia-mig-parted/apply/mode.go ApplyMigMode, util/device.go ResetAllGPUs), which
// also fails while nvidia_drm or another host client holds a GPU (mig-parted issue 181).
// The GPU Operator sets WITH_REBOOT only from ClusterPolicy spec.migManager.env
// (gpu-operator controllers/object_controls.go TransformMIGManager; its DaemonSet asset and
// Helm values set none), so by default mig-manager never reboots.
type MIGManagerReboot int

// What gpupool knows of mig-manager's reboots.
const (
	// RebootUnknown: no ClusterPolicy was read. A toggle on GPUs that need a reset may reboot
	// (the reset is what fails in practice); on later GPUs it is taken not to.
	RebootUnknown MIGManagerReboot = iota
	// RebootNever: mig-manager runs without WITH_REBOOT; a failed mode change fails the step.
	RebootNever
	// RebootOnFailure: WITH_REBOOT is set; any MIG mode toggle may reboot the node.
	RebootOnFailure
)

// Reason says why a pending pod is not served by the plan.
type Reason string

// Reasons a pending pod stays unserved.
const (
	// ReasonPartitionShape: no GPU the pod may use can be partitioned into what it asks for
	// (profile not in the catalog, unknown on the product, or more instances than a node holds).
	ReasonPartitionShape Reason = "PartitionShape"
	// ReasonNodePlacement: nodes with a suitable GPU lack the pod's CPU, memory or other
	// resources.
	ReasonNodePlacement Reason = "NodePlacement"
	// ReasonCapacity: suitable nodes exist but their GPUs are taken by running pods or by
	// demand served first.
	ReasonCapacity Reason = "Capacity"
	// ReasonDisruption: serving the pod needs evictions or node changes that the budget, the
	// approval mode, PodDisruptionBudgets or do-not-disrupt forbid.
	ReasonDisruption Reason = "Disruption"
	// ReasonNotInPool: no node of the pool matches the pod's node selector, affinity or
	// tolerations.
	ReasonNotInPool Reason = "NotInPool"
)

// Result is one planning pass's outcome.
type Result struct {
	// Steps are the per-node changes, sorted by node name; empty when nothing should change.
	Steps []Step
	// Served are the pending pods expected to run once the plan is done.
	Served []types.NamespacedName
	// FitsNow are pending pods that already fit the current layouts; the scheduler should
	// place them without any change (a device plugin or scheduler lag, not fragmentation).
	FitsNow []types.NamespacedName
	// Unserved are the pending pods the plan cannot serve, each with why.
	Unserved []Unserved
	// SlicesGained counts, per MIG profile, instances the plan adds minus those it removes.
	SlicesGained map[string]int
	// StrandedBefore and StrandedAfter count, per MIG profile, free instances that neither
	// pending demand nor standby shapes can use, before and after the plan.
	StrandedBefore, StrandedAfter map[string]int
	// Budget is how many nodes with evictions the plan could change (maxDisruptedNodes minus
	// those in flight, and no more than what is left of maxDisruptiveStepsPerHour).
	Budget int
	// BudgetByHourlyCap is true when what is left of maxDisruptiveStepsPerHour, not
	// maxDisruptedNodes, set Budget.
	BudgetByHourlyCap bool
	// ReconfigureBudget is how many nodes without evictions the plan could change
	// (maxReconfiguringNodes minus those in flight).
	ReconfigureBudget int
	// PoolNodes is how many nodes the policy selects.
	PoolNodes int
	// StepBound is the bound on the plan's steps that PlanWithin applied so that the plan can
	// be stored; 0 when the plan was not cut. Demand it leaves is planned after the plan runs.
	StepBound int
}

// Step is the change on one node.
type Step struct {
	// Node is the node's name.
	Node string
	// Product is the node's GPU product, for messages.
	Product string
	// GPUs whose layout changes, by index; MIG disabled is the empty layout.
	GPUs []GPUChange
	// Target is the node's complete target, every GPU by index, changed or not, because a
	// mig-parted config entry describes the whole node.
	Target []mig.GPUTarget
	// Evictions are the pods that must leave the node first.
	Evictions []Eviction
	// Sharing is the node's new device-plugin sharing setting; nil when it does not change.
	Sharing *v1alpha1.SharingConfig
	// WaitsFor names the nodes whose steps must be done before this one starts, sorted: the
	// nodes its evicted pods land on when those change too (their landing is carved first),
	// and the nodes whose evicted pods land here (they move before this node is cordoned).
	WaitsFor []string
	// RebootRisk says why mig-manager may reboot the node for this step (it changes a GPU's
	// MIG mode where a failure reboots the host, see MIGManagerReboot); "" when it may not.
	// The step was planned only while no pod but its evictions and DaemonSet or static pods
	// ran there, and execution checks that again before the node is cordoned.
	RebootRisk string
}

// GPUChange is one GPU's layout change.
type GPUChange struct {
	Index    int
	From, To mig.Layout
}

// Eviction is a pod a step evicts, with why.
type Eviction struct {
	Pod types.NamespacedName
	// UID is the pod's UID, so that execution evicts only this very pod.
	UID    types.UID
	Reason string
	// Landing is the node where the pod's replacement is expected to run: the step's own node,
	// or another pool node with room for it that no pod the plan serves counts on.
	Landing string
}

// Unserved is a pending pod the plan does not serve.
type Unserved struct {
	Pod     types.NamespacedName
	Reason  Reason
	Message string
}

// Moves counts the evictions whose replacements land on another node.
func (r *Result) Moves() int {
	n := 0
	for _, s := range r.Steps {
		for _, e := range s.Evictions {
			if e.Landing != s.Node {
				n++
			}
		}
	}
	return n
}

// Disruptive reports whether any step evicts a pod.
func (r *Result) Disruptive() bool {
	for _, s := range r.Steps {
		if len(s.Evictions) > 0 {
			return true
		}
	}
	return false
}
