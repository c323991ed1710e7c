package helmtest

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kustomize renders a kustomization as `kubectl kustomize` does.
func kustomize(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	y, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeObjects(string(y))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return objs
}

// install names what the kustomize install hard-codes and the chart templates.
type install struct {
	release, namespace, gpuOperatorNamespace string
	// fullname is what the chart prefixes names with; kustomize's prefix is "gpupool".
	fullname string
}

// The names config/ uses.
const (
	kustomizeNamespace   = "gpupool-system"
	kustomizeAgentNS     = "gpupool-agent"
	kustomizeGPUOperator = "gpu-operator"
	kustomizeManagerUser = "system:serviceaccount:gpupool-system:gpupool-manager"
	kustomizeAgentUser   = "system:serviceaccount:gpupool-agent:gpupool-agent"
	// kustomizeAgentSelector is config/agent's DaemonSet selector, as the manager's flag says it.
	kustomizeAgentSelector = "app.kubernetes.io/component=agent,app.kubernetes.io/name=gpupool"
)

// name is what the chart calls the object kustomize names n: gpupool-x becomes <fullname>-x.
func (in install) name(n string) string {
	if rest, ok := strings.CutPrefix(n, "gpupool-"); ok {
		return in.fullname + "-" + rest
	}
	return n
}

func (in install) ns(n string) string {
	switch n {
	case kustomizeNamespace:
		return in.namespace
	case kustomizeGPUOperator:
		return in.gpuOperatorNamespace
	case kustomizeAgentNS:
		return in.name(kustomizeAgentNS)
	}
	return n
}

func (in install) managerUser() string {
	return "system:serviceaccount:" + in.namespace + ":" + in.name("gpupool-manager")
}

func (in install) agentUser() string {
	return "system:serviceaccount:" + in.ns(kustomizeAgentNS) + ":" + in.name("gpupool-agent")
}

// expected turns an object of the kustomize install into what the chart must render for in:
// the same object with this install's names, namespaces and ServiceAccount user names.
func (in install) expected(t testing.TB, o *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	b, err := json.Marshal(o.Object)
	if err != nil {
		t.Fatal(err)
	}
	// The user names and the approver role appear inside CEL expressions and messages, the
	// GPU Operator's and the agent's namespaces in flags of the manager.
	s := strings.NewReplacer(
		kustomizeManagerUser, in.managerUser(),
		kustomizeAgentUser, in.agentUser(),
		"ClusterRole gpupool-plan-approver", "ClusterRole "+in.name("gpupool-plan-approver"),
		"MutatingAdmissionPolicy gpupool-plan-decision-author", "MutatingAdmissionPolicy "+in.name("gpupool-plan-decision-author"),
		"gpupool-manager-metrics."+kustomizeNamespace+".svc", in.name("gpupool-manager-metrics")+"."+in.namespace+".svc",
		"--gpu-operator-namespace="+kustomizeGPUOperator, "--gpu-operator-namespace="+in.gpuOperatorNamespace,
		"--agent-namespace="+kustomizeAgentNS, "--agent-namespace="+in.ns(kustomizeAgentNS),
		// The chart's selectors select by the release too.
		"--agent-pod-selector="+kustomizeAgentSelector, "--agent-pod-selector=app.kubernetes.io/component=agent,app.kubernetes.io/instance="+in.release+",app.kubernetes.io/name=gpupool",
		// The DaemonSet that controls the agents' pods and the ServiceAccount they run as.
		"--agent-daemonset="+kustomizeAgentNS, "--agent-daemonset="+in.name("gpupool-agent"),
		"--agent-service-account="+kustomizeAgentNS, "--agent-service-account="+in.name("gpupool-agent"),
	).Replace(string(b))
	out := &unstructured.Unstructured{}
	if err := json.Unmarshal([]byte(s), &out.Object); err != nil {
		t.Fatal(err)
	}
	out.SetName(in.name(out.GetName()))
	if out.GetNamespace() != "" {
		out.SetNamespace(in.ns(out.GetNamespace()))
	}
	rename := func(m map[string]any, fields ...string) {
		for _, f := range fields {
			if v, ok := m[f].(string); ok {
				if f == "namespace" {
					m[f] = in.ns(v)
				} else {
					m[f] = in.name(v)
				}
			}
		}
	}
	if ref, ok := out.Object["roleRef"].(map[string]any); ok {
		rename(ref, "name")
	}
	subjects, _ := out.Object["subjects"].([]any)
	for _, s := range subjects {
		rename(s.(map[string]any), "name", "namespace")
	}
	if spec, ok := out.Object["spec"].(map[string]any); ok && (strings.HasPrefix(out.GetKind(), "ValidatingAdmissionPolicy") ||
		strings.HasPrefix(out.GetKind(), "MutatingAdmissionPolicy")) {
		rename(spec, "policyName")
	}
	if pod, ok, _ := unstructured.NestedMap(out.Object, "spec", "template", "spec"); ok {
		rename(pod, "serviceAccountName")
		_ = unstructured.SetNestedMap(out.Object, pod, "spec", "template", "spec")
	}
	return out
}

func key(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetKind() + " " + o.GetName()
	}
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

// TestChartMatchesKustomize renders config/default plus config/agent with kustomize and the
// chart with Helm's SDK, and compares them object by object: the same kinds and names, the
// same RBAC rules and bindings, the same admission policies (every expression and message), the
// same Services and the same workloads, modulo the names the chart templates (release name and
// namespace, the GPU Operator's namespace) and the differences listed in chartOnly. It does so
// for the README's install (release gpupool in gpupool-system, which must give kustomize's
// names exactly) and for another release in other namespaces.
func TestChartMatchesKustomize(t *testing.T) {
	root := repoRoot(t)
	kust := append(kustomize(t, filepath.Join(root, "config", "default")), kustomize(t, filepath.Join(root, "config", "agent"))...)
	monitor := kustomize(t, filepath.Join(root, "config", "prometheus"))
	dashboard := kustomize(t, filepath.Join(root, "config", "grafana"))
	for _, in := range []install{
		{release: "gpupool", namespace: "gpupool-system", gpuOperatorNamespace: "gpu-operator", fullname: "gpupool"},
		{release: "ops", namespace: "gpu-infra", gpuOperatorNamespace: "nvidia", fullname: "ops-gpupool"},
	} {
		t.Run(in.release+" in "+in.namespace, func(t *testing.T) {
			vals := values(t, fmt.Sprintf(`{gpuOperator: {namespace: %s}}`, in.gpuOperatorNamespace))
			chartObjs := template(t, in.release, in.namespace, vals)
			compareInstalls(t, in, kust, chartObjs)

			// The ServiceMonitor and PrometheusRule of config/prometheus and the dashboard
			// ConfigMap of config/grafana, against the chart's when enabled.
			vals = values(t, fmt.Sprintf(`{gpuOperator: {namespace: %s}, serviceMonitor: {enabled: true},
				prometheusRule: {enabled: true}, grafanaDashboard: {enabled: true},
				manager: {metrics: {certSecret: gpupool-metrics-cert}}}`, in.gpuOperatorNamespace))
			got := map[string]*unstructured.Unstructured{}
			for _, o := range template(t, in.release, in.namespace, vals) {
				switch o.GetKind() {
				case "ServiceMonitor", "PrometheusRule":
					got[o.GetKind()] = o
				case "ConfigMap":
					if o.GetLabels()["grafana_dashboard"] == "1" {
						got[o.GetKind()] = o
					}
				}
			}
			if len(monitor) != 2 || len(dashboard) != 1 {
				t.Fatalf("config/prometheus renders %d objects, config/grafana %d: want a ServiceMonitor and a PrometheusRule, and a ConfigMap", len(monitor), len(dashboard))
			}
			// config/prometheus and config/grafana sit outside config/base, so kustomize
			// neither prefixes nor places them: only their specs (a ConfigMap's data) are compared.
			for _, k := range append(monitor, dashboard...) {
				c := got[k.GetKind()]
				if c == nil {
					t.Errorf("the chart renders no %s with everything on", k.GetKind())
					continue
				}
				want := in.expected(t, k)
				if k.GetKind() == "ConfigMap" {
					checkLabels(t, "dashboard ConfigMap", map[string]string{"grafana_dashboard": "1"}, c.GetLabels())
					if d := cmp.Diff(want.Object["data"], c.Object["data"]); d != "" {
						t.Errorf("dashboard ConfigMap data differs from config/grafana's (-kustomize +chart):\n%s", d)
					}
					continue
				}
				compareSpec(t, k.GetKind(), want, c)
			}
		})
	}
}

// kustomizeOnly are objects of the kustomize install that the chart leaves out, and why.
var kustomizeOnly = map[string]string{
	"Namespace " + kustomizeNamespace: "Helm installs into the release namespace and does not own it (helm install --create-namespace makes it)",
}

// chartOnly are objects only the chart renders, and why. When config/ gains one, the test
// compares it like any other.
var chartOnly = map[string]string{
	"PodDisruptionBudget " + kustomizeNamespace + "/gpupool-manager": "a node drain takes at most one of the two manager replicas",
}

func compareInstalls(t *testing.T, in install, kust, chartObjs []*unstructured.Unstructured) {
	t.Helper()
	got := map[string]*unstructured.Unstructured{}
	for _, o := range chartObjs {
		if _, dup := got[key(o)]; dup {
			t.Errorf("the chart renders %s twice", key(o))
		}
		got[key(o)] = o
	}
	// CRDs come from the chart's crds/, which TestGeneratedCopies holds equal to config/crd.
	crds := map[string]bool{}
	for _, c := range loadChart(t).CRDObjects() {
		objs, err := decodeObjects(string(c.File.Data))
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		for _, o := range objs {
			crds[o.GetName()] = true
		}
	}
	seen := map[string]bool{}
	for _, k := range kust {
		if k.GetKind() == "CustomResourceDefinition" {
			if !crds[k.GetName()] {
				t.Errorf("CRD %s is not in charts/gpupool/crds", k.GetName())
			}
			delete(crds, k.GetName())
			continue
		}
		if why, ok := kustomizeOnly[key(k)]; ok {
			t.Logf("only in kustomize: %s (%s)", key(k), why)
			continue
		}
		want := in.expected(t, k)
		c, ok := got[key(want)]
		if !ok {
			t.Errorf("the chart renders no %s (kustomize's %s)", key(want), key(k))
			continue
		}
		seen[key(want)] = true
		compareObject(t, want, c)
	}
	for name := range crds {
		t.Errorf("charts/gpupool/crds has CRD %s, config/crd does not", name)
	}
	chartOnlyHere := map[string]string{}
	for k, why := range chartOnly {
		kind, rest, _ := strings.Cut(k, " ")
		ns, name, _ := strings.Cut(rest, "/")
		chartOnlyHere[kind+" "+in.ns(ns)+"/"+in.name(name)] = why
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if seen[k] {
			continue
		}
		if why, ok := chartOnlyHere[k]; ok {
			t.Logf("only in the chart: %s (%s)", k, why)
			continue
		}
		t.Errorf("the chart renders %s, which config/default and config/agent do not", k)
	}
}

// compareObject compares one object. Labels: the chart's are a superset of kustomize's (it
// adds Helm's instance, version and chart labels), in metadata and in selectors.
func compareObject(t *testing.T, want, got *unstructured.Unstructured) {
	t.Helper()
	checkLabels(t, key(got), want.GetLabels(), got.GetLabels())
	switch want.GetKind() {
	case "ClusterRole", "Role":
		if d := cmp.Diff(want.Object["rules"], got.Object["rules"]); d != "" {
			t.Errorf("%s rules differ from kustomize's (-kustomize +chart):\n%s", key(got), d)
		}
	case "ClusterRoleBinding", "RoleBinding":
		for _, f := range []string{"roleRef", "subjects"} {
			if d := cmp.Diff(want.Object[f], got.Object[f]); d != "" {
				t.Errorf("%s %s differ from kustomize's (-kustomize +chart):\n%s", key(got), f, d)
			}
		}
	case "ServiceAccount", "Namespace":
		// Name, namespace and labels only.
	default:
		compareSpec(t, key(got), want, got)
	}
}

// compareSpec compares spec, after the chart's additions below are checked and dropped.
func compareSpec(t *testing.T, what string, want, got *unstructured.Unstructured) {
	t.Helper()
	w, _ := want.Object["spec"].(map[string]any)
	g, _ := deepCopy(t, got.Object)["spec"].(map[string]any)
	if w == nil || g == nil {
		t.Errorf("%s: spec missing (kustomize %v, chart %v)", what, w != nil, g != nil)
		return
	}
	// Selectors: the chart's select by the release too.
	for _, path := range [][]string{{"selector", "matchLabels"}, {"selector"}, {"template", "metadata", "labels"}} {
		wl, wok, _ := unstructured.NestedStringMap(w, path...)
		gl, gok, _ := unstructured.NestedStringMap(g, path...)
		if wok && gok {
			checkLabels(t, what+" "+strings.Join(path, "."), wl, gl)
			_ = unstructured.SetNestedStringMap(g, wl, path...)
		}
	}
	if pod, ok := g["template"].(map[string]any); ok {
		podWant, _, _ := unstructured.NestedMap(w, "template", "spec")
		trimWorkload(t, what, podWant, pod["spec"].(map[string]any))
	}
	if strings.HasPrefix(want.GetKind(), "ValidatingAdmissionPolicy") {
		// kustomize re-emits a folded scalar with a more-indented line (the CEL expressions
		// continued on an indented line) with an extra blank line, which a YAML parser reads
		// back as an extra newline: compare CEL and messages with whitespace runs as one space.
		w, g = collapseSpace(w).(map[string]any), collapseSpace(g).(map[string]any)
	}
	if want.GetKind() == "Deployment" {
		dropIfOnlyInChart(t, what, w, g, "strategy", "replace one replica at a time, which required pod anti-affinity needs on small clusters")
	}
	if d := cmp.Diff(w, g); d != "" {
		t.Errorf("%s spec differs from kustomize's (-kustomize +chart):\n%s", what, d)
	}
}

// trimWorkload checks and removes the chart's known additions to a pod template: pod
// anti-affinity and a priority class, an imagePullPolicy, and an image tag (kustomize's is
// latest, the chart's its appVersion).
func trimWorkload(t *testing.T, what string, want, got map[string]any) {
	t.Helper()
	dropIfOnlyInChart(t, what, want, got, "affinity", "pod anti-affinity: the two manager replicas never share a node")
	dropIfOnlyInChart(t, what, want, got, "priorityClassName", "system-node-critical, as the GPU Operator's DaemonSets")
	wc, _ := want["containers"].([]any)
	gc, _ := got["containers"].([]any)
	if len(wc) != len(gc) {
		return
	}
	for i := range wc {
		w, g := wc[i].(map[string]any), gc[i].(map[string]any)
		dropIfOnlyInChart(t, what, w, g, "imagePullPolicy", "a value of the chart")
		wi, _ := w["image"].(string)
		gi, _ := g["image"].(string)
		if repo(wi) != repo(gi) {
			t.Errorf("%s: image %q, kustomize's %q: the repositories differ", what, gi, wi)
		}
		g["image"] = wi
	}
}

func collapseSpace(v any) any {
	switch v := v.(type) {
	case string:
		return strings.Join(strings.Fields(v), " ")
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			out[k] = collapseSpace(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = collapseSpace(x)
		}
		return out
	}
	return v
}

func dropIfOnlyInChart(t *testing.T, what string, want, got map[string]any, field, why string) {
	t.Helper()
	if _, inKustomize := want[field]; inKustomize {
		return
	}
	if _, inChart := got[field]; inChart {
		t.Logf("%s: only in the chart: %s (%s)", what, field, why)
		delete(got, field)
	}
}

func repo(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i]
	}
	return image
}

func checkLabels(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: label %s=%q, kustomize's is %q", what, k, got[k], v)
		}
	}
}

func deepCopy(t testing.TB, m map[string]any) map[string]any {
	t.Helper()
	return (&unstructured.Unstructured{Object: m}).DeepCopy().Object
}
