package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/test/simcluster"
)

// scenarioLabel on a node names the scenario that owns it; each scenario's policy selects its
// own nodes by it, and its pods ask for them with a nodeSelector.
const scenarioLabel = "e2e.gpupool.io/scenario"

// The scenarios and how many simulated nodes each owns. Every node is an H200 with two GPUs in
// the all-1g layout (7x 1g.18gb each), named sim-h200-<n>.
var scenarioNodes = []struct {
	name  string
	nodes int
}{
	{"approve", 1},
	{"pdb", 2},
	{"fail", 1},
	{"wedge", 1},
	{"dnd", 1},
	{"restart", 1},
	{"autoidle", 2},
	{"sharing", 1},
	{"migsharing", 1},
	{"forgery", 1},
	{"retry", 1},
	{"reboot", 1},
	{"gpunode", 1},
	{"orphan", 1},
	{"silent", 1},
	{"mps", 1},
	{"leader", 1},
	{"triage", 2},
	{"provenance", 1},
	{"loosen", 1},
	{"liveness", 1},
	{"hourly", 2},
	{"tenant", 1},
	{"window", 1},
	{"signals", 1},
	{"rightsize", 2},
	// One device-plugin node; the scenario's second node is the DRA node (see BeforeSuite).
	{"dra", 1},
	// Last: its second node is the one node that starts all-7g (see BeforeSuite).
	{"move", 2},
}

// draScenario gets, beside its own node, the one node NVIDIA's DRA driver serves (gpusim's
// ":dra"), which gpusim names after all the others.
const draScenario = "dra"

var (
	// cluster is the one simulated cluster every scenario shares.
	cluster *simcluster.Cluster
	// k8s is cluster.Client; watcher can also watch.
	k8s     client.Client
	watcher client.WithWatch
	// nodesOf lists each scenario's nodes.
	nodesOf = map[string][]string{}
	// suiteCtx lives as long as the suite.
	suiteCtx    context.Context
	cancelSuite context.CancelFunc
	// failed is set when any spec failed, so that AfterSuite keeps the logs.
	failed bool
	// binDirToRemove holds the binaries the suite built.
	binDirToRemove string
	// plugin is the kubectl plugin binary, named as kubectl finds it on PATH.
	plugin string
)

func TestE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("the end-to-end suite starts a whole simulated cluster; skipped with -short")
	}
	RegisterFailHandler(Fail)
	RunSpecs(t, "gpupool end to end on a simulated GPU cluster")
}

var _ = BeforeSuite(func() {
	suiteCtx, cancelSuite = context.WithCancel(context.Background())
	root, err := simcluster.RepoRoot()
	Expect(err).NotTo(HaveOccurred())

	out, err := exec.Command("bash", filepath.Join(root, "hack", "control-plane.sh"), "--print-dir").Output()
	Expect(err).NotTo(HaveOccurred(), "hack/control-plane.sh --print-dir")
	binDir := strings.TrimSpace(string(out))
	for _, bin := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		_, err := os.Stat(filepath.Join(binDir, bin))
		Expect(err).NotTo(HaveOccurred(), "%s missing in %s: run `make test-assets` (make test does)", bin, binDir)
	}

	bins, err := os.MkdirTemp("", "gpupool-e2e-bin-")
	Expect(err).NotTo(HaveOccurred())
	binDirToRemove = bins
	By("building ./cmd/manager, ./cmd/gpusim and the kubectl plugin into " + bins)
	started := time.Now()
	build := exec.Command("go", "build", "-o", bins+string(os.PathSeparator), "./cmd/manager", "./cmd/gpusim", "./cmd/gpupoolctl")
	build.Dir = root
	buildOut, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build: %s", buildOut)
	fmt.Fprintf(GinkgoWriter, "built the manager, gpusim and the plugin in %s\n", time.Since(started).Round(time.Millisecond))
	// kubectl runs plugins as kubectl-<name> from PATH; the binary names itself after argv[0].
	plugin = filepath.Join(bins, "kubectl-gpupool")
	Expect(os.Rename(filepath.Join(bins, "gpupoolctl"), plugin)).To(Succeed())

	total := 0
	for _, s := range scenarioNodes {
		total += s.nodes
	}
	By(fmt.Sprintf("starting one simulated cluster with %d H200 nodes of 2 GPUs each, all-1g but the last, all-7g, "+
		"one all-1g node that NVIDIA's DRA driver serves and one 1-GPU node it serves in its DynamicMIG mode", total))
	started = time.Now()
	cluster, err = simcluster.Start(suiteCtx, simcluster.Options{BinDir: binDir,
		Manager: filepath.Join(bins, "manager"), GPUSim: filepath.Join(bins, "gpusim"),
		Nodes: fmt.Sprintf("%dxh200:2:all-1g,1xh200:2:all-7g,1xh200:2:all-1g:dra,1xh200:1:all-disabled:dynamicmig", total-1), Progress: GinkgoWriter})
	Expect(err).NotTo(HaveOccurred())
	fmt.Fprintf(GinkgoWriter, "cluster up in %s; logs in %s/logs\n", time.Since(started).Round(time.Millisecond), cluster.Dir)
	k8s = cluster.Client
	watcher, err = client.NewWithWatch(cluster.Config, client.Options{Scheme: k8s.Scheme()})
	Expect(err).NotTo(HaveOccurred())

	By("giving each scenario its own nodes")
	give := func(scenario, name string) {
		node := &corev1.Node{}
		Expect(k8s.Get(suiteCtx, client.ObjectKey{Name: name}, node)).To(Succeed())
		patch := client.MergeFrom(node.DeepCopy())
		node.Labels[scenarioLabel] = scenario
		Expect(k8s.Patch(suiteCtx, node, patch)).To(Succeed())
		nodesOf[scenario] = append(nodesOf[scenario], name)
	}
	n := 0
	for _, s := range scenarioNodes {
		for range s.nodes {
			give(s.name, fmt.Sprintf("sim-h200-%d", n))
			n++
		}
	}
	give(draScenario, fmt.Sprintf("sim-h200-%d", n))
	give(dynamicMIGScenario, fmt.Sprintf("sim-h200-%d", n+1))
})

var _ = ReportAfterEach(func(report SpecReport) {
	if report.Failed() {
		failed = true
	}
})

var _ = AfterSuite(func() {
	if cancelSuite != nil {
		defer cancelSuite()
	}
	if binDirToRemove != "" {
		defer func() { _ = os.RemoveAll(binDirToRemove) }()
	}
	if cluster == nil {
		return
	}
	if failed {
		keep, err := os.MkdirTemp("", "gpupool-e2e-logs-")
		if err == nil {
			err = copyDir(filepath.Join(cluster.Dir, "logs"), keep)
		}
		if err == nil {
			fmt.Fprintf(GinkgoWriter, "a spec failed: the processes' logs are kept in %s\n", keep)
			AddReportEntry("logs kept", keep)
		}
	}
	pids := cluster.PIDs()
	By(fmt.Sprintf("stopping the manager, gpusim, kwok and the control plane (pids %v)", pids))
	Expect(cluster.Stop()).To(Succeed())
	for _, pid := range pids {
		Expect(syscall.Kill(pid, 0)).To(MatchError(syscall.ESRCH), "process %d still running after Stop", pid)
	}
})

// copyDir copies the plain files of src into dst.
func copyDir(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
