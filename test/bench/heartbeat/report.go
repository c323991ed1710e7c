// Package heartbeat measures what the node agents' liveness signal costs the control plane:
// the agent rewriting its whole GPUNode status every refresh period (the heartbeat before
// the Lease), against renewing a per-node Lease and writing the status only on change, as the
// kubelet moved its own heartbeat to a Lease (KEP-589). Both run the real agent.Publisher
// against one kube-apiserver and etcd (the envtest binaries), in the same process, one after
// the other, over the same nodes, so the status mode is the baseline of the table.
package heartbeat

import (
	"fmt"
	"io"
	"time"
)

// Row is one mode's measurement over the window.
type Row struct {
	Mode string
	// Beats is how many heartbeats the agents made in the window.
	Beats int
	// Requests and RequestBytes are what the agents sent to the API server; ResponseBytes what
	// they got back.
	Requests, RequestBytes, ResponseBytes int64
	// WatchBytes is what one watcher of GPUNodes and agent Leases (the manager's cache) was
	// sent.
	WatchBytes int64
	// APIServerCPU and EtcdCPU are the CPU time the two processes used in the window.
	APIServerCPU, EtcdCPU time.Duration
	// Window is how long the mode ran.
	Window time.Duration
}

func (r Row) perSecond(v float64) float64 { return v / r.Window.Seconds() }

// Report is the whole run.
type Report struct {
	Nodes      int
	Period     time.Duration
	Window     time.Duration
	StatusSize int
	// Idle is the control plane with no agent at all, over the same window: what the API
	// server and etcd cost anyway, taken off each mode's CPU to leave the heartbeats' own.
	Idle Row
	Rows []Row
}

// heartbeatCPU is the CPU the mode's heartbeats cost the process, net of the idle control
// plane, per second of the window (cores).
func (rep *Report) heartbeatCPU(mode, idle time.Duration, window time.Duration) float64 {
	return max(0, mode.Seconds()/window.Seconds()-idle.Seconds()/rep.Idle.Window.Seconds())
}

// Write prints the report as a Markdown table, each figure with its ratio to the first row.
func (rep *Report) Write(w io.Writer) error {
	if len(rep.Rows) == 0 {
		return fmt.Errorf("no rows to report")
	}
	base := rep.Rows[0]
	ratio := func(b, v float64) string {
		switch {
		case v == 0 && b > 0:
			return "none"
		case v == 0 || b == 0:
			return "-"
		case b >= v:
			return fmt.Sprintf("%.1fx less", b/v)
		default:
			return fmt.Sprintf("%.1fx more", v/b)
		}
	}
	if _, err := fmt.Fprintf(w, "%d nodes of 8 H200 GPUs (a GPUNode status of %.1f KiB), refresh period %s, window %s per mode. "+
		"With no agent at all the control plane used %.3f cores (kube-apiserver) and %.3f (etcd); the cores below are the heartbeats' own, beyond that.\n\n",
		rep.Nodes, float64(rep.StatusSize)/1024, rep.Period, rep.Window,
		rep.Idle.APIServerCPU.Seconds()/rep.Idle.Window.Seconds(), rep.Idle.EtcdCPU.Seconds()/rep.Idle.Window.Seconds()); err != nil {
		return err
	}
	fmt.Fprintln(w, "| heartbeat | beats | agent requests/s | agent KiB/s sent | watcher KiB/s received | kube-apiserver cores | kube-apiserver CPU ms per beat | etcd cores |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	baseAPI := rep.heartbeatCPU(base.APIServerCPU, rep.Idle.APIServerCPU, base.Window)
	baseEtcd := rep.heartbeatCPU(base.EtcdCPU, rep.Idle.EtcdCPU, base.Window)
	for i, r := range rep.Rows {
		api := rep.heartbeatCPU(r.APIServerCPU, rep.Idle.APIServerCPU, r.Window)
		etcd := rep.heartbeatCPU(r.EtcdCPU, rep.Idle.EtcdCPU, r.Window)
		cells := []string{
			fmt.Sprintf("%.1f", r.perSecond(float64(r.Requests))),
			fmt.Sprintf("%.1f", r.perSecond(float64(r.RequestBytes))/1024),
			fmt.Sprintf("%.1f", r.perSecond(float64(r.WatchBytes))/1024),
			fmt.Sprintf("%.3f", api),
			fmt.Sprintf("%.1f", perBeat(api, r)),
			fmt.Sprintf("%.3f", etcd),
		}
		if i > 0 {
			cells[0] += " (" + ratio(float64(base.Requests)/base.Window.Seconds(), float64(r.Requests)/r.Window.Seconds()) + ")"
			cells[1] += " (" + ratio(float64(base.RequestBytes)/base.Window.Seconds(), float64(r.RequestBytes)/r.Window.Seconds()) + ")"
			cells[2] += " (" + ratio(float64(base.WatchBytes)/base.Window.Seconds(), float64(r.WatchBytes)/r.Window.Seconds()) + ")"
			cells[3] += " (" + ratio(baseAPI, api) + ")"
			cells[4] += " (" + ratio(perBeat(baseAPI, base), perBeat(api, r)) + ")"
			cells[5] += " (" + ratio(baseEtcd, etcd) + ")"
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", r.Mode, r.Beats, cells[0], cells[1], cells[2], cells[3], cells[4], cells[5])
	}
	return nil
}

// perBeat is the CPU, in milliseconds, that one heartbeat of the row cost, from its cores.
func perBeat(cores float64, r Row) float64 {
	if r.Beats == 0 {
		return 0
	}
	return cores * r.Window.Seconds() * 1000 / float64(r.Beats)
}
