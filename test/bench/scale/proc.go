package scale

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gpupool/gpupool/test/bench/measure"
)

// proxy serves the API server to one process on a plain-HTTP loopback port and counts that
// process's requests and bytes: the manager is a separate binary, so its client cannot be
// wrapped, but its connection can.
type proxy struct {
	URL     string
	Traffic measure.Traffic
	srv     *http.Server
}

func startProxy(cfg *rest.Config) (*proxy, error) {
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the API server's transport: %w", err)
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's address %q: %w", cfg.Host, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the proxy: %w", err)
	}
	p := &proxy{URL: "http://" + ln.Addr().String()}
	p.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target); r.Out.Host = target.Host },
		Transport: p.Traffic.Wrap(rt),
		// Watch events go through as they come.
		FlushInterval: -1,
	}}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *proxy) stop() { _ = p.srv.Close() }

// kubeconfig writes a kubeconfig that reaches the API server through the proxy.
func (p *proxy) kubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["scale"] = &clientcmdapi.Cluster{Server: p.URL}
	cfg.AuthInfos["scale"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["scale"] = &clientcmdapi.Context{Cluster: "scale", AuthInfo: "scale"}
	cfg.CurrentContext = "scale"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// process is a binary the benchmark runs and measures, its output in a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	log     string
	started time.Time
	exited  chan error
}

func startProcess(dir, name, binary string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	out, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", logPath, err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, started: time.Now(), exited: make(chan error, 1)}
	go func() {
		p.exited <- cmd.Wait()
		_ = out.Close()
	}()
	return p, nil
}

// alive fails with the end of the process's log when it has exited.
func (p *process) alive() error {
	select {
	case err := <-p.exited:
		p.exited <- err
		if err == nil {
			err = errors.New("exit status 0")
		}
		return fmt.Errorf("%s exited (%w); the end of %s:\n%s", p.name, err, p.log, tail(p.log, 20))
	default:
		return nil
	}
}

func (p *process) stop() {
	if p.alive() != nil {
		return
	}
	// The exit status of a process asked to stop says nothing the benchmark reports.
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-p.exited:
		p.exited <- err
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		p.exited <- <-p.exited
	}
}

// waitLog waits until the process's log holds want.
func (p *process) waitLog(ctx context.Context, want string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if err := p.alive(); err != nil {
			return err
		}
		if raw, err := os.ReadFile(p.log); err == nil && bytes.Contains(raw, []byte(want)) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not log %q within %s; the end of %s:\n%s", p.name, want, timeout, p.log, tail(p.log, 20))
}

func tail(path string, lines int) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := bytes.Split(bytes.TrimRight(raw, "\n"), []byte("\n"))
	return string(bytes.Join(all[max(0, len(all)-lines):], []byte("\n")))
}

// usage is what one process used over a window.
type usage struct {
	// RSSMedian is the median of one resident-set sample a second; Peak the process's VmHWM.
	RSSMedian, Peak int64
	// Cores is CPU time over wall time.
	Cores float64
}

// watchUsage samples the processes' memory once a second over window and reads their CPU
// time at both ends; check runs each second and stops the window on an error.
func watchUsage(ctx context.Context, window time.Duration, check func() error, pids ...int) ([]usage, error) {
	before := make([]time.Duration, len(pids))
	for i, pid := range pids {
		t, err := measure.CPUTime(pid)
		if err != nil {
			return nil, err
		}
		before[i] = t
	}
	start := time.Now()
	samples := make([][]int64, len(pids))
	for time.Since(start) < window {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
		if err := check(); err != nil {
			return nil, err
		}
		for i, pid := range pids {
			rss, _, err := measure.Memory(pid)
			if err != nil {
				return nil, err
			}
			samples[i] = append(samples[i], rss)
		}
	}
	wall := time.Since(start)
	out := make([]usage, len(pids))
	for i, pid := range pids {
		t, err := measure.CPUTime(pid)
		if err != nil {
			return nil, err
		}
		_, peak, err := measure.Memory(pid)
		if err != nil {
			return nil, err
		}
		if len(samples[i]) == 0 {
			return nil, errors.New("a window shorter than one second takes no sample")
		}
		slices.Sort(samples[i])
		out[i] = usage{RSSMedian: samples[i][len(samples[i])/2], Peak: peak, Cores: (t - before[i]).Seconds() / wall.Seconds()}
	}
	return out, nil
}
