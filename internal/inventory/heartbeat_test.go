package inventory_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/podrecord"
)

func TestReadinessHeartbeats(t *testing.T) {
	now := fixture.Now
	agents := inventory.AgentPods{Namespace: "gpupool-agent", Selector: labels.SelectorFromSet(labels.Set{"app": "agent"}),
		DaemonSet: "gpupool-agent", ServiceAccount: "gpupool-agent"}
	// agentPod is the pod the agent DaemonSet's controller makes on node.
	agentPod := func(name, node string, opts ...fixture.PodOption) corev1.Pod {
		opts = append([]fixture.PodOption{fixture.Running(node), fixture.OwnedBy("apps/v1", "DaemonSet", "gpupool-agent")}, opts...)
		p := fixture.Pod("gpupool-agent/"+name, opts...)
		p.Labels = map[string]string{"app": "agent"}
		p.Spec.ServiceAccountName = "gpupool-agent"
		return p
	}
	// impostor is a ready pod on gpu-1 like the agent's, changed by change.
	impostor := func(name string, change func(*corev1.Pod)) corev1.Pod {
		p := agentPod(name, "gpu-1", fixture.Ready(true, now))
		change(&p)
		return p
	}
	node := func(name string, ready corev1.ConditionStatus, since time.Time) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if ready != "" {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(since)}}
		}
		return n
	}
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	cases := []struct {
		name   string
		agents inventory.AgentPods
		pods   []corev1.Pod
		nodes  []corev1.Node
		before map[string]time.Time
		want   map[string]time.Time
	}{{
		name:  "a ready agent on a ready node vouches for now",
		pods:  []corev1.Pod{agentPod("a", "gpu-1", fixture.Ready(true, ago(time.Hour)))},
		nodes: []corev1.Node{node("gpu-1", corev1.ConditionTrue, ago(time.Hour))},
		want:  map[string]time.Time{"gpu-1": now},
	}, {
		name:  "an agent that stopped being ready was last alive then",
		pods:  []corev1.Pod{agentPod("a", "gpu-1", fixture.Ready(false, ago(time.Minute)))},
		nodes: []corev1.Node{node("gpu-1", corev1.ConditionTrue, ago(time.Hour))},
		want:  map[string]time.Time{"gpu-1": ago(time.Minute)},
	}, {
		name:  "a silent node's pod still says ready: the node's silence bounds it",
		pods:  []corev1.Pod{agentPod("a", "gpu-1", fixture.Ready(true, ago(time.Hour)))},
		nodes: []corev1.Node{node("gpu-1", corev1.ConditionUnknown, ago(3*time.Minute))},
		want:  map[string]time.Time{"gpu-1": ago(3 * time.Minute)},
	}, {
		name: "during a rolling update the newest sign of life counts",
		pods: []corev1.Pod{
			agentPod("old", "gpu-1", fixture.Ready(false, ago(10*time.Second))),
			agentPod("new", "gpu-1", fixture.Ready(false, ago(5*time.Second))),
		},
		nodes: []corev1.Node{node("gpu-1", corev1.ConditionTrue, ago(time.Hour))},
		want:  map[string]time.Time{"gpu-1": ago(5 * time.Second)},
	}, {
		name:   "a Lease renewed later than the pod was seen stays",
		pods:   []corev1.Pod{agentPod("a", "gpu-1", fixture.Ready(false, ago(time.Hour)))},
		nodes:  []corev1.Node{node("gpu-1", corev1.ConditionTrue, ago(time.Hour))},
		before: map[string]time.Time{"gpu-1": ago(time.Minute)},
		want:   map[string]time.Time{"gpu-1": ago(time.Minute)},
	}, {
		name: "pods that are not the agent's vouch for nothing",
		pods: []corev1.Pod{
			func() corev1.Pod {
				p := agentPod("a", "gpu-1", fixture.Ready(true, now))
				p.Namespace = "team"
				return p
			}(),
			func() corev1.Pod { p := agentPod("b", "gpu-1", fixture.Ready(true, now)); p.Labels = nil; return p }(),
			func() corev1.Pod {
				p := agentPod("c", "gpu-1", fixture.Ready(true, now))
				p.Status.Phase = corev1.PodFailed
				return p
			}(),
		},
		nodes: []corev1.Node{node("gpu-1", corev1.ConditionTrue, ago(time.Hour))},
		want:  map[string]time.Time{},
	}, {
		// Issue 34: a ready pod with the DaemonSet's labels kept a node whose agent was down
		// in planning. Only the DaemonSet's own pods, run as the agent, count.
		name: "impostors with the agent's labels, on its node, vouch for nothing",
		pods: []corev1.Pod{
			impostor("bare", func(p *corev1.Pod) { p.OwnerReferences = nil }),
			impostor("of-a-replicaset", func(p *corev1.Pod) { fixture.OwnedBy("apps/v1", "ReplicaSet", "gpupool-agent")(p) }),
			impostor("of-another-daemonset", func(p *corev1.Pod) { fixture.OwnedBy("apps/v1", "DaemonSet", "lookalike")(p) }),
			impostor("of-a-daemonset-of-another-group", func(p *corev1.Pod) {
				fixture.OwnedBy("example.com/v1", "DaemonSet", "gpupool-agent")(p)
			}),
			impostor("owned-not-controlled", func(p *corev1.Pod) { p.OwnerReferences[0].Controller = nil }),
			impostor("as-another-account", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "default" }),
			impostor("as-no-account", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "" }),
			impostor("in-another-namespace", func(p *corev1.Pod) { p.Namespace = "team" }),
		},
		nodes: []corev1.Node{node("gpu-1", corev1.ConditionTrue, ago(time.Hour))},
		want:  map[string]time.Time{},
	}, {
		name: "beside impostors, the agent's own pod still counts",
		pods: []corev1.Pod{
			impostor("bare", func(p *corev1.Pod) { p.OwnerReferences = nil }),
			agentPod("a", "gpu-1", fixture.Ready(false, ago(time.Minute))),
		},
		nodes: []corev1.Node{node("gpu-1", corev1.ConditionTrue, ago(time.Hour))},
		want:  map[string]time.Time{"gpu-1": ago(time.Minute)},
	}, {
		name:  "a pod whose kubelet has not reported readiness yet, or on a node without a Ready condition, vouches for nothing",
		pods:  []corev1.Pod{agentPod("a", "gpu-1"), agentPod("b", "gpu-2", fixture.Ready(true, now)), agentPod("c", "gone", fixture.Ready(true, now))},
		nodes: []corev1.Node{node("gpu-1", corev1.ConditionTrue, ago(time.Hour)), node("gpu-2", "", now)},
		want:  map[string]time.Time{},
	}, {
		name:   "an empty selector would match every pod: readiness is not read",
		agents: inventory.AgentPods{Namespace: "gpupool-agent", Selector: labels.Everything()},
		pods:   []corev1.Pod{agentPod("a", "gpu-1", fixture.Ready(true, now))},
		nodes:  []corev1.Node{node("gpu-1", corev1.ConditionTrue, ago(time.Hour))},
		want:   nil,
	}, {
		name:   "without the DaemonSet's name no pod can be told for the agent's: readiness is not read",
		agents: inventory.AgentPods{Namespace: "gpupool-agent", Selector: agents.Selector, ServiceAccount: "gpupool-agent"},
		pods:   []corev1.Pod{agentPod("a", "gpu-1", fixture.Ready(true, now))},
		nodes:  []corev1.Node{node("gpu-1", corev1.ConditionTrue, ago(time.Hour))},
		want:   nil,
	}, {
		name:   "nor without the ServiceAccount's",
		agents: inventory.AgentPods{Namespace: "gpupool-agent", Selector: agents.Selector, DaemonSet: "gpupool-agent"},
		pods:   []corev1.Pod{agentPod("a", "gpu-1", fixture.Ready(true, now))},
		nodes:  []corev1.Node{node("gpu-1", corev1.ConditionTrue, ago(time.Hour))},
		want:   nil,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := agents
			if tc.agents.Selector != nil {
				a = tc.agents
			}
			got := inventory.ReadinessHeartbeats(tc.before, podrecord.FromPods(fixture.Pointers(tc.pods)), tc.nodes, a, now)
			if len(got) != len(tc.want) || (got == nil) != (tc.want == nil) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for n, w := range tc.want {
				if !got[n].Equal(w) {
					t.Errorf("%s: got %v, want %v", n, got[n], w)
				}
			}
		})
	}
}
