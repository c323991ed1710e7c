package pool

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
)

// TestDecide table-tests the proposal lifecycle the policy controller carries out: what a
// user sees of plans (kept, replaced, withdrawn, refused) is decided here, without a cluster.
func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	policy := &v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	policy.Spec.Disruption.Approval = v1alpha1.ApprovalManual
	all1g, two3g := v1alpha1.ProfileCounts{"1g.18gb": 7}, v1alpha1.ProfileCounts{"3g.71gb": 2}
	planFor := func(name string, to v1alpha1.ProfileCounts, pods ...string) v1alpha1.RepartitionPlan {
		p := changePlan(name, step("n1", 0, all1g, to))
		p.Spec.Approval = v1alpha1.ApprovalManual
		for _, pod := range pods {
			p.Spec.Expected.Pods = append(p.Spec.Expected.Pods, v1alpha1.PodReference{Namespace: "ns", Name: pod})
		}
		return p
	}
	want := planFor("want", two3g, "a")
	// under review: an existing plan named name, made age ago, for pods.
	underReview := func(name string, to v1alpha1.ProfileCounts, age time.Duration, pods ...string) v1alpha1.RepartitionPlan {
		p := planFor(name, to, pods...)
		p.CreationTimestamp = metav1.NewTime(now.Add(-age))
		p.Spec.Hash = HashAs(&p, name)
		return p
	}
	pending := func(pods ...string) []demand.Request {
		var out []demand.Request
		for _, p := range pods {
			out = append(out, demand.Request{Pod: types.NamespacedName{Namespace: "ns", Name: p}})
		}
		return out
	}
	type expect struct {
		supersede []string // plan: why-prefix
		create    bool
		current   string
		refused   bool
	}
	for _, tc := range []struct {
		name    string
		plans   []v1alpha1.RepartitionPlan
		want    *v1alpha1.RepartitionPlan
		pending []demand.Request
		expect  expect
	}{
		{name: "nothing to do", expect: expect{}},
		{name: "new demand: a plan is created", want: &want, pending: pending("a"),
			expect: expect{create: true, current: "want"}},
		{name: "an approval not yet recorded protects the plan, and the planner's wish is not even made",
			plans: func() []v1alpha1.RepartitionPlan {
				p := underReview("old", v1alpha1.ProfileCounts{"7g.141gb": 1}, time.Hour, "a")
				p.Annotations = map[string]string{v1alpha1.AnnotationApprove: p.Spec.Hash}
				return []v1alpha1.RepartitionPlan{p}
			}(), want: nil, pending: pending("a"), expect: expect{current: "old"}},
		{name: "the same change under review is kept", plans: []v1alpha1.RepartitionPlan{underReview("old", two3g, 30*time.Minute, "a")},
			want: &want, pending: pending("a"), expect: expect{current: "old"}},
		{name: "inside the window a rearrangement of the same demand does not replace it",
			plans: []v1alpha1.RepartitionPlan{underReview("old", v1alpha1.ProfileCounts{"7g.141gb": 1}, time.Minute, "a")},
			want:  &want, pending: pending("a"), expect: expect{current: "old"}},
		{name: "inside the window, new demand replaces it",
			plans: []v1alpha1.RepartitionPlan{underReview("old", v1alpha1.ProfileCounts{"7g.141gb": 1}, time.Minute, "a")},
			want:  func() *v1alpha1.RepartitionPlan { w := planFor("want", two3g, "a", "b"); return &w }(), pending: pending("a", "b"),
			expect: expect{supersede: []string{"old: superseded by a new plan that also serves"}, create: true, current: "want"}},
		{name: "past the window another change replaces it",
			plans: []v1alpha1.RepartitionPlan{underReview("old", v1alpha1.ProfileCounts{"7g.141gb": 1}, 30*time.Minute, "a")},
			want:  &want, pending: pending("a"),
			expect: expect{supersede: []string{"old: superseded by a new plan"}, create: true, current: "want"}},
		{name: "no demand left: withdrawn", plans: []v1alpha1.RepartitionPlan{underReview("old", two3g, time.Minute, "a")},
			want: nil, pending: nil, expect: expect{supersede: []string{"old: " + WithdrawPrefix + "none of the 1 pod(s)"}}},
		{name: "its pods gone, inside the window: withdrawn, and the new demand gets its own plan",
			plans: []v1alpha1.RepartitionPlan{underReview("old", v1alpha1.ProfileCounts{"7g.141gb": 1}, time.Minute, "gone")},
			want:  &want, pending: pending("a"),
			expect: expect{supersede: []string{"old: " + WithdrawPrefix}, create: true, current: "want"}},
		{name: "a rejected change is not proposed again", plans: func() []v1alpha1.RepartitionPlan {
			p := underReview("old", two3g, time.Minute, "a")
			p.Annotations = map[string]string{v1alpha1.AnnotationReject: "no"}
			return []v1alpha1.RepartitionPlan{p}
		}(), want: &want, pending: pending("a"), expect: expect{refused: true}},
		{name: "a plan made under another approval mode is replaced by the same change under the policy's",
			plans: func() []v1alpha1.RepartitionPlan {
				p := underReview("old", two3g, time.Minute, "a")
				p.Spec.Approval = v1alpha1.ApprovalAuto
				return []v1alpha1.RepartitionPlan{p}
			}(), want: &want, pending: pending("a"),
			expect: expect{supersede: []string{"old: superseded: the policy's approval is now Manual, this plan was made under Auto"},
				create: true, current: "want"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			called := false
			d := Decide(policy, tc.plans, func() *v1alpha1.RepartitionPlan { called = true; return tc.want }, tc.pending, now)
			var got []string
			for _, s := range d.Supersede {
				got = append(got, s.Plan.Name+": "+s.Why)
			}
			if len(got) != len(tc.expect.supersede) {
				t.Fatalf("supersede %q, want %q", got, tc.expect.supersede)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.expect.supersede[i]) {
					t.Errorf("supersede %q, want it to start %q", got[i], tc.expect.supersede[i])
				}
			}
			if (d.Create != nil) != tc.expect.create {
				t.Errorf("create = %v, want %v", d.Create != nil, tc.expect.create)
			}
			current := ""
			if d.Current != nil {
				current = d.Current.Name
			}
			if current != tc.expect.current {
				t.Errorf("current = %q, want %q", current, tc.expect.current)
			}
			if (d.Refused != nil) != tc.expect.refused {
				t.Errorf("refused = %+v, want %v", d.Refused, tc.expect.refused)
			}
			if tc.expect.current == "old" && tc.want == nil && called && len(tc.plans) > 0 && tc.plans[0].Annotations[v1alpha1.AnnotationApprove] != "" {
				t.Errorf("the planner's plan was made though a plan is past the gate")
			}
		})
	}
}
