package nvidia

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
)

// entryJSON is the named entry of a mig-parted config as compact JSON, "" when the config has
// no such entry: what the file says, however it was rendered.
func entryJSON(t *testing.T, data []byte, name string) string {
	t.Helper()
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatalf("not YAML: %v\n%s", err, data)
	}
	var top struct {
		MIGConfigs map[string]json.RawMessage `json:"mig-configs"`
	}
	if err := json.Unmarshal(js, &top); err != nil {
		t.Fatalf("not a mig-parted config: %v\n%s", err, data)
	}
	raw, ok := top.MIGConfigs[name]
	if !ok {
		return ""
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// renderedEntry is how gpupool writes an entry for targets, as compact JSON.
func renderedEntry(t *testing.T, name string, targets ...mig.GPUTarget) string {
	t.Helper()
	return entryJSON(t, mustRender(t, Config{Version: ConfigVersion, MIGConfigs: map[string][]DeviceSpec{name: specsFor(t, targets...)}}), name)
}

func TestDesiredOperatorConfig(t *testing.T) {
	const plan = "pool-a-20261205-abcdef01"
	target := []mig.GPUTarget{on(0, mig.Layout{"3g.71gb": 2}), off(1)}
	entry := StepEntryName(target, plan)
	// A second step of the same plan, on another node, not yet past its drain.
	otherTarget := []mig.GPUTarget{on(0, mig.Layout{"1g.18gb": 7})}
	other := StepEntryName(otherTarget, plan)
	// An entry of a finished plan that some node may still wear.
	finished := StepEntryName([]mig.GPUTarget{on(0, balanced)}, "pool-a-20261201-00000000")
	// Two GPUs with one layout: gpupool writes them as one spec.
	pairTarget := []mig.GPUTarget{on(0, balanced), on(1, balanced)}
	pair := StepEntryName(pairTarget, plan)

	user := []DeviceSpec{{DeviceFilter: []string{"0x233510DE"}, Devices: Devices{All: true}, MIGEnabled: true, MIGDevices: map[string]int{"1g.18gb": 7}}}
	asks := StepConfig{Plan: plan, Node: "gpu-1", MIGConfigName: entry, Write: true, Targets: target}
	waits := StepConfig{Plan: plan, Node: "gpu-2", MIGConfigName: other, Targets: otherTarget}
	withEntries := func(entries map[string][]DeviceSpec) []byte {
		return mustRender(t, Config{Version: ConfigVersion, MIGConfigs: entries})
	}
	defaults := []byte(`version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
  all-1g.18gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.18gb": 7}
`)

	cases := []struct {
		name string
		in   OperatorConfigInput
		// want maps an entry name to its content as compact JSON; "" means absent.
		want         map[string]string
		wantEntries  []string // exactly these entries, when set
		wantProblems []string
	}{
		{
			name:        "from nothing: only the default entries",
			want:        map[string]string{AllDisabled: `[{"devices":"all","mig-enabled":false}]`},
			wantEntries: []string{AllDisabled},
		},
		{
			name:        "a step past its drain gets its entry, the plan's other step not yet",
			in:          OperatorConfigInput{Steps: []StepConfig{asks, waits}},
			want:        map[string]string{entry: renderedEntry(t, entry, target...), other: ""},
			wantEntries: []string{AllDisabled, entry},
		},
		{
			name: "a live plan's entries are kept though no node names them yet",
			in: OperatorConfigInput{Steps: []StepConfig{waits},
				MIGParted: withEntries(map[string][]DeviceSpec{other: specsFor(t, otherTarget...)})},
			want: map[string]string{other: renderedEntry(t, other, otherTarget...)},
		},
		{
			name: "an entry is kept while a node's label names it, its plan long finished",
			in: OperatorConfigInput{MIGConfigLabels: []string{finished},
				MIGParted: withEntries(map[string][]DeviceSpec{finished: specsFor(t, on(0, balanced))})},
			want:        map[string]string{finished: renderedEntry(t, finished, on(0, balanced))},
			wantEntries: []string{AllDisabled, finished},
		},
		{
			name: "while a node stays cordoned by a plan that is gone, no entry is dropped",
			in: OperatorConfigInput{KeepExisting: true,
				MIGParted: withEntries(map[string][]DeviceSpec{finished: specsFor(t, on(0, balanced))})},
			want:        map[string]string{finished: renderedEntry(t, finished, on(0, balanced))},
			wantEntries: []string{AllDisabled, finished},
		},
		{
			name: "a finished plan's entry is dropped once no node names it",
			in: OperatorConfigInput{
				MIGParted: withEntries(map[string][]DeviceSpec{finished: specsFor(t, on(0, balanced)), "all-1g.18gb": user})},
			want:        map[string]string{finished: ""},
			wantEntries: []string{AllDisabled, "all-1g.18gb"},
		},
		{
			name: "the entry a failed step may set back is kept",
			in: OperatorConfigInput{Steps: []StepConfig{{Plan: plan, Node: "gpu-1", MIGConfigName: entry, PreviousMIGConfig: finished}},
				MIGParted: withEntries(map[string][]DeviceSpec{finished: specsFor(t, on(0, balanced))})},
			want: map[string]string{finished: renderedEntry(t, finished, on(0, balanced))},
		},
		{
			name: "the user's entries and all-disabled are kept verbatim, named or not",
			in: OperatorConfigInput{MIGParted: []byte(`version: v1
mig-configs:
  all-disabled:
    - devices: [0, 1]
      mig-enabled: false
  custom-me:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.24gb+me,gfx": 1}
`)},
			want: map[string]string{AllDisabled: `[{"devices":[0,1],"mig-enabled":false}]`,
				"custom-me": `[{"devices":"all","mig-enabled":true,"mig-devices":{"1g.24gb+me,gfx":1}}]`},
			wantEntries: []string{AllDisabled, "custom-me"},
		},
		{
			name: "an entry of NVIDIA's a node names comes from the default config, with its all-disabled",
			in:   OperatorConfigInput{Defaults: defaults, MIGConfigLabels: []string{"all-balanced", AllDisabled}},
			want: map[string]string{"all-balanced": `[{"devices":"all","mig-enabled":true,"mig-devices":{"1g.18gb":2,"2g.35gb":1,"3g.71gb":1}}]`,
				"all-1g.18gb": ""},
			wantEntries: []string{AllDisabled, "all-balanced"},
		},
		{
			name:         "an entry of nobody's a node names is reported",
			in:           OperatorConfigInput{MIGConfigLabels: []string{"all-7g"}},
			wantEntries:  []string{AllDisabled},
			wantProblems: []string{"entry all-7g, which a node's nvidia.com/mig.config names, is in neither"},
		},
		{
			name:         "a gpupool entry a node names that is gone is reported, not made up",
			in:           OperatorConfigInput{MIGConfigLabels: []string{finished}},
			wantEntries:  []string{AllDisabled},
			wantProblems: []string{"entry " + finished + ", which a node's nvidia.com/mig.config names, is gone"},
		},
		{
			name: "the content of an existing entry is never rewritten: grouped otherwise, it stays as it is",
			in: OperatorConfigInput{Steps: []StepConfig{{Plan: plan, Node: "gpu-3", MIGConfigName: pair, Write: true, Targets: pairTarget}},
				MIGParted: withEntries(map[string][]DeviceSpec{pair: {
					{Devices: Devices{Indexes: []int{1}}, MIGEnabled: true, MIGDevices: balanced},
					{Devices: Devices{Indexes: []int{0}}, MIGEnabled: true, MIGDevices: balanced}}})},
			want: map[string]string{pair: `[{"devices":[1],"mig-enabled":true,"mig-devices":{"3g.71gb":1,"2g.35gb":1,"1g.18gb":1}},` +
				`{"devices":[0],"mig-enabled":true,"mig-devices":{"3g.71gb":1,"2g.35gb":1,"1g.18gb":1}}]`},
		},
		{
			name: "the content of an entry nobody can recompute is never rewritten, whatever it holds",
			in: OperatorConfigInput{MIGConfigLabels: []string{finished},
				MIGParted: withEntries(map[string][]DeviceSpec{finished: specsFor(t, off(0), off(1))})},
			want: map[string]string{finished: renderedEntry(t, finished, off(0), off(1))},
		},
		{
			name: "a hand-edited entry a step asks for is written back to what its name means",
			in: OperatorConfigInput{Steps: []StepConfig{asks}, MIGConfigLabels: []string{entry},
				MIGParted: withEntries(map[string][]DeviceSpec{entry: specsFor(t, off(0), off(1))})},
			want: map[string]string{entry: renderedEntry(t, entry, target...)},
		},
		{
			name: "an entry broken by hand is repaired when a step asks for it, kept while a node names it, else dropped",
			in: OperatorConfigInput{Steps: []StepConfig{asks}, MIGConfigLabels: []string{finished},
				MIGParted: []byte("version: v1\nmig-configs:\n  " + entry + ": [{devices: all}]\n  " + finished + ": [{devices: all}]\n  " + other + ": [{devices: all}]\n")},
			want: map[string]string{entry: renderedEntry(t, entry, target...), finished: `[{"devices":"all"}]`, other: ""},
		},
		{
			name: "a step whose target drifted gets no entry: a name always means one content",
			in: OperatorConfigInput{Steps: []StepConfig{{Plan: plan, Node: "gpu-1", MIGConfigName: entry, Write: true,
				Targets: []mig.GPUTarget{on(0, mig.Layout{"3g.71gb": 2}), on(1, mig.Layout{"7g.141gb": 1})}}}},
			wantEntries:  []string{AllDisabled},
			wantProblems: []string{"entry " + entry + " of plan " + plan + "'s step on gpu-1 is not written: the node's target no longer hashes"},
		},
		{
			name:         "a step whose node has no report gets no entry",
			in:           OperatorConfigInput{Steps: []StepConfig{{Plan: plan, Node: "gpu-1", MIGConfigName: entry, Write: true}}},
			wantEntries:  []string{AllDisabled},
			wantProblems: []string{"GPUNode report cannot be read"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DesiredOperatorConfig(tc.in)
			if err != nil {
				t.Fatalf("DesiredOperatorConfig: %v", err)
			}
			if _, err := ParseMIGPartedConfig(got.MIGParted); err != nil && !strings.Contains(tc.name, "broken") && !strings.Contains(tc.name, "verbatim") {
				t.Errorf("mig-manager would refuse the file: %v\n%s", err, got.MIGParted)
			}
			for name, want := range tc.want {
				if want != "" {
					js, err := yaml.YAMLToJSON([]byte(want)) // sorts the keys, as entryJSON reads them
					if err != nil {
						t.Fatal(err)
					}
					want = string(js)
				}
				if have := entryJSON(t, got.MIGParted, name); have != want {
					t.Errorf("entry %s:\n got %s\nwant %s\nin:\n%s", name, have, want, got.MIGParted)
				}
			}
			if tc.wantEntries != nil {
				own, broken, foreign, err := readEntries(got.MIGParted)
				if err != nil {
					t.Fatal(err)
				}
				names := slices.Sorted(maps.Keys(own))
				names = append(append(names, slices.Collect(maps.Keys(broken))...), slices.Collect(maps.Keys(foreign))...)
				slices.Sort(names)
				want := slices.Sorted(slices.Values(tc.wantEntries))
				if !slices.Equal(names, want) {
					t.Errorf("entries %v, want %v", names, want)
				}
			}
			if len(got.Problems) != len(tc.wantProblems) {
				t.Errorf("problems %q, want %d like %q", got.Problems, len(tc.wantProblems), tc.wantProblems)
			}
			for i := range min(len(got.Problems), len(tc.wantProblems)) {
				if !strings.Contains(got.Problems[i], tc.wantProblems[i]) {
					t.Errorf("problem %q, want it to contain %q", got.Problems[i], tc.wantProblems[i])
				}
			}
			// The writer writes only what differs: fed its own output, it wants the same.
			again := tc.in
			again.MIGParted, again.DevicePlugin = got.MIGParted, got.DevicePlugin
			second, err := DesiredOperatorConfig(again)
			if err != nil || !bytes.Equal(second.MIGParted, got.MIGParted) || !reflect.DeepEqual(second.DevicePlugin, got.DevicePlugin) {
				t.Errorf("not a fixed point: %v\n%s\nthen\n%s", err, got.MIGParted, second.MIGParted)
			}
		})
	}
}

// TestDesiredOperatorConfigWritesWhatUpdateConfigWrites holds the writer to the bytes the
// step's own write (UpdateConfig) produces for the same content, so that while both run they
// never undo each other's writes, and the file keeps the form NVIDIA's parser was checked on.
func TestDesiredOperatorConfigWritesWhatUpdateConfigWrites(t *testing.T) {
	const plan = "pool-a-20261205-abcdef01"
	target := []mig.GPUTarget{on(0, mig.Layout{"3g.71gb": 2}), off(1), on(2, balanced), on(3, balanced)}
	entry := StepEntryName(target, plan)
	current := []byte(`version: v1
mig-configs:
  all-1g.18gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.18gb": 7}
  gpupool-0000000000:
    - devices: all
      mig-enabled: false
`)
	want, err := UpdateConfig(current, map[string][]mig.GPUTarget{entry: target}, []string{"gpupool-0000000000"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DesiredOperatorConfig(OperatorConfigInput{MIGParted: current, MIGConfigLabels: []string{"gpupool-0000000000"},
		Steps: []StepConfig{{Plan: plan, Node: "gpu-1", MIGConfigName: entry, Write: true, Targets: target}}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.MIGParted, want) {
		t.Errorf("got\n%s\nUpdateConfig writes\n%s", got.MIGParted, want)
	}
	if !HasEntry(got.MIGParted, entry) {
		t.Errorf("the step would not see its entry:\n%s", got.MIGParted)
	}
}

func TestDesiredOperatorConfigRefusesAFileItCannotRead(t *testing.T) {
	for _, data := range []string{"version: v2\nmig-configs: {}\n", "mig-configs: [", "version: v1\nmig-configs: {}\nextra: 1\n"} {
		if _, err := DesiredOperatorConfig(OperatorConfigInput{MIGParted: []byte(data)}); err == nil {
			t.Errorf("%q: want an error, rewriting it would lose the entries of others", data)
		}
	}
}

func TestDesiredDevicePluginConfig(t *testing.T) {
	ts4 := v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: 4}
	render := func(s v1alpha1.SharingConfig) string {
		data, err := DevicePluginConfig(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	none := render(v1alpha1.SharingConfig{Mode: v1alpha1.SharingNone})
	// The same setting in other bytes: the plugin applies it as gpupool's rendering.
	ts4Other := "version: v1\nflags: {migStrategy: mixed}\nsharing: {timeSlicing: {renameByDefault: true, resources: [{name: nvidia.com/gpu, replicas: 4}]}}\n"
	asks := StepConfig{Plan: "p", Node: "gpu-1", MIGConfigName: "gpupool-0000000000", SharingConfigName: "gpupool-ts-4", Sharing: &ts4, Write: true}

	cases := []struct {
		name         string
		in           OperatorConfigInput
		want         map[string]string
		wantProblems []string
	}{
		{
			name: "from nothing: gpupool-none",
			want: map[string]string{DevicePluginNone: none},
		},
		{
			name: "a step past its drain gets its key; the user's keys stay",
			in:   OperatorConfigInput{Steps: []StepConfig{asks}, DevicePlugin: map[string]string{"user": "anything"}},
			want: map[string]string{DevicePluginNone: none, "gpupool-ts-4": render(ts4), "user": "anything"},
		},
		{
			name: "a step not past its drain: kept where present, not added",
			in: OperatorConfigInput{Steps: []StepConfig{{Plan: "p", Node: "gpu-1", SharingConfigName: "gpupool-ts-4", Sharing: &ts4},
				{Plan: "p", Node: "gpu-2", SharingConfigName: "gpupool-ts-8"}},
				DevicePlugin: map[string]string{"gpupool-ts-8": "whatever"}},
			want: map[string]string{DevicePluginNone: none, "gpupool-ts-8": "whatever"},
		},
		{
			name: "a key applying its setting keeps its bytes; one a node names comes back; an orphan goes",
			in: OperatorConfigInput{SharingLabels: []string{"gpupool-ts-4", "gpupool-mps-2", "user"},
				DevicePlugin: map[string]string{"gpupool-ts-4": ts4Other, "gpupool-ts-8": render(v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: 8})}},
			want: map[string]string{DevicePluginNone: none, "gpupool-ts-4": ts4Other,
				"gpupool-mps-2": render(v1alpha1.SharingConfig{Mode: v1alpha1.SharingMPS, Replicas: 2})},
		},
		{
			name: "a key edited to apply another setting is written back",
			in: OperatorConfigInput{SharingLabels: []string{"gpupool-ts-4"},
				DevicePlugin: map[string]string{"gpupool-ts-4": render(v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: 2}), DevicePluginNone: "broken"}},
			want: map[string]string{DevicePluginNone: none, "gpupool-ts-4": render(ts4)},
		},
		{
			name:         "a step whose setting is not its key's gets nothing written",
			in:           OperatorConfigInput{Steps: []StepConfig{{Plan: "p", Node: "gpu-1", SharingConfigName: "gpupool-ts-8", Sharing: &ts4, Write: true}}},
			want:         map[string]string{DevicePluginNone: none},
			wantProblems: []string{"key gpupool-ts-8 of plan p's step on gpu-1 is not written"},
		},
		{
			name:         "a gpupool key gpupool never writes is kept where it exists, never made up",
			in:           OperatorConfigInput{SharingLabels: []string{"gpupool-odd", "gpupool-gone"}, DevicePlugin: map[string]string{"gpupool-odd": "x"}},
			want:         map[string]string{DevicePluginNone: none, "gpupool-odd": "x"},
			wantProblems: []string{"key gpupool-gone"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DesiredOperatorConfig(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.DevicePlugin, tc.want) {
				t.Errorf("got %v\nwant %v", got.DevicePlugin, tc.want)
			}
			var problems []string
			for _, p := range got.Problems {
				if strings.HasPrefix(p, "key ") {
					problems = append(problems, p)
				}
			}
			if len(problems) != len(tc.wantProblems) {
				t.Fatalf("problems %q, want %q", problems, tc.wantProblems)
			}
			for i := range problems {
				if !strings.Contains(problems[i], tc.wantProblems[i]) {
					t.Errorf("problem %q, want it to contain %q", problems[i], tc.wantProblems[i])
				}
			}
		})
	}
}
