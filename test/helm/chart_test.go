package helmtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// kubeVersion is the control plane hack/control-plane.sh builds; the chart is rendered for it.
const kubeVersion = "v1.37.2"

// repoRoot is the gpupool checkout: two folders up from this package.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "charts", "gpupool", "Chart.yaml")); err != nil {
		t.Fatalf("charts/gpupool/Chart.yaml not found under %s: %v", root, err)
	}
	return root
}

func chartDir(t testing.TB) string { return filepath.Join(repoRoot(t), "charts", "gpupool") }

func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return ch
}

// values parses YAML values as `helm install -f` would read them.
func values(t testing.TB, doc string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte(doc), &vals); err != nil {
		t.Fatalf("values %q: %v", doc, err)
	}
	return vals
}

// template renders the chart as `helm template --namespace ns release charts/gpupool` does
// (action.Install in client-only mode, the same code path as an install up to the API calls,
// values schema included), and returns the rendered objects.
func template(t testing.TB, release, namespace string, vals map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, err := tryTemplate(t, release, namespace, vals)
	if err != nil {
		t.Fatalf("rendering the chart: %v", err)
	}
	return objs
}

func tryTemplate(t testing.TB, release, namespace string, vals map[string]any) ([]*unstructured.Unstructured, error) {
	t.Helper()
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.ClientOnly, install.DryRun = true, true
	install.ReleaseName, install.Namespace = release, namespace
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	install.KubeVersion = kv
	// The API versions a cluster with the Prometheus Operator serves, for .Capabilities checks.
	install.APIVersions = chartutil.VersionSet{"monitoring.coreos.com/v1"}
	rel, err := install.Run(loadChart(t), vals)
	if err != nil {
		return nil, err
	}
	return decodeObjects(rel.Manifest)
}

// decodeObjects splits a multi-document YAML stream into objects, skipping empty documents.
func decodeObjects(manifest string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

func readObjects(t testing.TB, file string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeObjects(string(b))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return objs
}

// find returns the one object of that kind and name, failing the test when there is none.
func find(t testing.TB, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s among the rendered objects", kind, name)
	return nil
}

// TestLint is `helm lint charts/gpupool` through Helm's SDK, with the default values and with
// every optional part on. The only message allowed is Helm's INFO that an icon is recommended
// (gpupool has no logo to point at).
func TestLint(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for name, vals := range map[string]map[string]any{
		"defaults": nil,
		"everything on": values(t, `
manager: {metrics: {certSecret: gpupool-metrics-cert}, logLevel: debug, podAntiAffinity: preferred}
serviceMonitor: {enabled: true, interval: 30s}
prometheusRule: {enabled: true, labels: {release: prometheus}}
grafanaDashboard: {enabled: true, namespace: monitoring, annotations: {grafana_folder: GPU}}
policies:
- name: training
  spec: {nodeSelector: {matchLabels: {gpupool.io/pool: training}}}
`),
		"no agent": values(t, `agent: {enabled: false}`),
	} {
		t.Run(name, func(t *testing.T) {
			linter := lint.AllWithKubeVersion(chartDir(t), vals, "gpupool-system", kv)
			for _, m := range linter.Messages {
				if m.Severity == support.InfoSev && m.Path == "Chart.yaml" && m.Err.Error() == "icon is recommended" {
					t.Logf("helm lint: %s", m)
					continue
				}
				t.Errorf("helm lint: %s", m)
			}
		})
	}
}

// TestSchemaRefusesTypos: a misspelt or unknown key fails the install (values.schema.json has
// additionalProperties: false at every level of the chart's own values), as do wrong types.
func TestSchemaRefusesTypos(t *testing.T) {
	for _, bad := range []struct{ values, want string }{
		{`manager: {replica: 3}`, "replica"},
		{`gpuOperator: {namepsace: nvidia}`, "namepsace"},
		{`agent: {image: {tag: v1, registry: quay.io}}`, "registry"},
		{`serviceMonitor: {tlsConfig: {insecureSkipVerify: true}}`, "insecureSkipVerify"},
		{`manager: {podAntiAffinity: sometimes}`, "podAntiAffinity"},
		{`agent: {tolerations: [{key: nvidia.com/gpu, operater: Exists}]}`, "operater"},
		{`policies: [{name: p, sepc: {}}]`, "sepc"},
		{`manager: {replicas: two}`, "replicas"},
		{`agent: {refreshPeriod: 30}`, "refreshPeriod"},
		{`topLevelTypo: true`, "topLevelTypo"},
	} {
		_, err := tryTemplate(t, "gpupool", "gpupool-system", values(t, bad.values))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("values %s: got error %v, want one naming %q", bad.values, err, bad.want)
		}
	}
}

// TestServiceMonitorVerifiesTLS: the ServiceMonitor is off by default, refuses to render
// without a certificate for the manager, and never skips TLS verification.
func TestServiceMonitorVerifiesTLS(t *testing.T) {
	for _, o := range template(t, "gpupool", "gpupool-system", nil) {
		if o.GetKind() == "ServiceMonitor" {
			t.Errorf("a ServiceMonitor is rendered by default")
		}
	}
	if _, err := tryTemplate(t, "gpupool", "gpupool-system", values(t, `serviceMonitor: {enabled: true}`)); err == nil ||
		!strings.Contains(err.Error(), "manager.metrics.certSecret") {
		t.Errorf("serviceMonitor.enabled without manager.metrics.certSecret: got %v, want a failure naming the value", err)
	}
	objs := template(t, "gpupool", "gpupool-system", values(t,
		`{serviceMonitor: {enabled: true}, manager: {metrics: {certSecret: gpupool-metrics-cert}}}`))
	sm := find(t, objs, "ServiceMonitor", "gpupool-manager-metrics")
	b, err := yaml.Marshal(sm.Object)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(bytes.ToLower(b), []byte("insecureskipverify")) {
		t.Errorf("the ServiceMonitor skips TLS verification:\n%s", b)
	}
	deploy := find(t, objs, "Deployment", "gpupool-manager")
	if args := containerArgs(t, deploy); !slices.Contains(args, "--metrics-cert-dir=/etc/gpupool/metrics-cert") {
		t.Errorf("manager args %q lack --metrics-cert-dir", args)
	}
}

// TestMonitoringIsOptIn: the PrometheusRule and the dashboard ConfigMap are off by default;
// enabled, the rules are files/prometheus-rules.yaml's spec and the dashboard is
// files/dashboards/gpupool.json, unchanged (test/monitoring tests both files).
func TestMonitoringIsOptIn(t *testing.T) {
	for _, o := range template(t, "gpupool", "gpupool-system", nil) {
		if o.GetKind() == "PrometheusRule" || o.GetLabels()["grafana_dashboard"] != "" {
			t.Errorf("%s %s is rendered by default", o.GetKind(), o.GetName())
		}
	}
	objs := template(t, "gpupool", "gpupool-system", values(t,
		`{prometheusRule: {enabled: true, labels: {release: prometheus}}, grafanaDashboard: {enabled: true, namespace: monitoring}}`))
	rule := find(t, objs, "PrometheusRule", "gpupool-manager-alerts")
	if rule.GetNamespace() != "gpupool-system" || rule.GetLabels()["release"] != "prometheus" {
		t.Errorf("PrometheusRule in %q with labels %v, want the release namespace and the label release=prometheus", rule.GetNamespace(), rule.GetLabels())
	}
	file := readObjects(t, filepath.Join(chartDir(t), "files", "prometheus-rules.yaml"))
	if len(file) != 1 {
		t.Fatalf("files/prometheus-rules.yaml holds %d objects, want one PrometheusRule", len(file))
	}
	if d := cmp.Diff(file[0].Object["spec"], rule.Object["spec"]); d != "" {
		t.Errorf("the PrometheusRule's spec differs from files/prometheus-rules.yaml (-file +chart):\n%s", d)
	}
	cm := find(t, objs, "ConfigMap", "gpupool-dashboard")
	if cm.GetNamespace() != "monitoring" || cm.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap in %q with labels %v, want namespace monitoring and grafana_dashboard=1", cm.GetNamespace(), cm.GetLabels())
	}
	want, err := os.ReadFile(filepath.Join(chartDir(t), "files", "dashboards", "gpupool.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(cm.Object, "data", "gpupool.json"); got != string(want) {
		t.Errorf("the dashboard ConfigMap's gpupool.json differs from files/dashboards/gpupool.json")
	}
}

// TestAgentLeasesFollowTheAgent: the manager reads the agents' heartbeat Leases in the agent's
// namespace, with a Role there, only when the chart installs the agent (which creates that
// namespace); without it no object goes to a namespace that may not exist, and the manager
// reads no Leases.
func TestAgentLeasesFollowTheAgent(t *testing.T) {
	for _, tc := range []struct {
		vals      string
		namespace string
	}{
		{vals: ``, namespace: "gpupool-agent"},
		{vals: `agent: {namespace: gpu-agents}`, namespace: "gpu-agents"},
		{vals: `agent: {serviceAccount: {name: gpu-agent}}`, namespace: "gpupool-agent"},
		{vals: `agent: {enabled: false}`, namespace: ""},
	} {
		objs := template(t, "gpupool", "gpupool-system", values(t, tc.vals))
		args := containerArgs(t, find(t, objs, "Deployment", "gpupool-manager"))
		if want := "--agent-namespace=" + tc.namespace; !slices.Contains(args, want) {
			t.Errorf("values %q: manager args %q lack %s", tc.vals, args, want)
		}
		// The agents' pods, told by the DaemonSet's own selector: their readiness is the heartbeat.
		selector := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "--agent-pod-selector=") })
		if tc.namespace == "" {
			if selector >= 0 {
				t.Errorf("values %q: without the agent the manager reads agent pods by %s", tc.vals, args[selector])
			}
			for _, a := range args {
				if strings.HasPrefix(a, "--agent-daemonset=") || strings.HasPrefix(a, "--agent-service-account=") {
					t.Errorf("values %q: without the agent the manager is told of its pods by %s", tc.vals, a)
				}
			}
		} else {
			ds := find(t, objs, "DaemonSet", "gpupool-agent")
			matchLabels, _, _ := unstructured.NestedStringMap(ds.Object, "spec", "selector", "matchLabels")
			var want []string
			for k, v := range matchLabels {
				want = append(want, k+"="+v)
			}
			slices.Sort(want)
			if selector < 0 || args[selector] != "--agent-pod-selector="+strings.Join(want, ",") {
				t.Errorf("values %q: manager args %q, want --agent-pod-selector=%s (the DaemonSet's selector)", tc.vals, args, strings.Join(want, ","))
			}
			// And only the DaemonSet's own pods, run as its ServiceAccount, are the agents.
			if want := "--agent-daemonset=" + ds.GetName(); !slices.Contains(args, want) {
				t.Errorf("values %q: manager args %q lack %s (the DaemonSet's name)", tc.vals, args, want)
			}
			account, _, _ := unstructured.NestedString(ds.Object, "spec", "template", "spec", "serviceAccountName")
			if want := "--agent-service-account=" + account; account == "" || !slices.Contains(args, want) {
				t.Errorf("values %q: manager args %q lack %s (the DaemonSet's ServiceAccount)", tc.vals, args, want)
			}
			if agentArgs := containerArgs(t, ds); !slices.Contains(agentArgs, "--heartbeat=readiness") {
				t.Errorf("values %q: agent args %q lack --heartbeat=readiness", tc.vals, agentArgs)
			}
		}
		leaseRoles := 0
		for _, o := range objs {
			if o.GetKind() != "Role" {
				continue
			}
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			for _, r := range rules {
				if groups, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "apiGroups"); slices.Contains(groups, "coordination.k8s.io") &&
					o.GetNamespace() != "gpupool-system" {
					leaseRoles++
					if o.GetNamespace() != tc.namespace {
						t.Errorf("values %q: Role %s for Leases in namespace %q, want %q", tc.vals, o.GetName(), o.GetNamespace(), tc.namespace)
					}
				}
			}
		}
		// The manager's Role to read them, and the agent's to renew its own.
		if want := map[bool]int{true: 2, false: 0}[tc.namespace != ""]; leaseRoles != want {
			t.Errorf("values %q: %d Roles on Leases outside the release's namespace, want %d", tc.vals, leaseRoles, want)
		}
	}
}

// TestGeneratedCopies: the chart's CRDs and the manager's RBAC rules are the files
// controller-gen writes, byte for byte (`make manifests` copies them; `make verify` fails on a
// stale copy).
func TestGeneratedCopies(t *testing.T) {
	root := repoRoot(t)
	want := map[string]string{filepath.Join("files", "role.yaml"): filepath.Join(root, "config", "rbac", "role.yaml")}
	bases, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(bases) == 0 {
		t.Fatalf("no CRDs in config/crd/bases (%v): run make manifests", err)
	}
	for _, b := range bases {
		want[filepath.Join("crds", filepath.Base(b))] = b
	}
	crds, err := filepath.Glob(filepath.Join(chartDir(t), "crds", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range crds {
		if _, ok := want[filepath.Join("crds", filepath.Base(c))]; !ok {
			t.Errorf("charts/gpupool/crds/%s is not in config/crd/bases: run make manifests", filepath.Base(c))
		}
	}
	for copyPath, src := range want {
		a, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(chartDir(t), copyPath))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("charts/gpupool/%s differs from %s (%v): run make manifests", copyPath, src, err)
		}
	}
}

// TestAppVersionIsTheImageTag: the images default to the tag `make images` gives a release
// commit: v<version> with hack/images' default version.
func TestAppVersionIsTheImageTag(t *testing.T) {
	ch := loadChart(t)
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "hack", "images", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`fs\.String\("version", "([^"]+)"`).FindSubmatch(src)
	if m == nil {
		t.Fatal(`hack/images/main.go has no fs.String("version", ...) flag any more: update this test`)
	}
	if want := "v" + strings.TrimPrefix(string(m[1]), "v"); ch.Metadata.AppVersion != want {
		t.Errorf("Chart.yaml appVersion %q, want %q (hack/images tags a release commit so)", ch.Metadata.AppVersion, want)
	}
	objs := template(t, "gpupool", "gpupool-system", nil)
	for kind, name := range map[string]string{"Deployment": "gpupool-manager", "DaemonSet": "gpupool-agent"} {
		img := containerImage(t, find(t, objs, kind, name))
		if !strings.HasSuffix(img, ":"+ch.Metadata.AppVersion) {
			t.Errorf("%s %s image %q, want the tag %s", kind, name, img, ch.Metadata.AppVersion)
		}
	}
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	objs = template(t, "gpupool", "gpupool-system", values(t, fmt.Sprintf(
		`{manager: {image: {repository: registry.example/gpupool-manager, tag: v0.1.0-0123456789ab, digest: %q}}}`, digest)))
	if img := containerImage(t, find(t, objs, "Deployment", "gpupool-manager")); img != "registry.example/gpupool-manager:v0.1.0-0123456789ab@"+digest {
		t.Errorf("manager image %q", img)
	}
}

func podSpec(t testing.TB, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	spec, ok, err := unstructured.NestedMap(o.Object, "spec", "template", "spec")
	if err != nil || !ok {
		t.Fatalf("%s %s has no pod template: %v", o.GetKind(), o.GetName(), err)
	}
	return spec
}

func container(t testing.TB, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	containers, _ := podSpec(t, o)["containers"].([]any)
	if len(containers) != 1 {
		t.Fatalf("%s %s has %d containers, want 1", o.GetKind(), o.GetName(), len(containers))
	}
	return containers[0].(map[string]any)
}

func containerImage(t testing.TB, o *unstructured.Unstructured) string {
	img, _ := container(t, o)["image"].(string)
	return img
}

func containerArgs(t testing.TB, o *unstructured.Unstructured) []string {
	var args []string
	list, _ := container(t, o)["args"].([]any)
	for _, a := range list {
		args = append(args, fmt.Sprint(a))
	}
	return args
}
