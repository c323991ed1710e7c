package heartbeat

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestParseCPUTime(t *testing.T) {
	for _, tc := range []struct {
		line string
		want time.Duration
		err  bool
	}{
		// utime 250 and stime 50 ticks: 3 s. The command name may hold spaces and ')'.
		{line: "4242 (kube-apiserver) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 0 0", want: 3 * time.Second},
		{line: "7 (odd ) name) R 1 7 7 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 1 0 0", want: 20 * time.Millisecond},
		{line: "garbage", err: true},
		{line: "1 (x) S 1 2 3", err: true},
	} {
		got, err := parseCPUTime(tc.line)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseCPUTime(%q) = %v, %v; want %v, error %v", tc.line, got, err, tc.want, tc.err)
		}
	}
}

// A short run on a real API server: both modes run every agent, and the Lease mode sends the
// API server and its watchers a small fraction of the status mode's bytes (each status write
// carries the whole 8-GPU report; a renewal a few hundred bytes).
func TestRunComparesTheTwoHeartbeats(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server and runs each mode for two seconds")
	}
	rep, err := Run(context.Background(), Config{Nodes: 10, Period: time.Second, Window: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rep.Rows))
	}
	status, lease := rep.Rows[0], rep.Rows[1]
	for _, r := range rep.Rows {
		if r.Beats < 10 || r.Requests < int64(r.Beats) {
			t.Errorf("%s: %d beats and %d requests: every agent must beat and each beat write", r.Mode, r.Beats, r.Requests)
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
	if !strings.Contains(out.String(), "| Lease every period, status on change (now) |") {
		t.Errorf("the table lacks the Lease row:\n%s", out.String())
	}
}
