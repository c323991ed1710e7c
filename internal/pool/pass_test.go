package pool

import (
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/podrecord"
)

func poolNode(name, pool string) corev1.Node {
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": pool}}}
}

func policyFor(name, pool string) v1alpha1.GPUPoolPolicy {
	return v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec: v1alpha1.GPUPoolPolicySpec{NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{"pool": pool}}}}
}

// pendingPod asks for one 1g instance; selector picks its nodes.
func pendingPod(name string, selector map[string]string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec: corev1.PodSpec{NodeSelector: selector, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/mig-1g.18gb": resource.MustParse("1")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
			Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}}}}
}

func planOn(name, policy string, phase v1alpha1.PlanPhase, steps ...v1alpha1.NodeStep) v1alpha1.RepartitionPlan {
	return v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.RepartitionPlanSpec{Policy: policy, Steps: steps},
		Status: v1alpha1.RepartitionPlanStatus{Phase: phase}}
}

// TestNewPass guards what the controller and the CLI hand the planner: the nodes it must leave
// alone and why, the budgets already spent by plans in flight, and the pending pods it counts.
func TestNewPass(t *testing.T) {
	done := v1alpha1.NodeStepStatus{Node: "a-2", State: v1alpha1.NodeDone, LastTransitionTime: ptr.To(metav1.NewTime(t0.Add(-time.Minute)))}
	executing := planOn("a-run", "a", v1alpha1.PlanExecuting,
		v1alpha1.NodeStep{Node: "a-1", Disruptive: true}, v1alpha1.NodeStep{Node: "a-2"}, v1alpha1.NodeStep{Node: "a-3"})
	executing.Status.Nodes = []v1alpha1.NodeStepStatus{done}
	for _, tc := range []struct {
		name         string
		cluster      Cluster
		opts         Options
		wantFrozen   map[string]string
		wantInFlight InFlight
		wantPending  []string
	}{{
		name: "nothing in flight: every pool node plannable, only the pool's placeable pods",
		cluster: Cluster{Policies: []v1alpha1.GPUPoolPolicy{policyFor("a", "a")},
			Nodes: []corev1.Node{poolNode("a-1", "a"), poolNode("b-1", "b")},
			Pods:  podrecord.FromPods([]*corev1.Pod{ptr.To(pendingPod("mine", nil)), ptr.To(pendingPod("theirs", map[string]string{"pool": "b"}))})},
		wantFrozen: map[string]string{}, wantPending: []string{"mine"},
	}, {
		name: "KeepUnplaceable keeps the other pool's pod for the planner to explain",
		cluster: Cluster{Policies: []v1alpha1.GPUPoolPolicy{policyFor("a", "a")},
			Nodes: []corev1.Node{poolNode("a-1", "a"), poolNode("b-1", "b")},
			Pods:  podrecord.FromPods([]*corev1.Pod{ptr.To(pendingPod("mine", nil)), ptr.To(pendingPod("theirs", map[string]string{"pool": "b"}))})},
		opts:       Options{KeepUnplaceable: true},
		wantFrozen: map[string]string{}, wantPending: []string{"mine", "theirs"},
	}, {
		name: "a node two policies select is frozen for both",
		cluster: Cluster{Policies: []v1alpha1.GPUPoolPolicy{policyFor("a", "a"), {ObjectMeta: metav1.ObjectMeta{Name: "z"},
			Spec: v1alpha1.GPUPoolPolicySpec{NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{"shared": "yes"}}}}},
			Nodes: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "a-1", Labels: map[string]string{"pool": "a", "shared": "yes"}}}}},
		wantFrozen: map[string]string{"a-1": "also selected by policy z"},
	}, {
		// The API server refuses an empty selector; one stored before it did makes an empty
		// pool (Problems reports it), never the whole cluster: no conflict, no pod to place.
		name: "a stored policy with an empty selector has an empty pool",
		cluster: Cluster{Policies: []v1alpha1.GPUPoolPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "old"}}, policyFor("a", "a")},
			Nodes: []corev1.Node{poolNode("a-1", "a")},
			Pods:  podrecord.FromPods([]*corev1.Pod{ptr.To(pendingPod("mine", nil))})},
		wantFrozen: map[string]string{},
	}, {
		name: "an executing plan freezes its unfinished nodes and spends the budgets; a node it finished is in the window",
		cluster: Cluster{Policies: []v1alpha1.GPUPoolPolicy{policyFor("a", "a")},
			Nodes: []corev1.Node{poolNode("a-1", "a"), poolNode("a-2", "a"), poolNode("a-3", "a")},
			Plans: []v1alpha1.RepartitionPlan{executing}},
		wantFrozen: map[string]string{"a-1": "plan a-run is changing it", "a-3": "plan a-run is changing it",
			"a-2": "changed by plan a-run 1m0s ago, within the stabilization window 2m0s"},
		wantInFlight: InFlight{Disrupting: 1, Reconfiguring: 1},
	}, {
		name: "a plan awaiting approval freezes nothing",
		cluster: Cluster{Policies: []v1alpha1.GPUPoolPolicy{policyFor("a", "a")}, Nodes: []corev1.Node{poolNode("a-1", "a")},
			Plans: []v1alpha1.RepartitionPlan{planOn("a-wait", "a", v1alpha1.PlanAwaitingApproval, v1alpha1.NodeStep{Node: "a-1"})}},
		wantFrozen: map[string]string{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			policy := &tc.cluster.Policies[0]
			pass, err := NewPass(policy, &tc.cluster, t0, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(pass.Frozen, tc.wantFrozen) {
				t.Errorf("frozen %v, want %v", pass.Frozen, tc.wantFrozen)
			}
			if pass.InFlight != tc.wantInFlight {
				t.Errorf("in flight %+v, want %+v", pass.InFlight, tc.wantInFlight)
			}
			var pending []string
			for _, r := range pass.Pending {
				pending = append(pending, r.Pod.Name)
			}
			if !slices.Equal(pending, tc.wantPending) {
				t.Errorf("pending %v, want %v", pending, tc.wantPending)
			}
			in := pass.Input()
			if in.Snapshot != pass.Snapshot || in.InFlightDisrupting != tc.wantInFlight.Disrupting || in.Policy != policy {
				t.Errorf("Input does not carry the pass: %+v", in)
			}
		})
	}
}

// TestPassDefaults guards that a policy no API server defaulted plans with the CRD's defaults.
func TestPassDefaults(t *testing.T) {
	p := policyFor("a", "a")
	pass, err := NewPass(&p, &Cluster{}, t0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if pass.MinPendingAge != DefaultMinPendingAge || pass.Window != DefaultStabilizationWindow {
		t.Errorf("defaults %s %s", pass.MinPendingAge, pass.Window)
	}
	p.Spec.NodeSelector.MatchExpressions = []v1alpha1.PoolSelectorRequirement{{Key: "x", Operator: "Bogus"}}
	if _, err := NewPass(&p, &Cluster{}, t0, Options{}); err == nil {
		t.Error("a selector that does not parse is accepted")
	}
}

// TestOwnPlans guards that only plans the policy controls count, newest first.
func TestOwnPlans(t *testing.T) {
	p := policyFor("a", "a")
	owned := func(name string, age time.Duration) v1alpha1.RepartitionPlan {
		plan := planOn(name, "a", "")
		plan.CreationTimestamp = metav1.NewTime(t0.Add(-age))
		plan.OwnerReferences = []metav1.OwnerReference{{APIVersion: "gpupool.io/v1alpha1", Kind: "GPUPoolPolicy", Name: "a",
			UID: p.UID, Controller: ptr.To(true)}}
		return plan
	}
	forged := planOn("forged", "a", "")
	got := OwnPlans(&p, []v1alpha1.RepartitionPlan{owned("old", time.Hour), forged, owned("new", time.Minute)})
	var names []string
	for _, g := range got {
		names = append(names, g.Name)
	}
	if !slices.Equal(names, []string{"new", "old"}) {
		t.Errorf("own plans %v, want [new old]", names)
	}
}
