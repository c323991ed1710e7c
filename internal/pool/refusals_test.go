package pool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
)

func changePlan(name string, steps ...v1alpha1.NodeStep) v1alpha1.RepartitionPlan {
	return v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.RepartitionPlanSpec{Policy: "p", Steps: steps}}
}

func step(node string, gpu int32, from, to v1alpha1.ProfileCounts, evict ...string) v1alpha1.NodeStep {
	s := v1alpha1.NodeStep{Node: node, MIGConfigName: "gpupool-" + node, GPUs: []v1alpha1.GPUChange{{Index: gpu, From: from, To: to}}}
	for _, e := range evict {
		s.Evictions = append(s.Evictions, v1alpha1.Eviction{PodReference: v1alpha1.PodReference{Namespace: "ns", Name: e}, UID: e + "-uid"})
	}
	return s
}

func TestSameChangeIsTheLayoutNotThePods(t *testing.T) {
	all1g := v1alpha1.ProfileCounts{"1g.18gb": 7}
	two3g := v1alpha1.ProfileCounts{"3g.71gb": 2}
	base := changePlan("a", step("n1", 0, all1g, two3g, "old-pod"))
	for _, tc := range []struct {
		name  string
		other v1alpha1.RepartitionPlan
		same  bool
	}{
		{"identical", changePlan("b", step("n1", 0, all1g, two3g, "old-pod")), true},
		{"other pods evicted, other entry name", func() v1alpha1.RepartitionPlan {
			p := changePlan("b", step("n1", 0, all1g, two3g, "new-pod"))
			p.Spec.Steps[0].MIGConfigName = "gpupool-other"
			p.Spec.Expected.Pods = []v1alpha1.PodReference{{Namespace: "ns", Name: "x"}}
			return p
		}(), true},
		{"another node", changePlan("b", step("n2", 0, all1g, two3g)), false},
		{"another GPU", changePlan("b", step("n1", 1, all1g, two3g)), false},
		{"another target", changePlan("b", step("n1", 0, all1g, v1alpha1.ProfileCounts{"7g.141gb": 1})), false},
		{"a node more", changePlan("b", step("n1", 0, all1g, two3g), step("n2", 0, all1g, two3g)), false},
		{"sharing added", func() v1alpha1.RepartitionPlan {
			p := changePlan("b", step("n1", 0, all1g, two3g))
			p.Spec.Steps[0].SharingConfig = &v1alpha1.SharingConfig{}
			return p
		}(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SameChange(&base, &tc.other); got != tc.same {
				t.Errorf("SameChange = %v, want %v", got, tc.same)
			}
		})
	}
}

func TestRefusedChangeReadsTheGateNotTheRecordedPhase(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	policy := &v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	all1g, two3g := v1alpha1.ProfileCounts{"1g.18gb": 7}, v1alpha1.ProfileCounts{"3g.71gb": 2}
	want := changePlan("want", step("n1", 0, all1g, two3g))
	refused := func(mutate func(*v1alpha1.RepartitionPlan)) v1alpha1.RepartitionPlan {
		p := changePlan("old", step("n1", 0, all1g, two3g, "pod"))
		p.CreationTimestamp = metav1.NewTime(now.Add(-10 * time.Minute))
		mutate(&p)
		return p
	}
	rejectedAt := func(at time.Time) func(*v1alpha1.RepartitionPlan) {
		return func(p *v1alpha1.RepartitionPlan) {
			p.Annotations = map[string]string{v1alpha1.AnnotationReject: "no"}
			p.Status.Phase = v1alpha1.PlanRejected
			p.Status.Conditions = []metav1.Condition{{Type: "Approved", Status: metav1.ConditionFalse, Reason: "Rejected",
				LastTransitionTime: metav1.NewTime(at)}}
		}
	}
	for _, tc := range []struct {
		name    string
		plan    v1alpha1.RepartitionPlan
		refused bool
		until   time.Time
	}{
		{"rejection annotation not yet recorded", refused(func(p *v1alpha1.RepartitionPlan) {
			p.Annotations = map[string]string{v1alpha1.AnnotationReject: ""}
		}), true, now.Add(RefusalMemory)},
		{"rejection recorded an hour ago", refused(rejectedAt(now.Add(-time.Hour))), true, now.Add(RefusalMemory - time.Hour)},
		{"rejection recorded a day ago", refused(rejectedAt(now.Add(-RefusalMemory))), false, time.Time{}},
		{"expired by the clock, not yet recorded", refused(func(p *v1alpha1.RepartitionPlan) {
			p.CreationTimestamp = metav1.NewTime(now.Add(-2 * time.Hour))
		}), true, now.Add(RefusalMemory)},
		{"still awaiting approval", refused(func(*v1alpha1.RepartitionPlan) {}), false, time.Time{}},
		{"superseded", refused(func(p *v1alpha1.RepartitionPlan) {
			p.Annotations = map[string]string{v1alpha1.AnnotationSupersede: "better plan"}
		}), false, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RefusedChange([]v1alpha1.RepartitionPlan{tc.plan}, &want, policy, now)
			if (got != nil) != tc.refused {
				t.Fatalf("RefusedChange = %+v, want refused=%v", got, tc.refused)
			}
			if got != nil && !got.Until.Equal(tc.until) {
				t.Errorf("refused until %s, want %s", got.Until, tc.until)
			}
		})
	}
	other := changePlan("other", step("n2", 0, all1g, two3g))
	if got := RefusedChange([]v1alpha1.RepartitionPlan{refused(rejectedAt(now))}, &other, policy, now); got != nil {
		t.Errorf("a refusal of one change holds against another: %+v", got)
	}
}

func TestDemandGone(t *testing.T) {
	plan := changePlan("p")
	plan.Spec.Expected.Pods = []v1alpha1.PodReference{{Namespace: "ns", Name: "a"}, {Namespace: "ns", Name: "b"}}
	req := func(name string) demand.Request {
		return demand.Request{Pod: types.NamespacedName{Namespace: "ns", Name: name}}
	}
	if why := DemandGone(&plan, []demand.Request{req("b")}); why != "" {
		t.Errorf("one pod still waits, yet: %q", why)
	}
	if why, want := DemandGone(&plan, []demand.Request{req("c")}), WithdrawPrefix+"none of the 2 pod(s) it was made for is pending any more (ns/a, ns/b)"; why != want {
		t.Errorf("DemandGone = %q, want %q", why, want)
	}
	standby := changePlan("standby")
	if why := DemandGone(&standby, nil); why != "" {
		t.Errorf("a plan made for no pod is the planner's to withdraw: %q", why)
	}
}
