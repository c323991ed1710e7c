package pool

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/planner"
)

func TestPodNotesTellEachPendingPodWhereItStands(t *testing.T) {
	pod := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "team", Name: name} }
	pending := []demand.Request{{Pod: pod("served"), UID: "u1"}, {Pod: pod("odd"), UID: "u2"},
		{Pod: pod("elsewhere"), UID: "u3"}, {Pod: pod("fits"), UID: "u4"}}
	res := &planner.Result{FitsNow: []types.NamespacedName{pod("fits")}, Unserved: []planner.Unserved{
		{Pod: pod("odd"), Reason: planner.ReasonPartitionShape, Message: "no GPU in the pool offers 5g.70gb"},
		{Pod: pod("elsewhere"), Reason: planner.ReasonNotInPool, Message: "no node matches"}}}
	plan := &v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "p-1"}}
	plan.Spec.Expected.Pods = []v1alpha1.PodReference{{Namespace: "team", Name: "served"}, {Namespace: "team", Name: "gone"}}
	for _, tc := range []struct {
		name   string
		phase  v1alpha1.PlanPhase
		reason string
	}{
		{"awaiting approval", v1alpha1.PlanAwaitingApproval, PodReasonPlanned},
		{"executing", v1alpha1.PlanExecuting, PodReasonPlanRunning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			notes := PodNotes(pending, res, plan, tc.phase, nil, nil)
			if len(notes) != 2 {
				t.Fatalf("notes = %+v, want the served and the unservable pod only", notes)
			}
			if n := notes[pod("served")]; n.Reason != tc.reason || n.UID != "u1" || !strings.Contains(n.Message, "plan p-1") {
				t.Errorf("served pod told %+v", n)
			}
			if n := notes[pod("odd")]; n.Reason != PodReasonCannotHelp || !strings.Contains(n.Message, "(PartitionShape): no GPU in the pool offers 5g.70gb") {
				t.Errorf("unservable pod told %+v", n)
			}
		})
	}
	until := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	notes := PodNotes(pending, res, nil, "", &Refusal{Plan: "p-0", Phase: v1alpha1.PlanRejected, Until: until}, plan)
	if n := notes[pod("served")]; n.Reason != PodReasonRefused || !strings.Contains(n.Message, "rejected in plan p-0") ||
		!strings.Contains(n.Message, "2026-12-06T00:00:00Z") {
		t.Errorf("pod whose change was refused told %+v", n)
	}
	a := PodNotes(pending, res, plan, v1alpha1.PlanAwaitingApproval, nil, nil)[pod("served")]
	b := PodNotes(pending, res, plan, v1alpha1.PlanExecuting, nil, nil)[pod("served")]
	if a.Key == b.Key {
		t.Errorf("approval changes what the pod is told, but not its key %q", a.Key)
	}
}
