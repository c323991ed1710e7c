package heartbeat

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// A short run on a real API server: every mode runs every agent; the Lease mode sends the API
// server and its watchers a small fraction of the status mode's bytes (each status write
// carries the whole 8-GPU report; a renewal a few hundred bytes), and the readiness mode sends
// nothing at all once each agent has written its report.
func TestRunComparesTheHeartbeats(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server and runs each mode for two seconds")
	}
	rep, err := Run(context.Background(), Config{Nodes: 10, Period: time.Second, Window: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rep.Rows))
	}
	status, lease, readiness := rep.Rows[0], rep.Rows[1], rep.Rows[2]
	if readiness.Beats < 10 || readiness.Requests != 0 || readiness.WatchBytes != 0 {
		t.Errorf("readiness: %d visits made %d requests (watchers got %d bytes): want visits and no request", readiness.Beats, readiness.Requests, readiness.WatchBytes)
	}
	for _, r := range rep.Rows[:2] {
		// An agent writes when a period has passed since its last write; on a loaded machine a
		// visit can come a little early and skip, so nine beats in ten must write, not all.
		if r.Beats < 10 || r.Requests*10 < int64(r.Beats)*9 {
			t.Errorf("%s: %d beats and %d requests: every agent must beat and (nearly) each beat write", r.Mode, r.Beats, r.Requests)
		}
	}
	if rep.StatusSize < 10_000 {
		t.Errorf("the status of an 8-GPU node is %d bytes: not the realistic report the comparison needs", rep.StatusSize)
	}
	if lease.RequestBytes*10 > status.RequestBytes || lease.WatchBytes*10 > status.WatchBytes {
		t.Errorf("the Lease mode sent %d bytes (watchers got %d) against %d (%d): not a tenth", lease.RequestBytes, lease.WatchBytes,
			status.RequestBytes, status.WatchBytes)
	}
	var out bytes.Buffer
	if err := rep.Write(&out); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"| Lease every period, status on change |", "| pod readiness, status on change (chart default) | "} {
		if !strings.Contains(out.String(), row) {
			t.Errorf("the table lacks the row %q:\n%s", row, out.String())
		}
	}
}
