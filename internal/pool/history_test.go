package pool

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func failedPlan(node string, at time.Time) v1alpha1.RepartitionPlan {
	return v1alpha1.RepartitionPlan{
		Spec: v1alpha1.RepartitionPlanSpec{Steps: []v1alpha1.NodeStep{{Node: node,
			Evictions: []v1alpha1.Eviction{{PodReference: v1alpha1.PodReference{Namespace: "a", Name: "b"}}}}}},
		Status: v1alpha1.RepartitionPlanStatus{Nodes: []v1alpha1.NodeStepStatus{{Node: node, State: v1alpha1.NodeFailed,
			StartedTime: &metav1.Time{Time: at.Add(-time.Minute)}, LastTransitionTime: &metav1.Time{Time: at}}}},
	}
}

func TestFailureBackoffDoublesPerFailure(t *testing.T) {
	cases := []struct {
		name     string
		failures []time.Duration // ago
		want     time.Duration   // wait from now; 0 means plannable
	}{
		{name: "never failed", want: 0},
		{name: "one failure just now", failures: []time.Duration{0}, want: 2 * time.Minute},
		{name: "one failure long enough ago", failures: []time.Duration{3 * time.Minute}, want: 0},
		{name: "three failures: 8 minutes after the last", failures: []time.Duration{0, 10 * time.Minute, 20 * time.Minute}, want: 8 * time.Minute},
		{name: "many failures stay capped", failures: []time.Duration{0, time.Minute, 2 * time.Minute, 3 * time.Minute, 4 * time.Minute,
			5 * time.Minute, 6 * time.Minute, 7 * time.Minute, 8 * time.Minute, 9 * time.Minute}, want: 6 * time.Hour},
		{name: "failures older than a day are forgiven", failures: []time.Duration{25 * time.Hour}, want: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var plans []v1alpha1.RepartitionPlan
			for _, ago := range tc.failures {
				plans = append(plans, failedPlan("gpu-1", t0.Add(-ago)))
			}
			plans = append(plans, failedPlan("other", t0))
			until, _ := FailureBackoff(plans, "gpu-1", 2*time.Minute, t0)
			got := time.Duration(0)
			if !until.IsZero() {
				got = until.Sub(t0)
			}
			if got != tc.want {
				t.Errorf("wait %s, want %s", got, tc.want)
			}
		})
	}
}

func TestEvictionsPausedOnceTheHourlyBoundIsSpent(t *testing.T) {
	policy := &v1alpha1.GPUPoolPolicy{}
	policy.Spec.Disruption.MaxDisruptiveStepsPerHour = ptr.To(int32(2))
	plans := []v1alpha1.RepartitionPlan{failedPlan("a", t0.Add(-10*time.Minute)), failedPlan("b", t0.Add(-2*time.Hour))}
	if why := EvictionsPaused(policy, plans, t0); why != "" {
		t.Fatalf("paused after one disruptive step in the hour: %s", why)
	}
	plans = append(plans, failedPlan("c", t0.Add(-30*time.Minute)))
	if why := EvictionsPaused(policy, plans, t0); why == "" {
		t.Fatal("not paused after two disruptive steps in the hour with a bound of 2")
	}
	if why := EvictionsPaused(policy, plans, t0.Add(time.Hour)); why != "" {
		t.Fatalf("still paused an hour later: %s", why)
	}
}

// TestInHistoryKeepsWhatTheBoundsRead guards plan garbage collection against erasing the
// history the hourly eviction bound and the failure backoff count: a plan with a disruptive
// step started in the last hour, or a step failed in the last day, is kept.
func TestInHistoryKeepsWhatTheBoundsRead(t *testing.T) {
	done := func(started time.Time, evicts bool) *v1alpha1.RepartitionPlan {
		step := v1alpha1.NodeStep{Node: "gpu-1"}
		if evicts {
			step.Evictions = []v1alpha1.Eviction{{PodReference: v1alpha1.PodReference{Namespace: "a", Name: "b"}}}
		}
		return &v1alpha1.RepartitionPlan{Spec: v1alpha1.RepartitionPlanSpec{Steps: []v1alpha1.NodeStep{step}},
			Status: v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanSucceeded, Nodes: []v1alpha1.NodeStepStatus{{Node: "gpu-1",
				State: v1alpha1.NodeDone, StartedTime: &metav1.Time{Time: started}, LastTransitionTime: &metav1.Time{Time: started.Add(time.Minute)}}}}}
	}
	failed := failedPlan("gpu-1", t0.Add(-23*time.Hour))
	for _, tc := range []struct {
		name string
		plan *v1alpha1.RepartitionPlan
		want bool
	}{
		{"evicted 10 minutes ago", done(t0.Add(-10*time.Minute), true), true},
		{"evicted two hours ago", done(t0.Add(-2*time.Hour), true), false},
		{"re-carved an idle GPU 10 minutes ago", done(t0.Add(-10*time.Minute), false), false},
		{"failed 23 hours ago", &failed, true},
		{"superseded before any step", &v1alpha1.RepartitionPlan{Status: v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanSuperseded}}, false},
	} {
		if got := InHistory(tc.plan, t0); got != tc.want {
			t.Errorf("%s: InHistory = %t, want %t", tc.name, got, tc.want)
		}
	}
	old := failedPlan("gpu-1", t0.Add(-25*time.Hour))
	if InHistory(&old, t0) {
		t.Error("a failure older than a day is still kept")
	}
}

// What is left of the hour counts the steps started in the last hour and the evicting steps
// approved plans have yet to start, so that two plans cannot both spend the same step.
func TestDisruptiveStepsLeftCountsStartedAndPromisedSteps(t *testing.T) {
	policy := &v1alpha1.GPUPoolPolicy{}
	policy.Spec.Disruption.MaxDisruptiveStepsPerHour = ptr.To(int32(4))
	evicting := func(nodes ...string) []v1alpha1.NodeStep {
		var steps []v1alpha1.NodeStep
		for _, n := range nodes {
			steps = append(steps, v1alpha1.NodeStep{Node: n, Disruptive: true,
				Evictions: []v1alpha1.Eviction{{PodReference: v1alpha1.PodReference{Namespace: "a", Name: n}}}})
		}
		return steps
	}
	approved := v1alpha1.RepartitionPlan{Spec: v1alpha1.RepartitionPlanSpec{Steps: evicting("p", "q")},
		Status: v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanExecuting,
			Nodes: []v1alpha1.NodeStepStatus{{Node: "p", State: v1alpha1.NodeDraining, StartedTime: &metav1.Time{Time: t0.Add(-time.Minute)}}}}}
	waiting := v1alpha1.RepartitionPlan{Spec: v1alpha1.RepartitionPlanSpec{Steps: evicting("x", "y")},
		Status: v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanAwaitingApproval}}
	cases := []struct {
		name  string
		plans []v1alpha1.RepartitionPlan
		want  int
	}{
		{name: "nothing spent", want: 4},
		{name: "a step an hour and a half ago no longer counts", plans: []v1alpha1.RepartitionPlan{failedPlan("a", t0.Add(-90*time.Minute))}, want: 4},
		{name: "a step 10 minutes ago counts", plans: []v1alpha1.RepartitionPlan{failedPlan("a", t0.Add(-10*time.Minute))}, want: 3},
		{name: "an executing plan's started and promised steps count", plans: []v1alpha1.RepartitionPlan{approved}, want: 2},
		{name: "a plan awaiting approval promises nothing", plans: []v1alpha1.RepartitionPlan{waiting}, want: 4},
		{name: "never below zero", plans: []v1alpha1.RepartitionPlan{approved, failedPlan("a", t0), failedPlan("b", t0), failedPlan("c", t0)}, want: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := DisruptiveStepsLeft(policy, tc.plans, t0); got != tc.want {
				t.Errorf("left %d, want %d", got, tc.want)
			}
			if paused := EvictionsPaused(policy, tc.plans, t0) != ""; paused != (tc.want == 0) {
				t.Errorf("EvictionsPaused=%t with %d left", paused, tc.want)
			}
		})
	}
	if got := HourlyCapFreed([]v1alpha1.RepartitionPlan{failedPlan("a", t0.Add(-10*time.Minute)), failedPlan("b", t0.Add(-5*time.Minute))}, t0); !got.Equal(t0.Add(-11 * time.Minute).Add(time.Hour)) {
		t.Errorf("HourlyCapFreed %s, want the oldest counted step's start plus an hour", got)
	}
}
