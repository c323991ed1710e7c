package rollout

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func trustedPlan(policy *v1alpha1.GPUPoolPolicy) *v1alpha1.RepartitionPlan {
	p := &v1alpha1.RepartitionPlan{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-a-20261201-0a1b2c3d", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "GPUPoolPolicy", Name: policy.Name, UID: policy.UID,
			Controller: ptr.To(true)}}},
		Spec: v1alpha1.RepartitionPlanSpec{Policy: policy.Name, Disruptive: true, Steps: []v1alpha1.NodeStep{{
			Node: "gpu-1", MIGConfigName: "gpupool-0123456789", Disruptive: true,
			GPUs:      []v1alpha1.GPUChange{{Index: 0, From: v1alpha1.ProfileCounts{"1g.18gb": 7}, To: v1alpha1.ProfileCounts{"7g.141gb": 1}}},
			Evictions: []v1alpha1.Eviction{{PodReference: v1alpha1.PodReference{Namespace: "team", Name: "infer"}, UID: "uid-1"}},
		}}},
	}
	p.Spec.Hash = v1alpha1.HashSteps(p.Spec.Steps)
	return p
}

func TestAuthenticate(t *testing.T) {
	policy := &v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pool-a", UID: "policy-uid"}}
	inPool := func(n string) bool { return n == "gpu-1" || n == "gpu-2" }
	rehash := func(p *v1alpha1.RepartitionPlan) { p.Spec.Hash = v1alpha1.HashSteps(p.Spec.Steps) }
	cases := []struct {
		name   string
		forge  func(*v1alpha1.RepartitionPlan)
		reason string
	}{
		{name: "the manager's own plan", forge: func(*v1alpha1.RepartitionPlan) {}},
		{name: "no owner", forge: func(p *v1alpha1.RepartitionPlan) { p.OwnerReferences = nil }, reason: ReasonNotOwned},
		{name: "owner that is not the controller", forge: func(p *v1alpha1.RepartitionPlan) {
			p.OwnerReferences[0].Controller = nil
		}, reason: ReasonNotOwned},
		{name: "owner with another UID", forge: func(p *v1alpha1.RepartitionPlan) { p.OwnerReferences[0].UID = "old" }, reason: ReasonNotOwned},
		{name: "owner of another kind", forge: func(p *v1alpha1.RepartitionPlan) { p.OwnerReferences[0].Kind = "ConfigMap" }, reason: ReasonNotOwned},
		{name: "owner of another group", forge: func(p *v1alpha1.RepartitionPlan) {
			p.OwnerReferences[0].APIVersion = "evil.example.com/v1"
		}, reason: ReasonNotOwned},
		{name: "made-up hash", forge: func(p *v1alpha1.RepartitionPlan) { p.Spec.Hash = "0123456789abcdef" }, reason: ReasonSpecHashMismatch},
		{name: "steps edited after hashing", forge: func(p *v1alpha1.RepartitionPlan) {
			p.Spec.Steps[0].Evictions[0].Name = "someone-else"
		}, reason: ReasonSpecHashMismatch},
		{name: "node outside the pool", forge: func(p *v1alpha1.RepartitionPlan) { p.Spec.Steps[0].Node = "elsewhere"; rehash(p) },
			reason: ReasonNodeOutsidePool},
		{name: "plan says not disruptive", forge: func(p *v1alpha1.RepartitionPlan) { p.Spec.Disruptive = false; rehash(p) },
			reason: ReasonDisruptiveLie},
		{name: "step says not disruptive", forge: func(p *v1alpha1.RepartitionPlan) { p.Spec.Steps[0].Disruptive = false; rehash(p) },
			reason: ReasonDisruptiveLie},
		{name: "eviction without a UID", forge: func(p *v1alpha1.RepartitionPlan) { p.Spec.Steps[0].Evictions[0].UID = ""; rehash(p) },
			reason: ReasonMissingPodUID},
		{name: "someone else's mig-parted entry", forge: func(p *v1alpha1.RepartitionPlan) {
			p.Spec.Steps[0].MIGConfigName = "all-disabled"
			rehash(p)
		}, reason: ReasonForeignConfigName},
		{name: "someone else's device-plugin key", forge: func(p *v1alpha1.RepartitionPlan) {
			p.Spec.Steps[0].SharingConfig = &v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: 2}
			p.Spec.Steps[0].SharingConfigName = "default"
			rehash(p)
		}, reason: ReasonForeignConfigName},
		{name: "waits for a node that is not a step", forge: func(p *v1alpha1.RepartitionPlan) {
			p.Spec.Steps[0].WaitsFor = []string{"gpu-9"}
			rehash(p)
		}, reason: ReasonBadOrder},
		{name: "steps that wait for each other", forge: func(p *v1alpha1.RepartitionPlan) {
			second := p.Spec.Steps[0]
			second.Node, second.WaitsFor = "gpu-2", []string{"gpu-1"}
			p.Spec.Steps[0].WaitsFor = []string{"gpu-2"}
			p.Spec.Steps = append(p.Spec.Steps, second)
			rehash(p)
		}, reason: ReasonBadOrder},
		{name: "a landing outside the pool", forge: func(p *v1alpha1.RepartitionPlan) {
			p.Spec.Steps[0].Evictions[0].LandingNode = "elsewhere"
			rehash(p)
		}, reason: ReasonBadOrder},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plan := trustedPlan(policy)
			tc.forge(plan)
			got := Authenticate(plan, policy, inPool)
			if got.Reason != tc.reason {
				t.Fatalf("Authenticate = %+v, want reason %q", got, tc.reason)
			}
			if tc.reason != "" && !strings.Contains(got.Message, " ") {
				t.Errorf("refusal %s has no message", got.Reason)
			}
		})
	}
}

func TestApprovedNeedsEvidenceNotAPhase(t *testing.T) {
	manual := &v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pool-a", UID: "u"}}
	plan := trustedPlan(manual)
	plan.Status.Phase, plan.Status.Approved = v1alpha1.PlanExecuting, true
	if Approved(plan, manual) {
		t.Fatal("a recorded phase approved a plan under Manual")
	}
	plan.Annotations = map[string]string{v1alpha1.AnnotationApprove: "deadbeefdeadbeef"}
	if Approved(plan, manual) {
		t.Fatal("an approval naming another hash approved the plan")
	}
	plan.Annotations[v1alpha1.AnnotationApprove] = plan.Spec.Hash
	if !Approved(plan, manual) {
		t.Fatal("the approval annotation with the plan's hash did not approve it")
	}
	plan.Annotations[v1alpha1.AnnotationReject] = "no"
	if Approved(plan, manual) {
		t.Fatal("a rejected plan counted as approved")
	}

	idle := manual.DeepCopy()
	idle.Spec.Disruption.Approval = v1alpha1.ApprovalAutoIdle
	plan.Annotations = nil
	if Approved(plan, idle) {
		t.Fatal("AutoIdle approved a disruptive plan")
	}
	auto := manual.DeepCopy()
	auto.Spec.Disruption.Approval = v1alpha1.ApprovalAuto
	if Approved(plan, auto) {
		t.Fatal("a plan made before spec.approval existed was approved by the policy's mode")
	}
	plan.Spec.Approval = v1alpha1.ApprovalManual
	if Approved(plan, auto) {
		t.Fatal("a plan made under Manual was approved by a later switch of its policy to Auto")
	}
	plan.Spec.Approval = v1alpha1.ApprovalAuto
	if !Approved(plan, auto) {
		t.Fatal("a plan made under Auto was not approved under Auto")
	}
	if Approved(plan, manual) {
		t.Fatal("a plan made under Auto kept its approval after its policy went back to Manual")
	}
	auto.Spec.Planning.Paused = true
	if !Approved(plan, auto) {
		t.Fatal("pausing an Auto policy withdrew the approval of a plan it approved; paused only stops new plans")
	}
}
