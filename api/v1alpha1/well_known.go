package v1alpha1

// Annotations and labels that form gpupool's contract with users (NVIDIA's own labels are
// spelled in internal/nvidia). They are API: renaming one breaks running clusters.
const (
	// AnnotationApprove approves a RepartitionPlan when its value equals the plan's spec.hash,
	// so an approval can never carry over to a different plan.
	AnnotationApprove = "gpupool.io/approve"
	// AnnotationReject rejects a RepartitionPlan; the value is the reason shown in its status.
	AnnotationReject = "gpupool.io/reject"
	// AnnotationApprovedBy and AnnotationRejectedBy name who set AnnotationApprove or
	// AnnotationReject. The API server writes them from the request's user, through the
	// MutatingAdmissionPolicy gpupool-plan-decision-author (config/approval), and refuses any
	// other value (ValidatingAdmissionPolicy gpupool-plan-approval); the plan controller copies
	// them into status.approvedBy and status.rejectedBy.
	AnnotationApprovedBy = "gpupool.io/approved-by"
	AnnotationRejectedBy = "gpupool.io/rejected-by"
	// AnnotationSupersede is the policy controller's request that a plan still awaiting
	// approval be superseded; the value is why. The plan controller, the only writer of a
	// plan's status, carries it out; a plan past its approval gate ignores it. Only the
	// manager may set it (config/admission, plan authorship).
	AnnotationSupersede = "gpupool.io/supersede"
	// AnnotationDoNotDisrupt on a pod, with value "true", forbids gpupool to evict it; the planner
	// leaves the GPUs it uses alone instead.
	AnnotationDoNotDisrupt = "gpupool.io/do-not-disrupt"
	// AnnotationCordonedBy on a node names the RepartitionPlan that cordoned it, so gpupool only
	// ever uncordons nodes it cordoned itself.
	AnnotationCordonedBy = "gpupool.io/cordoned-by"
	// AnnotationWasUnschedulable on a node, with value "true", records that someone else had
	// cordoned it before gpupool's plan did, so that gpupool leaves it cordoned afterwards.
	AnnotationWasUnschedulable = "gpupool.io/was-unschedulable"

	// LabelAgentLease marks, with value "true", the Lease a node agent renews as its heartbeat.
	// The Lease lives in the agent's namespace and is named after the node; the manager caches
	// only Leases with this label, and judges a node's GPU report fresh while its Lease is.
	LabelAgentLease = "gpupool.io/agent-lease"
)

// AgentLeaseHolder is the holderIdentity of node's heartbeat Lease (LabelAgentLease). The agent
// never takes over a Lease held by anyone else, the manager trusts only a Lease so held, and
// the agent admission policy (config/agent) refuses any other holder from an agent.
func AgentLeaseHolder(node string) string { return "gpupool-agent/" + node }
