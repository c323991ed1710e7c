// Package scale measures the manager at fleet scale: it starts etcd and
// kube-apiserver only, writes N H200 nodes with their GPUNode reports, agent Leases, running
// and pending pods straight into the API server, keeps the agents' heartbeats going, and runs
// the real manager binary beside a bare-cache baseline (cmd/barecache), measuring each from
// outside: memory and CPU from /proc, API traffic through a counting proxy, latencies from the
// objects it writes. `make bench-scale` runs it; `make test` does not.
package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/testenv"
	"github.com/gpupool/gpupool/test/bench/measure"
)

// Config is one run.
type Config struct {
	// Nodes is how many GPU nodes; each also has one pending 3g.71gb pod.
	Nodes int
	// RunningPerNode is how many running 1g.18gb pods each node holds (10 in the scale goals).
	RunningPerNode int
	// Budget is the policy's maxDisruptedNodes, a count or a percentage ("" for the API's
	// default, 1): how many nodes one plan may change.
	Budget string
	// Period is the agents' heartbeat period (30 s in production).
	Period time.Duration
	// Heartbeat is how the agents show they are alive: agent.HeartbeatReadiness (the chart's
	// default; each node gets a Ready agent pod and nothing is written at rest) or
	// agent.HeartbeatLease (each node's Lease renewed every Period).
	Heartbeat agent.Heartbeat
	// Settle is how long a process runs after its caches fill (the baseline) or after its
	// first plan (the manager) before the window starts.
	Settle time.Duration
	// Window is how long each process is measured at rest.
	Window time.Duration
	// Workers is how many requests the seeding has in flight.
	Workers int
	// Timeout bounds each wait for the manager: its first plan, the new shape in the status
	// and in a plan (10 min when zero).
	Timeout time.Duration
	// Manager is a manager binary to measure; when empty the checkout's is built.
	Manager string
	// Dir holds the binaries and the processes' logs.
	Dir string
	// Progress receives a line per step; nil prints nothing.
	Progress io.Writer
}

// Result is what one run measured.
type Result struct {
	Nodes, Running, Pending, NewPending int
	// Budget is the policy's maxDisruptedNodes ("" for the default).
	Budget string
	// Period is the agents' heartbeat period, and Heartbeat their kind.
	Period    time.Duration
	Heartbeat agent.Heartbeat
	// Seed is how long writing the fleet took.
	Seed time.Duration
	// Baseline and Manager are the processes at rest; the APIServer fields are the API server
	// over the same windows (the agents' heartbeats included).
	Baseline, Manager, APIServerBaseline, APIServerManager usage
	// BaselineRequests and ManagerRequests are the API requests per second each made at rest.
	BaselineRequests, ManagerRequests float64
	// BaselineSynced is how long the baseline took to fill its caches.
	BaselineSynced time.Duration
	// FirstPlan is from the manager's start to its first RepartitionPlan.
	FirstPlan time.Duration
	// PlanSteps and PlanBytes describe that plan.
	PlanSteps, PlanBytes int
	// NewShapeStatus and NewShapePlan are from the new shape's pods existing to the policy's
	// status.demand listing it and to a plan expecting one of them; 0 when not within the
	// timeout.
	NewShapeStatus, NewShapePlan time.Duration
	// Timeout is how long the new shape was waited for.
	Timeout time.Duration
	// LeftOut is how many pool nodes the policy's status counted as left out of planning (stale
	// or missing reports) at the end of the manager's window at rest: 0 unless the agents'
	// heartbeat fails to keep their unchanged reports usable.
	LeftOut int32
	// HeartbeatFailures counts Lease renewals the API server refused or failed.
	HeartbeatFailures int64
	// APIServerIdle and APIServerHeartbeats are the API server alone over a window, before any
	// heartbeat and then with the agents' heartbeats only, no other client: their difference is
	// what the heartbeats cost it.
	APIServerIdle, APIServerHeartbeats usage
}

// Run measures one fleet size.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
		}
	}
	logf.SetLogger(logr.Discard())
	switch cfg.Heartbeat {
	case "":
		cfg.Heartbeat = agent.HeartbeatReadiness
	case agent.HeartbeatReadiness, agent.HeartbeatLease:
	default:
		return nil, fmt.Errorf("heartbeat %q: want %s or %s", cfg.Heartbeat, agent.HeartbeatReadiness, agent.HeartbeatLease)
	}
	res := &Result{Nodes: cfg.Nodes, Running: cfg.Nodes * cfg.RunningPerNode, Pending: cfg.Nodes, Budget: cfg.Budget, Period: cfg.Period,
		Heartbeat: cfg.Heartbeat, NewPending: max(10, cfg.Nodes/10), Timeout: cfg.Timeout}
	if res.Timeout == 0 {
		res.Timeout = 10 * time.Minute
	}

	progress("building the manager and the bare-cache baseline")
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	manager, barecache := filepath.Join(cfg.Dir, "manager"), filepath.Join(cfg.Dir, "barecache")
	builds := map[string]string{manager: "./cmd/manager", barecache: "./test/bench/scale/cmd/barecache"}
	if cfg.Manager != "" {
		delete(builds, manager)
		manager = cfg.Manager
	}
	for bin, pkg := range builds {
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	}

	progress("starting etcd and kube-apiserver (envtest binaries)")
	env, err := testenv.Start()
	if err != nil {
		return nil, err
	}
	defer func() { _ = env.Stop() }()
	cp, err := measure.FindControlPlane(env.Config.Host)
	if err != nil {
		return nil, err
	}
	fast := rest.CopyConfig(env.Config)
	fast.QPS, fast.Burst = 5000, 10000
	c, err := client.New(fast, client.Options{Scheme: env.Scheme})
	if err != nil {
		return nil, fmt.Errorf("creating the seeding client: %w", err)
	}
	s, err := newSeeder(c, cfg.Workers)
	if err != nil {
		return nil, err
	}

	progress("writing %d nodes, their reports and agents (%s heartbeat), %d running and %d pending pods", cfg.Nodes, cfg.Heartbeat, res.Running, res.Pending)
	start := time.Now()
	if err := s.base(ctx, cfg.Budget); err != nil {
		return nil, err
	}
	if err := parallel(ctx, cfg.Nodes, cfg.Workers, func(ctx context.Context, i int) error {
		return s.node(ctx, i, cfg.RunningPerNode, cfg.Heartbeat)
	}); err != nil {
		return nil, err
	}
	if err := s.pending(ctx, "pending", pendingProfile, res.Pending); err != nil {
		return nil, err
	}
	res.Seed = time.Since(start)
	progress("written in %s", res.Seed.Round(time.Second))

	// What the heartbeats alone cost the API server: a window with no client at all, then one
	// with the agents' heartbeats and nothing else. The readiness heartbeat sends nothing (the
	// kubelet probes locally and writes only changes): its window measures that nothing.
	progress("API server alone: measuring %s idle, then %s with only the heartbeats", cfg.Window, cfg.Window)
	if res.APIServerIdle, err = apiServerAlone(ctx, cfg, cp); err != nil {
		return nil, err
	}
	beatCtx, stopBeats := context.WithCancel(ctx)
	defer stopBeats()
	var failures atomic.Int64
	if cfg.Heartbeat == agent.HeartbeatLease {
		go heartbeats(beatCtx, c, cfg.Nodes, cfg.Period, &failures)
	}
	// A full period first, so that the window sees renewals at their steady rate.
	if err := sleep(ctx, cfg.Period, func() error { return nil }); err != nil {
		return nil, err
	}
	if res.APIServerHeartbeats, err = apiServerAlone(ctx, cfg, cp); err != nil {
		return nil, err
	}

	if err := runBaseline(ctx, cfg, env, cp, barecache, res, progress); err != nil {
		return nil, err
	}
	if err := runManager(ctx, cfg, env, s, cp, manager, res, progress); err != nil {
		return nil, err
	}
	res.HeartbeatFailures = failures.Load()
	return res, nil
}

// apiServerAlone measures the API server over one window.
func apiServerAlone(ctx context.Context, cfg Config, cp measure.ControlPlane) (usage, error) {
	u, err := watchUsage(ctx, cfg.Window, func() error { return nil }, cp.APIServer)
	if err != nil {
		return usage{}, err
	}
	return u[0], nil
}

// runBaseline runs the bare cache: until it has synced, then Settle, then the window.
func runBaseline(ctx context.Context, cfg Config, env *testenv.Env, cp measure.ControlPlane, binary string, res *Result,
	progress func(string, ...any)) error {
	px, kubeconfig, err := proxyFor(env, cfg.Dir, "barecache")
	if err != nil {
		return err
	}
	defer px.stop()
	progress("baseline: a bare controller-runtime cache of the same kinds, default options")
	p, err := startProcess(cfg.Dir, "barecache", binary, "--kubeconfig="+kubeconfig)
	if err != nil {
		return err
	}
	defer p.stop()
	if err := p.waitLog(ctx, "synced", 15*time.Minute); err != nil {
		return err
	}
	res.BaselineSynced = time.Since(p.started)
	progress("baseline: synced in %s; settling %s, then measuring %s", res.BaselineSynced.Round(time.Second), cfg.Settle, cfg.Window)
	res.Baseline, res.APIServerBaseline, res.BaselineRequests, err = atRest(ctx, cfg, p, px, cp)
	return err
}

// atRest lets the process settle, then measures it and the API server over the window: their
// memory and CPU, and the process's API requests per second.
func atRest(ctx context.Context, cfg Config, p *process, px *proxy, cp measure.ControlPlane) (proc, apiserver usage, rps float64, err error) {
	if err := sleep(ctx, cfg.Settle, p.alive); err != nil {
		return usage{}, usage{}, 0, err
	}
	px.Traffic.Reset()
	u, err := watchUsage(ctx, cfg.Window, p.alive, p.cmd.Process.Pid, cp.APIServer)
	if err != nil {
		return usage{}, usage{}, 0, err
	}
	return u[0], u[1], float64(px.Traffic.Requests.Load()) / cfg.Window.Seconds(), nil
}

// runManager runs the manager: until its first plan, then Settle, then the window, then a
// new pending shape until it is in the status and in a plan.
func runManager(ctx context.Context, cfg Config, env *testenv.Env, s *seeder, cp measure.ControlPlane, binary string, res *Result,
	progress func(string, ...any)) error {
	px, kubeconfig, err := proxyFor(env, cfg.Dir, "manager")
	if err != nil {
		return err
	}
	defer px.stop()
	progress("manager: starting")
	pprofAddr, err := freeAddress()
	if err != nil {
		return err
	}
	args := []string{"--kubeconfig=" + kubeconfig, "--leader-elect=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--gpu-operator-namespace=" + operatorNamespace, "--agent-namespace=" + agentNamespace, "--agent-pod-selector=" + agentSelector,
		// Each complete pass logs its phases at debug level: where new demand's latency goes.
		// Nothing logs at rest, so this costs the measurement nothing.
		"--zap-log-level=debug"}
	if cfg.Manager == "" {
		// An older build given to compare may not know the flag.
		args = append(args, "--pprof-bind-address="+pprofAddr)
	}
	p, err := startProcess(cfg.Dir, "manager", binary, args...)
	if err != nil {
		return err
	}
	defer p.stop()
	c := env.Client
	var first *v1alpha1.RepartitionPlan
	if err := poll(ctx, 250*time.Millisecond, res.Timeout, p.alive, func() (bool, error) {
		var plans v1alpha1.RepartitionPlanList
		if err := c.List(ctx, &plans); err != nil {
			return false, err
		}
		if len(plans.Items) > 0 {
			first = &plans.Items[0]
		}
		return first != nil, nil
	}); err != nil {
		return fmt.Errorf("waiting for the first plan: %w; %s", err, policyState(ctx, c))
	}
	res.FirstPlan = time.Since(p.started)
	raw, err := json.Marshal(first)
	if err != nil {
		return err
	}
	res.PlanSteps, res.PlanBytes = len(first.Spec.Steps), len(raw)
	progress("manager: first plan %s after start (%d steps, %d KiB); settling %s, then measuring %s",
		res.FirstPlan.Round(100*time.Millisecond), res.PlanSteps, res.PlanBytes/1024, cfg.Settle, cfg.Window)
	if res.Manager, res.APIServerManager, res.ManagerRequests, err = atRest(ctx, cfg, p, px, cp); err != nil {
		return err
	}
	policy := &v1alpha1.GPUPoolPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Name: policyName}, policy); err != nil {
		return fmt.Errorf("reading the policy after the window: %w", err)
	}
	res.LeftOut = policy.Status.Pool.UnreportedNodes
	if cfg.Manager == "" {
		// Where the manager's CPU goes at rest, heartbeats arriving: go tool pprof -top. As
		// long as the window.
		seconds := max(1, int(cfg.Window.Seconds()))
		cpu := filepath.Join(cfg.Dir, fmt.Sprintf("manager-cpu-%d.pprof", cfg.Nodes))
		// And where the API server's goes over the same seconds, the manager at rest: its CPU
		// beside the manager's is in the table, and this says what it is spent on.
		apiCPU := filepath.Join(cfg.Dir, fmt.Sprintf("apiserver-cpu-%d.pprof", cfg.Nodes))
		apiDone := make(chan error, 1)
		go func() { apiDone <- fetchAPIServerProfile(ctx, env.Config, seconds, apiCPU) }()
		if err := fetch(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pprofAddr, seconds), cpu); err != nil {
			return err
		}
		if err := <-apiDone; err != nil {
			return err
		}
		progress("manager: CPU profile of %ds at rest in %s, the API server's over the same seconds in %s", seconds, cpu, apiCPU)
		// Where the manager's memory goes at rest: go tool pprof -top -sample_index=inuse_space.
		// gc=1 collects first, so the profile holds what is live, not the last pass's garbage.
		path := filepath.Join(cfg.Dir, fmt.Sprintf("manager-heap-%d.pprof", cfg.Nodes))
		if err := fetch(ctx, "http://"+pprofAddr+"/debug/pprof/heap?gc=1", path); err != nil {
			return err
		}
		progress("manager: heap profile at rest in %s", path)
	}

	progress("manager: %d pods of a new shape, %s, arrive", res.NewPending, newProfile)
	// The shape arrives with its first pod; the rest of the burst is written while the manager
	// works, as a 500-replica job's pods reach a real cluster.
	if err := s.pending(ctx, "new", newProfile, 1); err != nil {
		return err
	}
	arrived := time.Now()
	rest := make(chan error, 1)
	go func() { rest <- s.pendingFrom(ctx, "new", newProfile, 1, res.NewPending) }()
	newResource := mig.ResourceName(newProfile)
	err = poll(ctx, 500*time.Millisecond, res.Timeout, p.alive, func() (bool, error) {
		if res.NewShapeStatus == 0 {
			policy := &v1alpha1.GPUPoolPolicy{}
			if err := c.Get(ctx, client.ObjectKey{Name: policyName}, policy); err != nil {
				return false, err
			}
			if slices.ContainsFunc(policy.Status.Demand, func(d v1alpha1.ShapeDemand) bool { return d.Resource == newResource }) {
				res.NewShapeStatus = time.Since(arrived)
				progress("manager: the new shape is in the policy's status after %s", res.NewShapeStatus.Round(100*time.Millisecond))
			}
		}
		if res.NewShapePlan == 0 {
			var plans v1alpha1.RepartitionPlanList
			if err := c.List(ctx, &plans); err != nil {
				return false, err
			}
			for _, plan := range plans.Items {
				if slices.ContainsFunc(plan.Spec.Expected.Pods, func(r v1alpha1.PodReference) bool { return strings.HasPrefix(r.Name, "new-") }) {
					res.NewShapePlan = time.Since(arrived)
					progress("manager: plan %s serves the new shape after %s", plan.Name, res.NewShapePlan.Round(100*time.Millisecond))
					break
				}
			}
		}
		return res.NewShapeStatus > 0 && res.NewShapePlan > 0, nil
	})
	written := <-rest
	if err != nil && !errorsIsTimeout(err) {
		return err
	}
	if written != nil {
		return fmt.Errorf("writing the new shape's pods: %w", written)
	}
	return nil
}

// policyState says what the policy's status says, for an error.
func policyState(ctx context.Context, c client.Client) string {
	policy := &v1alpha1.GPUPoolPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Name: policyName}, policy); err != nil {
		return "reading the policy: " + err.Error()
	}
	var conds []string
	for _, c := range policy.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return fmt.Sprintf("the policy has %d pool nodes, %d pending pods, conditions %s", policy.Status.Pool.Nodes,
		policy.Status.PendingPods, strings.Join(conds, "; "))
}

// freeAddress is a loopback address no process listens on now.
func freeAddress() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// fetch saves what url serves into path.
func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", url, err)
	}
	return os.WriteFile(path, body, 0o644)
}

// fetchAPIServerProfile saves a CPU profile of the API server over seconds, read through its
// own /debug/pprof (served to the admin user, as kube-apiserver's --profiling allows by default).
func fetchAPIServerProfile(ctx context.Context, cfg *rest.Config, seconds int, path string) error {
	c, err := rest.UnversionedRESTClientFor(withSerializer(cfg))
	if err != nil {
		return fmt.Errorf("a client for the API server's profile: %w", err)
	}
	body, err := c.Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(seconds)).
		Timeout(time.Duration(seconds+30) * time.Second).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("fetching the API server's CPU profile: %w", err)
	}
	return os.WriteFile(path, body, 0o644)
}

// withSerializer is cfg with the codecs an unversioned REST client needs to be built.
func withSerializer(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	return c
}

// proxyFor starts a counting proxy for one process and writes its kubeconfig.
func proxyFor(env *testenv.Env, dir, name string) (*proxy, string, error) {
	px, err := startProxy(env.Config)
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, name+".kubeconfig")
	if err := px.kubeconfig(path); err != nil {
		px.stop()
		return nil, "", err
	}
	return px, path, nil
}

// errTimeout is poll's error when done never said true.
var errTimeout = errors.New("timed out")

func errorsIsTimeout(err error) bool { return errors.Is(err, errTimeout) }

// poll calls done every interval until it says true, fails, alive fails, or timeout passes.
func poll(ctx context.Context, interval, timeout time.Duration, alive func() error, done func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := alive(); err != nil {
			return err
		}
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w after %s", errTimeout, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// sleep waits d, failing early when alive does.
func sleep(ctx context.Context, d time.Duration, alive func() error) error {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if err := alive(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(time.Second, time.Until(end))):
		}
	}
	return alive()
}

// repoRoot is the module root, where go build runs.
func repoRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("finding the module root with go list -m: %w", err)
	}
	root := strings.TrimSpace(string(out))
	if _, err := os.Stat(filepath.Join(root, "cmd", "manager")); err != nil {
		return "", fmt.Errorf("module root %s has no cmd/manager: run from the gpupool checkout", root)
	}
	return root, nil
}
