package snapshot

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sigsyaml "sigs.k8s.io/yaml"
)

// Items of a small, valid snapshot, as kubectl prints them inside a List.
const (
	policyItem = `- apiVersion: gpupool.io/v1alpha1
  kind: GPUPoolPolicy
  metadata:
    name: pool-a
  spec:
    nodeSelector:
      matchLabels: {pool: a}
    catalog:
    - product: NVIDIA-H200
      migProfiles: [1g.18gb, 3g.71gb]
    disruption:
      approval: Manual
      maxDisruptedNodes: 50%
`
	nodeItem = `- apiVersion: v1
  kind: Node
  metadata:
    name: node-1
    labels: {pool: a, nvidia.com/gpu.product: NVIDIA-H200}
  status:
    allocatable: {cpu: "64", memory: 512Gi, pods: "110"}
    conditions:
    - type: Ready
      status: "True"
      lastHeartbeatTime: "2026-11-29T12:00:00Z"
      lastTransitionTime: "2026-11-01T00:00:00Z"
`
	gpuNodeItem = `- apiVersion: gpupool.io/v1alpha1
  kind: GPUNode
  metadata:
    name: node-1
  status:
    observedTime: "2026-11-29T11:59:00Z"
    conditions:
    - {type: NVMLReady, status: "True", reason: NVMLInitialized, lastTransitionTime: "2026-11-01T00:00:00Z"}
    gpus:
    - index: 0
      product: NVIDIA H200
      migMode: {current: Enabled}
      instances:
      - {profile: 1g.18gb, placement: {start: 0, size: 1}}
      - {profile: 1g.18gb, placement: {start: 1, size: 1}}
`
	podItem = `- apiVersion: v1
  kind: Pod
  metadata:
    name: trainer-0
    namespace: team-a
    ownerReferences:
    - {apiVersion: batch/v1, kind: Job, name: trainer, uid: 0b6f, controller: true}
  spec:
    containers:
    - name: main
      image: trainer
      resources:
        requests: {cpu: "8", memory: 64Gi, nvidia.com/mig-3g.71gb: "1"}
  status:
    phase: Pending
    conditions:
    - {type: PodScheduled, status: "False", reason: Unschedulable, lastTransitionTime: "2026-11-29T11:50:00Z"}
`
	configMapItem = `- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: settings
    namespace: kube-system
  data: {a: b}
`
)

// list wraps items in a List as kubectl get -o yaml prints it.
func list(items ...string) string {
	return "apiVersion: v1\nkind: List\nmetadata:\n  resourceVersion: \"\"\nitems:\n" + strings.Join(items, "")
}

// policyWith is policyItem with one line replaced, for the invalid-policy cases.
func policyWith(old, repl string) string {
	if !strings.Contains(policyItem, old) {
		panic("policyItem lacks " + old)
	}
	return strings.Replace(policyItem, old, repl, 1)
}

func TestReadGood(t *testing.T) {
	good := list(policyItem, nodeItem, gpuNodeItem, podItem, configMapItem)
	stream := strings.Join([]string{
		"# a stream of documents, as kubectl apply reads them",
		indentOut(policyItem),
		indentOut(nodeItem), indentOut(gpuNodeItem), indentOut(podItem), indentOut(configMapItem),
	}, "\n---\n")
	asJSON, err := sigsyaml.YAMLToJSON([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	for name, input := range map[string]string{
		"List":               good,
		"multi-doc stream":   stream,
		"JSON List":          string(asJSON),
		"JSON object stream": jsonStream(t, good),
	} {
		t.Run(name, func(t *testing.T) {
			snap, err := Parse([]byte(input))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if len(snap.Policies) != 1 || len(snap.Nodes) != 1 || len(snap.GPUNodes) != 1 || len(snap.Pods) != 1 || len(snap.PDBs) != 0 {
				t.Fatalf("got %d policies, %d nodes, %d GPUNodes, %d pods, %d PDBs; want 1, 1, 1, 1, 0",
					len(snap.Policies), len(snap.Nodes), len(snap.GPUNodes), len(snap.Pods), len(snap.PDBs))
			}
			if snap.IgnoredCount() != 1 || snap.Ignored["ConfigMap"] != 1 {
				t.Errorf("ignored %v, want one ConfigMap", snap.Ignored)
			}
			if want := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC); !snap.Newest.Equal(want) {
				t.Errorf("newest timestamp %s, want %s (the node's heartbeat)", snap.Newest, want)
			}
			if len(snap.Warnings) != 0 {
				t.Errorf("warnings: %q", snap.Warnings)
			}
		})
	}
}

// indentOut turns a List item back into a top-level document.
func indentOut(item string) string {
	lines := strings.Split(strings.TrimRight(item, "\n"), "\n")
	for i, l := range lines {
		if i == 0 {
			lines[i] = strings.TrimPrefix(l, "- ")
		} else {
			lines[i] = strings.TrimPrefix(l, "  ")
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// jsonStream renders a List's items as concatenated JSON objects.
func jsonStream(t *testing.T, listYAML string) string {
	t.Helper()
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := sigsyaml.Unmarshal([]byte(listYAML), &l); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, it := range l.Items {
		b.Write(it)
		b.WriteString("\n")
	}
	return b.String()
}

func TestReadInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, input, want string
	}{{
		name:  "unreadable YAML",
		input: list(policyItem) + "  - kind: [unclosed\n",
		want:  `document 0 (line 1): invalid YAML: yaml: line 18: did not find expected key`,
	}, {
		name:  "unreadable YAML in the second document",
		input: indentOut(policyItem) + "---\nkind: Node\n  name: x\n",
		want:  `document 1 (line 15): invalid YAML: yaml: line 16: mapping values are not allowed in this context`,
	}, {
		name:  "unreadable JSON",
		input: `{"apiVersion": "v1", "kind": "List", "items": [}`,
		want:  `document 0: invalid JSON at line 1: invalid character '}' looking for beginning of value`,
	}, {
		name:  "wrong field type",
		input: list(policyWith("approval: Manual", "approval: Manual\n      evictEmptyDir: yes please")),
		want:  `item 0 (GPUPoolPolicy pool-a): spec.disruption.evictEmptyDir: want a boolean, got string "yes please"`,
	}, {
		name:  "wrong type in a Kubernetes kind",
		input: list(policyItem, strings.Replace(nodeItem, `pods: "110"`, `pods: [110]`, 1)),
		want:  `item 1 (Node node-1): status.allocatable[pods]: want a quantity such as 8, 500m or 64Gi, got a list`,
	}, {
		name:  "bad quantity",
		input: list(policyItem, strings.Replace(podItem, `cpu: "8"`, `cpu: lots`, 1)),
		want:  `item 1 (Pod team-a/trainer-0): spec.containers[0].resources.requests[cpu]: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'`,
	}, {
		name:  "integer overflow",
		input: list(policyItem, strings.Replace(gpuNodeItem, "index: 0", "index: 99999999999", 1)),
		want:  `item 1 (GPUNode node-1): status.gpus[0].index: number 99999999999 does not fit in int32`,
	}, {
		name:  "unknown field in a GPUPoolPolicy",
		input: list(policyWith("approval: Manual", "aproval: Manual")), //nolint:misspell // the typo is the input under test
		want:  `item 0 (GPUPoolPolicy pool-a): spec.disruption.aproval: unknown field (did you mean approval?)`,
	}, {
		name:  "unknown fields in a GPUNode, all named",
		input: list(policyItem, strings.Replace(gpuNodeItem, "migMode: {current: Enabled}", "MIGMode: {current: Enabled}\n      color: green", 1)),
		want:  `item 1 (GPUNode node-1): status.gpus[0].MIGMode: unknown field (did you mean migMode?); also unknown: status.gpus[0].color`,
	}, {
		name:  "invalid approval",
		input: list(policyWith("approval: Manual", "approval: Sometimes")),
		want:  `item 0 (GPUPoolPolicy pool-a): spec.disruption.approval: unsupported value "Sometimes": want Manual, AutoIdle or Auto`,
	}, {
		name:  "bad percent",
		input: list(policyWith("maxDisruptedNodes: 50%", "maxDisruptedNodes: 150%")),
		want:  `item 0 (GPUPoolPolicy pool-a): spec.disruption.maxDisruptedNodes: invalid value "150%": want a count of 0 or more, or a percentage from 0% to 100%`,
	}, {
		name:  "negative count",
		input: list(policyWith("maxDisruptedNodes: 50%", "maxDisruptedNodes: -1")),
		want:  `item 0 (GPUPoolPolicy pool-a): spec.disruption.maxDisruptedNodes: invalid value -1: want a count of 0 or more, or a percentage from 0% to 100%`,
	}, {
		name:  "empty nodeSelector",
		input: list(policyWith("matchLabels: {pool: a}", "matchLabels: {}")),
		want:  `item 0 (GPUPoolPolicy pool-a): spec.nodeSelector: must select something: an empty selector would put every node of the cluster in the pool`,
	}, {
		name:  "invalid selector operator",
		input: list(policyWith("matchLabels: {pool: a}", "matchExpressions: [{key: pool, operator: Near, values: [a]}]")),
		want:  `item 0 (GPUPoolPolicy pool-a): spec.nodeSelector.matchExpressions[0].operator: Invalid value: "Near": not a valid selector operator`,
	}, {
		name:  "unparsable duration",
		input: list(policyWith("approval: Manual", "approval: Manual\n      drainTimeout: 15 minutes")),
		want:  `item 0 (GPUPoolPolicy pool-a): spec.disruption.drainTimeout: time: unknown unit " minutes" in duration "15 minutes"`,
	}, {
		name:  "negative duration",
		input: list(policyWith("maxDisruptedNodes: 50%", "maxDisruptedNodes: 50%\n    planning:\n      minPendingAge: -30s")),
		want:  `item 0 (GPUPoolPolicy pool-a): spec.planning.minPendingAge: duration -30s out of range: want between 0s and 24h0m0s`,
	}, {
		name:  "catalog profile",
		input: list(policyWith("migProfiles: [1g.18gb, 3g.71gb]", "migProfiles: [1g.18gb, 3g]")),
		want:  `item 0 (GPUPoolPolicy pool-a): spec.catalog[0].migProfiles[1]: invalid MIG profile "3g": want a name such as 1g.18gb, 3g.71gb, 1g.10gb+me, 1g.24gb+gfx or 1g.24gb-me`,
	}, {
		name:  "missing policy",
		input: list(nodeItem, gpuNodeItem, podItem),
		want:  `no GPUPoolPolicy in the input: include gpupoolpolicies, e.g. kubectl get nodes,pods,pdb,gpunodes,gpupoolpolicies -A -o yaml`,
	}, {
		name:  "missing kind",
		input: list(policyItem, "- apiVersion: v1\n  metadata: {name: x}\n"),
		want:  `item 1 (x): kind: required: every object needs apiVersion and kind, as kubectl get -o yaml prints them`,
	}, {
		name:  "old PodDisruptionBudget version",
		input: list(policyItem, "- apiVersion: policy/v1beta1\n  kind: PodDisruptionBudget\n  metadata: {name: x, namespace: a}\n"),
		want:  `item 1 (PodDisruptionBudget a/x): apiVersion: unsupported version "policy/v1beta1" of PodDisruptionBudget: want policy/v1`,
	}, {
		name:  "object without a name",
		input: list(policyItem, strings.Replace(nodeItem, "name: node-1", "generateName: node-", 1)),
		want:  `item 1 (Node): metadata.name: required`,
	}, {
		name:  "object listed twice",
		input: list(policyItem, nodeItem, nodeItem),
		want:  `item 2 (Node node-1): metadata.name: the same Node is also item 1: keep one`,
	}, {
		name:  "GPU index out of range",
		input: list(policyItem, strings.Replace(gpuNodeItem, "index: 0", "index: 64", 1)),
		want:  `item 1 (GPUNode node-1): status.gpus[0].index: 64 is outside 0..63`,
	}, {
		name:  "duplicate JSON field",
		input: `{"apiVersion":"gpupool.io/v1alpha1","kind":"GPUPoolPolicy","metadata":{"name":"p"},"spec":{"nodeSelector":{"matchLabels":{"a":"b"}},"planning":{"paused":true,"paused":false}}}`,
		want:  `GPUPoolPolicy p: spec.planning.paused: given twice`,
	}, {
		name:  "not an object",
		input: list(policyItem, "- just a string\n"),
		want:  `item 1: want an object with apiVersion and kind, got string "just a string"`,
	}, {
		name:  "empty input",
		input: "\n# nothing here\n",
		want:  `the input holds no object, only comments and blank lines`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.input))
			if err == nil {
				t.Fatalf("Parse succeeded, want error %q", tc.want)
			}
			var serr *Error
			if !errors.As(err, &serr) {
				t.Fatalf("error %T %v is not a *snapshot.Error", err, err)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("error\n got: %s\nwant: %s", got, tc.want)
			}
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Errorf("error spans several lines: %q", err.Error())
			}
		})
	}
}

func TestReadWarnings(t *testing.T) {
	// A newer cluster's Pods may carry fields this build does not know: plan anyway, but say so.
	pod := strings.Replace(podItem, "    containers:", "    futureField: 1\n    containers:", 1)
	// A hand-edited report with overlapping instances reads, with a warning.
	gpuNode := strings.Replace(gpuNodeItem, "placement: {start: 1, size: 1}", "placement: {start: 0, size: 1}", 1)
	snap, err := Parse([]byte(list(policyItem, nodeItem, gpuNode, pod)))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := []string{
		`item 2 (GPUNode node-1): status.gpus[0].instances: `,
		`item 3 (Pod team-a/trainer-0): spec.futureField: unknown field: ignored (is the snapshot from a newer Kubernetes?)`,
	}
	if len(snap.Warnings) != len(want) {
		t.Fatalf("warnings %q, want %d", snap.Warnings, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(snap.Warnings[i], w) {
			t.Errorf("warning %d: %q, want prefix %q", i, snap.Warnings[i], w)
		}
	}
}

func TestReadDefaultsNamespace(t *testing.T) {
	pod := strings.Replace(podItem, "    namespace: team-a\n", "", 1)
	snap, err := Parse([]byte(list(policyItem, pod)))
	if err != nil {
		t.Fatal(err)
	}
	if ns := snap.Pods[0].Namespace; ns != "default" {
		t.Errorf("namespace %q, want default, as kubectl apply without -n", ns)
	}
}

// samples are the shipped example snapshots.
func samples(t testing.TB) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob("../../config/samples/snapshots/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no sample snapshots found: %v", err)
	}
	out := map[string][]byte{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = data
	}
	return out
}

func TestSamplesRead(t *testing.T) {
	for name, data := range samples(t) {
		t.Run(name, func(t *testing.T) {
			snap, err := Parse(data)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			// The samples' placements follow the MIG rules (docs/architecture.md, "MIG geometry"): no warning.
			if len(snap.Warnings) > 0 {
				t.Errorf("warnings: %q", snap.Warnings)
			}
			if len(snap.Nodes) < 2 || len(snap.Nodes) > 6 || len(snap.GPUNodes) != len(snap.Nodes) {
				t.Errorf("%d nodes and %d GPUNodes; samples hold 2 to 6 nodes, each with its report", len(snap.Nodes), len(snap.GPUNodes))
			}
		})
	}
}

func FuzzRead(f *testing.F) {
	for _, data := range samples(f) {
		f.Add(data)
	}
	f.Add([]byte(list(policyItem, nodeItem, gpuNodeItem, podItem, configMapItem)))
	f.Add([]byte(indentOut(policyItem) + "---\n" + indentOut(nodeItem)))
	f.Add([]byte(`{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"gpupool.io/v1alpha1","kind":"GPUPoolPolicy","metadata":{"name":"p"},"spec":{"nodeSelector":{"matchLabels":{"a":"b"}}}}]}`))
	f.Add([]byte("kind: List\napiVersion: v1\nitems: [{kind: List, apiVersion: v1, items: []}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		snap, err := Parse(data)
		if err != nil {
			var serr *Error
			if !errors.As(err, &serr) {
				t.Fatalf("error %T is not a *snapshot.Error: %v", err, err)
			}
			if msg := err.Error(); msg == "" || strings.ContainsAny(msg, "\n\r") {
				t.Fatalf("error is not one non-empty line: %q", msg)
			}
			return
		}
		if len(snap.Policies) == 0 {
			t.Fatal("Parse succeeded without a GPUPoolPolicy")
		}
		for _, n := range snap.Nodes {
			if n.Name == "" {
				t.Fatal("a Node without a name")
			}
		}
		for _, g := range snap.GPUNodes {
			if g.Name == "" {
				t.Fatal("a GPUNode without a name")
			}
			if ferr := validateGPUNode(&g); ferr != nil {
				t.Fatalf("GPUNode %s passed the reader but not validation: %s: %s", g.Name, ferr.field, ferr.msg)
			}
		}
		for _, p := range snap.Pods {
			if p.Name == "" || p.Namespace == "" {
				t.Fatalf("a Pod without a name or namespace: %q/%q", p.Namespace, p.Name)
			}
		}
		for _, p := range snap.PDBs {
			if p.Name == "" || p.Namespace == "" {
				t.Fatalf("a PodDisruptionBudget without a name or namespace: %q/%q", p.Namespace, p.Name)
			}
		}
		for _, p := range snap.Policies {
			if p.Name == "" {
				t.Fatal("a GPUPoolPolicy without a name")
			}
			if ferr := validatePolicy(&p); ferr != nil {
				t.Fatalf("policy %s passed the reader but not validation: %s: %s", p.Name, ferr.field, ferr.msg)
			}
		}
		for kind, n := range snap.Ignored {
			if kind == "" || n <= 0 {
				t.Fatalf("ignored count %d for kind %q", n, kind)
			}
		}
		for _, w := range snap.Warnings {
			if strings.ContainsAny(w, "\n\r") {
				t.Fatalf("warning spans several lines: %q", w)
			}
		}
	})
}
