package pool

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/podrecord"
)

// TestTimeFactsFollowTheClock: a report goes stale when neither it nor its heartbeat is within
// maxReportAge, and a pod counts as pending once it has waited minPendingAge; both move with
// the time alone, which is what a recheck without events must notice.
func TestTimeFactsFollowTheClock(t *testing.T) {
	report := func(name string, observed time.Time) v1alpha1.GPUNode {
		r := fixture.Report(name)
		r.Status.ObservedTime = ptr.To(metav1.NewTime(observed))
		return r
	}
	t0 := fixture.Now
	c := &Cluster{
		GPUNodes: []v1alpha1.GPUNode{report("old", t0.Add(-time.Hour)), report("beating", t0.Add(-time.Hour)), report("fresh", t0)},
		// The Lease says "beating" is alive though its report is an hour old.
		Heartbeats: map[string]time.Time{"beating": t0},
		Pods: podrecord.FromPods(fixture.Pointers([]corev1.Pod{
			fixture.Pod("team/waiting", fixture.Unschedulable(t0.Add(-time.Hour)), fixture.Requests("nvidia.com/gpu", "1")),
			fixture.Pod("team/new", fixture.Unschedulable(t0), fixture.Requests("nvidia.com/gpu", "1")),
			fixture.Pod("team/running", fixture.Running("fresh"), fixture.Requests("nvidia.com/gpu", "1")),
		})),
	}
	const maxReportAge = 2 * time.Minute
	policy := policyFor("a", "a")
	policy.Spec.Planning.MinPendingAge = &metav1.Duration{Duration: 30 * time.Second}
	cases := []struct {
		at           time.Time
		stale        []string
		pending      []string
		sameAsBefore bool
	}{
		{at: t0, stale: []string{"old"}, pending: []string{"team/waiting"}},
		{at: t0.Add(10 * time.Second), stale: []string{"old"}, pending: []string{"team/waiting"}, sameAsBefore: true},
		{at: t0.Add(time.Minute), stale: []string{"old"}, pending: []string{"team/new", "team/waiting"}},
		{at: t0.Add(3 * time.Minute), stale: []string{"beating", "fresh", "old"}, pending: []string{"team/new", "team/waiting"}},
	}
	var before TimeFacts
	for i, tc := range cases {
		got := TimeFactsOf(&policy, c, tc.at, maxReportAge)
		want := TimeFacts{Stale: tc.stale, Pending: tc.pending}
		if !got.Equal(want) {
			t.Errorf("at %s: got %+v, want %+v", tc.at.Sub(t0), got, want)
		}
		if i > 0 && got.Equal(before) != tc.sameAsBefore {
			t.Errorf("at %s: equal to the facts before = %v, want %v", tc.at.Sub(t0), got.Equal(before), tc.sameAsBefore)
		}
		before = got
	}
	if got := TimeFactsOf(&policy, c, t0.Add(time.Hour), 0); len(got.Stale) != 0 {
		t.Errorf("with no maxReportAge no report is stale, got %v", got.Stale)
	}
}

// TestFrozenNodesThawWithTime: a node changed by a plan is frozen for the stabilization window
// and a node whose step failed for its backoff; both thaw with no object changing, which
// TimeFacts must show (the recheck of a pool at rest passes again then), while the seconds
// ticking inside the window must not (they change nothing the planner may do).
func TestFrozenNodesThawWithTime(t *testing.T) {
	t0 := fixture.Now
	at := func(d time.Duration) *metav1.Time { return ptr.To(metav1.NewTime(t0.Add(d))) }
	changed := planOn("a-changed", "a", v1alpha1.PlanSucceeded, v1alpha1.NodeStep{Node: "a-1"})
	changed.Status.Nodes = []v1alpha1.NodeStepStatus{{Node: "a-1", State: v1alpha1.NodeDone, LastTransitionTime: at(0)}}
	failed := planOn("a-failed", "a", v1alpha1.PlanFailed, v1alpha1.NodeStep{Node: "a-2"})
	failed.Status.Nodes = []v1alpha1.NodeStepStatus{{Node: "a-2", State: v1alpha1.NodeFailed, LastTransitionTime: at(0)}}
	c := &Cluster{Plans: []v1alpha1.RepartitionPlan{changed, failed}}
	policy := policyFor("a", "a")
	policy.Spec.Planning.StabilizationWindow = &metav1.Duration{Duration: 2 * time.Minute}
	// One failure waits max(window, 1m) = 2m; the window also ends 2m after the change. The
	// failed node's second failure would double it: a third plan, failing a minute later.
	refailed := planOn("a-refailed", "a", v1alpha1.PlanFailed, v1alpha1.NodeStep{Node: "a-2"})
	refailed.Status.Nodes = []v1alpha1.NodeStepStatus{{Node: "a-2", State: v1alpha1.NodeFailed, LastTransitionTime: at(time.Minute)}}
	c.Plans = append(c.Plans, refailed)
	cases := []struct {
		at           time.Duration
		frozen       []string
		sameAsBefore bool
	}{
		{at: 10 * time.Second, frozen: []string{"a-1", "a-2"}},
		{at: 50 * time.Second, frozen: []string{"a-1", "a-2"}, sameAsBefore: true},
		// The window is over for a-1; a-2's two failures wait 4m from the last, until 5m.
		{at: 3 * time.Minute, frozen: []string{"a-2"}},
		{at: 4 * time.Minute, frozen: []string{"a-2"}, sameAsBefore: true},
		{at: 6 * time.Minute, frozen: nil},
	}
	var before TimeFacts
	for i, tc := range cases {
		got := TimeFactsOf(&policy, c, t0.Add(tc.at), 0)
		if !slices.Equal(got.Frozen, tc.frozen) {
			t.Errorf("at %s: frozen %v, want %v", tc.at, got.Frozen, tc.frozen)
		}
		if i > 0 && got.Equal(before) != tc.sameAsBefore {
			t.Errorf("at %s: equal to the facts before = %v, want %v", tc.at, got.Equal(before), tc.sameAsBefore)
		}
		before = got
	}
}
