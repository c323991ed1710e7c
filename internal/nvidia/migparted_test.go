package nvidia

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpupool/gpupool/internal/mig"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func on(index int, l mig.Layout) mig.GPUTarget {
	return mig.GPUTarget{Index: index, MIGEnabled: true, Layout: l}
}

func off(index int) mig.GPUTarget { return mig.GPUTarget{Index: index} }

var balanced = mig.Layout{"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 1}

// smallEntries is a two-node example: GPUs 0 and 1 share a layout, GPU 2 serves whole-GPU pods.
func smallEntries() map[string][]mig.GPUTarget {
	return map[string][]mig.GPUTarget{
		"gpupool-6b2d41aa00": {on(1, balanced), on(0, balanced), off(2), on(3, mig.Layout{"1g.18gb": 7, "1g.35gb": 0})},
		"gpupool-0c11f00d00": {on(0, mig.Layout{}), on(1, mig.Layout{"7g.141gb": 1})},
	}
}

func TestMIGPartedConfigGolden(t *testing.T) {
	got, err := MIGPartedConfig(smallEntries())
	if err != nil {
		t.Fatalf("MIGPartedConfig: %v", err)
	}
	golden := filepath.Join("testdata", "small.yaml")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if string(got) != string(want) {
		t.Errorf("rendered config differs from %s:\n%s", golden, got)
	}
	again, err := MIGPartedConfig(smallEntries())
	if err != nil || string(again) != string(got) {
		t.Errorf("second rendering differs: %v\n%s", err, again)
	}
}

func TestMIGPartedConfigRoundTrip(t *testing.T) {
	entries := smallEntries()
	data, err := MIGPartedConfig(entries)
	if err != nil {
		t.Fatalf("MIGPartedConfig: %v", err)
	}
	cfg, err := ParseMIGPartedConfig(data)
	if err != nil {
		t.Fatalf("parsing rendered config: %v\n%s", err, data)
	}
	if len(cfg.MIGConfigs) != len(entries)+1 {
		t.Errorf("got entries %v, want all-disabled plus %d", sortedNames(cfg.MIGConfigs), len(entries))
	}
	if !reflect.DeepEqual(cfg.MIGConfigs[AllDisabled], allDisabledSpecs()) {
		t.Errorf("all-disabled = %+v", cfg.MIGConfigs[AllDisabled])
	}
	for name, targets := range entries {
		want, err := DeviceSpecs(targets)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cfg.MIGConfigs[name], want) {
			t.Errorf("%s parsed as %+v, want %+v", name, cfg.MIGConfigs[name], want)
		}
	}
	back, err := cfg.Marshal()
	if err != nil || string(back) != string(data) {
		t.Errorf("render(parse(x)) != x: %v\n%s", err, back)
	}
}

func TestDeviceSpecs(t *testing.T) {
	cases := []struct {
		name    string
		targets []mig.GPUTarget
		want    []DeviceSpec
	}{
		{
			name:    "consecutive identical GPUs share one spec",
			targets: []mig.GPUTarget{on(2, balanced), on(0, balanced), on(1, balanced)},
			want:    []DeviceSpec{{Devices: Devices{Indexes: []int{0, 1, 2}}, MIGEnabled: true, MIGDevices: balanced}},
		},
		{
			name:    "identical GPUs separated by another stay apart",
			targets: []mig.GPUTarget{on(0, balanced), off(1), on(2, balanced)},
			want: []DeviceSpec{
				{Devices: Devices{Indexes: []int{0}}, MIGEnabled: true, MIGDevices: balanced},
				{Devices: Devices{Indexes: []int{1}}},
				{Devices: Devices{Indexes: []int{2}}, MIGEnabled: true, MIGDevices: balanced},
			},
		},
		{
			name:    "zero counts do not make layouts differ",
			targets: []mig.GPUTarget{on(0, mig.Layout{"1g.18gb": 7}), on(1, mig.Layout{"1g.18gb": 7, "2g.35gb": 0})},
			want:    []DeviceSpec{{Devices: Devices{Indexes: []int{0, 1}}, MIGEnabled: true, MIGDevices: map[string]int{"1g.18gb": 7}}},
		},
		{
			name:    "MIG on without instances keeps an empty set",
			targets: []mig.GPUTarget{on(0, nil), off(1), off(2)},
			want: []DeviceSpec{
				{Devices: Devices{Indexes: []int{0}}, MIGEnabled: true, MIGDevices: map[string]int{}},
				{Devices: Devices{Indexes: []int{1, 2}}},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DeviceSpecs(tc.targets)
			if err != nil {
				t.Fatalf("DeviceSpecs: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestDeviceSpecsErrors(t *testing.T) {
	cases := []struct {
		name    string
		targets []mig.GPUTarget
		want    string
	}{
		{"no GPUs", nil, "no GPUs"},
		{"duplicate index", []mig.GPUTarget{on(0, balanced), off(0)}, "GPU 0 listed twice"},
		{"negative index", []mig.GPUTarget{off(-1)}, "negative"},
		{"layout on a MIG-off GPU", []mig.GPUTarget{{Index: 0, Layout: balanced}}, "MIG disabled but a layout"},
		{"negative count", []mig.GPUTarget{on(0, mig.Layout{"1g.18gb": -1})}, "negative count"},
		{"bad profile", []mig.GPUTarget{on(0, mig.Layout{"big": 1})}, `invalid MIG profile name "big"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DeviceSpecs(tc.targets)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestMIGPartedConfigErrors(t *testing.T) {
	cases := map[string]string{
		AllDisabled:                          "reserved",
		"":                                   "cannot be a value of label",
		"gpupool-" + strings.Repeat("a", 60): "cannot be a value of label",
		"gpupool-bad/name":                   "cannot be a value of label",
	}
	for name, want := range cases {
		_, err := MIGPartedConfig(map[string][]mig.GPUTarget{name: {off(0)}})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("name %q: error %v, want one containing %q", name, err, want)
		}
	}
	_, err := MIGPartedConfig(map[string][]mig.GPUTarget{"gpupool-x": {off(0), off(0)}})
	if err == nil || !strings.Contains(err.Error(), `entry "gpupool-x": GPU 0 listed twice`) {
		t.Errorf("duplicate GPU: error %v", err)
	}
	data, err := MIGPartedConfig(nil)
	if err != nil || string(data) != "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n" {
		t.Errorf("empty config: %v\n%s", err, data)
	}
}

// nvidiaSample is in the style of the GPU Operator's default config, with a device filter.
const nvidiaSample = `version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false

  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}

  # H100 and H200 only
  all-1g.18gb:
    - device-filter: ["0x233010DE", "0x233510DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.18gb": 7
  custom:
    - device-filter: "0x233510DE"
      devices: [0, 1]
      mig-enabled: true
      mig-devices:
        "3g.71gb": 2
        "1g.18gb+me": 0
    - devices: [2]
      mig-enabled: false
      mig-devices: {}
`

func TestParseMIGPartedConfig(t *testing.T) {
	cfg, err := ParseMIGPartedConfig([]byte(nvidiaSample))
	if err != nil {
		t.Fatalf("parsing NVIDIA-style sample: %v", err)
	}
	want := map[string][]DeviceSpec{
		"all-disabled": {{Devices: Devices{All: true}}},
		"all-enabled":  {{Devices: Devices{All: true}, MIGEnabled: true, MIGDevices: map[string]int{}}},
		"all-1g.18gb": {{DeviceFilter: []string{"0x233010DE", "0x233510DE"}, Devices: Devices{All: true}, MIGEnabled: true,
			MIGDevices: map[string]int{"1g.18gb": 7}}},
		"custom": {
			{DeviceFilter: []string{"0x233510DE"}, Devices: Devices{Indexes: []int{0, 1}}, MIGEnabled: true,
				MIGDevices: map[string]int{"3g.71gb": 2, "1g.18gb+me": 0}},
			{Devices: Devices{Indexes: []int{2}}},
		},
	}
	if cfg.Version != ConfigVersion || !reflect.DeepEqual(cfg.MIGConfigs, want) {
		t.Errorf("parsed %+v\nwant %+v", cfg.MIGConfigs, want)
	}
	// A re-rendered user config means the same to mig-parted.
	out, err := cfg.Marshal()
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	again, err := ParseMIGPartedConfig(out)
	if err != nil || !reflect.DeepEqual(again, cfg) {
		t.Errorf("re-rendered sample parses differently: %v\n%s", err, out)
	}
}

func TestParseMIGPartedConfigRejects(t *testing.T) {
	const head = "version: v1\nmig-configs:\n  x:\n"
	cases := []struct {
		name, yaml, want string
	}{
		{"empty", "", "not a mapping"},
		{"a list", "- 1\n", "not a mapping"},
		{"not YAML", "version: [", "parsing mig-parted config"},
		{"unknown top-level field", "version: v1\nmig-configs:\n  x: [{devices: all, mig-enabled: false}]\nextra: 1\n", `unexpected field "extra"`},
		{"field names are case-sensitive", "Version: v1\n", `unexpected field "Version"`},
		{"missing version", "mig-configs:\n  x: [{devices: all, mig-enabled: false}]\n", "unknown version"},
		{"other version", "version: v2\nmig-configs:\n  x: [{devices: all, mig-enabled: false}]\n", `unknown version "v2"`},
		{"no entries", "version: v1\nmig-configs: {}\n", "at least one entry"},
		{"missing mig-configs", "version: v1\n", "at least one entry"},
		{"empty entry", head + "    []\n", "at least one item"},
		{"unknown spec field", head + "    - {devices: all, mig-enabled: false, placement: 0}\n", "placement: unexpected field"},
		{"missing devices", head + "    - {mig-enabled: false}\n", `missing required field "devices"`},
		{"missing mig-enabled", head + "    - {devices: all}\n", `missing required field "mig-enabled"`},
		{"null mig-enabled", head + "    - {devices: all, mig-enabled: null}\n", "must not be null"},
		{"devices word", head + "    - {devices: some, mig-enabled: false}\n", `invalid value "some"`},
		{"devices number", head + "    - {devices: 0, mig-enabled: false}\n", "must be all or a list"},
		{"negative index", head + "    - {devices: [-1], mig-enabled: false}\n", "negative GPU index"},
		{"devices on a MIG-off GPU", head + "    - {devices: all, mig-enabled: false, mig-devices: {1g.18gb: 1}}\n", "mig-enabled is false"},
		{"MIG on without devices", head + "    - {devices: all, mig-enabled: true}\n", "mig-devices is required"},
		{"bad profile", head + "    - {devices: all, mig-enabled: true, mig-devices: {large: 1}}\n", `invalid MIG profile name "large"`},
		{"negative count", head + "    - {devices: all, mig-enabled: true, mig-devices: {1g.18gb: -1}}\n", "negative count"},
		{"every count zero", head + "    - {devices: all, mig-enabled: true, mig-devices: {1g.18gb: 0, 2g.35gb: 0}}\n", "every count is 0"},
		{"fractional count", head + "    - {devices: all, mig-enabled: true, mig-devices: {1g.18gb: 1.5}}\n", "mig-devices"},
		{"duplicate key", "version: v1\nversion: v1\n", "parsing mig-parted config"},
		{"bad device-filter", head + "    - {devices: all, mig-enabled: false, device-filter: {a: b}}\n", "device-filter"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMIGPartedConfig([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestParseMIGPartedConfigNullMIGDevices(t *testing.T) {
	// mig-parted decodes "mig-devices: null" into no map at all (encoding/json sets a map to nil
	// on null), then refuses it where MIG is enabled: "missing required field 'mig-devices'"
	// (api/spec/v1/spec.go). With MIG disabled nothing is listed, which it accepts.
	_, err := ParseMIGPartedConfig([]byte("version: v1\nmig-configs:\n  x:\n    - {devices: all, mig-enabled: true, mig-devices: null}\n"))
	if err == nil || !strings.Contains(err.Error(), "mig-devices is required") {
		t.Errorf("MIG on with null mig-devices: error %v, want mig-parted's refusal", err)
	}
	cfg, err := ParseMIGPartedConfig([]byte("version: v1\nmig-configs:\n  x:\n    - {devices: all, mig-enabled: false, mig-devices: null}\n"))
	if err != nil {
		t.Fatalf("MIG off with null mig-devices: %v", err)
	}
	if got := cfg.MIGConfigs["x"][0].MIGDevices; got != nil {
		t.Errorf("mig-devices = %#v, want none", got)
	}
}

func mustRender(t *testing.T, c Config) []byte {
	t.Helper()
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func specsFor(t *testing.T, targets ...mig.GPUTarget) []DeviceSpec {
	t.Helper()
	s, err := DeviceSpecs(targets)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestUpdateConfig(t *testing.T) {
	user := []DeviceSpec{{DeviceFilter: []string{"0x233510DE"}, Devices: Devices{All: true}, MIGEnabled: true, MIGDevices: map[string]int{"1g.18gb": 7}}}
	userAllDisabled := []DeviceSpec{{Devices: Devices{Indexes: []int{0, 1, 2, 3, 4, 5, 6, 7}}}}
	current := mustRender(t, Config{Version: ConfigVersion, MIGConfigs: map[string][]DeviceSpec{
		AllDisabled:        userAllDisabled,
		"all-1g.18gb":      user,
		"gpupool":          user, // no dash: not gpupool's
		"gpupool-old":      specsFor(t, on(0, balanced)),
		"gpupool-used":     specsFor(t, on(0, mig.Layout{"7g.141gb": 1})),
		"gpupool-regroup":  {{Devices: Devices{Indexes: []int{1}}, MIGEnabled: true, MIGDevices: balanced}, {Devices: Devices{Indexes: []int{0}}, MIGEnabled: true, MIGDevices: balanced}},
		"gpupool-readding": specsFor(t, off(0)),
	}})

	cases := []struct {
		name      string
		current   []byte
		add       map[string][]mig.GPUTarget
		inUse     []string
		wantNames []string
		wantErr   string
	}{
		{
			name:      "from nothing",
			add:       map[string][]mig.GPUTarget{"gpupool-new": {on(0, balanced)}},
			wantNames: []string{AllDisabled, "gpupool-new"},
		},
		{
			name:      "garbage-collects unused gpupool entries, keeps the user's and those in use",
			current:   current,
			add:       map[string][]mig.GPUTarget{"gpupool-new": {on(0, balanced)}},
			inUse:     []string{"gpupool-used", "all-1g.18gb", "gpupool-missing"},
			wantNames: []string{AllDisabled, "all-1g.18gb", "gpupool", "gpupool-new", "gpupool-used"},
		},
		{
			name:      "re-adding an entry with the same layout, grouped differently, is fine",
			current:   current,
			add:       map[string][]mig.GPUTarget{"gpupool-regroup": {on(0, balanced), on(1, balanced)}, "gpupool-readding": {off(0)}},
			wantNames: []string{AllDisabled, "all-1g.18gb", "gpupool", "gpupool-readding", "gpupool-regroup"},
		},
		{
			name:    "an entry never changes content",
			current: current,
			add:     map[string][]mig.GPUTarget{"gpupool-used": {on(0, balanced)}},
			inUse:   []string{"gpupool-used"},
			wantErr: `entry "gpupool-used" already exists with another layout`,
		},
		{
			name:    "an unused entry never changes content either",
			current: current,
			add:     map[string][]mig.GPUTarget{"gpupool-old": {off(0)}},
			wantErr: `entry "gpupool-old" already exists with another layout`,
		},
		{
			name:    "gpupool writes only its own names",
			current: current,
			add:     map[string][]mig.GPUTarget{"all-1g.18gb": {off(0)}},
			wantErr: `"all-1g.18gb": gpupool only writes entries named gpupool-*`,
		},
		{
			name:    "a file that is no mig-parted config is not overwritten",
			current: []byte("version: v2\nmig-configs:\n  x: [{devices: all, mig-enabled: false}]\n"),
			wantErr: "reading the current mig-parted config",
		},
		{
			name:    "a file that is not even YAML is not overwritten",
			current: []byte("version: v1\nmig-configs: [\n"),
			wantErr: "reading the current mig-parted config",
		},
		{
			name:    "a bad new entry is an error",
			add:     map[string][]mig.GPUTarget{"gpupool-bad": {off(0), off(0)}},
			wantErr: `entry "gpupool-bad": GPU 0 listed twice`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := UpdateConfig(tc.current, tc.add, tc.inUse, nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("UpdateConfig: %v", err)
			}
			cfg, err := ParseMIGPartedConfig(out)
			if err != nil {
				t.Fatalf("result does not parse: %v\n%s", err, out)
			}
			if _, ok := cfg.MIGConfigs[AllDisabled]; !ok {
				t.Errorf("no %s entry:\n%s", AllDisabled, out)
			}
			if got := sortedNames(cfg.MIGConfigs); !reflect.DeepEqual(got, tc.wantNames) {
				t.Errorf("entries %v, want %v", got, tc.wantNames)
			}
			for name, targets := range tc.add {
				if specsKey(cfg.MIGConfigs[name]) != specsKey(specsFor(t, targets...)) {
					t.Errorf("%s holds %+v", name, cfg.MIGConfigs[name])
				}
			}
			if tc.current != nil {
				// The user's entries keep their content, all-disabled included.
				old, _ := ParseMIGPartedConfig(tc.current)
				for _, name := range []string{AllDisabled, "all-1g.18gb", "gpupool"} {
					if !reflect.DeepEqual(cfg.MIGConfigs[name], old.MIGConfigs[name]) {
						t.Errorf("user entry %s changed to %+v", name, cfg.MIGConfigs[name])
					}
				}
			}
			// Same inputs again: same bytes, so the ConfigMap is not rewritten.
			again, err := UpdateConfig(out, tc.add, tc.inUse, nil)
			if err != nil || string(again) != string(out) {
				t.Errorf("second update differs: %v\n%s\nthen\n%s", err, out, again)
			}
		})
	}
}

func FuzzParseMIGPartedConfig(f *testing.F) {
	f.Add([]byte(nvidiaSample))
	if data, err := MIGPartedConfig(smallEntries()); err == nil {
		f.Add(data)
	}
	f.Add([]byte("version: v1\nmig-configs:\n  x: [{devices: [0], mig-enabled: true, mig-devices: null}]\n"))
	f.Add([]byte("version: v1\nmig-configs:\n  \"yes\": [{devices: all, device-filter: [], mig-enabled: false}]\n"))
	f.Add([]byte("version: [\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseMIGPartedConfig(data)
		if err != nil {
			return
		}
		// Whatever parses renders, and reads back as the same config.
		out, err := cfg.Marshal()
		if err != nil {
			t.Fatalf("parsed config does not render: %v", err)
		}
		again, err := ParseMIGPartedConfig(out)
		if err != nil {
			t.Fatalf("rendered config does not parse: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(again, cfg) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v\n%s", cfg, again, out)
		}
	})
}

// TestUpdateConfigKeepsEntriesItCannotReadVerbatim guards the GPU Operator contract for the
// nodes outside the pool: an entry in a form NVIDIA's parser accepts and gpupool's does not
// (a Blackwell profile with attributes) is kept as it was, and an entry a node's label names
// that the ConfigMap lacks comes from NVIDIA's default config.
func TestUpdateConfigKeepsEntriesItCannotReadVerbatim(t *testing.T) {
	current := []byte(`version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  rtx-gfx:
    - device-filter: ["0x2BB510DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.24gb+me,gfx": 4
`)
	defaults := []byte(`version: v1
mig-configs:
  all-1g.10gb:
    - device-filter: ["0x20B010DE", "0x20B110DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices: {}
`)
	out, err := UpdateConfig(current, map[string][]mig.GPUTarget{"gpupool-new": {on(0, balanced)}},
		[]string{"rtx-gfx", "all-1g.10gb"}, defaults)
	if err != nil {
		t.Fatalf("UpdateConfig: %v", err)
	}
	js, err := yaml.YAMLToJSON(out)
	if err != nil {
		t.Fatalf("result is not YAML: %v\n%s", err, out)
	}
	var got struct {
		MIGConfigs map[string][]map[string]any `json:"mig-configs"`
	}
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatalf("result: %v", err)
	}
	if d := got.MIGConfigs["rtx-gfx"]; len(d) != 1 || d[0]["mig-devices"].(map[string]any)["1g.24gb+me,gfx"] != float64(4) {
		t.Errorf("rtx-gfx not kept verbatim: %v\n%s", d, out)
	}
	if d := got.MIGConfigs["all-1g.10gb"]; len(d) != 1 || d[0]["mig-devices"].(map[string]any)["1g.5gb"] != float64(7) {
		t.Errorf("all-1g.10gb not taken from NVIDIA's defaults: %v\n%s", d, out)
	}
	if _, ok := got.MIGConfigs["all-balanced"]; ok {
		t.Errorf("all-balanced copied although no node names it:\n%s", out)
	}
	if _, ok := got.MIGConfigs["gpupool-new"]; !ok {
		t.Errorf("gpupool-new missing:\n%s", out)
	}
	again, err := UpdateConfig(out, map[string][]mig.GPUTarget{"gpupool-new": {on(0, balanced)}},
		[]string{"rtx-gfx", "all-1g.10gb"}, defaults)
	if err != nil || string(again) != string(out) {
		t.Errorf("second update differs: %v\n%s\nthen\n%s", err, out, again)
	}
}

// TestEntryNames guards gpupool's entry names: derived from what they name, so the same layout
// (or plan and layout) always gets the same name, written in the form the RepartitionPlan CRD
// admits; the pinned values guard that names already on nodes keep their meaning.
func TestEntryNames(t *testing.T) {
	name := MIGConfigName([]mig.GPUTarget{on(0, mig.Layout{"1g.18gb": 7}), off(1)})
	if name != "gpupool-bd539ec618" {
		t.Errorf("MIGConfigName = %q, want gpupool-bd539ec618", name)
	}
	if a, b := MIGConfigName([]mig.GPUTarget{on(0, mig.Layout{"1g.18gb": 7})}), MIGConfigName([]mig.GPUTarget{on(0, mig.Layout{"3g.71gb": 2})}); a == b {
		t.Errorf("two layouts share the entry %s", a)
	}
	if a, b := MIGConfigName([]mig.GPUTarget{on(0, nil)}), MIGConfigName([]mig.GPUTarget{off(0)}); a == b {
		t.Errorf("MIG on with no instance shares the entry %s with MIG off", a)
	}
	if got := PlanEntryName("gpupool-0123456789", "pool-a-20261129-a0a0a0a0"); got != "gpupool-437ad252ad" {
		t.Errorf("PlanEntryName = %q, want gpupool-437ad252ad", got)
	}
	if PlanEntryName("gpupool-0123456789", "plan-a") == PlanEntryName("gpupool-0123456789", "plan-b") {
		t.Errorf("two plans share an entry for one layout")
	}
	if a, b := MIGConfigName([]mig.GPUTarget{off(1), on(0, mig.Layout{"1g.18gb": 7})}), name; a != b {
		t.Errorf("the same node listed in another order is named %s, not %s", a, b)
	}
	targets := []mig.GPUTarget{on(0, mig.Layout{"1g.18gb": 7}), off(1)}
	if got, want := StepEntryName(targets, "plan-a"), PlanEntryName(name, "plan-a"); got != want {
		t.Errorf("StepEntryName = %s, want the plan's name for the layout, %s", got, want)
	}
}

// Blackwell's profile kinds reach mig-parted as NVIDIA spells them (config-default.yaml:
// "1g.24gb+gfx", "1g.24gb-me", "1g.24gb+me.all"): the written entry reads back, with a
// generic YAML decoder, under exactly those names.
func TestUpdateConfigWritesTheNewProfileKindsVerbatim(t *testing.T) {
	layout := mig.Layout{"2g.48gb-me": 1, "1g.24gb+me.all": 1, "1g.24gb-me": 1}
	gfx := mig.Layout{"2g.48gb+gfx": 1, "1g.24gb+gfx": 2}
	out, err := UpdateConfig(nil, map[string][]mig.GPUTarget{"gpupool-rtx": {on(0, layout), on(1, gfx)}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		MIGConfigs map[string][]struct {
			Devices    any            `json:"devices"` // "all" in NVIDIA's all-disabled entry
			MIGDevices map[string]int `json:"mig-devices"`
		} `json:"mig-configs"`
	}
	if err := yaml.Unmarshal(out, &file); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	specs := file.MIGConfigs["gpupool-rtx"]
	if len(specs) != 2 {
		t.Fatalf("entry %+v, want one spec per GPU\n%s", specs, out)
	}
	for i, want := range []mig.Layout{layout, gfx} {
		if got := mig.Layout(specs[i].MIGDevices); !got.Equal(want) || fmt.Sprint(specs[i].Devices) != fmt.Sprintf("[%d]", i) {
			t.Errorf("spec %d: devices %v, mig-devices %v; want [%d], %v", i, specs[i].Devices, got, i, want)
		}
	}
	if _, err := ParseMIGPartedConfig(out); err != nil {
		t.Errorf("gpupool's own strict reader refuses it: %v", err)
	}
}

// TestHasEntryReadsOnlyTheNamedEntry: a step waits until the ConfigMap holds its entry, so the
// check must not depend on entries gpupool neither wrote nor can read. Here the user's entry
// uses what NVIDIA's parser accepts and gpupool's does not (a comma attribute, a null
// mig-enabled); the whole-file parse refuses it, the entry check must not.
func TestHasEntryReadsOnlyTheNamedEntry(t *testing.T) {
	current := []byte(`version: v1
mig-configs:
  rtx-gfx:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.24gb+me,gfx": 4
  off-by-null:
    - devices: all
      mig-enabled: null
`)
	out, err := UpdateConfig(current, map[string][]mig.GPUTarget{"gpupool-new": {on(0, balanced)}}, []string{"rtx-gfx", "off-by-null"}, nil)
	if err != nil {
		t.Fatalf("UpdateConfig: %v", err)
	}
	if _, err := ParseMIGPartedConfig(out); err == nil {
		t.Fatal("the whole-file parse accepts the user's entries: the case no longer shows what it guards")
	}
	for _, tc := range []struct {
		name string
		data []byte
		want bool
	}{
		{"gpupool-new", out, true},
		{"gpupool-other", out, false},
		{"gpupool-new", bytes.Replace(out, []byte("version: v1"), []byte("version: v2"), 1), false},
		{"gpupool-new", []byte("not: [yaml"), false},
		{"gpupool-new", nil, false},
		{"gpupool-bad", []byte("version: v1\nmig-configs:\n  gpupool-bad:\n    - devices: all\n"), false},
		{"gpupool-empty", []byte("version: v1\nmig-configs:\n  gpupool-empty: []\n"), false},
	} {
		if got := HasEntry(tc.data, tc.name); got != tc.want {
			t.Errorf("HasEntry(%s) = %t, want %t\n%s", tc.name, got, tc.want, tc.data)
		}
	}
}
