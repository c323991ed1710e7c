package helmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gpupool/gpupool/test/localcluster"
)

const (
	releaseName      = "gpupool"
	releaseNamespace = "gpupool-system"
	gpuNode          = "gpu-node"
	cpuNode          = "cpu-node"
)

var (
	policies  = schema.GroupVersionResource{Group: "gpupool.io", Version: "v1alpha1", Resource: "gpupoolpolicies"}
	plans     = schema.GroupVersionResource{Group: "gpupool.io", Version: "v1alpha1", Resource: "repartitionplans"}
	vaps      = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}
	vapBinds  = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}
	crdsGroup = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// TestInstallOnKwokCluster installs the chart with Helm's SDK (action.Install) into a real
// control plane whose kubelets kwok plays, on one GPU node and one without a GPU: the
// manager's two replicas are admitted and land on different nodes, the agent only on the GPU
// node, the admission policies are in force with this release's ServiceAccount, and a
// GPUPoolPolicy is accepted. action.Uninstall then leaves nothing of the release but the CRDs.
func TestInstallOnKwokCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local control plane; skipped with -short")
	}
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root := repoRoot(t)
	out, err := exec.Command("bash", filepath.Join(root, "hack", "control-plane.sh"), "--print-dir").Output()
	if err != nil {
		t.Fatalf("hack/control-plane.sh --print-dir: %v", err)
	}
	cluster := startKwokCluster(ctx, t, strings.TrimSpace(string(out)))
	t.Logf("cluster up after %s", since(started))
	cs, err := kubernetes.NewForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}

	// What the NVIDIA GPU Operator brings before gpupool: its namespace, its RuntimeClass, and
	// GPU Feature Discovery's label on the GPU node.
	must(t, ignoreExists(func() error {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpu-operator"}}, metav1.CreateOptions{})
		return err
	}))
	must(t, ignoreExists(func() error {
		_, err := cs.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "nvidia"}, Handler: "nvidia"}, metav1.CreateOptions{})
		return err
	}))
	for name, labels := range map[string]map[string]string{
		gpuNode: {corev1.LabelHostname: gpuNode, "nvidia.com/gpu.present": "true"},
		cpuNode: {corev1.LabelHostname: cpuNode},
	} {
		capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"),
			corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourcePods: resource.MustParse("110")}
		_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels,
				Annotations: map[string]string{localcluster.KwokNodeAnnotation: localcluster.KwokNodeAnnotationValue}},
			Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
		}, metav1.CreateOptions{})
		must(t, err)
	}
	eventually(ctx, t, "both nodes Ready", func() error {
		for _, name := range []string{gpuNode, cpuNode} {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
				return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
			}) {
				return fmt.Errorf("node %s not Ready", name)
			}
		}
		return nil
	})
	t.Logf("nodes Ready after %s", since(started))

	// helm install gpupool charts/gpupool -n gpupool-system --create-namespace, with one policy.
	cfg := helmConfig(t, cluster.Kubeconfig)
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace = releaseName, releaseNamespace, true
	inst.Timeout = time.Minute
	rel, err := inst.RunWithContext(ctx, loadChart(t), values(t, `
policies:
- name: from-values
  spec:
    nodeSelector: {matchLabels: {nvidia.com/gpu.present: "true"}}
    catalog:
    - product: NVIDIA-H200
      migProfiles: [1g.18gb, 3g.71gb, 7g.141gb]
`))
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	t.Logf("release %s v%d %s after %s", rel.Name, rel.Version, rel.Info.Status, since(started))
	manifest, err := decodeObjects(rel.Manifest)
	must(t, err)

	// Both manager replicas run, one per node.
	eventually(ctx, t, "two manager pods Running on different nodes", func() error {
		pods, err := cs.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/instance=" + releaseName + ",app.kubernetes.io/component=manager"})
		if err != nil {
			return err
		}
		nodes := map[string]bool{}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("pod %s is %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName)
			}
			nodes[p.Spec.NodeName] = true
		}
		if len(pods.Items) != 2 || len(nodes) != 2 {
			return fmt.Errorf("%d manager pods on nodes %v", len(pods.Items), nodes)
		}
		return nil
	})
	eventually(ctx, t, "the manager Deployment available", func() error {
		d, err := cs.AppsV1().Deployments(releaseNamespace).Get(ctx, "gpupool-manager", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.AvailableReplicas != 2 {
			return fmt.Errorf("%d of 2 replicas available", d.Status.AvailableReplicas)
		}
		return nil
	})
	// The agent runs on the GPU node only, as system-node-critical.
	eventually(ctx, t, "one agent pod Running, on the GPU node", func() error {
		ds, err := cs.AppsV1().DaemonSets("gpupool-agent").Get(ctx, "gpupool-agent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ds.Status.DesiredNumberScheduled != 1 || ds.Status.NumberReady != 1 {
			return fmt.Errorf("DaemonSet: %d desired, %d ready", ds.Status.DesiredNumberScheduled, ds.Status.NumberReady)
		}
		pods, err := cs.CoreV1().Pods("gpupool-agent").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent"})
		if err != nil {
			return err
		}
		if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != gpuNode || pods.Items[0].Status.Phase != corev1.PodRunning {
			var where []string
			for _, p := range pods.Items {
				where = append(where, p.Name+" on "+p.Spec.NodeName+" "+string(p.Status.Phase))
			}
			return fmt.Errorf("agent pods: %v", where)
		}
		if p := pods.Items[0].Spec.Priority; p == nil || *p < 2000000000 {
			return fmt.Errorf("agent pod priority %v, want system-node-critical's", p)
		}
		return nil
	})
	pdb, err := cs.PolicyV1().PodDisruptionBudgets(releaseNamespace).Get(ctx, "gpupool-manager", metav1.GetOptions{})
	must(t, err)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
	}
	t.Logf("manager and agent running after %s", since(started))

	// The policy from values and one applied afterwards are both accepted by the CRD's schema.
	_, err = dyn.Resource(policies).Get(ctx, "from-values", metav1.GetOptions{})
	must(t, err)
	sample := readObjects(t, filepath.Join(root, "config", "samples", "gpupool_v1alpha1_gpupoolpolicy.yaml"))
	if len(sample) != 1 {
		t.Fatalf("config/samples/gpupool_v1alpha1_gpupoolpolicy.yaml holds %d objects", len(sample))
	}
	_, err = dyn.Resource(policies).Create(ctx, sample[0], metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("applying %s: %v", sample[0].GetName(), err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(policies).Delete(context.Background(), sample[0].GetName(), metav1.DeleteOptions{})
	})

	// The plan-authorship policy is in force and names this release's manager: the cluster
	// admin may not create a RepartitionPlan (dry run, so nothing is stored either way).
	plan := readObjects(t, filepath.Join(root, "config", "samples", "gpupool_v1alpha1_repartitionplan.yaml"))[0]
	eventually(ctx, t, "the plan-authorship policy refusing the admin's plan", func() error {
		_, err := dyn.Resource(plans).Create(ctx, plan, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil:
			return fmt.Errorf("the admin created RepartitionPlan %s", plan.GetName())
		case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
			return err
		case !strings.Contains(err.Error(), "system:serviceaccount:"+releaseNamespace+":gpupool-manager"):
			return fmt.Errorf("refused, but not naming the release's manager: %w", err)
		}
		return nil
	})
	t.Logf("policies checked after %s", since(started))

	// helm uninstall gpupool -n gpupool-system.
	uninst := action.NewUninstall(cfg)
	uninst.Wait, uninst.Timeout = true, time.Minute
	if _, err := uninst.Run(releaseName); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	t.Logf("uninstalled after %s", since(started))

	// Nothing of the release is left: every object its manifest named is gone, and no object of
	// the kinds it installs carries its instance label, in any namespace.
	for _, o := range manifest {
		gvr, err := resourceOf(cfg, o)
		must(t, err)
		eventually(ctx, t, "the release's "+key(o)+" deleted", func() error {
			var getErr error
			if o.GetNamespace() != "" {
				_, getErr = dyn.Resource(gvr).Namespace(o.GetNamespace()).Get(ctx, o.GetName(), metav1.GetOptions{})
			} else {
				_, getErr = dyn.Resource(gvr).Get(ctx, o.GetName(), metav1.GetOptions{})
			}
			if apierrors.IsNotFound(getErr) {
				return nil
			}
			if getErr != nil {
				return getErr
			}
			return fmt.Errorf("%s still exists", key(o))
		})
	}
	left := func() ([]string, error) {
		var found []string
		selector := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + releaseName}
		for _, r := range []schema.GroupVersionResource{
			{Group: "apps", Version: "v1", Resource: "deployments"}, {Group: "apps", Version: "v1", Resource: "daemonsets"},
			{Version: "v1", Resource: "pods"}, {Version: "v1", Resource: "serviceaccounts"}, {Version: "v1", Resource: "services"},
			{Version: "v1", Resource: "namespaces"},
			{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
			{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
			{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
			{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
			{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
			vaps, vapBinds, policies,
		} {
			list, err := dyn.Resource(r).List(ctx, selector)
			if err != nil {
				return nil, fmt.Errorf("listing %s: %w", r.Resource, err)
			}
			for _, o := range list.Items {
				found = append(found, key(&o))
			}
		}
		secrets, err := cs.CoreV1().Secrets(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=" + releaseName})
		if err != nil {
			return nil, err
		}
		for _, s := range secrets.Items {
			found = append(found, "Secret "+s.Namespace+"/"+s.Name)
		}
		return found, nil
	}
	eventually(ctx, t, "nothing of the release left", func() error {
		found, err := left()
		if err != nil {
			return err
		}
		if len(found) > 0 {
			return fmt.Errorf("left behind: %s", strings.Join(found, ", "))
		}
		return nil
	})
	// Helm keeps what crds/ installed, and so the policy applied outside the release.
	for _, c := range loadChart(t).CRDObjects() {
		objs, err := decodeObjects(string(c.File.Data))
		must(t, err)
		for _, o := range objs {
			if _, err := dyn.Resource(crdsGroup).Get(ctx, o.GetName(), metav1.GetOptions{}); err != nil {
				t.Errorf("CRD %s after uninstall: %v", o.GetName(), err)
			}
		}
	}
	if _, err := dyn.Resource(policies).Get(ctx, sample[0].GetName(), metav1.GetOptions{}); err != nil {
		t.Errorf("GPUPoolPolicy %s, applied outside the release, after uninstall: %v", sample[0].GetName(), err)
	}
	t.Logf("nothing left but the CRDs after %s", since(started))
}

// helmConfig is Helm's action configuration for the cluster, keeping releases in Secrets of
// the release namespace as the helm command does, with discovery cached in a temporary folder.
func helmConfig(t *testing.T, kubeconfig string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(true)
	ns, cache := releaseNamespace, t.TempDir()
	flags.KubeConfig, flags.Namespace, flags.CacheDir = &kubeconfig, &ns, &cache
	cfg := &action.Configuration{}
	if err := cfg.Init(flags, releaseNamespace, "secret", t.Logf); err != nil {
		t.Fatalf("initialising Helm: %v", err)
	}
	return cfg
}

// resourceOf maps an object's kind to its resource through the API server's discovery.
func resourceOf(cfg *action.Configuration, o *unstructured.Unstructured) (schema.GroupVersionResource, error) {
	mapper, err := cfg.RESTClientGetter.ToRESTMapper()
	if err != nil {
		return schema.GroupVersionResource{}, err
	}
	gvk := o.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return schema.GroupVersionResource{}, err
	}
	return m.Resource, nil
}

// eventually retries check every 250ms until it succeeds, failing the test with its last error
// after a minute or when ctx ends.
func eventually(ctx context.Context, t *testing.T, what string, check func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		last = check()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (%v)", what, last, err)
	}
}

// ignoreExists runs a create, tolerating AlreadyExists.
func ignoreExists(f func() error) error {
	if err := f(); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }

// keepLogs copies the control plane's logs out of its work folder, which Stop removes.
// startKwokCluster starts a local control plane with kwok from the binaries in binDir, and
// stops it when the test ends, keeping its logs when the test failed.
func startKwokCluster(ctx context.Context, t *testing.T, binDir string) *localcluster.Cluster {
	t.Helper()
	cluster, err := localcluster.Start(ctx, localcluster.Options{BinDir: binDir, Components: localcluster.WithKwok})
	if err != nil {
		t.Fatalf("starting the local cluster (make test-assets builds it): %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			keepLogs(t, cluster)
		}
		if err := cluster.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	return cluster
}

func keepLogs(t *testing.T, c *localcluster.Cluster) {
	dir, err := os.MkdirTemp("", "gpupool-helm-logs-")
	if err != nil {
		return
	}
	entries, _ := os.ReadDir(filepath.Join(c.Dir, "logs"))
	for _, e := range entries {
		if b, err := os.ReadFile(filepath.Join(c.Dir, "logs", e.Name())); err == nil {
			_ = os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644)
		}
	}
	t.Logf("the control plane's logs are kept in %s", dir)
}
