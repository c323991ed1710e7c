// Command demo shows gpupool doing its whole job on a simulated GPU cluster: a local control
// plane with kwok nodes, the simulated GPU Operator and the manager (test/simcluster); a policy
// and a workload the all-1g layout cannot serve; the plan gpupool proposes, its approval, its
// execution step by step, and a before/after table. It cleans up everything it started.
//
// `make demo` runs it; `make demo-up` keeps the cluster until Ctrl-C or `make demo-down`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/test/simcluster"
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
	binDir  string
	manager string
	gpusim  string
	// plugin is the built gpupoolctl; pluginDir holds it as kubectl-gpupool, on kubectl's PATH,
	// so that "kubectl gpupool" runs it exactly as it runs for a user who installed it.
	plugin    string
	pluginDir string
	pidFile   string
	cluster   *simcluster.Cluster
	step      int
}

// The simulated cluster: four H200 and two A100-80GB nodes with two GPUs each, every GPU cut
// into seven 1g slices, as many clusters start out; and one H200 node that NVIDIA's DRA driver
// serves in its DynamicMIG mode, carving instances as claims are allocated.
const demoNodes = "4xh200:2:all-1g,2xa100-80gb:2:all-1g,1xh200:1:all-disabled:dynamicmig"

func main() {
	var d demo
	var keep bool
	flag.StringVar(&d.binDir, "bin-dir", "", "folder with the control-plane binaries (hack/control-plane.sh --print-dir)")
	flag.StringVar(&d.manager, "manager", "", "path of the built manager binary")
	flag.StringVar(&d.gpusim, "gpusim", "", "path of the built gpusim binary")
	flag.StringVar(&d.plugin, "plugin", "", "path of the built gpupoolctl binary, run as the kubectl plugin kubectl-gpupool")
	flag.BoolVar(&keep, "keep", false, "leave the cluster running until Ctrl-C or `make demo-down`")
	flag.StringVar(&d.pidFile, "pid-file", filepath.Join(os.TempDir(), "gpupool-demo.pid"),
		"with --keep, where the demo writes its PID so that `make demo-down` can stop it")
	flag.Parse()
	if d.binDir == "" || d.manager == "" || d.gpusim == "" || d.plugin == "" {
		fmt.Fprintln(os.Stderr, "usage: demo --bin-dir DIR --manager PATH --gpusim PATH --plugin PATH [--keep]  (run it with `make demo`)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := d.run(ctx, keep)
	if d.pluginDir != "" {
		_ = os.RemoveAll(d.pluginDir)
	}
	if d.cluster != nil {
		d.say("Stopping the manager, gpusim, kwok and the control plane")
		if stopErr := d.cluster.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		fmt.Println("   all processes stopped and the work folder removed")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		if d.cluster != nil {
			fmt.Fprintf(os.Stderr, "logs were in %s/logs\n", d.cluster.Dir)
		}
		os.Exit(1)
	}
}

func (d *demo) say(title string) {
	d.step++
	fmt.Printf("\n== %d. %s\n", d.step, title)
}

func (d *demo) run(ctx context.Context, keep bool) error {
	began := time.Now()
	fmt.Println("gpupool demo: a simulated GPU cluster on 127.0.0.1, every part built from pinned Go modules.")

	d.say("Starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok; gpusim; the manager")
	fmt.Println("   gpusim plays NVIDIA's GPU Operator (mig-manager and device plugin) over go-nvml mock GPUs")
	fmt.Println("   and runs gpupool's node agent on each simulated node; kwok plays the kubelets.")
	cluster, err := simcluster.Start(ctx, simcluster.Options{BinDir: d.binDir, Manager: d.manager, GPUSim: d.gpusim,
		Nodes: demoNodes, Progress: indent{}})
	if err != nil {
		return err
	}
	d.cluster = cluster
	if err := d.installPlugin(); err != nil {
		return err
	}
	fmt.Printf("   ready in %.1fs; kubeconfig: %s\n", time.Since(began).Seconds(), cluster.Kubeconfig)
	if err := d.kubectl("get", "nodes", "-o", "custom-columns=NODE:.metadata.name,PRODUCT:.metadata.labels.nvidia\\.com/gpu\\.product,"+
		"MIG-CONFIG:.metadata.labels.nvidia\\.com/mig\\.config,1G.18GB:.status.allocatable.nvidia\\.com/mig-1g\\.18gb,"+
		"1G.10GB:.status.allocatable.nvidia\\.com/mig-1g\\.10gb"); err != nil {
		return err
	}

	d.say("The API server validates policies before any controller sees them")
	fmt.Println("   a policy with a bad profile name and an unknown approval mode:")
	if err := d.kubectlStdin(invalidPolicy, "apply", "-f", "-"); err == nil {
		return errors.New("the API server accepted an invalid policy")
	}

	d.say("Applying the pool's policy (hack/demo/manifests/policy.yaml): approval Manual")
	if err := d.kubectl("apply", "-f", "hack/demo/manifests/policy.yaml"); err != nil {
		return err
	}
	if err := d.kubectl("apply", "-k", "config/approval"); err != nil {
		return err
	}

	d.say("Submitting a workload mix the all-1g layout cannot serve (hack/demo/manifests/workloads.yaml)")
	if err := d.kubectl("create", "namespace", "demo"); err != nil {
		return err
	}
	if err := d.kubectl("apply", "-f", "hack/demo/manifests/workloads.yaml"); err != nil {
		return err
	}
	submitted := time.Now()
	if err := d.waitFor(ctx, "the 1g inference pods to run and the others to be created", time.Minute, func() (bool, error) {
		pods, err := d.pods(ctx)
		return err == nil && pods["inference-1g"].running == 10 && pods["training-3g"].pending == 9 &&
			pods["finetune-2g"].pending == 3 && pods["notebook-shared"].pending == 6, err
	}); err != nil {
		return err
	}
	before, err := d.settled(ctx)
	if err != nil {
		return err
	}
	if err := d.kubectl("get", "deployments", "-n", "demo"); err != nil {
		return err
	}
	fmt.Println("   the scheduler says why the others wait:")
	if err := d.kubectl("get", "events", "-n", "demo", "--field-selector=reason=FailedScheduling", "-o",
		"custom-columns=MESSAGE:.message", "--sort-by=.lastTimestamp"); err != nil {
		return err
	}

	d.say("The policy controller sees the demand and proposes a RepartitionPlan")
	plan, err := d.waitPlan(ctx, before.pending)
	if err != nil {
		return err
	}
	fmt.Println("   the pool as gpupool sees it: free 1g slices stranded while other shapes pend, and the plan:")
	if err := d.kubectl("gpupool", "status", "demo-pool"); err != nil {
		return err
	}
	fmt.Println("   why does a 3g training pod wait? kubectl gpupool names the layer, the blocking dimension and the plan:")
	if err := d.kubectl("gpupool", "why", "-n", "demo", pendingPod(ctx, d, "training-3g")); err != nil {
		return err
	}
	fmt.Println("   what the plan changes, node by node (GPUs not listed keep running untouched):")
	if err := d.kubectl("gpupool", "plan", plan.Name); err != nil {
		return err
	}

	d.say("Approving is a decision only holders of the 'approve' verb may take")
	if err := d.kubectl("create", "clusterrole", "plan-editor", "--verb=get,list,patch,update",
		"--resource=repartitionplans.gpupool.io"); err != nil {
		return err
	}
	if err := d.kubectl("create", "clusterrolebinding", "alice-edits-plans", "--clusterrole=plan-editor", "--user=alice"); err != nil {
		return err
	}
	if err := d.waitRefused(ctx, "--as=alice", "annotate", "--overwrite", "repartitionplan", plan.Name,
		v1alpha1.AnnotationApprove+"="+plan.Spec.Hash); err != nil {
		return err
	}
	fmt.Println("   the cluster admin approves it; the approval names the plan's hash, so it can never carry over")
	fmt.Println("   to another plan:")
	approved := time.Now()
	if err := d.kubectl("gpupool", "approve", plan.Name); err != nil {
		return err
	}

	d.say("gpupool executes the plan: cordon, drain (Eviction API, PDBs honoured), config entries, relabel, verify, uncordon")
	final, err := d.follow(ctx, plan.Name)
	if err != nil {
		return err
	}
	if final.Status.Phase != v1alpha1.PlanSucceeded {
		return fmt.Errorf("plan %s ended %s: kubectl describe repartitionplan %s says why", plan.Name, final.Status.Phase, plan.Name)
	}
	if err := d.waitFor(ctx, "the pods the plan serves to run", 2*time.Minute, func() (bool, error) {
		after, err := d.measure(ctx)
		return err == nil && after.running >= before.running+len(plan.Spec.Expected.Pods), err
	}); err != nil {
		return err
	}
	after, err := d.settled(ctx)
	if err != nil {
		return err
	}
	if err := d.kubectl("get", "deployments", "-n", "demo"); err != nil {
		return err
	}
	if err := d.kubectl("get", "nodes", "-o", "custom-columns=NODE:.metadata.name,SCHEDULABLE:.spec.unschedulable,"+
		"MIG-CONFIG:.metadata.labels.nvidia\\.com/mig\\.config,STATE:.metadata.labels.nvidia\\.com/mig\\.config\\.state"); err != nil {
		return err
	}
	fmt.Println("   the events gpupool recorded on the plan:")
	if err := d.kubectl("get", "events", "--field-selector=involvedObject.name="+plan.Name, "-o",
		"custom-columns=REASON:.reason,MESSAGE:.message", "--sort-by=.metadata.creationTimestamp"); err != nil {
		return err
	}

	d.say("After: the pool as kubectl gpupool status shows it")
	if err := d.kubectl("gpupool", "status", "demo-pool"); err != nil {
		return err
	}
	d.table(before, after, countEvictions(final), approved.Sub(submitted), time.Since(approved))

	if err := d.dynamicMIG(ctx); err != nil {
		return err
	}
	fmt.Printf("\n   the whole demo took %s\n", time.Since(began).Round(time.Second))

	if keep {
		d.say("The cluster stays up until Ctrl-C or `make demo-down`")
		if err := os.WriteFile(d.pidFile, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", d.pidFile, err)
		}
		defer func() { _ = os.Remove(d.pidFile) }()
		fmt.Printf("   export KUBECONFIG=%s\n   export PATH=%s:%s:$PATH\n", d.cluster.Kubeconfig, d.pluginDir, d.binDir)
		fmt.Println("   then: kubectl gpupool status; kubectl gpupool why -n demo POD")
		fmt.Printf("   manager metrics: curl -s http://%s/metrics | grep ^gpupool_\n", d.cluster.ManagerMetrics)
		fmt.Printf("   logs: %s/logs\n", d.cluster.Dir)
		<-ctx.Done()
	}
	return nil
}

// waitFor polls check until it is true, failing after timeout with what it waited for and
// where the logs are.
func (d *demo) waitFor(ctx context.Context, what string, timeout time.Duration, check func() (bool, error)) error {
	if err := simcluster.Poll(ctx, timeout, what, check); err != nil {
		return fmt.Errorf("%w; logs in %s/logs", err, d.cluster.Dir)
	}
	return nil
}
