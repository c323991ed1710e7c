package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/snapshot"
)

const samplesDir = "../../config/samples/snapshots"

func sample(name string) string { return filepath.Join(samplesDir, name) }

// decodeOutput reads -o json output, insisting on exactly one object with exactly the
// documented keys, and strict types for the plans.
func decodeOutput(t *testing.T, out string) (plans []v1alpha1.RepartitionPlan, unserved []unservedOutput, stranded strandedOutput) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var top map[string]json.RawMessage
	if err := dec.Decode(&top); err != nil {
		t.Fatalf("output is not a JSON object: %v\n%s", err, out)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("output holds more than one JSON value (next: %v)", err)
	}
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"plans", "proposals", "stranded", "unserved"}; !slices.Equal(keys, want) {
		t.Fatalf("keys %q, want %q", keys, want)
	}
	strict := func(raw json.RawMessage, into any) {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		if err := d.Decode(into); err != nil {
			t.Fatalf("decoding %s: %v", raw, err)
		}
	}
	strict(top["plans"], &plans)
	strict(top["unserved"], &unserved)
	strict(top["stranded"], &stranded)
	var proposals []proposalOutput
	strict(top["proposals"], &proposals)
	if plans == nil || proposals == nil || unserved == nil || stranded.Before == nil || stranded.After == nil {
		t.Fatalf("empty parts must be [] and {}, not null:\n%s", out)
	}
	return plans, unserved, stranded
}

// TestSamples runs the CLI on each shipped snapshot and checks the outcome it documents.
func TestSamples(t *testing.T) {
	for _, tc := range []struct {
		file          string
		wantEvictions []string // exactly these pods are evicted
		neverEvicted  string
		wantServed    []string
		wantStepNodes []string
	}{{
		file:          "fragmented-h200.yaml",
		wantServed:    []string{"team-a/trainer-0-p7x2m", "team-a/trainer-1-w4c9n", "team-c/finetune-5b8d7-zr2kq"},
		wantStepNodes: []string{"h200-node-2"},
	}, {
		file:          "mixed-a100-h100.yaml",
		wantServed:    []string{"team-a/trainer-any-0-x9d4s", "team-a/trainer-h100-0-b7k2p", "team-c/batch-infer-58d9c6f7b4-4tq8m", "team-c/batch-infer-58d9c6f7b4-7wn2c", "team-c/batch-infer-58d9c6f7b4-9zr5k"},
		wantStepNodes: []string{"a100-node-1", "h100-node-1"},
	}, {
		file:          "busy-eviction.yaml",
		wantEvictions: []string{"team-b/infer-5c7b9d6f8-2mx8q", "team-b/infer-5c7b9d6f8-7kd4w"},
		neverEvicted:  "team-c/notebook-alice-0",
		wantServed:    []string{"team-a/pretrain-7g-0-s5j3d"},
		wantStepNodes: []string{"h100-node-1"},
	}, {
		file:          "hopper-nvl-gh200.yaml",
		wantEvictions: []string{"team-b/infer-1-7c9d5-2xkqp", "team-b/infer-1-7c9d5-8m4zt"},
		wantServed:    []string{"team-a/train-gh-0-m4q9z", "team-a/train-gh144-0-r8w3c", "team-a/train-nvl-0-k2x7p"},
		wantStepNodes: []string{"gh200-144g-node-3", "gh200-node-2", "h100nvl-node-1"},
	}, {
		file:          "blackwell-gb200-b300.yaml",
		wantEvictions: []string{"team-b/infer-3-7c9d5-2xkqp", "team-b/infer-3-7c9d5-8m4zt"},
		wantServed:    []string{"team-a/train-b300-0-v7n2x", "team-a/train-gb200-0-p3k8d", "team-c/tune-gb300-0-h5t9q"},
		wantStepNodes: []string{"b300-node-2", "gb200-node-1", "gb300-node-3"},
	}, {
		file:          "rtx-pro-6000-blackwell.yaml",
		wantServed:    []string{"team-d/render-0-q8m2v", "team-d/transcode-0-z6c4n"},
		wantStepNodes: []string{"rtxpro-node-1", "rtxpro-node-2"},
	}, {
		// A pod asking through a ResourceClaim of NVIDIA's DRA driver and one asking the device
		// plugin, served by one plan, on the node whose idle-looking GPU no allocated claim holds.
		file:          "dra-claims-h100.yaml",
		wantServed:    []string{"team-a/train-dra-0-4kq8z", "team-c/infer-big-5f7d8-w2n4x"},
		wantStepNodes: []string{"h100-node-1", "h100-node-2"},
	}} {
		t.Run(tc.file, func(t *testing.T) {
			code, out, errOut := invoke(t, "", "plan", "-f", sample(tc.file), "-o", "json")
			if code != exitOK || errOut != "" {
				t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, errOut)
			}
			plans, unserved, _ := decodeOutput(t, out)
			if len(plans) != 1 {
				t.Fatalf("%d plans, want 1", len(plans))
			}
			if len(unserved) != 0 {
				t.Errorf("unserved %+v, want none", unserved)
			}
			spec := plans[0].Spec
			var nodes, evicted, served []string
			for _, s := range spec.Steps {
				nodes = append(nodes, s.Node)
				for _, e := range s.Evictions {
					evicted = append(evicted, e.Namespace+"/"+e.Name)
				}
			}
			for _, p := range spec.Expected.Pods {
				served = append(served, p.Namespace+"/"+p.Name)
			}
			if !slices.Equal(nodes, tc.wantStepNodes) {
				t.Errorf("steps on %q, want %q", nodes, tc.wantStepNodes)
			}
			if !slices.Equal(evicted, tc.wantEvictions) {
				t.Errorf("evicts %q, want %q", evicted, tc.wantEvictions)
			}
			if spec.Disruptive != (len(tc.wantEvictions) > 0) {
				t.Errorf("disruptive %t with evictions %q", spec.Disruptive, evicted)
			}
			if tc.neverEvicted != "" && slices.Contains(evicted, tc.neverEvicted) {
				t.Errorf("evicts %s, which is annotated gpupool.io/do-not-disrupt", tc.neverEvicted)
			}
			if !slices.Equal(served, tc.wantServed) {
				t.Errorf("serves %q, want %q", served, tc.wantServed)
			}

			code, table, errOut := invoke(t, "", "plan", "-f", sample(tc.file))
			if code != exitOK || errOut != "" {
				t.Fatalf("table: exit %d, stderr %q; want 0 and nothing", code, errOut)
			}
			if !strings.Contains(table, "Plan "+plans[0].Name) {
				t.Errorf("table does not name plan %s:\n%s", plans[0].Name, table)
			}
			for _, line := range strings.Split(table, "\n") {
				if len(line) > 100 {
					t.Errorf("table line of %d columns: %q", len(line), line)
				}
			}
		})
	}
}

// TestSampleMixedServesH100PodOnH100 checks the one constraint the mixed sample is about.
func TestSampleMixedServesH100PodOnH100(t *testing.T) {
	_, out, _ := invoke(t, "", "plan", "-f", sample("mixed-a100-h100.yaml"), "-o", "json")
	plans, _, _ := decodeOutput(t, out)
	for _, s := range plans[0].Spec.Steps {
		for _, g := range s.GPUs {
			if g.To["3g.40gb"] > 0 && g.From["3g.40gb"] == 0 && strings.HasPrefix(s.Node, "h100-") {
				return
			}
		}
	}
	t.Errorf("no step creates a 3g.40gb on an H100 node for the H100-only trainer: %+v", plans[0].Spec.Steps)
}

func TestJSONRoundTrip(t *testing.T) {
	code, out, _ := invoke(t, "", "plan", "-f", sample("busy-eviction.yaml"), "-o", "json")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	plans, _, stranded := decodeOutput(t, out)

	// The decoded plan is the object the controller would create, field for field.
	f, err := os.Open(sample("busy-eviction.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	snap, err := snapshot.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := snap.Plan(snapshot.Options{Now: snap.Newest})
	if err != nil {
		t.Fatal(err)
	}
	want := rep.Policies[0].Plan
	if !reflect.DeepEqual(&plans[0], want) {
		t.Errorf("plan after the JSON round trip\n got %+v\nwant %+v", plans[0], *want)
	}
	if plans[0].APIVersion != "gpupool.io/v1alpha1" || plans[0].Kind != "RepartitionPlan" {
		t.Errorf("plan carries %s %s, want gpupool.io/v1alpha1 RepartitionPlan", plans[0].APIVersion, plans[0].Kind)
	}
	if int32(stranded.Before["1g.10gb"]) != want.Spec.Expected.StrandedBefore["1g.10gb"] ||
		int32(stranded.After["1g.10gb"]) != want.Spec.Expected.StrandedAfter["1g.10gb"] {
		t.Errorf("stranded %+v disagrees with the plan's expectation %+v", stranded, want.Spec.Expected)
	}
}

func TestYAMLOutputMatchesJSON(t *testing.T) {
	_, asJSON, _ := invoke(t, "", "plan", "-f", sample("fragmented-h200.yaml"), "-o", "json")
	code, asYAML, _ := invoke(t, "", "plan", "-f", sample("fragmented-h200.yaml"), "-o", "yaml")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	converted, err := sigsyaml.YAMLToJSON([]byte(asYAML))
	if err != nil {
		t.Fatalf("-o yaml is not YAML: %v", err)
	}
	var a, b any
	if err := json.Unmarshal([]byte(asJSON), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(converted, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("-o yaml and -o json differ:\n%s\n%s", asYAML, asJSON)
	}
}

func TestNothingToChange(t *testing.T) {
	input := `apiVersion: gpupool.io/v1alpha1
kind: GPUPoolPolicy
metadata: {name: empty-pool}
spec:
  nodeSelector: {matchLabels: {pool: none}}
`
	code, out, errOut := invoke(t, input, "plan", "-f", "-", "-o", "json")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q; want 0: nothing to change is a success", code, errOut)
	}
	plans, unserved, _ := decodeOutput(t, out)
	if len(plans) != 0 || len(unserved) != 0 {
		t.Errorf("plans %+v, unserved %+v; want none", plans, unserved)
	}
	code, table, _ := invoke(t, input, "plan", "-f", "-")
	if code != exitOK || !strings.Contains(table, "No change: no pending GPU pod needs this pool.") {
		t.Errorf("exit %d, table:\n%s", code, table)
	}
	if !strings.Contains(table, "the current time: the input carries no timestamp") {
		t.Errorf("the table does not say it planned at the current time:\n%s", table)
	}
}

func TestNowFlag(t *testing.T) {
	code, out, _ := invoke(t, "", "plan", "-f", sample("busy-eviction.yaml"), "-o", "json", "--now", "2027-01-02T03:04:05Z")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	plans, _, _ := decodeOutput(t, out)
	if !strings.Contains(plans[0].Name, "-20270102-") {
		t.Errorf("plan %s is not named after --now's date", plans[0].Name)
	}
	_, table, _ := invoke(t, "", "plan", "-f", sample("busy-eviction.yaml"), "--now", "2027-01-02T03:04:05Z")
	if !strings.Contains(table, "Planned at 2027-01-02T03:04:05Z (--now).") {
		t.Errorf("table does not report --now:\n%s", table)
	}
}

func TestStdinEqualsFile(t *testing.T) {
	data, err := os.ReadFile(sample("mixed-a100-h100.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, fromFile, _ := invoke(t, "", "plan", "-f", sample("mixed-a100-h100.yaml"), "-o", "json")
	code, fromStdin, _ := invoke(t, string(data), "plan", "--filename", "-", "--output", "json")
	if code != exitOK || fromFile != fromStdin {
		t.Errorf("exit %d; stdin and file outputs differ", code)
	}
}

func TestIgnoredKindsAndWarnings(t *testing.T) {
	data, err := os.ReadFile(sample("fragmented-h200.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	extra := `- apiVersion: v1
  kind: ConfigMap
  metadata: {name: a, namespace: b}
- apiVersion: v1
  kind: Service
  metadata: {name: a, namespace: b}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: c, namespace: b}
`
	input := strings.Replace(string(data), "items:\n", "items:\n"+extra, 1)
	input = strings.Replace(input, "    schedulerName: default-scheduler\n", "    schedulerName: default-scheduler\n    futureField: on\n", 1)
	code, table, errOut := invoke(t, input, "plan", "-f", "-")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(table, "Ignored 3 objects of other kinds (ConfigMap 2, Service 1).") {
		t.Errorf("table does not count the ignored objects:\n%s", table)
	}
	if !strings.HasPrefix(errOut, "gpupoolctl: warning: item 9 (Pod team-b/infer-7c9d5f8b6-2xkqp): spec.futureField: unknown field") {
		t.Errorf("stderr %q, want a warning naming the unknown Pod field", errOut)
	}
	code, out, _ := invoke(t, input, "plan", "-f", "-", "-o", "json")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	decodeOutput(t, out) // warnings never reach stdout
}

func TestInvalidInput(t *testing.T) {
	dir := t.TempDir()
	sampleData, err := os.ReadFile(sample("fragmented-h200.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sometimes := filepath.Join(dir, "sometimes.yaml")
	if err := os.WriteFile(sometimes, bytes.Replace(sampleData, []byte("approval: Manual"), []byte("approval: Sometimes"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	items := strings.Count(string(sampleData), "\n- apiVersion:") - 1
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"invalid approval", "", []string{"-f", sometimes},
			`gpupoolctl what-if: ` + sometimes + `: item ` + strconv.Itoa(items) + ` (GPUPoolPolicy h200-pool): spec.disruption.approval: unsupported value "Sometimes": want Manual, AutoIdle or Auto`},
		{"missing file", "", []string{"-f", filepath.Join(dir, "nope.yaml")},
			`gpupoolctl what-if: reading the snapshot: open ` + filepath.Join(dir, "nope.yaml") + `: no such file or directory`},
		{"unreadable stdin", "kind: [", []string{"-f", "-"},
			`gpupoolctl what-if: document 0 (line 1): invalid YAML: yaml: line 1: did not find expected node content`},
		{"no policy", "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n", []string{"-f", "-"},
			`gpupoolctl what-if: no GPUPoolPolicy in the input: include gpupoolpolicies, e.g. kubectl get nodes,pods,pdb,gpunodes,gpupoolpolicies -A -o yaml`},
		{"unknown policy", "", []string{"-f", sample("busy-eviction.yaml"), "--policy", "other"},
			`gpupoolctl what-if: no GPUPoolPolicy named "other" in the input (it has busy-pool)`},
		{"no -f", "", nil, `gpupoolctl what-if: -f FILE or --live is required: the snapshot to plan (- for stdin), or the live cluster (see gpupoolctl what-if --help)`},
		{"both -f and --live", "", []string{"-f", "-", "--live"}, `gpupoolctl what-if: -f and --live exclude each other: plan either a snapshot or the live cluster`},
		{"positional file", "", []string{"snapshot.yaml"}, `gpupoolctl what-if: unexpected argument "snapshot.yaml": name the snapshot with -f (see gpupoolctl what-if --help)`},
		{"bad flag", "", []string{"--frobnicate"}, `gpupoolctl what-if: unknown flag: --frobnicate (see gpupoolctl what-if --help)`},
		{"bad output", "", []string{"-f", "-", "-o", "xml"}, `gpupoolctl what-if: -o "xml": want one of ` + outputFormats},
		{"bad --now", "", []string{"-f", "-", "--now", "yesterday"}, `gpupoolctl what-if: --now "yesterday": want an RFC 3339 time such as 2026-11-29T12:00:00Z`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := invoke(t, tc.stdin, append([]string{"what-if"}, tc.args...)...)
			if code != exitInvalid {
				t.Errorf("exit %d, want 2", code)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			if errOut != tc.want+"\n" {
				t.Errorf("stderr\n got: %q\nwant: %q", errOut, tc.want+"\n")
			}
		})
	}
}

func TestWriteErrorExitsOne(t *testing.T) {
	var stderr bytes.Buffer
	code := run("gpupoolctl", []string{"plan", "-f", sample("busy-eviction.yaml")}, strings.NewReader(""), failingWriter{}, &stderr)
	if code != exitFailed || !strings.HasPrefix(stderr.String(), "gpupoolctl plan: writing the plan: ") {
		t.Errorf("exit %d, stderr %q; want 1 and the write error", code, stderr.String())
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, os.ErrClosed }

// The planning time defaults to the snapshot's newest timestamp, so replays are identical.
func TestReplayIsDeterministic(t *testing.T) {
	_, first, _ := invoke(t, "", "plan", "-f", sample("fragmented-h200.yaml"))
	_, second, _ := invoke(t, "", "plan", "-f", sample("fragmented-h200.yaml"))
	if first != second {
		t.Errorf("two runs on one snapshot differ:\n%s\n%s", first, second)
	}
}

// TestSampleDRAExplainsTheClaimItCannotMap checks the DRA sample's third pod: its claim selects
// by memory capacity, which gpupool does not model, so it is listed as waiting with that reason
// instead of being guessed at or dropped.
func TestSampleDRAExplainsTheClaimItCannotMap(t *testing.T) {
	code, table, errOut := invoke(t, "", "plan", "-f", sample("dra-claims-h100.yaml"))
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	flat := strings.Join(strings.Fields(table), " ")
	for _, want := range []string{
		"team-d/sweep-0-j7t3r: asks through a ResourceClaim gpupool cannot map: ResourceClaim sweep-0-j7t3r-gpu-c5v8b",
		"is not of the form device.attributes['gpu.nvidia.com'].profile == '<profile>'",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}
