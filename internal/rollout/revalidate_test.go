package rollout_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/rollout"
)

// TestRevalidateCancelsPlansTheClusterOutgrew guards that an approved plan is re-checked
// against a fresh look before its first disruptive step, and that each way the cluster can move
// on cancels it with a message naming what changed, while a plan that still holds goes ahead.
func TestRevalidateCancelsPlansTheClusterOutgrew(t *testing.T) {
	sevenOnes := v1alpha1.ProfileCounts{"1g.18gb": 7}
	ref := func(name string) *v1alpha1.PodReference {
		return &v1alpha1.PodReference{Namespace: "team", Name: name}
	}
	// GPU 0 of gpu-1 holds 7 1g instances; pod "old" uses the first one.
	report := func(pods ...string) map[string][]v1alpha1.GPUStatus {
		var instances []v1alpha1.MIGInstance
		for i := range 7 {
			in := v1alpha1.MIGInstance{Profile: "1g.18gb"}
			if i < len(pods) {
				in.Pod = ref(pods[i])
			}
			instances = append(instances, in)
		}
		return map[string][]v1alpha1.GPUStatus{"gpu-1": {{Index: 0, Instances: instances}}}
	}
	plan := &v1alpha1.RepartitionPlan{Spec: v1alpha1.RepartitionPlanSpec{
		Disruptive: true,
		Steps: []v1alpha1.NodeStep{{Node: "gpu-1", GPUs: []v1alpha1.GPUChange{{Index: 0, From: sevenOnes,
			To: v1alpha1.ProfileCounts{"3g.71gb": 2}}},
			Evictions: []v1alpha1.Eviction{{PodReference: *ref("old")}}}},
		Expected: v1alpha1.PlanExpectation{Pods: []v1alpha1.PodReference{*ref("wants-3g")}},
	}}
	stillPending := map[string]rollout.PodFact{"team/old": {Node: "gpu-1"}, "team/wants-3g": {}}

	cases := []struct {
		name  string
		facts rollout.Facts
		want  string // substring of the reason; "" means the plan still holds
	}{
		{"nothing changed", rollout.Facts{GPUs: report("old"), Pods: stillPending}, ""},
		{"the pod to evict already left", rollout.Facts{GPUs: report(),
			Pods: map[string]rollout.PodFact{"team/wants-3g": {}}}, ""},
		{"no report for the node", rollout.Facts{GPUs: map[string][]v1alpha1.GPUStatus{}, Pods: stillPending},
			"no GPU report"},
		{"the layout changed under the plan", rollout.Facts{GPUs: map[string][]v1alpha1.GPUStatus{"gpu-1": {{Index: 0,
			Instances: []v1alpha1.MIGInstance{{Profile: "7g.141gb"}}}}}, Pods: stillPending},
			"GPU 0 of node gpu-1 is now 1x7g.141gb; the plan was made for 7x1g.18gb"},
		{"a new pod landed on a changed GPU", rollout.Facts{GPUs: report("old", "newcomer"), Pods: stillPending},
			"pod team/newcomer started on GPU 0"},
		{"an evicted pod became do-not-disrupt", rollout.Facts{GPUs: report("old"),
			Pods: map[string]rollout.PodFact{"team/old": {Node: "gpu-1", DoNotDisrupt: true}, "team/wants-3g": {}}},
			"now annotated gpupool.io/do-not-disrupt"},
		{"the pending pod it serves was scheduled elsewhere", rollout.Facts{GPUs: report("old"),
			Pods: map[string]rollout.PodFact{"team/old": {Node: "gpu-1"}, "team/wants-3g": {Node: "gpu-9"}}},
			"none of the 1 pending pod(s)"},
		{"the pending pod it serves was deleted", rollout.Facts{GPUs: report("old"),
			Pods: map[string]rollout.PodFact{"team/old": {Node: "gpu-1"}}}, "none of the 1 pending pod(s)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := rollout.Revalidate(plan, tc.facts)
			if tc.want == "" {
				NewWithT(t).Expect(got).To(BeEmpty())
				return
			}
			NewWithT(t).Expect(got).To(ContainSubstring(tc.want))
		})
	}
}

// TestRevalidateKeepsNonDisruptivePlansWithoutDemand guards that a plan that evicts nobody (a
// re-carve of idle GPUs toward standby shapes) is not cancelled for lack of pending pods.
func TestRevalidateKeepsNonDisruptivePlansWithoutDemand(t *testing.T) {
	plan := &v1alpha1.RepartitionPlan{Spec: v1alpha1.RepartitionPlanSpec{
		Steps: []v1alpha1.NodeStep{{Node: "gpu-1", GPUs: []v1alpha1.GPUChange{{Index: 0,
			To: v1alpha1.ProfileCounts{"3g.71gb": 2}}}}},
		Expected: v1alpha1.PlanExpectation{Pods: []v1alpha1.PodReference{{Namespace: "team", Name: "gone"}}},
	}}
	facts := rollout.Facts{GPUs: map[string][]v1alpha1.GPUStatus{"gpu-1": {{Index: 0}}}, Pods: map[string]rollout.PodFact{}}
	NewWithT(t).Expect(rollout.Revalidate(plan, facts)).To(BeEmpty())
}

// TestRevalidateChecksTheLandingOfMovedPods guards make before break at the last moment: a
// step that moves a pod to a node the plan does not change is cancelled when that node no
// longer has room for it, is cordoned or unreported, and goes ahead while the room is there; a
// landing on a node the plan changes itself is that node's own step's business.
func TestRevalidateChecksTheLandingOfMovedPods(t *testing.T) {
	enabled := &v1alpha1.MIGModeStatus{Current: "Enabled", Pending: "Enabled"}
	landing := func(used ...bool) []v1alpha1.GPUStatus {
		var instances []v1alpha1.MIGInstance
		for _, u := range used {
			in := v1alpha1.MIGInstance{Profile: "1g.18gb"}
			if u {
				in.Pod = &v1alpha1.PodReference{Namespace: "other", Name: "taker"}
			}
			instances = append(instances, in)
		}
		return []v1alpha1.GPUStatus{{Index: 0, MIGMode: enabled, Instances: instances}}
	}
	mover := v1alpha1.NodeStep{Node: "gpu-1", GPUs: []v1alpha1.GPUChange{{Index: 1, From: v1alpha1.ProfileCounts{"1g.18gb": 7},
		To: v1alpha1.ProfileCounts{"7g.141gb": 1}}},
		Evictions: []v1alpha1.Eviction{{PodReference: v1alpha1.PodReference{Namespace: "team", Name: "small"}, LandingNode: "gpu-2"}}}
	fromGPU := []v1alpha1.GPUStatus{{Index: 1, MIGMode: enabled, Instances: []v1alpha1.MIGInstance{{Profile: "1g.18gb",
		Pod: &v1alpha1.PodReference{Namespace: "team", Name: "small"}}, {Profile: "1g.18gb"}, {Profile: "1g.18gb"},
		{Profile: "1g.18gb"}, {Profile: "1g.18gb"}, {Profile: "1g.18gb"}, {Profile: "1g.18gb"}}}}
	pods := map[string]rollout.PodFact{"team/small": {Node: "gpu-1", MIG: map[string]int64{"1g.18gb": 1}}}
	cases := []struct {
		name        string
		steps       []v1alpha1.NodeStep
		landing     []v1alpha1.GPUStatus
		cordoned    bool
		unavailable string
		want        string
	}{
		{name: "room left: goes ahead", steps: []v1alpha1.NodeStep{mover}, landing: landing(true, false)},
		{name: "the scheduler took the room", steps: []v1alpha1.NodeStep{mover}, landing: landing(true, true),
			want: "node gpu-2 has 0 free 1g.18gb now and the plan moves team/small there needing 1"},
		{name: "the landing was cordoned", steps: []v1alpha1.NodeStep{mover}, landing: landing(false), cordoned: true,
			want: "node gpu-2, where the plan moves team/small, is cordoned now"},
		{name: "the landing went NotReady", steps: []v1alpha1.NodeStep{mover}, landing: landing(false), unavailable: "is not Ready",
			want: "node gpu-2, where the plan moves team/small, is not Ready now"},
		{name: "the landing lost its report", steps: []v1alpha1.NodeStep{mover},
			want: "node gpu-2, where the plan moves team/small, has no GPU report any more"},
		{name: "a landing the plan carves is checked by its own step", steps: []v1alpha1.NodeStep{mover, {Node: "gpu-2"}},
			landing: landing(true)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			plan := &v1alpha1.RepartitionPlan{Spec: v1alpha1.RepartitionPlanSpec{Steps: tc.steps}}
			facts := rollout.Facts{GPUs: map[string][]v1alpha1.GPUStatus{"gpu-1": fromGPU}, Pods: pods,
				Cordoned: map[string]bool{"gpu-2": tc.cordoned}, Unavailable: map[string]string{}}
			if tc.unavailable != "" {
				facts.Unavailable["gpu-2"] = tc.unavailable
			}
			if tc.landing != nil {
				facts.GPUs["gpu-2"] = tc.landing
			}
			g.Expect(rollout.Revalidate(plan, facts)).To(ContainSubstring(tc.want))
			if tc.want == "" {
				g.Expect(rollout.Revalidate(plan, facts)).To(BeEmpty())
			}
		})
	}
}

// TestNodeUnavailable guards which nodes cannot be a landing although they are not cordoned:
// not Ready (or never reported Ready), or tainted by the node lifecycle controller for a
// condition that keeps new pods off; other taints are the scheduler's business, as at planning.
func TestNodeUnavailable(t *testing.T) {
	ready := func(s corev1.ConditionStatus, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{Spec: corev1.NodeSpec{Taints: taints},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: s}}}}
	}
	for _, tc := range []struct {
		name string
		node *corev1.Node
		want string
	}{
		{"Ready and untainted", ready(corev1.ConditionTrue), ""},
		{"NotReady", ready(corev1.ConditionFalse), "is not Ready"},
		{"Ready unknown", ready(corev1.ConditionUnknown), "is not Ready"},
		{"no Ready condition", &corev1.Node{}, "is not Ready"},
		{"unreachable", ready(corev1.ConditionTrue, corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}),
			"is tainted node.kubernetes.io/unreachable:NoExecute"},
		{"memory pressure", ready(corev1.ConditionTrue, corev1.Taint{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule}),
			"is tainted node.kubernetes.io/memory-pressure:NoSchedule"},
		{"a preference only", ready(corev1.ConditionTrue, corev1.Taint{Key: corev1.TaintNodeDiskPressure, Effect: corev1.TaintEffectPreferNoSchedule}), ""},
		{"a team's own taint", ready(corev1.ConditionTrue, corev1.Taint{Key: "team", Value: "ml", Effect: corev1.TaintEffectNoSchedule}), ""},
	} {
		if got := rollout.NodeUnavailable(tc.node); got != tc.want {
			t.Errorf("%s: NodeUnavailable = %q, want %q", tc.name, got, tc.want)
		}
	}
}
