package heartbeat

import (
	"bytes"
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

// controlPlane are the processes whose CPU the benchmark reads.
type controlPlane struct {
	apiserver, etcd int
}

// findControlPlane finds the kube-apiserver serving host (envtest's config) and the etcd it
// stores into, by their command lines in /proc.
func findControlPlane(host string) (controlPlane, error) {
	u, err := url.Parse(host)
	if err != nil {
		return controlPlane{}, fmt.Errorf("parsing the API server's address %q: %w", host, err)
	}
	procs, err := commandLines()
	if err != nil {
		return controlPlane{}, err
	}
	var cp controlPlane
	etcdURL := ""
	for pid, args := range procs {
		if filepath.Base(args[0]) == "kube-apiserver" && hasArg(args, "--secure-port="+u.Port()) {
			cp.apiserver = pid
			for _, a := range args {
				if v, ok := strings.CutPrefix(a, "--etcd-servers="); ok {
					etcdURL = strings.Split(v, ",")[0]
				}
			}
		}
	}
	if cp.apiserver == 0 || etcdURL == "" {
		return controlPlane{}, fmt.Errorf("no kube-apiserver process with --secure-port=%s and --etcd-servers found in /proc", u.Port())
	}
	for pid, args := range procs {
		if filepath.Base(args[0]) == "etcd" && strings.Contains(strings.Join(args, " "), etcdURL) {
			cp.etcd = pid
		}
	}
	if cp.etcd == 0 {
		return controlPlane{}, fmt.Errorf("no etcd process serving %s found in /proc", etcdURL)
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

// cpuTime is the user plus system CPU time the process has used.
func cpuTime(pid int) (time.Duration, error) {
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
