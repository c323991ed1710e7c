package pool

import (
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
