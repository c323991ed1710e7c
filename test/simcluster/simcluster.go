// Package simcluster runs gpupool end to end with no GPU: the local control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler), kwok for kubelets, gpupool's CRDs,
// the GPU Operator's ClusterPolicy (CRD and object, as the operator's Helm chart installs
// them), the simulated GPU Operator (cmd/gpusim, which also runs the node agent per node) and
// the manager as real processes. The demo and the end-to-end suite share it, so what the demo
// shows is what the suite tests.
package simcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/sim"
	"github.com/gpupool/gpupool/internal/testenv"
	"github.com/gpupool/gpupool/test/localcluster"
)

// Namespace is the manager's namespace, where its ServiceAccount lives.
const Namespace = "gpupool-system"

// AgentNamespace is the node agents' namespace, as config/agent installs it: the agents (run by
// gpusim) renew their heartbeat Leases there, and the manager reads them (--agent-namespace).
const AgentNamespace = "gpupool-agent"

// AgentUser is the agents' ServiceAccount user as config/agent installs it: gpusim's agents act
// as it, under config/agent's RBAC and admission policies.
const AgentUser = "system:serviceaccount:" + AgentNamespace + ":gpupool-agent"

// OperatorNamespace is the simulated GPU Operator's namespace, the ClusterPolicy's
// status.namespace: the only place the simulated mig-manager and device plugin read their
// ConfigMaps, as the real operator mounts them into its DaemonSets there, and where the manager,
// which finds it in the ClusterPolicy, writes them.
const OperatorNamespace = "gpu-operator"

// The GPU Operator's ClusterPolicy the simulated cluster installs: the settings gpupool checks
// (internal/nvidia CheckClusterPolicy) and the simulated operands read.
const (
	// ClusterPolicyName is the name the GPU Operator's Helm chart gives it.
	ClusterPolicyName = "cluster-policy"
	// MIGConfigMap is the mig-parted ConfigMap the manager writes and the simulated
	// mig-manager reads (spec.migManager.config.name).
	MIGConfigMap = "gpupool-mig-parted-config"
	// DevicePluginConfigMap holds the device plugin's configs (spec.devicePlugin.config.name),
	// and DevicePluginDefault is the key applied on a node without the
	// nvidia.com/device-plugin.config label (spec.devicePlugin.config.default): gpupool's
	// exclusive config. gpusim does not seed this ConfigMap (NVIDIA's operator creates none of
	// a name it is given), so the simulated device plugins advertise nothing until the manager
	// creates it when it starts: the cluster comes up only if the manager does.
	DevicePluginConfigMap = "gpupool-device-plugin-config"
	DevicePluginDefault   = "gpupool-none"
)

// UsageMinWindow and UsageMinSamples are the evidence at which the simulated agents publish a
// pod's usage summary (gpusim --agent-usage-min-window/-samples): half a minute of the agents'
// 2s refresh instead of production's day, so that kubectl gpupool rightsize --min-window and
// --min-samples with these values recommends within a scenario or a demo.
const (
	UsageMinWindow  = 30 * time.Second
	UsageMinSamples = 15
)

// Process names, for logs (Cluster.LogPath) and for killing one.
const (
	ManagerProcess = "manager"
	GPUSimProcess  = "gpusim"
)

// Options configure a simulated cluster.
type Options struct {
	// BinDir holds the control-plane binaries (hack/control-plane.sh --print-dir).
	BinDir string
	// Manager and GPUSim are the built cmd/manager and cmd/gpusim binaries.
	Manager, GPUSim string
	// Nodes is gpusim's --nodes spec, e.g. "4xh200:2:all-1g,2xa100-80gb:2:all-1g".
	Nodes string
	// ManagerArgs are added to the manager's command line.
	ManagerArgs []string
	// Progress receives one line per step a user should notice; nil discards them.
	Progress io.Writer
}

// Cluster is a running simulated GPU cluster.
type Cluster struct {
	*localcluster.Cluster
	// Client reaches the API server as cluster-admin, with core, apiextensions and gpupool kinds.
	Client client.Client
	// ManagerProbe is the manager's health probe address (its /readyz).
	ManagerProbe string
	// ManagerMetrics is the manager's plain-HTTP metrics address (its /metrics).
	ManagerMetrics string
	// ManagerKubeconfig is the manager's kubeconfig: it acts as its ServiceAccount
	// (ManagerUser), with the RBAC of config/rbac and under the policies of config/admission.
	ManagerKubeconfig string

	opts     Options
	progress io.Writer
	// replicas are the manager replicas StartManagerReplicas runs, if any.
	replicas []Replica
}

// Start brings everything up and returns once the simulated nodes are Ready, every agent has
// published its GPUNode and the manager is ready. On failure it stops what it started.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	for name, path := range map[string]string{"manager": opts.Manager, "gpusim": opts.GPUSim} {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%s binary %q not found: run `make build` first", name, path)
		}
	}
	c := &Cluster{opts: opts, progress: opts.Progress}
	if c.progress == nil {
		c.progress = io.Discard
	}
	lc, err := localcluster.Start(ctx, localcluster.Options{BinDir: opts.BinDir, Components: localcluster.WithKwok,
		Progress: c.progress})
	if err != nil {
		return nil, err
	}
	c.Cluster = lc
	if err := c.start(ctx); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return fmt.Errorf("building the client scheme: %w", err)
		}
	}
	cl, err := client.New(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	c.Client = cl

	fmt.Fprintln(c.progress, "installing gpupool's CRDs and the GPU Operator's ClusterPolicy CRD")
	if err := c.installCRDs(ctx); err != nil {
		return err
	}
	for _, ns := range []string{Namespace, OperatorNamespace, AgentNamespace} {
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil &&
			!apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	fmt.Fprintln(c.progress, "installing the admission policies and the manager's ServiceAccount and RBAC")
	if err := c.installTrustBoundary(ctx); err != nil {
		return err
	}
	fmt.Fprintf(c.progress, "installing ClusterPolicy %s (MIG strategy mixed, operator namespace %s)\n", ClusterPolicyName, OperatorNamespace)
	if err := sim.InstallClusterPolicy(ctx, cl, ClusterPolicy()); err != nil {
		return err
	}

	fmt.Fprintf(c.progress, "starting the simulated GPU Operator (gpusim --nodes %s)\n", c.opts.Nodes)
	if err := c.Run(GPUSimProcess, c.opts.GPUSim, "--kubeconfig="+c.Kubeconfig, "--nodes="+c.opts.Nodes,
		"--create-nodes", "--seed-config", "--cluster-policy="+ClusterPolicyName, "--agent-refresh-period=2s",
		"--agent-lease-namespace="+AgentNamespace, "--agent-user="+AgentUser,
		"--agent-usage-min-window="+UsageMinWindow.String(), fmt.Sprintf("--agent-usage-min-samples=%d", UsageMinSamples)); err != nil {
		return err
	}
	if err := c.waitNodes(ctx); err != nil {
		return err
	}
	return c.StartManager(ctx)
}

// ClusterPolicy is the GPU Operator's ClusterPolicy the simulated cluster installs.
func ClusterPolicy() sim.ClusterPolicySettings {
	return sim.ClusterPolicySettings{
		Name: ClusterPolicyName, Namespace: OperatorNamespace, MIGStrategy: "mixed",
		MIGConfigMap: MIGConfigMap, DevicePluginConfigMap: DevicePluginConfigMap, DevicePluginDefault: DevicePluginDefault,
	}
}

// installCRDs creates gpupool's CRDs from config/crd/bases and the simulator's ClusterPolicy
// CRD, and waits until they are served.
func (c *Cluster) installCRDs(ctx context.Context) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in %s/config/crd/bases: run `make manifests`", root)
	}
	var names []string
	cp := sim.ClusterPolicyCRD()
	if err := c.Client.Create(ctx, cp); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating CRD %s: %w", cp.Name, err)
	}
	names = append(names, cp.Name)
	for _, f := range files {
		objs, err := testenv.ReadObjects(f)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if err := c.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating CRD %s: %w", o.GetName(), err)
			}
			names = append(names, o.GetName())
		}
	}
	return Poll(ctx, time.Minute, "the CRDs to be established", func() (bool, error) {
		for _, name := range names {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			established := false
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					established = true
				}
			}
			if !established {
				return false, nil
			}
		}
		return true, nil
	})
}

// waitNodes waits until every simulated node is Ready and its agent has published GPUs.
func (c *Cluster) waitNodes(ctx context.Context) error {
	return Poll(ctx, 2*time.Minute, "the simulated nodes to be Ready with their GPUs reported", func() (bool, error) {
		if err := c.exitedEarly(GPUSimProcess); err != nil {
			return false, err
		}
		var nodes corev1.NodeList
		if err := c.Client.List(ctx, &nodes, client.MatchingLabels{nvidia.LabelGPUPresent: "true"}); err != nil {
			return false, err
		}
		if len(nodes.Items) == 0 {
			return false, nil
		}
		for _, n := range nodes.Items {
			ready := false
			for _, cond := range n.Status.Conditions {
				ready = ready || (cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue)
			}
			report := &v1alpha1.GPUNode{}
			if err := c.Client.Get(ctx, client.ObjectKey{Name: n.Name}, report); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			if !ready || len(report.Status.GPUs) == 0 {
				return false, nil
			}
		}
		fmt.Fprintf(c.progress, "%d simulated GPU nodes Ready, each with its GPUNode published by the agent\n", len(nodes.Items))
		return true, nil
	})
}

// StartManager runs the manager process and waits until it is ready. Leader election is off so
// that a replacement started after KillManager acts at once instead of waiting out a lease.
func (c *Cluster) StartManager(ctx context.Context) error {
	probe, metrics, err := c.startManager(ctx, ManagerProcess, false)
	c.ManagerProbe, c.ManagerMetrics = probe, metrics
	return err
}

// LeaseName is the Lease, in Namespace, the manager's replicas elect their leader with.
const LeaseName = "gpupool-manager.gpupool.io"

// Replica is one of several manager processes that elect a leader.
type Replica struct {
	// Process is its name for LogPath and Kill.
	Process string
	// Probe and Metrics are its health probe and plain-HTTP metrics addresses.
	Probe, Metrics string
}

// StartManagerReplicas replaces the manager with n replicas that elect a leader through the
// Lease LeaseName in Namespace (--leader-elect), as a Deployment of n replicas does: only the
// leader acts. It returns once every replica is ready (one that is not the leader is ready
// too). StopManagerReplicas goes back to the single manager.
func (c *Cluster) StartManagerReplicas(ctx context.Context, n int) ([]Replica, error) {
	if err := c.KillManager(); err != nil {
		return nil, err
	}
	c.replicas = nil
	for i := range n {
		r := Replica{Process: fmt.Sprintf("%s-%d", ManagerProcess, i)}
		var err error
		r.Probe, r.Metrics, err = c.startManager(ctx, r.Process, true)
		c.replicas = append(c.replicas, r)
		if err != nil {
			return c.replicas, err
		}
	}
	return c.replicas, nil
}

// StopManagerReplicas kills the replicas still running and starts the single manager again,
// with leader election off.
func (c *Cluster) StopManagerReplicas(ctx context.Context) error {
	var errs []error
	for _, r := range c.replicas {
		if exited, err := c.Exited(r.Process); err != nil || exited {
			continue // killed already, or gone by itself
		}
		errs = append(errs, c.Kill(r.Process))
	}
	c.replicas = nil
	return errors.Join(append(errs, c.StartManager(ctx))...)
}

// startManager runs a manager process named name and waits until it is ready, returning its
// probe and metrics addresses. With leaderElect it competes for the Lease LeaseName.
func (c *Cluster) startManager(ctx context.Context, name string, leaderElect bool) (probe, metrics string, err error) {
	if probe, err = freeAddr(); err != nil {
		return "", "", err
	}
	if metrics, err = freeAddr(); err != nil {
		return "", "", err
	}
	election := []string{"--leader-elect=false"}
	if leaderElect {
		election = []string{"--leader-elect=true", "--leader-election-namespace=" + Namespace}
	}
	args := append(append([]string{"--kubeconfig=" + c.ManagerKubeconfig}, election...),
		"--health-probe-bind-address="+probe, "--metrics-bind-address="+metrics, "--metrics-secure=false",
		// gpusim reads the ConfigMap from the API server, not from a kubelet-synced volume.
		"--config-propagation=1s")
	args = append(args, c.opts.ManagerArgs...)
	if name == ManagerProcess {
		fmt.Fprintln(c.progress, "starting the gpupool manager")
	} else {
		fmt.Fprintf(c.progress, "starting gpupool manager replica %s (leader election on)\n", name)
	}
	if err := c.Run(name, c.opts.Manager, args...); err != nil {
		return probe, metrics, err
	}
	return probe, metrics, Poll(ctx, time.Minute, "the manager "+name+" to be ready", func() (bool, error) {
		if err := c.exitedEarly(name); err != nil {
			return false, err
		}
		resp, err := http.Get("http://" + probe + "/readyz") //nolint:noctx // loopback probe, bounded by poll
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// exitedEarly says, as an error, that a process which should be running has exited.
func (c *Cluster) exitedEarly(name string) error {
	exited, err := c.Exited(name)
	switch {
	case !exited:
		return nil
	case err != nil:
		return fmt.Errorf("%s exited: %w; see %s", name, err, c.LogPath(name))
	}
	return fmt.Errorf("%s exited; see %s", name, c.LogPath(name))
}

// KillManager ends the manager with SIGKILL, as a crashed replica.
func (c *Cluster) KillManager() error { return c.Kill(ManagerProcess) }

// Poll calls check every 250ms until it returns true, fails, or the timeout passes; the error
// says what it waited for.
func Poll(ctx context.Context, timeout time.Duration, what string, check func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ticker := time.NewTicker(250 * time.Millisecond)
	defer ticker.Stop()
	for {
		ok, err := check()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-ticker.C:
		}
	}
}

// RepoRoot is the folder holding go.mod, found upwards from the working directory, so that
// the demo (run from the root) and tests (run from their package) find config/ and hack/.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory: run from inside the gpupool checkout")
		}
		dir = parent
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
