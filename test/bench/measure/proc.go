// Package measure is what the benchmarks measure with: a process's CPU time and memory from
// /proc, the control plane's processes found by their command lines, and the API traffic a
// client sends and receives, counted by a wrapping transport.
package measure

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// ControlPlane are the processes whose CPU and memory the benchmarks read.
type ControlPlane struct {
	APIServer, Etcd int
}

// FindControlPlane finds the kube-apiserver serving host (envtest's config) and the etcd it
// stores into, by their command lines in /proc.
func FindControlPlane(host string) (ControlPlane, error) {
	u, err := url.Parse(host)
	if err != nil {
		return ControlPlane{}, fmt.Errorf("parsing the API server's address %q: %w", host, err)
	}
	procs, err := commandLines()
	if err != nil {
		return ControlPlane{}, err
	}
	var cp ControlPlane
	etcdURL := ""
	for pid, args := range procs {
		if filepath.Base(args[0]) == "kube-apiserver" && hasArg(args, "--secure-port="+u.Port()) {
			cp.APIServer = pid
			for _, a := range args {
				if v, ok := strings.CutPrefix(a, "--etcd-servers="); ok {
					etcdURL = strings.Split(v, ",")[0]
				}
			}
		}
	}
	if cp.APIServer == 0 || etcdURL == "" {
		return ControlPlane{}, fmt.Errorf("no kube-apiserver process with --secure-port=%s and --etcd-servers found in /proc", u.Port())
	}
	for pid, args := range procs {
		if filepath.Base(args[0]) == "etcd" && strings.Contains(strings.Join(args, " "), etcdURL) {
			cp.Etcd = pid
		}
	}
	if cp.Etcd == 0 {
		return ControlPlane{}, fmt.Errorf("no etcd process serving %s found in /proc", etcdURL)
	}
	return cp, nil
}

func hasArg(args []string, want string) bool {
	for _, a := range args {
		if a == want {
			return true
		}
	}
	return false
}

// commandLines reads every process's arguments.
func commandLines() (map[int][]string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	out := map[int][]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue // gone, or a kernel thread
		}
		out[pid] = strings.Split(string(bytes.TrimRight(raw, "\x00")), "\x00")
	}
	return out, nil
}

// CPUTime is the user plus system CPU time the process has used.
func CPUTime(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
	}
	return parseCPUTime(string(raw))
}

// parseCPUTime reads utime and stime (fields 14 and 15, proc(5)) from a /proc/<pid>/stat line.
// The command name (field 2) may hold spaces and parentheses, so fields are counted from the
// last ')'.
func parseCPUTime(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc stat line %q", stat)
	}
	fields := strings.Fields(stat[i+1:])
	// fields[0] is field 3 (state): utime is field 14, stime field 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc stat line %q", stat)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("malformed CPU time %q in /proc stat line: %w", f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// Memory is a process's resident set now and at its peak (VmRSS and VmHWM, proc(5)).
func Memory(pid int) (rss, peak int64, err error) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, 0, fmt.Errorf("reading the memory of process %d: %w", pid, err)
	}
	return parseMemory(string(raw))
}

// parseMemory reads VmRSS and VmHWM, in kB, from a /proc/<pid>/status file, as bytes.
func parseMemory(status string) (rss, peak int64, err error) {
	found := 0
	for line := range strings.Lines(status) {
		key, value, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("malformed %s line %q in /proc status: %w", key, strings.TrimSpace(line), err)
		}
		if key == "VmRSS" {
			rss = kb * 1024
		} else {
			peak = kb * 1024
		}
		found++
	}
	if found != 2 {
		return 0, 0, errors.New("no VmRSS and VmHWM in /proc status: is the process a zombie?")
	}
	return rss, peak, nil
}
