// Command demo shows gpupool on a local control plane built from Go modules: it starts etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler on loopback, installs the CRDs and
// samples, shows the API server refusing a bad policy, runs the manager, and cleans up.
//
// `make demo` runs it; `make demo DEMO_FLAGS=--keep` leaves the cluster up until Ctrl-C.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpupool/gpupool/test/localcluster"
)

// invalidPolicy is what a user might type by mistake: the demo shows it being refused.
const invalidPolicy = `apiVersion: gpupool.io/v1alpha1
kind: GPUPoolPolicy
metadata:
  name: typo-pool
spec:
  nodeSelector:
    matchLabels: {gpupool.io/pool: training}
  catalog:
  - product: NVIDIA-H200
    migProfiles: [3g.71]
  disruption:
    approval: Sometimes
`

type demo struct {
	binDir     string
	manager    string
	gpupoolctl string
	cluster    *localcluster.Cluster
	step       int
}

func main() {
	var d demo
	var keep bool
	flag.StringVar(&d.binDir, "bin-dir", "", "folder with the control-plane binaries (hack/control-plane.sh --print-dir)")
	flag.StringVar(&d.manager, "manager", "", "path of the built manager binary")
	flag.StringVar(&d.gpupoolctl, "gpupoolctl", "", "path of the built gpupoolctl binary")
	flag.BoolVar(&keep, "keep", false, "leave the cluster running until Ctrl-C")
	flag.Parse()
	if d.binDir == "" || d.manager == "" || d.gpupoolctl == "" {
		fmt.Fprintln(os.Stderr, "usage: demo --bin-dir DIR --manager PATH --gpupoolctl PATH [--keep]  (run it with `make demo`)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := d.run(ctx, keep)
	if d.cluster != nil {
		d.say("Stopping the manager and the control plane")
		if stopErr := d.cluster.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		fmt.Println("   all processes stopped and the work folder removed")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		os.Exit(1)
	}
}

func (d *demo) say(format string, args ...any) {
	d.step++
	fmt.Printf("\n== %d. %s\n", d.step, fmt.Sprintf(format, args...))
}

func (d *demo) run(ctx context.Context, keep bool) error {
	fmt.Println("gpupool demo: a local Kubernetes control plane on 127.0.0.1, built from pinned Go modules.")

	d.say("Starting etcd, kube-apiserver, kube-controller-manager and kube-scheduler")
	start := time.Now()
	cluster, err := localcluster.Start(ctx, localcluster.Options{BinDir: d.binDir, Progress: indent{}})
	if err != nil {
		return err
	}
	d.cluster = cluster
	fmt.Printf("   ready in %.1fs; kubeconfig: %s\n", time.Since(start).Seconds(), cluster.Kubeconfig)
	if err := d.kubectl("version"); err != nil {
		return err
	}

	d.say("Installing gpupool's CRDs: GPUPoolPolicy, RepartitionPlan, GPUNode")
	if err := d.kubectl("apply", "--server-side", "-f", "config/crd/bases"); err != nil {
		return err
	}
	if err := d.kubectl("wait", "--for=condition=Established", "--timeout=60s",
		"crd/gpupoolpolicies.gpupool.io", "crd/repartitionplans.gpupool.io", "crd/gpunodes.gpupool.io"); err != nil {
		return err
	}

	d.say("The API server validates policies before any controller sees them")
	fmt.Println("   a policy with a bad profile name and an unknown approval mode:")
	if err := d.kubectlStdin(invalidPolicy, "apply", "-f", "-"); err == nil {
		return errors.New("the API server accepted an invalid policy")
	}

	d.say("Applying the samples (config/samples): a policy, a proposed plan and a node report")
	if err := d.kubectl("apply", "-k", "config/samples"); err != nil {
		return err
	}
	if err := d.kubectl("get", "gpupool", "-o", "wide"); err != nil {
		return err
	}
	fmt.Println("\n   the policy's defaults, filled in by the API server:")
	if err := d.kubectl("get", "gpupoolpolicy", "training-pool", "-o", "jsonpath={.spec.disruption}{\"\\n\"}{.spec.planning}{\"\\n\"}"); err != nil {
		return err
	}
	fmt.Println("\n   approving is an authorised decision: only subjects allowed the verb 'approve' may do it")
	if err := d.kubectl("apply", "-k", "config/approval"); err != nil {
		return err
	}
	if err := d.kubectl("create", "clusterrole", "plan-editor", "--verb=get,list,patch,update",
		"--resource=repartitionplans.gpupool.io"); err != nil {
		return err
	}
	if err := d.kubectl("create", "clusterrolebinding", "alice-edits-plans", "--clusterrole=plan-editor", "--user=alice"); err != nil {
		return err
	}
	if err := d.waitRefused(ctx, "--as=alice", "annotate", "--overwrite", "repartitionplan",
		"training-pool-20261129-1f3e9a7c", "gpupool.io/approve=1f3e9a7c"); err != nil {
		return err
	}
	fmt.Println("   an approver (here the cluster admin) approves it, bound to the plan's hash so that an")
	fmt.Println("   approval never carries over to another plan:")
	if err := d.kubectl("annotate", "repartitionplan", "training-pool-20261129-1f3e9a7c", "gpupool.io/approve=1f3e9a7c"); err != nil {
		return err
	}
	fmt.Println("   and its spec cannot be edited once created:")
	if err := d.kubectl("patch", "repartitionplan", "training-pool-20261129-1f3e9a7c", "--type=merge",
		"-p", `{"spec":{"hash":"deadbeef"}}`); err == nil {
		return errors.New("the API server allowed an edit of a plan's spec")
	}

	d.say("Starting the gpupool manager (leader election, probes, metrics)")
	probe, err := freeAddr()
	if err != nil {
		return err
	}
	metrics, err := freeAddr()
	if err != nil {
		return err
	}
	if err := d.cluster.Run("manager", d.manager, "--kubeconfig="+d.cluster.Kubeconfig,
		"--leader-elect", "--leader-election-namespace=kube-system",
		"--health-probe-bind-address="+probe, "--metrics-bind-address="+metrics, "--metrics-secure=false"); err != nil {
		return err
	}
	if err := waitOK(ctx, "http://"+probe+"/readyz", d.cluster.LogPath("manager")); err != nil {
		return err
	}
	fmt.Printf("   /readyz answers on %s; log: %s\n", probe, d.cluster.LogPath("manager"))
	if err := d.waitLease(ctx); err != nil {
		return err
	}
	if err := d.kubectl("get", "lease", "-n", "kube-system", "gpupool-manager.gpupool.io",
		"-o", "custom-columns=LEASE:.metadata.name,HOLDER:.spec.holderIdentity"); err != nil {
		return err
	}

	d.say("The policy controller observes the pool and reports it in the policy's status")
	if err := d.kubectl("wait", "--for=condition=Ready", "--timeout=60s", "gpupoolpolicy/training-pool"); err != nil {
		return err
	}
	if err := d.kubectl("get", "gpupoolpolicies"); err != nil {
		return err
	}
	fmt.Println("   its conditions (no GPU node carries the pool's label in this demo cluster yet):")
	if err := d.kubectl("get", "gpupoolpolicy", "training-pool", "-o",
		`jsonpath={range .status.conditions[*]}{.type}={.status} ({.reason}): {.message}{"\n"}{end}`); err != nil {
		return err
	}

	d.say("The planner, offline: what would gpupool do on a fragmented H200 pool?")
	fmt.Println("   config/samples/snapshots/fragmented-h200.yaml is what `kubectl get nodes,pods,pdb,gpunodes,gpupoolpolicies -A -o yaml`")
	fmt.Println("   prints for three H200 nodes carved into 1g.18gb slices, with pods waiting for 3g and 2g slices:")
	if err := d.exec("gpupoolctl", d.gpupoolctl, "plan", "-f", "config/samples/snapshots/fragmented-h200.yaml"); err != nil {
		return err
	}
	fmt.Println("   and where only evicting running pods helps (a do-not-disrupt pod is never evicted):")
	if err := d.exec("gpupoolctl", d.gpupoolctl, "plan", "-f", "config/samples/snapshots/busy-eviction.yaml"); err != nil {
		return err
	}

	d.say("What is not there yet")
	for _, line := range []string{
		"simulated GPU nodes (kwok + the simulated GPU Operator) and a workload that cannot schedule",
		"simulated GPU nodes for the policy controller to plan on live (it does so in the envtest suite)",
		"the plan controller executing approved plans on simulated nodes (it does so in the envtest suite)",
		"the node agent on the simulated nodes (it publishes GPUNode from NVML today: kubectl apply -k config/agent on real GPU nodes)",
	} {
		fmt.Println("   - " + line)
	}
	fmt.Println("   The README's status table tracks each of them.")

	if keep {
		d.say("The cluster stays up until Ctrl-C")
		fmt.Printf("   export KUBECONFIG=%s\n   export PATH=%s:$PATH\n", d.cluster.Kubeconfig, d.binDir)
		<-ctx.Done()
	}
	return nil
}

// exec runs a program and prints its output indented, echoing the command as the user types it.
func (d *demo) exec(name, path string, args ...string) error {
	fmt.Printf("   $ %s %s\n", name, strings.Join(args, " "))
	out, err := exec.Command(path, args...).CombinedOutput()
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		fmt.Println("     " + line)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

// kubectl runs the kubectl built with the control plane (same version as the API server) and
// echoes the command, so the user sees what to type.
func (d *demo) kubectl(args ...string) error { return d.kubectlStdin("", args...) }

func (d *demo) kubectlStdin(stdin string, args ...string) error {
	fmt.Printf("   $ kubectl %s\n", strings.Join(args, " "))
	cmd := exec.Command(filepath.Join(d.binDir, "kubectl"), append([]string{"--kubeconfig=" + d.cluster.Kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	for _, line := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
		fmt.Println("     " + line)
	}
	if err != nil {
		return fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// waitRefused runs a kubectl command that an admission policy must refuse, retrying while the
// API server has not started enforcing a policy created a moment ago, and prints the refusal.
func (d *demo) waitRefused(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		cmd := exec.Command(filepath.Join(d.binDir, "kubectl"), append([]string{"--kubeconfig=" + d.cluster.Kubeconfig}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil && strings.Contains(string(out), "may not approve") {
			fmt.Printf("   $ kubectl %s\n     %s\n", strings.Join(args, " "), strings.TrimSpace(string(out)))
			return nil
		}
		if err == nil {
			// Accepted before the policy was active: take the annotation back and try again.
			_ = exec.Command(filepath.Join(d.binDir, "kubectl"), "--kubeconfig="+d.cluster.Kubeconfig,
				"annotate", "repartitionplan", args[len(args)-2], "gpupool.io/approve-").Run()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the approval policy never refused kubectl %s: %s", strings.Join(args, " "), out)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (d *demo) waitLease(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		out, err := exec.Command(filepath.Join(d.binDir, "kubectl"), "--kubeconfig="+d.cluster.Kubeconfig,
			"get", "lease", "-n", "kube-system", "gpupool-manager.gpupool.io", "-o", "jsonpath={.spec.holderIdentity}").Output()
		if err == nil && len(out) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the manager did not take its leader Lease: %w; see %s", ctx.Err(), d.cluster.LogPath("manager"))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func waitOK(ctx context.Context, url, logPath string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer 200: %w; see %s", url, ctx.Err(), logPath)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// indent prefixes the cluster's progress lines so they read as part of the current step.
type indent struct{}

func (indent) Write(p []byte) (int, error) {
	fmt.Print("   " + string(p))
	return len(p), nil
}
