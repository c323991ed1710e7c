package podrecord

import (
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/gpupool/gpupool/internal/fixture"
)

// The record keeps how long an evicted pod may take to terminate: its own grace period, or the
// API server's default when the pod (a hand-written snapshot) has none.
func TestNewKeepsTheGracePeriod(t *testing.T) {
	p := fixture.Pod("team/x", fixture.Running("gpu-1"))
	p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(1800))
	if got := New(&p, &Interner{}).GracePeriod; got != 30*time.Minute {
		t.Errorf("GracePeriod = %s, want 30m", got)
	}
	p.Spec.TerminationGracePeriodSeconds = nil
	if got := New(&p, nil).GracePeriod; got != 30*time.Second {
		t.Errorf("GracePeriod of a pod without one = %s, want the API server's default 30s", got)
	}
}
