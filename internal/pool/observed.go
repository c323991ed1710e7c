package pool

// What a pass reads beyond the objects it plans on, in one place for the policy controller and
// `gpupoolctl what-if --live`: when each node's agent was last known alive, and whether
// mig-manager may reboot a node. Both read the same lists and call these, so that the CLI's
// answer is the controller's.

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/podrecord"
)

// DefaultMaxReportAge is how old a node's GPU report (or its agent's last heartbeat) may be
// before the node is not planned, unless the manager is told otherwise.
const DefaultMaxReportAge = 2 * time.Minute

// Heartbeats are, per node, when its agent was last known alive: the renewal of its heartbeat
// Lease (leases are those listed in the agents' namespace with v1alpha1.LabelAgentLease; one
// counts only when held by that node's agent, v1alpha1.AgentLeaseHolder), and, where agents
// names the agents' pods, the readiness of its pod (inventory.ReadinessHeartbeats). nil when
// nothing is known, which judges each report by its observedTime alone.
func Heartbeats(leases []coordinationv1.Lease, pods []*podrecord.Record, nodes []corev1.Node, agents inventory.AgentPods,
	now time.Time) map[string]time.Time {
	var out map[string]time.Time
	for _, l := range leases {
		if l.Labels[v1alpha1.LabelAgentLease] != "true" || l.Spec.RenewTime == nil ||
			ptr.Deref(l.Spec.HolderIdentity, "") != v1alpha1.AgentLeaseHolder(l.Name) {
			continue
		}
		if out == nil {
			out = make(map[string]time.Time, len(leases))
		}
		out[l.Name] = l.Spec.RenewTime.Time
	}
	// Agents' pods run on the GPU nodes; ReadinessHeartbeats reads none unless agents names
	// them well enough to trust (namespace, selector, DaemonSet and ServiceAccount).
	return inventory.ReadinessHeartbeats(out, pods, nodes, agents, now)
}

// MIGManagerRebootOf says, from the GPU Operator's ClusterPolicies, whether mig-manager may
// reboot a node whose MIG mode change fails, so that the planner keeps such changes off nodes
// where a reboot would kill pods. Without a ClusterPolicy (none listed, or none readable) it is
// unknown, which the planner treats as a reboot wherever a toggle needs a GPU reset.
func MIGManagerRebootOf(clusterPolicies []unstructured.Unstructured) planner.MIGManagerReboot {
	active := nvidia.ActiveClusterPolicy(clusterPolicies)
	switch {
	case active == nil:
		return planner.RebootUnknown
	case nvidia.MIGManagerWithReboot(active):
		return planner.RebootOnFailure
	}
	return planner.RebootNever
}
