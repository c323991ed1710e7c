package pool_test

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/pool"
)

func pendingPods(names ...string) []demand.Request {
	out := make([]demand.Request, len(names))
	for i, n := range names {
		out[i] = demand.Request{Pod: types.NamespacedName{Namespace: "ml", Name: n}}
	}
	return out
}

func key(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ml", Name: name} }

func planServing(name string, pods ...string) *v1alpha1.RepartitionPlan {
	p := &v1alpha1.RepartitionPlan{}
	p.Name = name
	for _, n := range pods {
		p.Spec.Expected.Pods = append(p.Spec.Expected.Pods, v1alpha1.PodReference{Namespace: "ml", Name: n})
	}
	return p
}

func TestDemandSatisfied(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pending []demand.Request
		res     planner.Result
		plan    *v1alpha1.RepartitionPlan
		want    pool.Condition
	}{
		{name: "nothing pending", want: pool.Condition{True: true, Reason: "NoPendingPods", Message: "no GPU pod is pending"}},
		{
			name: "fits the current layouts", pending: pendingPods("a"), res: planner.Result{FitsNow: []types.NamespacedName{key("a")}},
			want: pool.Condition{Reason: "PlanServesPending", Message: "1 pod(s) pending; the current layouts serve them all"},
		},
		{
			name: "the live plan serves the rest", pending: pendingPods("a", "b"),
			res: planner.Result{FitsNow: []types.NamespacedName{key("a")}}, plan: planServing("p1", "b"),
			want: pool.Condition{Reason: "PlanServesPending", Message: "2 pod(s) pending; the current layouts or plan p1 serve them all"},
		},
		{
			name: "a pod the planner cannot serve", pending: pendingPods("a", "b"), plan: planServing("p1", "a"),
			res:  planner.Result{Unserved: []planner.Unserved{{Pod: key("b"), Reason: planner.ReasonPartitionShape, Message: "needs 2g.35gb"}}},
			want: pool.Condition{Reason: "PartitionShape", Message: "2 pod(s) pending, 1 not served; e.g. ml/b needs 2g.35gb"},
		},
		{
			// The planner serves "new" in a plan it has not proposed (the plan under review was
			// kept): the condition must not claim the live plan serves it.
			name: "new demand the kept plan does not serve", pending: pendingPods("old", "new"), plan: planServing("p1", "old"),
			res:  planner.Result{Served: []types.NamespacedName{key("new"), key("old")}},
			want: pool.Condition{Reason: pool.ReasonAwaitingNextPlan, Message: "2 pod(s) pending, 1 not served by plan p1; e.g. ml/new, which the next plan serves"},
		},
		{
			name: "no live plan", pending: pendingPods("a"), res: planner.Result{Served: []types.NamespacedName{key("a")}},
			want: pool.Condition{Reason: pool.ReasonAwaitingNextPlan,
				Message: "1 pod(s) pending, 1 not served by any plan; e.g. ml/a, which the planner can serve but no live plan proposes yet"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pool.DemandSatisfied(tc.pending, &tc.res, tc.plan); got != tc.want {
				t.Errorf("DemandSatisfied:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestExtends(t *testing.T) {
	for _, tc := range []struct {
		name           string
		want, awaiting *v1alpha1.RepartitionPlan
		extends        bool
	}{
		{name: "same pods", want: planServing("w", "a", "b"), awaiting: planServing("p", "b", "a"), extends: false},
		{name: "a new pod besides the old ones", want: planServing("w", "a", "b"), awaiting: planServing("p", "a"), extends: true},
		{name: "a new pod instead of an old one", want: planServing("w", "b"), awaiting: planServing("p", "a"), extends: true},
		{name: "a new pod but fewer in all", want: planServing("w", "c"), awaiting: planServing("p", "a", "b"), extends: false},
		{name: "fewer pods", want: planServing("w", "a"), awaiting: planServing("p", "a", "b"), extends: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pool.Extends(tc.want, tc.awaiting); got != tc.extends {
				t.Errorf("Extends = %v, want %v", got, tc.extends)
			}
		})
	}
}

// TestUnservedByShape guards the unserved-pods metric's counts: per resource and reason, pods
// of other pools left out, and served pods not counted.
func TestUnservedByShape(t *testing.T) {
	ask := func(name string, resources ...string) demand.Request {
		r := demand.Request{Pod: key(name)}
		for _, res := range resources {
			r.GPUs = append(r.GPUs, demand.GPURequest{Resource: corev1.ResourceName(res)})
		}
		return r
	}
	pending := []demand.Request{
		ask("a", "nvidia.com/mig-7g.141gb"),
		ask("b", "nvidia.com/mig-7g.141gb"),
		ask("c", "nvidia.com/mig-1g.18gb", "nvidia.com/mig-2g.35gb"),
		ask("elsewhere", "nvidia.com/gpu"),
		ask("served", "nvidia.com/gpu"),
	}
	res := &planner.Result{Served: []types.NamespacedName{key("served")}, Unserved: []planner.Unserved{
		{Pod: key("a"), Reason: planner.ReasonPartitionShape},
		{Pod: key("b"), Reason: planner.ReasonPartitionShape},
		{Pod: key("c"), Reason: planner.ReasonNodePlacement},
		{Pod: key("elsewhere"), Reason: planner.ReasonNotInPool},
	}}
	got := pool.UnservedByShape(pending, res)
	want := map[pool.ShapeReason]int{
		{Shape: "nvidia.com/mig-7g.141gb", Reason: planner.ReasonPartitionShape}: 2,
		{Shape: "nvidia.com/mig-1g.18gb", Reason: planner.ReasonNodePlacement}:   1,
		{Shape: "nvidia.com/mig-2g.35gb", Reason: planner.ReasonNodePlacement}:   1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("UnservedByShape = %v, want %v", got, want)
	}
}
