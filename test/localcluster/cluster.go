// Package localcluster runs a real Kubernetes control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, and kwok on request) as plain processes on loopback,
// from the binaries hack/control-plane.sh builds. `make demo` and the end-to-end suites use it;
// nothing in the product imports it.
//
// Ports are chosen free at start, every process is stopped newest first (all at once makes the
// API server linger while it retries etcd), and each child gets SIGKILL if this process dies,
// so no stray process outlives a demo or a test.
package localcluster

import (
	"context"
	"crypto/tls"
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
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Component is a control-plane binary the cluster can run.
type Component string

// The components, in start order.
const (
	Etcd              Component = "etcd"
	APIServer         Component = "kube-apiserver"
	ControllerManager Component = "kube-controller-manager"
	Scheduler         Component = "kube-scheduler"
	// Kwok plays the kubelet for Nodes annotated KwokNodeAnnotation=KwokNodeAnnotationValue:
	// it keeps them Ready through Leases, marks their pods Running and removes terminating ones.
	Kwok Component = "kwok"
)

// AllComponents is the full control plane: ReplicaSets recreate evicted pods, the disruption
// controller computes PodDisruptionBudget status, and the scheduler binds pending pods. Nodes
// have no kubelet: pods are bound but stay Pending unless a test sets their status (or uses
// WithKwok).
var AllComponents = []Component{Etcd, APIServer, ControllerManager, Scheduler}

// WithKwok is AllComponents plus Kwok, for tests that need Ready nodes and Running pods without
// writing their status themselves. It is a separate list so callers of AllComponents do not
// need the kwok binary nor pay for another process.
var WithKwok = []Component{Etcd, APIServer, ControllerManager, Scheduler, Kwok}

// startOrder is the order of the components after the API server, whatever order a caller
// lists them in: kwok last, so the pods it reports Running have already been scheduled.
var startOrder = []Component{ControllerManager, Scheduler, Kwok}

// Options configure a cluster.
type Options struct {
	// BinDir holds the binaries (hack/control-plane.sh --print-dir).
	BinDir string
	// Dir is the work folder for certificates, etcd data, logs and the kubeconfig; a new
	// temporary folder, removed by Stop, when empty.
	Dir string
	// Components to run; AllComponents when empty. Etcd and APIServer are always run, the rest
	// in the order of the constants. Kwok needs kwok-stages.yaml next to its binary (see
	// hack/control-plane.sh), or else the kwok module in the Go module cache.
	Components []Component
	// Progress receives one line per step a user should notice; nil discards them.
	Progress io.Writer
	// StartTimeout bounds the wait for every component to report healthy.
	StartTimeout time.Duration
}

// Cluster is a running local control plane.
type Cluster struct {
	// Dir is the work folder.
	Dir string
	// Kubeconfig is the path of an admin kubeconfig with embedded certificates.
	Kubeconfig string
	// Config reaches the API server as cluster-admin.
	Config *rest.Config

	removeDir bool
	progress  io.Writer
	procs     []*process
}

type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start brings up the control plane and returns once every component reports healthy.
// On failure it stops what it started and says which component failed and where its log is.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	components := opts.Components
	if len(components) == 0 {
		components = AllComponents
	}
	for _, c := range components {
		if _, err := os.Stat(filepath.Join(opts.BinDir, string(c))); err != nil {
			return nil, fmt.Errorf("%s not found in %s: run `make control-plane` to build it", c, opts.BinDir)
		}
	}
	c := &Cluster{Dir: opts.Dir, progress: opts.Progress}
	if c.progress == nil {
		c.progress = io.Discard
	}
	if c.Dir == "" {
		dir, err := os.MkdirTemp("", "gpupool-cluster-")
		if err != nil {
			return nil, fmt.Errorf("creating work folder: %w", err)
		}
		c.Dir, c.removeDir = dir, true
	}
	if err := c.start(ctx, opts, components); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, opts Options, components []Component) error {
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	// Found before anything starts, so a missing stage file fails in milliseconds.
	var kwokStagesPath string
	if slices.Contains(components, Kwok) {
		var err error
		if kwokStagesPath, err = kwokStages(ctx, opts.BinDir, c.Dir); err != nil {
			return err
		}
	}
	keys := pki{dir: filepath.Join(c.Dir, "pki")}
	if err := keys.generate(); err != nil {
		return fmt.Errorf("generating certificates: %w", err)
	}
	ports, err := freePorts(6)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort, cmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	server := "https://127.0.0.1:" + strconv.Itoa(apiPort)
	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	if err := writeKubeconfig(c.Kubeconfig, server, keys); err != nil {
		return err
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return fmt.Errorf("loading %s: %w", c.Kubeconfig, err)
	}
	bin := func(comp Component) string { return filepath.Join(opts.BinDir, string(comp)) }
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeer)

	c.say("starting etcd on %s", etcdURL)
	if err := c.run(string(Etcd), bin(Etcd),
		"--name=gpupool", "--data-dir="+filepath.Join(c.Dir, "etcd-data"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=gpupool="+peerURL, "--initial-cluster-state=new",
		"--unsafe-no-fsync=true", "--log-level=warn"); err != nil {
		return err
	}

	c.say("starting kube-apiserver on %s", server)
	if err := c.run(string(APIServer), bin(APIServer),
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(apiPort),
		"--tls-cert-file="+keys.path("apiserver.crt"), "--tls-private-key-file="+keys.path("apiserver.key"),
		"--client-ca-file="+keys.path("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+keys.path("sa.pub"),
		"--service-account-signing-key-file="+keys.path("sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=Node,RBAC",
		// A loopback advertise address is refused by the default endpoint reconciler.
		"--endpoint-reconciler-type=none"); err != nil {
		return err
	}
	if err := c.waitHealthy(ctx, string(APIServer), server+"/readyz", rest.CopyConfig(c.Config)); err != nil {
		return err
	}

	for _, comp := range startOrder {
		if !slices.Contains(components, comp) {
			continue
		}
		switch comp {
		case ControllerManager:
			c.say("starting kube-controller-manager")
			if err := c.run(string(comp), bin(comp), "--kubeconfig="+c.Kubeconfig,
				"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(cmPort),
				"--leader-elect=false", "--controllers=*",
				"--service-account-private-key-file="+keys.path("sa.key"),
				"--root-ca-file="+keys.path("ca.crt"),
				// Per-controller service accounts add seconds to start-up and nothing here.
				"--use-service-account-credentials=false",
				"--cluster-signing-cert-file="+keys.path("ca.crt"),
				"--cluster-signing-key-file="+keys.path("ca.key")); err != nil {
				return err
			}
			if err := c.waitHealthy(ctx, string(comp), "https://127.0.0.1:"+strconv.Itoa(cmPort)+"/healthz", nil); err != nil {
				return err
			}
		case Scheduler:
			c.say("starting kube-scheduler")
			if err := c.run(string(comp), bin(comp), "--kubeconfig="+c.Kubeconfig,
				"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(schedPort),
				"--leader-elect=false"); err != nil {
				return err
			}
			if err := c.waitHealthy(ctx, string(comp), "https://127.0.0.1:"+strconv.Itoa(schedPort)+"/healthz", nil); err != nil {
				return err
			}
		case Kwok:
			c.say("starting kwok for nodes annotated %s=%s", KwokNodeAnnotation, KwokNodeAnnotationValue)
			if err := c.run(string(comp), bin(comp), kwokArgs(c.Kubeconfig, kwokStagesPath, kwokPort)...); err != nil {
				return err
			}
			// Plain HTTP: kwok serves TLS on the same port only with a certificate it makes up.
			if err := c.waitHealthy(ctx, string(comp), "http://127.0.0.1:"+strconv.Itoa(kwokPort)+"/healthz", nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// Stop stops every component, newest first, and removes a temporary work folder.
func (c *Cluster) Stop() error {
	var errs []error
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		if err := p.stop(10 * time.Second); err != nil {
			errs = append(errs, fmt.Errorf("stopping %s: %w", p.name, err))
		}
	}
	c.procs = nil
	if c.removeDir && c.Dir != "" {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", c.Dir, err))
		}
	}
	return errors.Join(errs...)
}

// PIDs are the process IDs of the running components, in start order.
func (c *Cluster) PIDs() []int {
	pids := make([]int, 0, len(c.procs))
	for _, p := range c.procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	return pids
}

// LogPath is where a component's output goes.
func (c *Cluster) LogPath(name string) string {
	return filepath.Join(c.Dir, "logs", name+".log")
}

func (c *Cluster) say(format string, args ...any) {
	fmt.Fprintf(c.progress, format+"\n", args...)
}

// Run starts another process next to the control plane (a simulator, the manager) with
// its output in the cluster's log folder; Stop stops it before the control plane.
func (c *Cluster) Run(name, path string, args ...string) error {
	return c.run(name, path, args...)
}

func (c *Cluster) run(name, path string, args ...string) error {
	if err := os.MkdirAll(filepath.Join(c.Dir, "logs"), 0o755); err != nil {
		return fmt.Errorf("creating log folder: %w", err)
	}
	// Appended, so that a process restarted under the same name keeps its earlier log.
	logFile, err := os.OpenFile(c.LogPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("creating log for %s: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group: a Ctrl-C in the terminal reaches only us, and we stop the
		// children in order. Pdeathsig kills a child whose parent died without stopping it.
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	c.procs = append(c.procs, p)
	return nil
}

// Kill ends the newest process run under name with SIGKILL, as a crash would, and waits for
// it. Tests use it to take a replica down mid-work.
func (c *Cluster) Kill(name string) error {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		if p.name != name {
			continue
		}
		c.procs = append(c.procs[:i], c.procs[i+1:]...)
		select {
		case <-p.done:
			if p.err == nil {
				return fmt.Errorf("%s had already exited; see %s", name, c.LogPath(name))
			}
			return fmt.Errorf("%s had already exited: %w; see %s", name, p.err, c.LogPath(name))
		default:
		}
		if err := p.cmd.Process.Kill(); err != nil {
			return fmt.Errorf("killing %s: %w", name, err)
		}
		<-p.done
		return nil
	}
	return fmt.Errorf("no process named %s is running", name)
}

// Exited reports whether the newest process run under name has exited, and how.
func (c *Cluster) Exited(name string) (bool, error) {
	for i := len(c.procs) - 1; i >= 0; i-- {
		if p := c.procs[i]; p.name == name {
			select {
			case <-p.done:
				return true, p.err
			default:
				return false, nil
			}
		}
	}
	return false, fmt.Errorf("no process named %s was run", name)
}

func (p *process) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("did not exit within %s of SIGTERM; killed", grace)
	}
}

// waitHealthy polls url until it answers 200, failing early when the process exits.
// With cfg nil it skips TLS verification: the controller-manager's and scheduler's serving
// certificates are self-signed and only their health matters here.
func (c *Cluster) waitHealthy(ctx context.Context, name, url string, cfg *rest.Config) error {
	client := &http.Client{Timeout: 5 * time.Second}
	if cfg != nil {
		transport, err := rest.TransportFor(cfg)
		if err != nil {
			return fmt.Errorf("building client for %s: %w", name, err)
		}
		client.Transport = transport
	} else {
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // loopback health check of a self-signed endpoint
	}
	proc := c.procs[len(c.procs)-1]
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-proc.done:
			if proc.err == nil {
				return fmt.Errorf("%s exited during start-up; see %s", name, c.LogPath(name))
			}
			return fmt.Errorf("%s exited during start-up: %w; see %s", name, proc.err, c.LogPath(name))
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy at %s: %w; see %s", name, url, ctx.Err(), c.LogPath(name))
		case <-ticker.C:
		}
	}
}

// freePorts reserves n distinct loopback ports; they are released just before use, so a race
// with another process is possible but shows up as a clear start-up error.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free loopback port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func writeKubeconfig(path, server string, keys pki) error {
	read := func(name string) ([]byte, error) { return os.ReadFile(keys.path(name)) }
	ca, err := read("ca.crt")
	if err != nil {
		return err
	}
	cert, err := read("admin.crt")
	if err != nil {
		return err
	}
	key, err := read("admin.key")
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "admin"}
	cfg.CurrentContext = "local"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}
