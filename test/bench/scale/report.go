package scale

import (
	"fmt"
	"io"
	"time"

	"github.com/gpupool/gpupool/internal/agent"
)

const mib = 1 << 20

// Write renders the results as Markdown tables: the manager beside the bare-cache baseline,
// with their ratio, then the latencies, per fleet size.
func Write(w io.Writer, results []*Result) error {
	ew := &errWriter{w: w}
	for _, r := range results {
		budget := r.Budget
		if budget == "" {
			budget = "1 (the default)"
		}
		ew.printf("### %d nodes, %d running pods, %d pending\n\n", r.Nodes, r.Running, r.Pending)
		ew.printf("maxDisruptedNodes %s. ", budget)
		if r.Heartbeat == agent.HeartbeatLease {
			ew.printf("Fleet written in %s. At rest: the agents' Leases renewed every period, nothing else changing.\n\n", r.Seed.Round(time.Second))
		} else {
			ew.printf("Fleet written in %s, with a Ready agent pod per node. At rest: the agents' heartbeat is their pods' readiness, "+
				"which their kubelets probe locally and write only on change, so nothing changes.\n\n", r.Seed.Round(time.Second))
		}
		ew.printf("| at rest | manager | bare cache | manager / bare cache |\n|---|---:|---:|---:|\n")
		row := func(what string, m, b float64, format string) {
			ratio := "n/a"
			if b > 0 {
				ratio = fmt.Sprintf("%.2fx", m/b)
			}
			ew.printf("| %s | "+format+" | "+format+" | %s |\n", what, m, b, ratio)
		}
		row("RSS, median of 1 s samples (MiB)", float64(r.Manager.RSSMedian)/mib, float64(r.Baseline.RSSMedian)/mib, "%.0f")
		row("RSS peak, VmHWM (MiB)", float64(r.Manager.Peak)/mib, float64(r.Baseline.Peak)/mib, "%.0f")
		row("CPU (cores)", r.Manager.Cores, r.Baseline.Cores, "%.3f")
		row("API requests per second", r.ManagerRequests, r.BaselineRequests, "%.1f")
		row("API server CPU, heartbeats included (cores)", r.APIServerManager.Cores, r.APIServerBaseline.Cores, "%.3f")
		row("API server RSS, median (MiB)", float64(r.APIServerManager.RSSMedian)/mib, float64(r.APIServerBaseline.RSSMedian)/mib, "%.0f")
		ew.printf("\n| API server alone, no client but the agents | cores | RSS median (MiB) |\n|---|---:|---:|\n")
		ew.printf("| idle, before any heartbeat | %.3f | %.0f |\n", r.APIServerIdle.Cores, float64(r.APIServerIdle.RSSMedian)/mib)
		if r.Heartbeat == agent.HeartbeatLease {
			ew.printf("| the agents' Leases renewing every %s | %.3f | %.0f |\n", r.Period, r.APIServerHeartbeats.Cores, float64(r.APIServerHeartbeats.RSSMedian)/mib)
		} else {
			ew.printf("| the agents' pods ready (no request to serve) | %.3f | %.0f |\n", r.APIServerHeartbeats.Cores, float64(r.APIServerHeartbeats.RSSMedian)/mib)
		}
		ew.printf("| heartbeats alone (the difference) | %.3f | |\n", r.APIServerHeartbeats.Cores-r.APIServerIdle.Cores)
		ew.printf("\n| latency | measured |\n|---|---:|\n")
		ew.printf("| bare cache: start to caches synced | %s |\n", r.BaselineSynced.Round(100*time.Millisecond))
		ew.printf("| manager: start to first plan | %s (%d steps, %d KiB of JSON) |\n", r.FirstPlan.Round(100*time.Millisecond), r.PlanSteps, r.PlanBytes/1024)
		ew.printf("| pool nodes left out of planning at rest (stale or missing reports) | %d of %d |\n", r.LeftOut, r.Nodes)
		ew.printf("| a new shape (%d pods, timed from the first): to the policy's status.demand | %s |\n", r.NewPending, latency(r.NewShapeStatus, r.Timeout))
		ew.printf("| a new shape (%d pods, timed from the first): to a plan expecting one | %s |\n", r.NewPending, latency(r.NewShapePlan, r.Timeout))
		if r.HeartbeatFailures > 0 {
			ew.printf("\n%d Lease renewals failed.\n", r.HeartbeatFailures)
		}
		ew.printf("\n")
	}
	return ew.err
}

func latency(d, timeout time.Duration) string {
	if d == 0 {
		return "not within " + timeout.String()
	}
	return d.Round(100 * time.Millisecond).String()
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
