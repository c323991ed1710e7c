package inventory

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpupool/gpupool/internal/podrecord"
)

// AgentPods says which pods are the node agents: those in Namespace that Selector matches
// (the agent DaemonSet's own selector).
type AgentPods struct {
	Namespace string
	Selector  labels.Selector
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
	if agents.Selector == nil || agents.Selector.Empty() {
		return beats // matching every pod would take any pod's readiness for an agent's
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
		if p.Namespace != agents.Namespace || !p.Bound() || !agents.Selector.Matches(labels.Set(p.Labels)) {
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
