package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/pool"
)

func TestClusterStateSkipsOnlyAPassThatWouldRepeat(t *testing.T) {
	at := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	base := passInputs{generation: 3, events: 7, facts: pool.TimeFacts{Pending: []string{"ns/a"}}, at: at}
	for _, tc := range []struct {
		name      string
		next      func(passInputs) passInputs
		unchanged bool
	}{
		{"same inputs a second later", func(in passInputs) passInputs { in.at = in.at.Add(time.Second); return in }, true},
		{"a watched change", func(in passInputs) passInputs { in.events++; return in }, false},
		{"the policy edited", func(in passInputs) passInputs { in.generation++; return in }, false},
		{"a pod came of age", func(in passInputs) passInputs {
			in.facts = pool.TimeFacts{Pending: []string{"ns/a", "ns/b"}}
			return in
		}, false},
		{"the plan under review left its window", func(in passInputs) passInputs { in.young = "plan-1"; return in }, false},
		{"nothing for the full-pass interval", func(in passInputs) passInputs { in.at = in.at.Add(fullPassInterval); return in }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s clusterState
			g := NewWithT(t)
			g.Expect(s.unchanged("gpus", base)).To(BeFalse(), "a policy never passed must pass")
			s.passed("gpus", base)
			g.Expect(s.unchanged("gpus", tc.next(base))).To(Equal(tc.unchanged))
			g.Expect(s.unchanged("other", tc.next(base))).To(BeFalse(), "one policy's pass says nothing of another's")
		})
	}
}

func TestClusterStateRemembersAResultUntilItsDemandMoves(t *testing.T) {
	policy := &v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "gpus", Generation: 2}}
	plan := &v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "gpus-1"}}
	res := &planner.Result{}
	pending := []demand.Request{{Pod: types.NamespacedName{Namespace: "ns", Name: "a"}}}
	newPod := append(pending[:1:1], demand.Request{Pod: types.NamespacedName{Namespace: "ns", Name: "b"}})
	otherPod := []demand.Request{{Pod: types.NamespacedName{Namespace: "ns", Name: "b"}}}
	edited := policy.DeepCopy()
	edited.Generation++
	for _, tc := range []struct {
		name    string
		policy  *v1alpha1.GPUPoolPolicy
		plan    *v1alpha1.RepartitionPlan
		frozen  string
		pending []demand.Request
		kept    bool
	}{
		{"same plan, policy, frozen nodes and pods", policy, plan, "", pending, true},
		{"a new pending pod", policy, plan, "", newPod, false},
		{"a pending pod replaced by another", policy, plan, "", otherPod, false},
		{"the demand gone", policy, plan, "", nil, false},
		{"the policy edited", edited, plan, "", pending, false},
		{"another node frozen", policy, plan, "node-1", pending, false},
		{"another plan under review", policy, &v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "gpus-2"}}, "", pending, false},
		{"no plan under review", policy, nil, "", pending, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s clusterState
			s.remember(policy, plan, res, "", pending)
			got := s.remembered(tc.policy, tc.plan, tc.frozen, tc.pending)
			if tc.kept {
				NewWithT(t).Expect(got).To(BeIdenticalTo(res))
			} else {
				NewWithT(t).Expect(got).To(BeNil())
			}
		})
	}
}

func TestClusterStateForgetsADeletedPolicyWhole(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "gpus"}}
	plan := &v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "gpus-1"}}
	in := passInputs{at: time.Now()}
	var s clusterState
	s.passed("gpus", in)
	s.remember(policy, plan, &planner.Result{}, "", nil)
	g.Expect(s.retell("gpus", map[types.UID]string{"pod-a": "story"})).To(BeEmpty())
	g.Expect(s.lastProposed("gpus")).To(Equal("gpus-1"))
	g.Expect(s.retell("gpus", map[types.UID]string{"pod-a": "story"})).To(HaveKeyWithValue(types.UID("pod-a"), "story"))

	s.forget("gpus")
	g.Expect(s.unchanged("gpus", in)).To(BeFalse(), "a policy created again under the name passes in full")
	g.Expect(s.lastProposed("gpus")).To(BeEmpty(), "nor does it look for the old policy's plan")
	g.Expect(s.retell("gpus", map[types.UID]string{"pod-a": "story"})).To(BeEmpty(), "and its pods are told again")

	s.remember(policy, nil, nil, "", nil)
	g.Expect(s.lastProposed("gpus")).To(BeEmpty(), "no current plan leaves nothing to look for")
}
