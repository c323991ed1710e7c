package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ApprovalMode says who may start a disruptive plan.
// +kubebuilder:validation:Enum=Manual;AutoIdle;Auto
type ApprovalMode string

const (
	// ApprovalManual waits for a human to annotate each plan with gpupool.io/approve.
	ApprovalManual ApprovalMode = "Manual"
	// ApprovalAutoIdle applies plans that evict no running pod without asking, and never plans
	// an eviction: pending pods that only an eviction would serve are reported unserved with
	// reason Disruption.
	ApprovalAutoIdle ApprovalMode = "AutoIdle"
	// ApprovalAuto applies every plan that stays within the disruption budget.
	ApprovalAuto ApprovalMode = "Auto"
)

// GPUPoolPolicySpec is the user's intent for one pool of GPU nodes.
// +kubebuilder:validation:XValidation:rule="(has(self.nodeSelector.matchLabels) && self.nodeSelector.matchLabels.exists(k, !(k in ['kubernetes.io/os', 'kubernetes.io/arch', 'beta.kubernetes.io/os', 'beta.kubernetes.io/arch']))) || (has(self.nodeSelector.matchExpressions) && self.nodeSelector.matchExpressions.exists(e, (e.operator == 'In' && !(e.key in ['kubernetes.io/os', 'kubernetes.io/arch', 'beta.kubernetes.io/os', 'beta.kubernetes.io/arch'])) || (e.operator == 'Exists' && !(e.key in ['kubernetes.io/hostname', 'kubernetes.io/os', 'kubernetes.io/arch', 'beta.kubernetes.io/os', 'beta.kubernetes.io/arch']))))",message="nodeSelector must select something: give it a matchLabels entry, or an In or Exists expression, on a label only the pool's nodes carry; an empty selector, one of only NotIn and DoesNotExist expressions, or one naming only the operating system or architecture (or Exists on a label the kubelet sets on every node) would put every node of the cluster in the pool",fieldPath=".nodeSelector"
type GPUPoolPolicySpec struct {
	// NodeSelector selects the nodes of the pool. Two policies selecting one node is a conflict:
	// both report Conflict and neither touches that node.
	NodeSelector PoolSelector `json:"nodeSelector"`

	// Catalog lists, per GPU product, the MIG profiles and sharing modes gpupool may configure.
	// A product missing from the catalog is never reconfigured.
	// +listType=map
	// +listMapKey=product
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Catalog []CatalogEntry `json:"catalog,omitempty"`

	// Shapes are request shapes to keep free as standby headroom, beyond pending demand.
	// +listType=map
	// +listMapKey=resource
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(s, self.exists_one(o, o.resource == s.resource))",message="shapes must be unique per resource"
	// +optional
	Shapes []StandbyShape `json:"shapes,omitempty"`

	// Disruption bounds how plans may disrupt running work and who must approve them.
	// +kubebuilder:default={}
	// +optional
	Disruption DisruptionPolicy `json:"disruption,omitempty"`

	// Planning tunes when the controller plans.
	// +kubebuilder:default={}
	// +optional
	Planning PlanningPolicy `json:"planning,omitempty"`

	// Rightsizing tunes the recommendations made for the pool's GPU workloads (kubectl gpupool
	// rightsize, what-if --rightsized and the manager's metrics). They are recommendations
	// only: no workload is ever changed.
	// +kubebuilder:default={}
	// +optional
	Rightsizing RightsizingPolicy `json:"rightsizing,omitempty"`
}

// RightsizeBasis is the statistic of each pod's GPU memory use that a recommended profile
// must hold, plus headroom.
// +kubebuilder:validation:Enum=P95;Peak
type RightsizeBasis string

const (
	// RightsizeP95 holds the 95th percentile of use, as VPA's memory target does.
	RightsizeP95 RightsizeBasis = "P95"
	// RightsizePeak holds the highest use seen, for workloads that must never run out of
	// memory.
	RightsizePeak RightsizeBasis = "Peak"
)

// RightsizingPolicy tunes the right-sizing recommendations for a pool.
type RightsizingPolicy struct {
	// Basis is the statistic of each pod's GPU memory use a recommended profile must hold:
	// P95, or Peak for workloads that must never run out of memory. kubectl gpupool
	// rightsize --basis overrides it for one run.
	// +kubebuilder:default=P95
	// +optional
	Basis RightsizeBasis `json:"basis,omitempty"`
}

// CatalogEntry is what gpupool may configure on one GPU product.
// +kubebuilder:validation:XValidation:rule="size(self.migProfiles) > 0 || self.allowWholeGPU || has(self.sharing)",message="allow at least one of migProfiles, allowWholeGPU or sharing"
type CatalogEntry struct {
	// Product matches the nvidia.com/gpu.product label (e.g. NVIDIA-H200) or the product name the
	// node agent reads through NVML; a case-insensitive substring match on either.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Product string `json:"product"`

	// MIGProfiles allowed on this product, e.g. 1g.18gb or 3g.71gb.
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:default={}
	// +optional
	MIGProfiles []MIGProfileName `json:"migProfiles"`

	// AllowWholeGPU allows turning MIG off on a GPU to serve whole-GPU requests.
	// +optional
	AllowWholeGPU bool `json:"allowWholeGPU,omitempty"`

	// Sharing lists the sharing modes allowed on this product.
	// +optional
	Sharing *SharingCatalog `json:"sharing,omitempty"`
}

// SharingCatalog lists the replica counts gpupool may choose for each sharing mode.
type SharingCatalog struct {
	// TimeSlicing replica counts allowed (on full GPUs and on MIG devices).
	// +optional
	TimeSlicing *ReplicaChoices `json:"timeSlicing,omitempty"`
	// MPS replica counts allowed (full GPUs only: MPS does not run on MIG devices).
	// +optional
	MPS *MPSReplicaChoices `json:"mps,omitempty"`
}

// ReplicaChoices are time-slicing replica counts.
type ReplicaChoices struct {
	// Replicas each device may be advertised as.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Minimum=2
	// +kubebuilder:validation:items:Maximum=256
	Replicas []int32 `json:"replicas"`
}

// MPSReplicaChoices are MPS replica counts; CUDA MPS serves at most 48 clients per device.
type MPSReplicaChoices struct {
	// Replicas each GPU may be advertised as.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Minimum=2
	// +kubebuilder:validation:items:Maximum=48
	Replicas []int32 `json:"replicas"`
}

// StandbyShape is a request shape kept free as headroom so the next pod of that shape starts
// without waiting for a repartition.
type StandbyShape struct {
	// Resource is the extended resource a pod of this shape requests, e.g.
	// nvidia.com/mig-1g.18gb, nvidia.com/gpu or nvidia.com/gpu.shared. MIG variants are spelled
	// as the device plugin advertises them ("+" becomes "."; k8s-device-plugin
	// internal/rm/rm.go): nvidia.com/mig-1g.24gb.gfx, nvidia.com/mig-1g.24gb.me.all,
	// nvidia.com/mig-1g.24gb-me.
	// +kubebuilder:validation:Pattern=`^nvidia\.com/(gpu|gpu\.shared|mig-[1-7]g\.[0-9]+gb(\.me|\.me\.all|\.gfx|-me)?)$`
	// +kubebuilder:validation:MaxLength=64
	Resource string `json:"resource"`
	// MinFree is how many units of the resource to keep free in the pool.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	MinFree int32 `json:"minFree"`
	// Priority orders standby shapes against each other; pending pods always come first.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Priority int32 `json:"priority,omitempty"`
}

// DisruptionPolicy bounds the disruption a plan may cause.
type DisruptionPolicy struct {
	// Approval says who may start a plan that changes GPU layouts.
	// +kubebuilder:default=Manual
	// +optional
	Approval ApprovalMode `json:"approval,omitempty"`

	// MaxDisruptedNodes is how many nodes where pods are evicted may be changing at once, as a
	// count or a percentage of the pool's nodes (rounded up). Nodes that only re-carve idle
	// GPUs count against maxReconfiguringNodes instead.
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="must be a non-negative count or a percentage between 0% and 100%"
	// +optional
	MaxDisruptedNodes *intstr.IntOrString `json:"maxDisruptedNodes,omitempty"`

	// MaxReconfiguringNodes is how many nodes that evict no pod, only re-carving idle GPUs, may
	// be changing at once, as a count or a percentage of the pool's nodes (rounded up). Such a
	// node is cordoned for the minutes mig-manager takes, but nothing running on it stops.
	// Policies stored before this field existed read it as the default.
	// +kubebuilder:default="50%"
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="must be a non-negative count or a percentage between 0% and 100%"
	// +optional
	MaxReconfiguringNodes *intstr.IntOrString `json:"maxReconfiguringNodes,omitempty"`

	// DrainTimeout is how long a node may take to drain before its step fails.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,5}(\\\\.[0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$') && duration(self) >= duration('1s') && duration(self) <= duration('168h')",message="must be a duration between 1s and 168h, such as 90s, 15m or 2h"
	// +kubebuilder:default="15m"
	// +optional
	DrainTimeout *metav1.Duration `json:"drainTimeout,omitempty"`

	// ConfigureTimeout is how long mig-manager may stay pending before the node's step fails.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,5}(\\\\.[0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$') && duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="must be a duration between 1s and 24h, such as 90s, 15m or 2h"
	// +kubebuilder:default="10m"
	// +optional
	ConfigureTimeout *metav1.Duration `json:"configureTimeout,omitempty"`

	// PlanTTL is how long an unapproved plan waits before it expires.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,5}(\\\\.[0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$') && duration(self) >= duration('1m') && duration(self) <= duration('720h')",message="must be a duration between 1m and 720h, such as 90s, 15m or 2h"
	// +kubebuilder:default="1h"
	// +optional
	PlanTTL *metav1.Duration `json:"planTTL,omitempty"`

	// MaxDisruptiveStepsPerHour bounds how many node steps that evict pods the policy's plans
	// may start in any hour. Once it is spent, plans only re-carve idle GPUs until the hour
	// has passed, so that no combination of demand, faults and Auto approval evicts pods in a
	// loop.
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	// +optional
	MaxDisruptiveStepsPerHour *int32 `json:"maxDisruptiveStepsPerHour,omitempty"`

	// EvictEmptyDir allows evicting pods with emptyDir volumes or generic ephemeral volumes
	// (spec.volumes[].ephemeral, whose claim is deleted with the pod): their data is lost.
	// +optional
	EvictEmptyDir bool `json:"evictEmptyDir,omitempty"`

	// EvictUnmanaged allows evicting pods no controller will recreate.
	// +optional
	EvictUnmanaged bool `json:"evictUnmanaged,omitempty"`
	// KeepFailedNodesCordoned leaves a node whose reconfiguration failed cordoned even when the
	// agent shows every GPU with a whole layout. By default such a node is reopened, and only a
	// node with a possibly half-configured GPU stays cordoned.
	// +optional
	KeepFailedNodesCordoned bool `json:"keepFailedNodesCordoned,omitempty"`

	// Windows are the maintenance windows in which a node step that evicts pods may start.
	// Without windows such a step may start at any time. With windows it starts only while one
	// of them is open; a step already started runs to completion even after its window closes
	// (stopping half-way could leave a GPU half-configured). Steps that only re-carve idle
	// GPUs evict nothing and are not held by windows. An approved plan waits for the next
	// window (its WithinMaintenanceWindow condition says when that opens) and does not expire
	// meanwhile: planTTL only bounds the wait for approval.
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	// +optional
	Windows []MaintenanceWindow `json:"windows,omitempty"`
}

// MaintenanceWindow is a recurring span of time: it opens at each time its cron schedule names
// and stays open for its duration, like the schedule and duration of karpenter's NodePool
// disruption budgets (sigs.k8s.io/karpenter pkg/apis/v1/nodepool.go, Budget).
type MaintenanceWindow struct {
	// Schedule is when the window opens, in standard cron syntax: five fields (minute, hour,
	// day of month, month, day of week), e.g. "0 2 * * 6" for 02:00 every Saturday, or one of
	// @yearly, @monthly, @weekly, @daily, @hourly. It is read in timeZone. @every and a
	// TZ= or CRON_TZ= prefix are not accepted: the window must be anchored to the clock, and
	// the time zone is set in timeZone.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^(@(annually|yearly|monthly|weekly|daily|midnight|hourly)|\S+\s+\S+\s+\S+\s+\S+\s+\S+)$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('TZ=')",message="set the time zone in timeZone, not with a TZ= or CRON_TZ= prefix"
	// +required
	Schedule string `json:"schedule"`

	// Duration is how long the window stays open after each start, between 1m and 168h
	// (cron names minutes, so shorter windows could be missed).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,5}(\\\\.[0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$') && duration(self) >= duration('1m') && duration(self) <= duration('168h')",message="must be a duration between 1m and 168h, such as 30m, 4h or 48h"
	// +required
	Duration metav1.Duration `json:"duration"`

	// TimeZone is the IANA time zone the schedule is read in, e.g. Europe/Berlin; UTC when
	// empty. In a zone with daylight saving time, a start in the hour the clock skips does not
	// happen that day, and one in the hour the clock repeats happens at both occurrences.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_+/-]*$`
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// PlanningPolicy tunes when the controller plans.
type PlanningPolicy struct {
	// MinPendingAge ignores pods pending for less than this, which the scheduler may still place.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,5}(\\\\.[0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$') && duration(self) >= duration('0s') && duration(self) <= duration('24h')",message="must be a duration between 0s and 24h, such as 90s, 15m or 2h"
	// +kubebuilder:default="30s"
	// +optional
	MinPendingAge *metav1.Duration `json:"minPendingAge,omitempty"`

	// StabilizationWindow is the least time between two plans touching one node.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,5}(\\\\.[0-9]{1,9})?(ns|us|µs|ms|s|m|h)){1,4}$') && duration(self) >= duration('0s') && duration(self) <= duration('24h')",message="must be a duration between 0s and 24h, such as 90s, 15m or 2h"
	// +kubebuilder:default="2m"
	// +optional
	StabilizationWindow *metav1.Duration `json:"stabilizationWindow,omitempty"`

	// Paused stops planning; plans already executing run to completion.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// GPUPoolPolicyStatus is what the controller observes of the pool.
type GPUPoolPolicyStatus struct {
	// ObservedGeneration is the spec generation this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, DemandSatisfied, AwaitingApproval, Reconfiguring, Degraded,
	// GPUOperatorConfigured, Conflict, SpecValid, MIGTablesMatch and DRASlicesCurrent.
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// Pool summarises the pool's nodes, GPUs and MIG slices.
	// +optional
	Pool PoolStatus `json:"pool,omitempty"`

	// PendingPods counts the pods waiting for GPU resources of this pool.
	// +optional
	PendingPods int32 `json:"pendingPods"`

	// Demand is the pending demand per request shape.
	// +listType=map
	// +listMapKey=resource
	// +optional
	Demand []ShapeDemand `json:"demand,omitempty"`

	// CurrentPlan names the RepartitionPlan now awaiting approval or executing.
	// +optional
	CurrentPlan string `json:"currentPlan,omitempty"`
}

// PoolStatus summarises a pool's capacity.
type PoolStatus struct {
	// Nodes in the pool.
	Nodes int32 `json:"nodes"`
	// GPUs in the pool.
	GPUs int32 `json:"gpus"`
	// GPUsByProduct counts GPUs per product name.
	// +optional
	GPUsByProduct map[string]int32 `json:"gpusByProduct,omitempty"`
	// Slices per MIG profile.
	// +listType=map
	// +listMapKey=profile
	// +optional
	Slices []ProfileSlices `json:"slices,omitempty"`
	// StrandedSlices counts the pool's stranded free MIG instances, whatever their size (a free
	// 3g instance counts one, as a 1g does): the sum of slices[].stranded, and of the
	// gpupool_stranded_slices metric.
	// +optional
	StrandedSlices int32 `json:"strandedSlices"`
	// UnreportedNodes counts the pool's nodes left out of planning because their agent's GPU
	// report is missing, cannot read NVML, or is older than two minutes (the agent refreshes it
	// every 30 s by default).
	// Their GPUs are not in GPUs or Slices. Degraded is True while it is above zero.
	// +optional
	UnreportedNodes int32 `json:"unreportedNodes,omitempty"`
}

// ProfileSlices counts the instances of one MIG profile in a pool.
type ProfileSlices struct {
	// Profile is the MIG profile name.
	Profile string `json:"profile"`
	// Total instances configured.
	Total int32 `json:"total"`
	// Used instances, held by a pod.
	Used int32 `json:"used"`
	// Free instances.
	Free int32 `json:"free"`
	// Stranded free instances that no pending pod or standby shape can use, counted in
	// instances like Total, Used and Free. Instances of nodes that share their GPUs
	// (time-slicing) are never stranded: they are replicas of the shared resource.
	Stranded int32 `json:"stranded"`
}

// ShapeDemand is the pending demand for one request shape.
type ShapeDemand struct {
	// Resource is the extended resource requested.
	Resource string `json:"resource"`
	// PendingPods asking for it.
	PendingPods int32 `json:"pendingPods"`
	// FeasibleNodes could host one such pod after a repartition.
	FeasibleNodes int32 `json:"feasibleNodes"`
	// EligibleNodes are in the pool and match the pods' placement constraints.
	EligibleNodes int32 `json:"eligibleNodes"`
}

// GPUPoolPolicy declares a pool of GPU nodes, what may be configured on them and how much
// disruption repartitioning may cause.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=gpp,categories=gpupool
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.pool.nodes`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.status.pool.gpus`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pendingPods`
// +kubebuilder:printcolumn:name="Stranded",type=integer,JSONPath=`.status.pool.strandedSlices`
// +kubebuilder:printcolumn:name="Plan",type=string,JSONPath=`.status.currentPlan`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GPUPoolPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GPUPoolPolicySpec   `json:"spec"`
	Status GPUPoolPolicyStatus `json:"status,omitempty"`
}

// GPUPoolPolicyList is a list of GPUPoolPolicy.
// +kubebuilder:object:root=true
type GPUPoolPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUPoolPolicy `json:"items"`
}
