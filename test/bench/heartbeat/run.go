package heartbeat

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
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
	// Nodes is how many GPU nodes, each with its agent.
	Nodes int
	// Period is the agents' refresh period (30 s in production).
	Period time.Duration
	// Window is how long each mode is measured; a few periods.
	Window time.Duration
	// Progress receives a line per step; nil prints nothing.
	Progress io.Writer
}

// agentNamespace is where the agents' Leases go, as config/agent installs them.
const agentNamespace = "gpupool-agent"

// Run starts etcd and kube-apiserver, plays every node's agent in each heartbeat mode in turn,
// and measures each mode over the window.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}
	// The caches and clients log through controller-runtime; nothing of theirs is reported.
	logf.SetLogger(logr.Discard())
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
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}}); err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", agentNamespace, err)
	}

	// The manager's view: a cache of every GPUNode and of the agents' Leases, whose watch
	// streams are counted.
	var watched, agents measure.Traffic
	managerCache, err := startCache(ctx, watched.Counted(env.Config), env, &v1alpha1.GPUNode{}, &coordinationv1.Lease{})
	if err != nil {
		return nil, err
	}
	// The agents read their GPUNode from a cache (as each agent's own, restricted to its node,
	// does) and their Lease from the API server; their requests are counted.
	agentCache, err := startCache(ctx, env.Config, env, &v1alpha1.GPUNode{})
	if err != nil {
		return nil, err
	}
	agentClient, err := client.New(agents.Counted(env.Config), client.Options{Scheme: env.Scheme,
		Cache: &client.CacheOptions{Reader: agentCache, DisableFor: []client.Object{&coordinationv1.Lease{}}}})
	if err != nil {
		return nil, fmt.Errorf("creating the agents' client: %w", err)
	}

	gpus, err := nodeGPUs()
	if err != nil {
		return nil, err
	}
	report := &Report{Nodes: cfg.Nodes, Period: cfg.Period, Window: cfg.Window, StatusSize: statusSize(gpus)}
	progress("the control plane alone, no agent: measuring for %s", cfg.Window)
	if report.Idle, err = measureWindow(cp, func() (int, error) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(cfg.Window):
			return 0, nil
		}
	}); err != nil {
		return nil, err
	}
	for _, mode := range []struct {
		name           string
		heartbeat      agent.Heartbeat
		leaseNamespace string
	}{
		{"GPUNode status every period (before)", agent.HeartbeatStatus, ""},
		{"Lease every period, status on change", agent.HeartbeatLease, agentNamespace},
		// The kubelet probes the agent's readiness on its node and writes the pod's status
		// only when it changes: nothing reaches the API server at rest.
		{"pod readiness, status on change (chart default)", agent.HeartbeatReadiness, ""},
	} {
		pubs := make([]*agent.Publisher, cfg.Nodes)
		for i := range pubs {
			pubs[i] = &agent.Publisher{Client: agentClient, NodeName: fmt.Sprintf("gpu-%05d", i),
				Read: func(context.Context) ([]v1alpha1.GPUStatus, error) { return gpus, nil },
				// A little under the schedule's period, so that every visit is due despite jitter.
				Period: cfg.Period - cfg.Period/20, Heartbeat: mode.heartbeat, LeaseNamespace: mode.leaseNamespace}
		}
		progress("%s: %d agents start (their first status write, unmeasured)", mode.name, cfg.Nodes)
		if err := visitAll(ctx, pubs); err != nil {
			return nil, err
		}
		if err := waitCached(ctx, agentCache, cfg.Nodes); err != nil {
			return nil, err
		}
		// One unmeasured period on the measured schedule, so that each agent's first measured
		// visit comes a whole period after its previous one, as its own timer would.
		if _, err := beat(ctx, pubs, cfg.Period, cfg.Period); err != nil {
			return nil, err
		}
		progress("%s: measuring for %s", mode.name, cfg.Window)
		agents.Reset()
		watched.Reset()
		row, err := measureWindow(cp, func() (int, error) { return beat(ctx, pubs, cfg.Period, cfg.Window) })
		if err != nil {
			return nil, err
		}
		row.Mode = mode.name
		row.Requests, row.RequestBytes, row.ResponseBytes = agents.Requests.Load(), agents.Sent.Load(), agents.Received.Load()
		row.WatchBytes = watched.Received.Load()
		report.Rows = append(report.Rows, row)
	}
	_ = managerCache // kept running: its watch streams are what WatchBytes counts
	return report, nil
}

// startCache starts a cache of the kinds given on cfg (GPUNodes, and the agents' Leases), and
// waits for it.
func startCache(ctx context.Context, cfg *rest.Config, env *testenv.Env, kinds ...client.Object) (cache.Cache, error) {
	c, err := cache.New(cfg, cache.Options{Scheme: env.Scheme, ByObject: map[client.Object]cache.ByObject{
		&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{agentNamespace: {}},
			Label: labels.SelectorFromSet(labels.Set{v1alpha1.LabelAgentLease: "true"})},
	}})
	if err != nil {
		return nil, fmt.Errorf("creating a cache: %w", err)
	}
	for _, o := range kinds {
		if _, err := c.GetInformer(ctx, o); err != nil {
			return nil, fmt.Errorf("starting an informer: %w", err)
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the cache did not sync")
	}
	return c, nil
}

// visitAll reconciles every agent once.
func visitAll(ctx context.Context, pubs []*agent.Publisher) error {
	for _, p := range pubs {
		if _, err := p.Reconcile(ctx, p.Request()); err != nil {
			return fmt.Errorf("agent of %s: %w", p.NodeName, err)
		}
	}
	return nil
}

// waitCached waits until the agents' cache holds every node's GPUNode, so that no agent
// reads a GPUNode as missing and creates it again while measured.
func waitCached(ctx context.Context, c cache.Cache, nodes int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var list v1alpha1.GPUNodeList
		if err := c.List(ctx, &list); err != nil {
			return fmt.Errorf("listing cached GPUNodes: %w", err)
		}
		if len(list.Items) >= nodes {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the cache holds %d of %d GPUNodes after a minute", len(list.Items), nodes)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// beat visits the agents round-robin, each once a period, spread evenly over the period, for
// the window, as the agents' own timers would; it returns how many visits it made.
func beat(ctx context.Context, pubs []*agent.Publisher, period, window time.Duration) (int, error) {
	tick := time.NewTicker(period / time.Duration(len(pubs)))
	defer tick.Stop()
	end := time.Now().Add(window)
	visits := 0
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return visits, ctx.Err()
		case <-tick.C:
		}
		p := pubs[visits%len(pubs)]
		if _, err := p.Reconcile(ctx, p.Request()); err != nil {
			return visits, fmt.Errorf("agent of %s: %w", p.NodeName, err)
		}
		visits++
	}
	return visits, nil
}

// measure runs work and reads the control plane's CPU time around it.
func measureWindow(cp measure.ControlPlane, work func() (int, error)) (Row, error) {
	apiBefore, err := measure.CPUTime(cp.APIServer)
	if err != nil {
		return Row{}, err
	}
	etcdBefore, err := measure.CPUTime(cp.Etcd)
	if err != nil {
		return Row{}, err
	}
	start := time.Now()
	beats, err := work()
	if err != nil {
		return Row{}, err
	}
	row := Row{Beats: beats, Window: time.Since(start)}
	apiAfter, err := measure.CPUTime(cp.APIServer)
	if err != nil {
		return Row{}, err
	}
	etcdAfter, err := measure.CPUTime(cp.Etcd)
	if err != nil {
		return Row{}, err
	}
	row.APIServerCPU, row.EtcdCPU = apiAfter-apiBefore, etcdAfter-etcdBefore
	return row, nil
}

// nodeGPUs is what a busy 8-GPU H200 node's agent publishes: every GPU carved 1g.18gb x7, each
// instance held by a pod, and the product's profile table, as NVML reports them.
func nodeGPUs() ([]v1alpha1.GPUStatus, error) {
	product, ok := mig.LookupProduct("H200")
	if !ok {
		return nil, fmt.Errorf("no H200 in the MIG table")
	}
	var profiles []v1alpha1.GPUInstanceProfile
	for _, pr := range product.Profiles {
		gp := v1alpha1.GPUInstanceProfile{ID: int32(pr.ID), Name: pr.Name, MemoryMiB: int64(pr.MemoryMiB),
			Slices: int32(pr.ComputeSlices), MaxCount: int32(pr.MaxCount)}
		for _, pl := range pr.Placements {
			gp.Placements = append(gp.Placements, v1alpha1.SlicePlacement{Start: int32(pl.Start), Size: int32(pl.Size)})
		}
		profiles = append(profiles, gp)
	}
	placed, err := product.Place(mig.Layout{"1g.18gb": 7}, nil)
	if err != nil {
		return nil, fmt.Errorf("placing 1g.18gb x7 on an H200: %w", err)
	}
	gpus := make([]v1alpha1.GPUStatus, 8)
	for i := range gpus {
		g := v1alpha1.GPUStatus{Index: int32(i), UUID: fmt.Sprintf("GPU-%08d-0000-4000-8000-%012d", i, i),
			Product: "NVIDIA H200", PCIDeviceID: "0x233510DE", MemoryMiB: 143771,
			MIGMode: &v1alpha1.MIGModeStatus{Current: agent.MIGEnabled, Pending: agent.MIGEnabled}, Profiles: profiles}
		for j, in := range placed {
			g.Instances = append(g.Instances, v1alpha1.MIGInstance{Profile: in.Profile,
				Placement: v1alpha1.SlicePlacement{Start: int32(in.Placement.Start), Size: int32(in.Placement.Size)},
				UUID:      fmt.Sprintf("MIG-%08d-0000-4000-8000-%012d", i, j), Busy: true,
				Pod: &v1alpha1.PodReference{Namespace: "team-ml", Name: fmt.Sprintf("inference-7d9f8c6b5-%d%d", i, j)}})
		}
		gpus[i] = g
	}
	return gpus, nil
}

// statusSize is how many bytes of JSON the GPUs take in a GPUNode's status.
func statusSize(gpus []v1alpha1.GPUStatus) int {
	data, err := json.Marshal(gpus)
	if err != nil {
		return 0
	}
	return len(data)
}
