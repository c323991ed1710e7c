// Command manager runs gpupool's controllers: it watches GPU demand and inventory, proposes
// RepartitionPlans and executes approved ones.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	gpupoolv1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/metrics"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// options are the manager's command-line settings.
type options struct {
	metricsCertDir          string
	operatorNamespace       string
	agentNamespace          string
	agentPodSelector        string
	agentDaemonSet          string
	agentServiceAccount     string
	metricsAddr             string
	metricsSecure           bool
	probeAddr               string
	pprofAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	enableHTTP2             bool
	configPropagation       time.Duration
	eventCoalescing         time.Duration
	rightsizeInterval       time.Duration
	prometheusURL           string
}

func main() {
	var opts options
	flag.StringVar(&opts.metricsAddr, "metrics-bind-address", ":8443",
		"Address the metrics endpoint binds to (:8443 for HTTPS, :8080 for HTTP, 0 to disable).")
	flag.StringVar(&opts.operatorNamespace, "gpu-operator-namespace", "",
		"Namespace of NVIDIA's GPU Operator, where gpupool writes the ConfigMaps its mig-manager and device plugin mount; "+
			"when empty, the ClusterPolicy's status.namespace, else "+nvidia.DefaultOperatorNamespace+".")
	flag.StringVar(&opts.agentNamespace, "agent-namespace", "gpupool-agent",
		"Namespace where the node agents renew their heartbeat Leases; a node's GPU report is fresh while its agent's Lease is. "+
			"Empty judges reports by their observedTime alone (agents started without a Lease).")
	flag.StringVar(&opts.agentPodSelector, "agent-pod-selector", "",
		"Label selector of the node agents' pods in --agent-namespace (the agent DaemonSet's selector): a node's GPU report is fresh while "+
			"its agent pod is Ready on a Ready node (agents run with --heartbeat=readiness). Empty reads no pod's readiness.")
	flag.StringVar(&opts.agentDaemonSet, "agent-daemonset", "gpupool-agent",
		"Name of the node agents' DaemonSet in --agent-namespace: only pods it controls are taken for agents by --agent-pod-selector.")
	flag.StringVar(&opts.agentServiceAccount, "agent-service-account", "gpupool-agent",
		"Name of the node agents' ServiceAccount in --agent-namespace: only pods run by it are taken for agents by --agent-pod-selector.")
	flag.StringVar(&opts.metricsCertDir, "metrics-cert-dir", "",
		"Folder with tls.crt and tls.key for the metrics endpoint (e.g. a mounted cert-manager Secret); a self-signed certificate when empty.")
	flag.BoolVar(&opts.metricsSecure, "metrics-secure", true,
		"Serve metrics over HTTPS, authenticated and authorised through the API server.")
	flag.StringVar(&opts.probeAddr, "health-probe-bind-address", ":8081",
		"Address the /healthz and /readyz probes bind to.")
	flag.StringVar(&opts.pprofAddr, "pprof-bind-address", "0",
		"Address Go's /debug/pprof endpoints bind to, for profiling the manager (0, the default, disables them; bind to localhost only).")
	flag.BoolVar(&opts.leaderElect, "leader-elect", true,
		"Elect a leader through a Lease so that only one replica acts at a time.")
	flag.StringVar(&opts.leaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader-election Lease (default: the pod's namespace).")
	flag.BoolVar(&opts.enableHTTP2, "enable-http2", false,
		"Serve the metrics endpoint over HTTP/2 (off by default: CVE-2023-44487 and CVE-2023-39325).")
	flag.DurationVar(&opts.configPropagation, "config-propagation", controllers.DefaultConfigPropagation,
		"Wait between writing the mig-parted ConfigMap and relabelling a node, so the kubelet can refresh mig-manager's mounted copy.")
	flag.DurationVar(&opts.eventCoalescing, "event-coalescing", controllers.DefaultEventCoalescing,
		"How long the cluster's events (pods, nodes, GPU reports) gather before the policy pass they start, so that a burst makes one pass; 0 passes at once.")
	flag.DurationVar(&opts.rightsizeInterval, "rightsize-interval", controllers.DefaultRightsizeInterval,
		"How often the leader recommends a MIG profile per GPU workload from the usage the agents publish, for the gpupool_rightsize_* metrics (nothing is changed); 0 turns it off.")
	flag.StringVar(&opts.prometheusURL, "prometheus-url", "",
		"Prometheus's base URL, where DCGM exporter is scraped: the right-sizing pass then reads each pod's compute (the p95 of DCGM_FI_PROF_GR_ENGINE_ACTIVE over a day) and keeps the compute slices it needs; without it, recommendations cover memory only and say so.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	if os.Getenv("GOGC") == "" {
		// Most of the manager's live heap is the informer cache, which barely changes; what a
		// pass allocates is short-lived. Go's default (GOGC=100) lets the heap grow to twice the
		// live heap before collecting, so the cache's size was paid twice over in RSS. At 50 the
		// manager of a 1,000-node fleet (bench-scale) holds 163 MiB instead of 252, for 0.003
		// core more at rest. GOGC set in the environment wins.
		debug.SetGCPercent(defaultGCPercent)
	}
	if limit, set, err := heapLimit(os.Getenv("GOMEMLIMIT"), os.Getenv(memoryLimitEnv)); err != nil {
		ctrl.Log.Error(err, "ignoring the memory limit", "env", memoryLimitEnv)
	} else if set {
		debug.SetMemoryLimit(limit)
		ctrl.Log.Info("keeping the Go heap under 90% of the container's memory limit", "bytes", limit)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		ctrl.Log.Error(err, "loading kubeconfig: set KUBECONFIG or run in a pod")
		os.Exit(1)
	}
	if err := run(ctrl.SetupSignalHandler(), cfg, opts); err != nil {
		ctrl.Log.Error(err, "manager stopped")
		os.Exit(1)
	}
}

// agentPodSelector parses --agent-pod-selector: nil when empty (no pod's readiness is read).
// A selector matching every pod would take any pod's readiness for an agent's, so it must
// select something, the agents' namespace must be known, and so must the DaemonSet that
// controls their pods and the ServiceAccount that runs them (inventory.AgentPods): labels
// alone anyone creating a pod can copy.
func agentPodSelector(namespace, selector, daemonSet, serviceAccount string) (labels.Selector, error) {
	if strings.TrimSpace(selector) == "" {
		return nil, nil
	}
	s, err := labels.Parse(selector)
	switch {
	case err != nil:
		return nil, fmt.Errorf("--agent-pod-selector=%q: %w: give the agent DaemonSet's selector, e.g. app.kubernetes.io/name=gpupool-agent", selector, err)
	case s.Empty():
		return nil, fmt.Errorf("--agent-pod-selector=%q selects every pod: give the agent DaemonSet's selector", selector)
	case namespace == "":
		return nil, errors.New("--agent-pod-selector needs --agent-namespace, the namespace of the agents' pods")
	}
	for _, f := range []struct{ flag, value, what string }{
		{"--agent-daemonset", daemonSet, "the agent DaemonSet's name"},
		{"--agent-service-account", serviceAccount, "the name of the ServiceAccount the agent DaemonSet's pods run as"},
	} {
		if f.value == "" {
			return nil, fmt.Errorf("--agent-pod-selector needs %s: give %s (gpupool-agent as config/agent installs it)", f.flag, f.what)
		}
		if errs := validation.IsDNS1123Subdomain(f.value); len(errs) > 0 {
			return nil, fmt.Errorf("%s=%q: %s: give %s", f.flag, f.value, strings.Join(errs, "; "), f.what)
		}
	}
	return s, nil
}

// defaultGCPercent is the manager's GOGC unless the environment sets one.
const defaultGCPercent = 50

// memoryLimitEnv carries the container's memory limit in bytes (the Deployment sets it from
// the downward API's limits.memory).
const memoryLimitEnv = "GPUPOOL_MEMORY_LIMIT"

// heapLimit is the soft limit for the Go runtime: 90% of the container's memory limit, leaving
// room for what is not heap (stacks, the runtime, cgo). A GOMEMLIMIT the operator set wins, and
// no limit (an empty value) sets none. The runtime then collects harder as the heap nears it,
// instead of letting it grow to twice the live heap and the kernel kill the pod.
func heapLimit(gomemlimit, containerLimit string) (int64, bool, error) {
	if gomemlimit != "" || containerLimit == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(containerLimit, 10, 64)
	if err != nil || n <= 0 {
		return 0, false, fmt.Errorf("%s=%q is not a positive number of bytes", memoryLimitEnv, containerLimit)
	}
	return n / 10 * 9, true, nil
}

// run starts the manager and blocks until ctx ends or the manager fails.
func run(ctx context.Context, cfg *rest.Config, opts options) error {
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return fmt.Errorf("registering built-in kinds: %w", err)
	}
	if err := gpupoolv1alpha1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("registering gpupool kinds: %w", err)
	}

	agentPods, err := agentPodSelector(opts.agentNamespace, opts.agentPodSelector, opts.agentDaemonSet, opts.agentServiceAccount)
	if err != nil {
		return err
	}
	compute, err := computeSource(opts.prometheusURL)
	if err != nil {
		return err
	}
	configNamespace, err := operatorNamespace(ctx, cfg, scheme, opts.operatorNamespace)
	if err != nil {
		return err
	}
	log.Info("gpupool's ConfigMaps go to the GPU Operator's namespace", "namespace", configNamespace)

	var tlsOpts []func(*tls.Config)
	if !opts.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metricsOpts := metricsserver.Options{
		BindAddress:   opts.metricsAddr,
		SecureServing: opts.metricsSecure,
		CertDir:       opts.metricsCertDir,
		TLSOpts:       tlsOpts,
	}
	if opts.metricsSecure {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		// managedFields are a large share of every cached object and nothing here reads them.
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			// gpupool reads and writes only its own ConfigMaps, in the GPU Operator's namespace;
			// RBAC grants no more.
			ByObject: byObject(configNamespace, opts.agentNamespace),
		},
		// Policies are read as unstructured objects and decoded one at a time (controllers/
		// policies.go); those reads must come from the cache too.
		Client:                        client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        opts.probeAddr,
		PprofBindAddress:              opts.pprofAddr,
		LeaderElection:                opts.leaderElect,
		LeaderElectionID:              "gpupool-manager.gpupool.io",
		LeaderElectionNamespace:       opts.leaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding ready check: %w", err)
	}

	m, err := metrics.New(ctrlmetrics.Registry)
	if err != nil {
		return err
	}
	policies := &controllers.PolicyReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: clock.RealClock{},
		ConfigNamespace: configNamespace, AgentNamespace: opts.agentNamespace, AgentPodSelector: agentPods,
		AgentDaemonSet: opts.agentDaemonSet, AgentServiceAccount: opts.agentServiceAccount,
		Recorder: mgr.GetEventRecorder("gpupool-policy-controller"), Metrics: m, EventCoalescing: opts.eventCoalescing,
		ReturnMemoryAfter: controllers.DefaultReturnMemoryAfter}
	if err := policies.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the policy controller: %w", err)
	}
	plans := &controllers.PlanReconciler{Client: mgr.GetClient(), Clock: clock.RealClock{},
		Recorder: mgr.GetEventRecorder("gpupool-plan-controller"), Namespace: configNamespace, Metrics: m,
		ConfigPropagation: opts.configPropagation}
	if err := plans.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the plan controller: %w", err)
	}
	cordons := &controllers.CordonReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("gpupool-cordon-controller"),
		Namespace: configNamespace, Metrics: m}
	if err := cordons.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the cordon controller: %w", err)
	}
	operatorConfig := &controllers.OperatorConfigReconciler{Client: mgr.GetClient(), Namespace: configNamespace}
	if err := operatorConfig.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the GPU Operator ConfigMap writer: %w", err)
	}
	if err := controllers.AddPodWait(mgr, m, clock.RealClock{}); err != nil {
		return err
	}
	if opts.rightsizeInterval > 0 {
		if err := controllers.AddRightsizePass(mgr, &controllers.RightsizePass{Metrics: m, Interval: opts.rightsizeInterval, Compute: compute}); err != nil {
			return err
		}
	}
	log.Info("starting manager", "controllers", []string{"gpupoolpolicy", "repartitionplan", "cordon", "operatorconfig"}, "leaderElection", opts.leaderElect,
		"metrics", opts.metricsAddr, "probes", opts.probeAddr)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}

// operatorNamespace is where gpupool writes its ConfigMaps: the flag's value, else the GPU
// Operator's own namespace from its ClusterPolicy (the operator mounts the ConfigMaps into its
// DaemonSets, so they must be there), else the operator's usual namespace. The policy
// controller's ClusterPolicy check reports it when the operator later says otherwise.
func operatorNamespace(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return "", fmt.Errorf("creating a client to read the ClusterPolicy: %w", err)
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(nvidia.ClusterPolicyGVK.GroupVersion().WithKind(nvidia.ClusterPolicyGVK.Kind + "List"))
	err = c.List(ctx, list)
	switch {
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		return nvidia.DefaultOperatorNamespace, nil
	case err != nil:
		return "", fmt.Errorf("reading the GPU Operator's ClusterPolicy to find its namespace (or pass --gpu-operator-namespace): %w", err)
	}
	for i := range list.Items {
		if ns := nvidia.OperatorNamespace(&list.Items[i]); ns != "" {
			return ns, nil
		}
	}
	return nvidia.DefaultOperatorNamespace, nil
}

// byObject restricts the cache per kind: gpupool reads and writes only its own ConfigMaps, in
// the GPU Operator's namespace, and reads only the agents' heartbeat Leases, in theirs (RBAC
// grants no more); Nodes are slimmed as they enter it, and Pods become records
// (controllers.NewPodStore).
func byObject(configNamespace, agentNamespace string) map[client.Object]cache.ByObject {
	// Nodes, which grow with the fleet, are kept only in the fields decisions read.
	out := controllers.SlimCache()
	out[&corev1.ConfigMap{}] = cache.ByObject{Namespaces: map[string]cache.Config{configNamespace: {}}}
	if agentNamespace != "" {
		out[&coordinationv1.Lease{}] = controllers.AgentLeaseCache(agentNamespace)
	}
	return out
}
