// Command gpusim is the simulated NVIDIA GPU Operator that `make demo` and the end-to-end
// suite run next to a local control plane (kube-apiserver, scheduler, controller-manager and
// kwok): for every simulated GPU node it plays mig-manager and the device plugin over a
// go-nvml mock server, and runs gpupool's node agent against that mock. internal/sim does the
// work and documents it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/gpupool/gpupool/internal/rightsize"
	"github.com/gpupool/gpupool/internal/sim"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

func main() {
	os.Exit(run(ctrl.SetupSignalHandler(), os.Args[1:], os.Stderr, loadConfig))
}

// loadConfig reads the kubeconfig at path, or finds one as kubectl does when path is empty.
func loadConfig(path string) (*rest.Config, error) {
	if path != "" {
		return clientcmd.BuildConfigFromFlags("", path)
	}
	return ctrl.GetConfig()
}

// run is main with its dependencies passed in; it returns the exit code.
func run(ctx context.Context, args []string, stderr io.Writer, restConfig func(string) (*rest.Config, error)) int {
	fs := flag.NewFlagSet("gpusim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { usage(fs, stderr) }
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the control plane (default: $KUBECONFIG, then ~/.kube/config)")
	nodes := fs.String("nodes", "", "simulated nodes: comma-separated [<count>x]<model>:<gpus>[:<preset>[:dra|:dynamicmig]] groups (see above)")
	clusterPolicy := fs.String("cluster-policy", "", "name of the GPU Operator's ClusterPolicy (nvidia.com/v1) the operands are rendered from (default: the only one)")
	createNodes := fs.Bool("create-nodes", false, "create the Node objects that do not exist yet (labelled as GPU Feature Discovery does, annotated for kwok)")
	seedConfig := fs.Bool("seed-config", false, "add the nodes' initial presets to the ClusterPolicy's mig-parted ConfigMap when missing, creating it if needed")
	seedDevicePluginConfig := fs.Bool("seed-device-plugin-config", false, "create the ClusterPolicy's device plugin ConfigMap (one exclusive config "+
		"under spec.devicePlugin.config.default) when it does not exist; NVIDIA's operator never does, so without it the device plugin waits for "+
		"gpupool's manager to create it")
	agents := fs.Bool("agents", true, "run gpupool's node agent in-process for every simulated node")
	agentPeriod := fs.Duration("agent-refresh-period", sim.DefaultAgentRefreshPeriod, "how often the in-process agents re-read NVML")
	agentUser := fs.String("agent-user", "", "user the in-process agents act as, with their node's name as the user extra "+
		"authentication.kubernetes.io/node-name, as the agent DaemonSet's pods do (e.g. system:serviceaccount:gpupool-agent:gpupool-agent, "+
		"with config/agent's RBAC and admission policies installed); empty acts with gpusim's own credentials")
	agentLeases := fs.String("agent-lease-namespace", "", "namespace where the in-process agents renew their heartbeat Leases, as the agent DaemonSet does; empty rewrites GPUNode status each refresh instead")
	usageWindow := fs.Duration("agent-usage-min-window", rightsize.DefaultMinWindow, "the in-process agents rewrite a pod's usage summary "+
		"(GPUNode status.usage) the pass its window reaches this; give the recommender's --min-window when it is shortened for a demo")
	usageSamples := fs.Int64("agent-usage-min-samples", rightsize.DefaultMinSamples, "the in-process agents rewrite a pod's usage summary "+
		"the pass its samples reach this; give the recommender's --min-samples when it is shortened for a demo")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gpusim: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	specs, err := sim.ParseNodeSpecs(*nodes)
	if err != nil {
		fmt.Fprintf(stderr, "gpusim: --nodes: %v\n", err)
		return exitUsage
	}
	if errs := validation.IsDNS1123Subdomain(*clusterPolicy); *clusterPolicy != "" && len(errs) > 0 {
		fmt.Fprintf(stderr, "gpusim: --cluster-policy %q: %s\n", *clusterPolicy, strings.Join(errs, "; "))
		return exitUsage
	}
	if *agentPeriod <= 0 {
		fmt.Fprintf(stderr, "gpusim: --agent-refresh-period must be positive, got %s\n", *agentPeriod)
		return exitUsage
	}
	if *usageWindow <= 0 || *usageSamples <= 0 {
		fmt.Fprintf(stderr, "gpusim: --agent-usage-min-window and --agent-usage-min-samples must be positive, got %s and %d\n", *usageWindow, *usageSamples)
		return exitUsage
	}

	// The agents log through controller-runtime's global logger, which only its first setting
	// fulfils; the simulator gets the logger explicitly.
	logger := zap.New(zap.UseFlagOptions(&zapOpts), zap.WriteTo(stderr))
	ctrl.SetLogger(logger)
	log := logger.WithName("gpusim")
	cfg, err := restConfig(*kubeconfig)
	if err != nil {
		log.Error(err, "loading kubeconfig", "path", *kubeconfig)
		return exitFailed
	}
	s, err := sim.New(cfg, sim.Options{
		Nodes:                  specs,
		ClusterPolicy:          *clusterPolicy,
		CreateNodes:            *createNodes,
		SeedConfig:             *seedConfig,
		SeedDevicePluginConfig: *seedDevicePluginConfig,
		DisableAgents:          !*agents,
		AgentRefreshPeriod:     *agentPeriod,
		AgentUsageRule:         rightsize.PublishRule{MinWindow: *usageWindow, MinSamples: *usageSamples},
		AgentLeaseNamespace:    *agentLeases,
		AgentUser:              *agentUser,
		Logger:                 logger,
	})
	if err != nil {
		log.Error(err, "setting up the simulator")
		return exitFailed
	}
	for _, n := range s.Nodes() {
		log.Info("simulated node", "node", n.Name(), "model", n.Model().Name, "config", n.InitialConfig())
	}
	start := time.Now()
	if err := s.Run(ctx); err != nil {
		log.Error(err, "simulator stopped")
		return exitFailed
	}
	log.Info("stopped", "ran", time.Since(start).Round(time.Second).String())
	return exitOK
}

func usage(fs *flag.FlagSet, w io.Writer) {
	var models []string
	for _, m := range sim.Models() {
		models = append(models, fmt.Sprintf("  %-22s %s", strings.Join(m.Aliases, ", "), m.Name))
	}
	fmt.Fprintf(w, `Usage: gpusim --nodes SPEC [flags]

Simulates NVIDIA's GPU Operator (mig-manager, device plugin) and runs gpupool's node agent
for every simulated node, against the control plane of --kubeconfig.

--nodes takes comma-separated groups [<count>x]<model>:<gpus>[:<preset>[:dra|:dynamicmig]]:
  2xh200:8:all-1g,a100-80gb:4   two H200 nodes with 8 GPUs each in all-1g, one A100-80GB
                                node with 4 GPUs, MIG disabled
  h200:2:all-1g:dra             an H200 node whose GPUs NVIDIA's DRA driver serves instead of
                                the device plugin: its kubelet plugin publishes the MIG devices
                                in a ResourceSlice when it starts, and mig-manager restarts it
                                with each change (nvidia.com/gpu.deploy.client=true)
  h200:2:all-disabled:dynamicmig
                                an H200 node whose GPUs the DRA driver serves with its
                                DynamicMIG feature gate: every profile and placement is a
                                partition device on shared counters; the MIG instance is
                                created when a claim is allocated it and destroyed when the
                                claim goes; no mig-manager runs there
Nodes are named sim-<first alias>-<n> (sim-h200-0, sim-a100-80gb-0, ...), n counting
from 0 per model.
Models (aliases, then the canonical name):
%s
Presets (initial layout and nvidia.com/mig.config value): %s

Like NVIDIA's GPU Operator, the simulated operands take their settings from the ClusterPolicy
(--cluster-policy) and read its ConfigMaps only in its status.namespace: mig-manager applies the
entry of spec.migManager.config.name (key config.yaml) that label nvidia.com/mig.config names,
and sets nvidia.com/mig.config.state=failed for a file mig-parted refuses or a name it lacks.
The device plugin runs with spec.mig.strategy and the key of spec.devicePlugin.config.name that
label %s names (spec.devicePlugin.config.default
without the label): a listed resource is shared as replicas, renamed <name>.shared under
renameByDefault (nvidia.com/gpu.shared, nvidia.com/mig-<profile>.shared). A config NVIDIA's
plugin refuses (an unknown key, a file that does not decode, MPS under the mixed strategy, more
than 48 MPS replicas) makes it advertise nothing: every nvidia.com/ resource goes to 0.

Fault knobs, per node, as annotations (internal/sim/faults.go says what each does):
  %s: comma-separated %s
  %s: a Go duration mig-manager stays pending before applying, e.g. 5s
  %s: a Go duration a reboot keeps the host down (default %s)
  %s: a new value restarts mig-manager, which applies the current mig.config again

GPU memory a pod's simulated workload uses on each device it holds alone, as a pod annotation
the node's NVML reports and the agent samples into GPUNode status.usage (internal/sim/usage.go):
  %s: steady:<quantity> (steady:9Gi), bursty:<low>-<high>[/<period>]
      (bursty:4Gi-60Gi: the high for the first fifth of every period, default 1m), or
      preallocate:<fraction> (preallocate:0.9 of the device, flat, as JAX/XLA and vLLM take it);
      pods without it report no usage

Flags:
`, strings.Join(models, "\n"), strings.Join(sim.Presets(), ", "), sim.LabelDevicePluginConfig,
		sim.AnnotationFault, strings.Join(sim.FaultWords(), " | "), sim.AnnotationApplyDelay,
		sim.AnnotationRebootDuration, sim.DefaultRebootDuration, sim.AnnotationRestartMIGManager, sim.AnnotationUsage)
	fs.PrintDefaults()
}
