// Command agent is gpupool's node agent, its read-only eyes on a GPU node. It
// runs as a DaemonSet (config/agent) and publishes the node's GPUs, as NVML
// and the kubelet report them, in the status of the cluster-scoped GPUNode
// named after the node; internal/agent does the work and documents it.
//
// With --probe it instead reads the GPUs once, prints them as JSON with each
// GPU's profile table compared against gpupool's built-in MIG tables
// (internal/mig), and exits: on a machine with a real GPU that one command
// confirms or refutes the placements the planner assumes.
//
// go-nvml loads libnvidia-ml.so.1 with dlopen when NVML is initialised, so the
// binary builds and starts without a driver and reports the missing driver
// clearly (NVMLReady=False, retried with backoff). go-nvml needs cgo: build
// with CGO_ENABLED=1.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
)

// Exit codes.
const (
	exitOK     = 0
	exitNVML   = 1 // --probe: NVML unusable (no driver, no GPU, ...)
	exitFailed = 1 // the agent could not start or its manager failed
	exitUsage  = 2
)

// podResourcesTimeout bounds each call to the kubelet.
const podResourcesTimeout = 10 * time.Second

func main() {
	os.Exit(run(ctrl.SetupSignalHandler(), os.Args[1:], os.Stdout, os.Stderr, deps{
		newNVML:    func() agent.NVML { return nvml.New() },
		restConfig: ctrl.GetConfig,
	}))
}

// deps are what run takes from the outside world, so tests can drive it with
// go-nvml's mock servers, an envtest API server and a fake clock.
type deps struct {
	newNVML    func() agent.NVML
	restConfig func() (*rest.Config, error)
	clock      clock.WithTicker // nil: the real clock
}

// run is main with its dependencies passed in; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, d deps) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	probe := fs.Bool("probe", false, "read the GPUs through NVML, print them as JSON with a comparison against gpupool's built-in MIG tables, and exit")
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "name of this node, and of the GPUNode the agent publishes (default $NODE_NAME)")
	socket := fs.String("pod-resources-socket", agent.DefaultPodResourcesSocket, "kubelet PodResources API socket, a path or unix:// URL")
	period := fs.Duration("refresh-period", agent.DefaultRefreshPeriod, "how often NVML is re-read and the heartbeat renewed")
	heartbeat := fs.String("heartbeat", "",
		"how the manager learns this agent is alive: readiness (the pod's readiness probe; no writes while the GPUs do not change), "+
			"lease (a Lease named after the node, renewed every refresh period) or status (GPUNode status rewritten every refresh period). "+
			"Default: lease when --lease-namespace is set, else status")
	leaseNamespace := fs.String("lease-namespace", os.Getenv("POD_NAMESPACE"),
		"namespace of the heartbeat Lease named after the node (default $POD_NAMESPACE), for --heartbeat=lease")
	probeAddr := fs.String("health-probe-bind-address", ":8081", "address the /healthz and /readyz probes bind to (0 disables them)")
	metricsAddr := fs.String("metrics-bind-address", "0", "address plain-HTTP metrics bind to, e.g. :8080 (0 disables them)")
	reportUsage := fs.Bool("report-usage", true,
		"sample the GPU memory each pod uses every refresh period and publish a summary per pod in GPUNode status.usage, "+
			"rewritten only when it changes materially (input to right-sizing recommendations)")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "agent: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	if *probe {
		return runProbe(d.newNVML(), *nodeName, *socket, stdout, stderr)
	}
	if *nodeName == "" {
		fmt.Fprintln(stderr, "agent: --node-name (or $NODE_NAME) is required: the agent publishes GPUNode/<node-name>")
		return exitUsage
	}
	if *period <= 0 {
		fmt.Fprintf(stderr, "agent: --refresh-period must be positive, got %s\n", *period)
		return exitUsage
	}
	mode, leaseNS, err := heartbeatMode(fs, agent.Heartbeat(*heartbeat), *leaseNamespace, *probeAddr)
	if err != nil {
		fmt.Fprintf(stderr, "agent: %v\n", err)
		return exitUsage
	}

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts), zap.WriteTo(stderr)))
	log := ctrl.Log.WithName("agent")
	cfg, err := d.restConfig()
	if err != nil {
		log.Error(err, "loading kubeconfig: set KUBECONFIG or run in a pod")
		return exitFailed
	}
	pods, err := agent.NewPodResourcesClient(*socket)
	if err != nil {
		log.Error(err, "preparing the kubelet PodResources client")
		return exitFailed
	}
	defer func() { _ = pods.Close() }() // the process is ending; nothing to report to
	lib := d.newNVML()
	var usage agent.UsageFunc
	if *reportUsage {
		usage = agent.NVMLUsageReader(lib)
	}
	mgr, err := agent.NewManager(cfg, agent.ManagerOptions{
		NodeName:               *nodeName,
		Read:                   agent.NVMLReader(lib),
		Owners:                 agent.PodResourcesOwners(pods, podResourcesTimeout),
		Usage:                  usage,
		RefreshPeriod:          *period,
		Heartbeat:              mode,
		LeaseNamespace:         leaseNS,
		Clock:                  d.clock,
		HealthProbeBindAddress: *probeAddr,
		MetricsBindAddress:     *metricsAddr,
	})
	if err != nil {
		log.Error(err, "setting up the agent")
		return exitFailed
	}
	log.Info("starting agent", "node", *nodeName, "refreshPeriod", *period, "heartbeat", mode, "leaseNamespace", leaseNS, "podResources", *socket,
		"probes", *probeAddr, "metrics", *metricsAddr, "reportUsage", *reportUsage)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "agent stopped")
		return exitFailed
	}
	return exitOK
}

// heartbeatMode resolves --heartbeat against --lease-namespace: the Lease's namespace, which
// defaults to $POD_NAMESPACE, is used only by the lease heartbeat, and naming it explicitly
// for another is a mistake worth stopping on. The readiness heartbeat needs the probes served.
func heartbeatMode(fs *flag.FlagSet, mode agent.Heartbeat, leaseNamespace, probeAddr string) (agent.Heartbeat, string, error) {
	leaseSet := false
	fs.Visit(func(f *flag.Flag) { leaseSet = leaseSet || f.Name == "lease-namespace" })
	switch mode {
	case "":
		if leaseNamespace != "" {
			return agent.HeartbeatLease, leaseNamespace, nil
		}
		return agent.HeartbeatStatus, "", nil
	case agent.HeartbeatLease:
		if leaseNamespace == "" {
			return "", "", errors.New("--heartbeat=lease needs --lease-namespace (or $POD_NAMESPACE)")
		}
		return mode, leaseNamespace, nil
	case agent.HeartbeatReadiness, agent.HeartbeatStatus:
		if leaseSet && leaseNamespace != "" {
			return "", "", fmt.Errorf("--lease-namespace=%s is only for --heartbeat=lease, not %s", leaseNamespace, mode)
		}
		if mode == agent.HeartbeatReadiness && probeAddr == "0" {
			return "", "", errors.New("--heartbeat=readiness needs the readiness probe: --health-probe-bind-address must not be 0")
		}
		return mode, "", nil
	}
	return "", "", fmt.Errorf("--heartbeat=%s: want %s, %s or %s", mode, agent.HeartbeatReadiness, agent.HeartbeatLease, agent.HeartbeatStatus)
}

// runProbe reads the GPUs once and prints the probe report.
func runProbe(lib agent.NVML, nodeName, socket string, stdout, stderr io.Writer) int {
	gpus, err := agent.Read(lib)
	if err != nil {
		fmt.Fprintf(stderr, "agent --probe: %v\n", err)
		var e *agent.Error
		if errors.As(err, &e) {
			fmt.Fprintf(stderr, "agent --probe: NVMLReady=False reason=%s\n", e.Reason)
		}
		return exitNVML
	}
	note, unmatched := attributePods(gpus, socket)
	report := agent.NewProbeReport(nodeName, gpus)
	report.PodResources, report.UnmatchedDevices = note, unmatched

	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(report); err != nil {
		fmt.Fprintf(stderr, "agent --probe: write JSON: %v\n", err)
		return exitNVML
	}
	return exitOK
}

// attributePods adds pods from the kubelet when its socket exists; the probe
// is about hardware, so a node without a kubelet only gets a note.
func attributePods(gpus []v1alpha1.GPUStatus, socket string) (note string, unmatched []string) {
	path := strings.TrimPrefix(strings.TrimPrefix(socket, "unix://"), "unix:")
	if _, err := os.Stat(path); err != nil {
		return fmt.Sprintf("skipped: no kubelet PodResources socket at %s", path), nil
	}
	c, err := agent.NewPodResourcesClient(socket)
	if err != nil {
		return "failed: " + err.Error(), nil
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), podResourcesTimeout)
	defer cancel()
	owners, err := agent.DeviceOwners(ctx, c)
	if err != nil {
		return "failed: " + err.Error(), nil
	}
	return fmt.Sprintf("read from %s", path), agent.Attribute(gpus, owners)
}
