package scale

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpupool/gpupool/internal/agent"
)

// A small run end to end, so the benchmark cannot rot between the runs that publish its
// numbers: the fleet is written, both processes run and are measured, the manager plans for
// the pending pods and puts the new shape in the policy's status.
func TestRunMeasuresTheManagerBesideTheBaseline(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the manager and starts an API server")
	}
	for _, heartbeat := range []agent.Heartbeat{agent.HeartbeatReadiness, agent.HeartbeatLease} {
		t.Run(string(heartbeat), func(t *testing.T) { runSmall(t, heartbeat) })
	}
}

func runSmall(t *testing.T, heartbeat agent.Heartbeat) {
	res, err := Run(context.Background(), Config{Nodes: 12, RunningPerNode: 10, Period: 2 * time.Second, Heartbeat: heartbeat,
		Settle: time.Second, Window: 2 * time.Second, Workers: 8, Timeout: time.Minute, Dir: t.TempDir(), Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	if res.HeartbeatFailures != 0 {
		t.Errorf("%d Lease renewals failed", res.HeartbeatFailures)
	}
	if res.Manager.RSSMedian == 0 || res.Baseline.RSSMedian == 0 || res.Manager.Peak < res.Manager.RSSMedian {
		t.Errorf("memory not measured: manager %+v, baseline %+v", res.Manager, res.Baseline)
	}
	if res.FirstPlan == 0 || res.PlanSteps == 0 {
		t.Errorf("no first plan measured: %s, %d steps", res.FirstPlan, res.PlanSteps)
	}
	if res.APIServerIdle.Cores <= 0 || res.APIServerHeartbeats.RSSMedian == 0 {
		t.Errorf("the API server alone was not measured: idle %+v, heartbeats %+v", res.APIServerIdle, res.APIServerHeartbeats)
	}
	if res.LeftOut != 0 {
		t.Errorf("%d nodes left out of planning at rest: their agents' ready pods did not keep the reports usable", res.LeftOut)
	}
	if res.NewShapeStatus == 0 {
		t.Errorf("the new shape never reached the policy's status within %s", res.Timeout)
	}
	var out bytes.Buffer
	if err := Write(&out, []*Result{res}); err != nil {
		t.Fatal(err)
	}
	row := map[agent.Heartbeat]string{agent.HeartbeatReadiness: "| the agents' pods ready (no request to serve) |",
		agent.HeartbeatLease: "| the agents' Leases renewing every 2s |"}[heartbeat]
	for _, want := range []string{"### 12 nodes, 120 running pods, 12 pending", "| RSS, median of 1 s samples (MiB) |", "| manager: start to first plan |", "| heartbeats alone (the difference) |", row} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
