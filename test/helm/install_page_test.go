package helmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpupool/gpupool/test/localcluster"
)

// installSteps are the runnable blocks of docs/install.md, in the page's order.
var installSteps = []string{
	"install", "configmaps", "clusterpolicy", "verify",
	"pause", "plans", "cordons", "find-nodes", "point-back", "relabel", "uninstall",
}

const (
	// pageNode is the GPU node that gpupool has moved onto one of its own entries before the
	// page's undo, and pageNVIDIAEntry the entry of NVIDIA's config the page's relabel step gives
	// it back.
	pageNode        = "gpu-node-0"
	pageNVIDIAEntry = "all-1g.18gb"
	pagePolicy      = "training-pool" // config/samples/gpupool_v1alpha1_gpupoolpolicy.yaml
	managerProcess  = "manager"
)

var clusterPolicies = schema.GroupVersionResource{Group: "nvidia.com", Version: "v1", Resource: "clusterpolicies"}

// TestInstallPageRuns runs every command block docs/install.md marks runnable, as written and in
// the page's order, with bash against a local cluster (real kube-apiserver, scheduler and
// controller-manager, kwok for kubelets) that has what the page starts from: the GPU Operator's
// namespace, RuntimeClass, ClusterPolicy (with NVIDIA's own settings) and
// default-mig-parted-config, and two GPU nodes, one of which gpupool has put on one of its
// entries. kubectl and helm are built from pinned Go modules (hack/control-plane.sh; helm from
// this module's helm.sh/helm/v3), kubectl-gpupool from the checkout. Each block must exit 0, and
// the test then checks what the page promises: the ClusterPolicy configured, the policies
// paused, and after the undo and uninstall every node on NVIDIA's config, none cordoned,
// gpupool's ConfigMaps and namespace gone, the CRDs and policies kept.
//
// kwok only pretends to run the chart's manager pods, so the manager runs here as a process
// with the chart's own arguments and as the chart's ServiceAccount (impersonated), started once
// the chart is installed and ended right before the block that uninstalls the chart.
func TestInstallPageRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local control plane and builds helm, kubectl and gpupool; skipped with -short")
	}
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root := repoRoot(t)
	page, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	must(t, err)
	blocks, err := runnableBlocks(string(page))
	must(t, err)

	binDir := controlPlaneDir(t, root)
	pathDir := t.TempDir()
	tools := buildPageTools(t, root, binDir, pathDir)
	t.Logf("kubectl, helm, kubectl-gpupool and the manager ready after %s", since(started))

	cluster := startKwokCluster(ctx, t, binDir)
	cs, err := kubernetes.NewForConfig(cluster.Config)
	must(t, err)
	dyn, err := dynamic.NewForConfig(cluster.Config)
	must(t, err)

	home := t.TempDir()
	env := append(os.Environ(),
		"KUBECONFIG="+cluster.Kubeconfig, "HOME="+home, "PATH="+pathDir+string(os.PathListSeparator)+os.Getenv("PATH"),
		// The Images section sets $tag; the install block uses it.
		"tag=v0.1.0-test")
	sh := func(what, script string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
		cmd.Dir, cmd.Env = root, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		return string(out)
	}
	sh("the cluster as the GPU Operator leaves it", operatorBefore)
	eventually(ctx, t, "the GPU nodes Ready", func() error {
		_, err := sh2(ctx, env, root, "kubectl wait --for=condition=Ready node --all --timeout=1s")
		return err
	})
	t.Logf("cluster up, with the GPU Operator's side, after %s", since(started))

	// What a user does between the page's blocks, and what the cluster does that kwok cannot.
	before := map[string]func(){
		"configmaps": func() { startManager(ctx, t, cluster, cs, tools.manager) },
		// The page's Verify starts from an applied policy.
		"verify": func() {
			sh("applying the sample policy", "kubectl apply -f config/samples/gpupool_v1alpha1_gpupoolpolicy.yaml")
		},
		"uninstall": func() { must(t, cluster.Kill(managerProcess)) },
	}
	// What each block's output must show, as the page's comments say it does: a block that
	// exits 0 while printing the wrong thing is not a step that worked.
	shows := map[string][]*regexp.Regexp{
		"verify": {
			regexp.MustCompile(`(?m)^` + pagePolicy + `\s.*\sTrue\s+\S+$`), // kubectl get gpp: READY True
			regexp.MustCompile(`GPUOperatorConfigured=True\s+\(Configured\)`),
		},
		"pause": {regexp.MustCompile(`(?m)^` + pagePolicy + `\s.*\sFalse\s+\S+$`)}, // READY False
	}
	after := map[string]func(){
		"verify": func() {
			// The block's kubectl wait already held it; this reads it from the API, not the CLI.
			if err := condition(ctx, dyn, pagePolicy, "GPUOperatorConfigured", "True", "Configured"); err != nil {
				t.Errorf("after the verify block: %v", err)
			}
		},
		"pause": func() {
			eventually(ctx, t, pagePolicy+" Ready=False for Paused", func() error {
				return condition(ctx, dyn, pagePolicy, "Ready", "False", "Paused")
			})
		},
	}
	placeholders := map[string]string{
		"registry": "registry.invalid/gpupool", "policy": pagePolicy, "node": pageNode,
	}
	for _, b := range blocks {
		if f := before[b.Name]; f != nil {
			f()
		}
		script, err := fillPlaceholders(b.Script, placeholders)
		if err != nil {
			t.Fatalf("docs/install.md block %q (line %d): %v", b.Name, b.Line, err)
		}
		out := sh(fmt.Sprintf("docs/install.md block %q (line %d)", b.Name, b.Line), script)
		t.Logf("block %q ran after %s:\n%s", b.Name, since(started), out)
		for _, want := range shows[b.Name] {
			if !want.MatchString(out) {
				t.Errorf("docs/install.md block %q (line %d): its output does not show %s", b.Name, b.Line, want)
			}
		}
		if f := after[b.Name]; f != nil {
			f()
		}
	}

	// What the page promises once it is worked through.
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	must(t, err)
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			t.Errorf("node %s is left cordoned", n.Name)
		}
		if v := n.Labels["nvidia.com/mig.config"]; strings.HasPrefix(v, "gpupool-") {
			t.Errorf("node %s is left on gpupool's entry %s", n.Name, v)
		}
		if v, ok := n.Labels["nvidia.com/device-plugin.config"]; ok {
			t.Errorf("node %s keeps gpupool's sharing key %s", n.Name, v)
		}
	}
	if n, err := cs.CoreV1().Nodes().Get(ctx, pageNode, metav1.GetOptions{}); err != nil || n.Labels["nvidia.com/mig.config"] != pageNVIDIAEntry {
		t.Errorf("node %s: mig.config %q (%v), want NVIDIA's %s", pageNode, n.Labels["nvidia.com/mig.config"], err, pageNVIDIAEntry)
	}
	cp, err := dyn.Resource(clusterPolicies).Get(ctx, "cluster-policy", metav1.GetOptions{})
	must(t, err)
	if v, _, _ := unstructured.NestedString(cp.Object, "spec", "migManager", "config", "name"); v != "default-mig-parted-config" {
		t.Errorf("ClusterPolicy migManager.config.name %q, want NVIDIA's default-mig-parted-config", v)
	}
	if v, _, _ := unstructured.NestedString(cp.Object, "spec", "devicePlugin", "config", "name"); v != "" {
		t.Errorf("ClusterPolicy devicePlugin.config.name %q, want NVIDIA's default (none)", v)
	}
	for _, cm := range []string{"gpupool-mig-parted-config", "gpupool-device-plugin-config"} {
		if _, err := cs.CoreV1().ConfigMaps("gpu-operator").Get(ctx, cm, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ConfigMap gpu-operator/%s after uninstall: %v, want NotFound", cm, err)
		}
	}
	if _, err := cs.CoreV1().ConfigMaps("gpu-operator").Get(ctx, "default-mig-parted-config", metav1.GetOptions{}); err != nil {
		t.Errorf("NVIDIA's default-mig-parted-config after uninstall: %v", err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, releaseNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s after uninstall: %v, want NotFound", releaseNamespace, err)
	}
	// helm uninstall keeps the CRDs, and with them the policies.
	if _, err := dyn.Resource(policies).Get(ctx, pagePolicy, metav1.GetOptions{}); err != nil {
		t.Errorf("GPUPoolPolicy %s after uninstall: %v (the page says the CRDs and policies stay)", pagePolicy, err)
	}
	t.Logf("the page's promises checked after %s", since(started))
}

// operatorBefore is the cluster as the GPU Operator leaves it before gpupool: its namespace and
// RuntimeClass, a ClusterPolicy with NVIDIA's own ConfigMaps (a minimal CRD, as
// internal/sim/clusterpolicy.go's ClusterPolicyCRD; status.namespace as the operator writes it),
// mig-manager's default-mig-parted-config, and two GPU nodes labelled as GPU Feature Discovery
// does and for the sample policy's pool. gpu-node-0 is on one of gpupool's entries and sharing
// keys, as if gpupool had repartitioned it before the undo.
const operatorBefore = `
kubectl create namespace gpu-operator
kubectl create -f - <<'EOF'
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: nvidia}
handler: nvidia
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: clusterpolicies.nvidia.com}
spec:
  group: nvidia.com
  names: {plural: clusterpolicies, singular: clusterpolicy, kind: ClusterPolicy, listKind: ClusterPolicyList}
  scope: Cluster
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: default-mig-parted-config, namespace: gpu-operator}
data:
  config.yaml: |
    version: v1
    mig-configs:
      all-disabled:
      - devices: all
        mig-enabled: false
      all-1g.18gb:
      - devices: all
        mig-enabled: true
        mig-devices: {"1g.18gb": 7}
EOF
kubectl wait --for=condition=Established crd/clusterpolicies.nvidia.com --timeout=1m
kubectl create -f - <<'EOF'
apiVersion: nvidia.com/v1
kind: ClusterPolicy
metadata: {name: cluster-policy}
spec:
  mig: {strategy: single}
  migManager: {enabled: true, config: {name: default-mig-parted-config}}
  devicePlugin: {enabled: true, config: {name: "", default: ""}}
EOF
kubectl patch clusterpolicies.nvidia.com cluster-policy --subresource=status --type merge -p '{"status":{"namespace":"gpu-operator","state":"ready"}}'
for i in 0 1; do
  kubectl create -f - <<EOF
apiVersion: v1
kind: Node
metadata:
  name: gpu-node-$i
  annotations: {kwok.x-k8s.io/node: fake}
  labels:
    kubernetes.io/hostname: gpu-node-$i
    nvidia.com/gpu.present: "true"
    nvidia.com/gpu.product: NVIDIA-H200
    nvidia.com/mig.config: all-1g.18gb
    gpupool.io/pool: training
status:
  capacity: {cpu: "16", memory: 64Gi, pods: "110"}
  allocatable: {cpu: "16", memory: 64Gi, pods: "110"}
EOF
done
kubectl label node gpu-node-0 nvidia.com/mig.config=gpupool-0123456789ab nvidia.com/device-plugin.config=gpupool-ts-2 --overwrite
`

// pageTools are the binaries the test builds.
type pageTools struct{ manager string }

// buildPageTools puts kubectl (from the control-plane cache), helm (built from this module's
// pinned helm.sh/helm/v3 into a cache beside it) and kubectl-gpupool (from the checkout) into
// pathDir, and builds the manager.
func buildPageTools(t *testing.T, root, binDir, pathDir string) pageTools {
	t.Helper()
	kubectl := filepath.Join(binDir, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("%s: %v (run `hack/control-plane.sh kubectl`, or `make test-assets`)", kubectl, err)
	}
	must(t, os.Symlink(kubectl, filepath.Join(pathDir, "kubectl")))
	helm := helmCLI(t, binDir)
	must(t, os.Symlink(helm, filepath.Join(pathDir, "helm")))
	gobuild := func(out, pkg string) {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
	}
	gobuild(filepath.Join(pathDir, "kubectl-gpupool"), "./cmd/gpupoolctl")
	manager := filepath.Join(t.TempDir(), "manager")
	gobuild(manager, "./cmd/manager")
	return pageTools{manager: manager}
}

// helmCLI returns helm's command, built once per machine, like hack/control-plane.sh builds the
// control plane: in a throwaway module requiring helm.sh/helm/v3 at the version this module
// pins (its cmd/helm needs modules this one does not), into <cache>/../helm/<version>/helm
// beside the control-plane cache, never downloaded as a binary.
func helmCLI(t *testing.T, binDir string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "helm.sh/helm/v3").Output()
	if err != nil {
		t.Fatalf("go list -m helm.sh/helm/v3: %v", err)
	}
	version := strings.TrimSpace(string(out))
	dir := filepath.Join(filepath.Dir(binDir), "..", "helm", version)
	helm := filepath.Join(dir, "helm")
	if _, err := os.Stat(helm); err == nil {
		return helm
	}
	must(t, os.MkdirAll(dir, 0o755))
	t.Logf("building helm %s into %s (once per machine, about 2 minutes on 2 cores)", version, dir)
	work := t.TempDir()
	script := `set -euo pipefail
go mod init gpupool.local/helm >/dev/null 2>&1
go get "helm.sh/helm/v3/cmd/helm@$VERSION" 2>/dev/null
go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$VERSION" -o "$OUT.tmp" helm.sh/helm/v3/cmd/helm
mv -f "$OUT.tmp" "$OUT"`
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "VERSION="+version, "OUT="+helm, "GOFLAGS=-mod=mod -buildvcs=false", "CGO_ENABLED=0", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building helm %s from its module: %v\n%s", version, err, b)
	}
	return helm
}

// controlPlaneDir is hack/control-plane.sh's cache folder.
func controlPlaneDir(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.Command("bash", filepath.Join(root, "hack", "control-plane.sh"), "--print-dir").Output()
	if err != nil {
		t.Fatalf("hack/control-plane.sh --print-dir: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// startManager runs the manager as the chart's Deployment would: with the Deployment's own
// arguments (bind addresses moved to free loopback ports) and as the chart's ServiceAccount, so
// the chart's RBAC and admission policies hold it. It waits until the manager is ready, as the
// Deployment's readiness probe would.
func startManager(ctx context.Context, t *testing.T, cluster *localcluster.Cluster, cs kubernetes.Interface, manager string) {
	t.Helper()
	var args []string
	eventually(ctx, t, "the chart's manager Deployment", func() error {
		d, err := cs.AppsV1().Deployments(releaseNamespace).Get(ctx, "gpupool-manager", metav1.GetOptions{})
		if err != nil {
			return err
		}
		args = d.Spec.Template.Spec.Containers[0].Args
		return nil
	})
	probe := freePort(t)
	var run []string
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--metrics-bind-address="):
			a = "--metrics-bind-address=0"
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			a = "--health-probe-bind-address=" + probe
		case a == "--leader-elect" || strings.HasPrefix(a, "--leader-elect="):
			a = "--leader-elect=false" // one process; the Lease would outlive it into the uninstall
		}
		run = append(run, a)
	}
	cfg, err := clientcmd.LoadFromFile(cluster.Kubeconfig)
	must(t, err)
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate = "system:serviceaccount:" + releaseNamespace + ":gpupool-manager"
	}
	kubeconfig := filepath.Join(t.TempDir(), "manager.kubeconfig")
	must(t, clientcmd.WriteToFile(*cfg, kubeconfig))
	must(t, cluster.Run(managerProcess, manager, append([]string{"--kubeconfig=" + kubeconfig}, run...)...))
	eventually(ctx, t, "the manager ready", func() error {
		if exited, err := cluster.Exited(managerProcess); exited {
			return fmt.Errorf("the manager exited (%w); see %s", err, cluster.LogPath(managerProcess))
		}
		resp, err := http.Get("http://" + probe + "/readyz") //nolint:noctx // loopback, bounded by eventually
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().String()
}

// condition checks a policy's condition: status, and reason unless empty.
func condition(ctx context.Context, dyn dynamic.Interface, policy, typ, status, reason string) error {
	p, err := dyn.Resource(policies).Get(ctx, policy, metav1.GetOptions{})
	if err != nil {
		return err
	}
	conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] != typ {
			continue
		}
		if m["status"] != status || (reason != "" && m["reason"] != reason) {
			b, _ := json.Marshal(m)
			return fmt.Errorf("condition %s", b)
		}
		return nil
	}
	return fmt.Errorf("no condition %s yet", typ)
}

// sh2 runs a script and returns its output and error, for polls.
func sh2(ctx context.Context, env []string, dir, script string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%w: %s", err, out)
	}
	return string(out), nil
}
