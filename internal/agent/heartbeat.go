package agent

// Heartbeat is how an agent tells the manager that it is alive and still stands by the report
// it last wrote: a report is written only when the GPUs change, so its age alone cannot say.
type Heartbeat string

const (
	// HeartbeatReadiness makes the agent pod's readiness the heartbeat: the kubelet probes the
	// agent locally (ReadyCheck, which fails once the agent stops refreshing) and writes the pod's
	// Ready condition only when it changes, and when the node itself goes silent the node
	// lifecycle controller marks its pods not ready. The manager trusts a report while its
	// node's agent pod is Ready (--agent-pod-selector). At rest it costs the API server nothing:
	// the kubelet's own heartbeat already pays for the node.
	HeartbeatReadiness Heartbeat = "readiness"
	// HeartbeatLease renews a Lease named after the node every refresh period, as the kubelet
	// renews its node's (KEP-589): one small write per node per period. For agents whose pods
	// the manager cannot see (run outside the chart, or simulated).
	HeartbeatLease Heartbeat = "lease"
	// HeartbeatStatus rewrites status.observedTime every refresh period, the whole report: the
	// heartbeat of agents before Leases, kept for managers that read neither Leases nor pods.
	HeartbeatStatus Heartbeat = "status"
)
