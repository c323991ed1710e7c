package inventory

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpupool/gpupool/internal/podrecord"
)

// AgentPods says which pods are the node agents: those in Namespace that Selector matches
// (the agent DaemonSet's own selector), controlled by the DaemonSet named DaemonSet and run by
// the ServiceAccount named ServiceAccount.
//
// Labels alone are not enough: anyone who may create a pod with them, or a workload that
// happens to carry them, would vouch for a node whose agent is gone. The pod must be the
// DaemonSet's (a controller ownerReference to apps' DaemonSet of that name) and carry the
// agent's identity (spec.serviceAccountName), as the DaemonSet controller makes them.
//
// The DaemonSet is matched by name, not by UID. The UID would need the manager to watch
// DaemonSets in the agents' namespace (more RBAC and cache for nothing more): whoever can
// write a pod there with a forged ownerReference can read the DaemonSet's UID as easily, and
// can also run a pod as the agent's ServiceAccount, that is, be the agent as far as the API
// server can tell (its token writes the agent's GPUNode and Lease too). A pod naming a
// DaemonSet UID that does not exist is deleted by the garbage collector anyway, and a
// DaemonSet deleted and recreated (a reinstall) gets a new UID that a UID check would have to
// follow. What keeps impostors out is who may create pods in the agents' namespace: keep that
// to cluster admins and the DaemonSet controller.
type AgentPods struct {
	Namespace      string
	Selector       labels.Selector
	DaemonSet      string
	ServiceAccount string
}

// Match reports whether p is one of the node agents' pods.
func (a AgentPods) Match(p *podrecord.Record) bool {
	return p.Namespace == a.Namespace && p.ServiceAccount == a.ServiceAccount &&
		p.Controller == "DaemonSet" && p.ControllerGroup == "apps" && p.ControllerName == a.DaemonSet &&
		a.Selector.Matches(labels.Set(p.Labels))
}

// usable reports whether a names its pods well enough to trust their readiness: a selector
// that selects something, and the DaemonSet and ServiceAccount the pods must have.
func (a AgentPods) usable() bool {
	return a.Namespace != "" && a.Selector != nil && !a.Selector.Empty() && a.DaemonSet != "" && a.ServiceAccount != ""
}

// ReadinessHeartbeats adds to beats, per node, when the node's agent pod was last seen ready
// (the agent's readiness heartbeat), and returns beats (a new map when nil).
//
// The kubelet probes the agent on its node and writes the pod's Ready condition only when it
// changes; the agent fails its probe once it stops refreshing its report. When the node itself
// goes silent its pods' readiness cannot be trusted: the node lifecycle controller marks them
// not ready, but only after its grace period, so a node that is not Ready vouches for nothing
// after it stopped being so. So the agent was alive at now while its pod is Ready on a Ready
// node; otherwise it was last alive when the pod or the node stopped being ready. That keeps a
// Lease's meaning: a report stays usable for the report-age limit after its agent was last
// known alive, which also covers an agent's rolling update, where the old pod is gone before
// the new one is ready.
func ReadinessHeartbeats(beats map[string]time.Time, pods []*podrecord.Record, nodes []corev1.Node, agents AgentPods, now time.Time) map[string]time.Time {
	if !agents.usable() {
		return beats // matching too much would take any pod's readiness for an agent's
	}
	nodeReady := make(map[string]*corev1.NodeCondition, len(nodes))
	for i := range nodes {
		for j := range nodes[i].Status.Conditions {
			if c := &nodes[i].Status.Conditions[j]; c.Type == corev1.NodeReady {
				nodeReady[nodes[i].Name] = c
			}
		}
	}
	if beats == nil {
		beats = map[string]time.Time{}
	}
	for _, p := range pods {
		if !p.Bound() || !agents.Match(p) {
			continue
		}
		ready, known := nodeReady[p.NodeName]
		if !known {
			continue // no Node, or a Node without a Ready condition: nothing vouches for it
		}
		seen := now
		if !p.Ready {
			seen = p.UnreadySince.Time
		}
		if ready.Status != corev1.ConditionTrue && ready.LastTransitionTime.Time.Before(seen) {
			seen = ready.LastTransitionTime.Time
		}
		if seen.IsZero() {
			continue
		}
		if seen.After(beats[p.NodeName]) {
			beats[p.NodeName] = seen
		}
	}
	return beats
}
