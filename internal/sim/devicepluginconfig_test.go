package sim

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// sharingConfig writes, by hand in NVIDIA's format, a device plugin config sharing the given
// resources with r replicas and renameByDefault, in section ("timeSlicing" or "mps").
func sharingConfig(section string, r int, resources ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  %s:\n    renameByDefault: true\n    resources:\n", section)
	for _, name := range resources {
		fmt.Fprintf(&b, "    - name: %s\n      replicas: %d\n", name, r)
	}
	return b.String()
}

func timeSlicing(r int, resources ...string) string {
	return sharingConfig("timeSlicing", r, resources...)
}
func mps(r int, resources ...string) string { return sharingConfig("mps", r, resources...) }

// mustRun decodes a config written by hand into a plugin run under the mixed strategy.
func mustRun(t *testing.T, config string) *pluginRun {
	t.Helper()
	f, err := decodeDevicePluginConfig([]byte(config))
	if err != nil {
		t.Fatalf("decodeDevicePluginConfig(%q): %v", config, err)
	}
	return &pluginRun{key: "test", strategy: migStrategyMixed, file: f}
}

// The device plugin's config files as NVIDIA documents them decode to the sharing they ask for;
// unknown fields are ignored (the plugin reads its file with sigs.k8s.io/yaml's non-strict
// Unmarshal), an empty version means v1, names get the nvidia.com/ prefix, MPS wins over
// time-slicing, and failRequestsGreaterThanOne defaults to true under MPS only.
func TestDecodeDevicePluginConfig(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name, config       string
		want               devicePluginFile
		strategy           string
		failGreaterThanOne bool
	}{
		{name: "empty file", config: "", want: devicePluginFile{Version: "v1"}, strategy: sharingNone},
		{name: "flags only", config: "version: v1\nflags:\n  migStrategy: mixed\n",
			want: devicePluginFile{Version: "v1", MIGStrategy: ptrTo("mixed")}, strategy: sharingNone},
		{name: "unknown fields are ignored", config: "version: v1\nflags: {migStrategy: none, somethingNew: 1}\nfuture: {a: b}\n",
			want: devicePluginFile{Version: "v1", MIGStrategy: ptrTo("none")}, strategy: sharingNone},
		{name: "NVIDIA's time-slicing example", config: `
version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    renameByDefault: false
    failRequestsGreaterThanOne: false
    resources:
    - name: nvidia.com/gpu
      replicas: 10
`, want: devicePluginFile{Version: "v1", MIGStrategy: ptrTo("none"), TimeSlicing: &replicatedResources{
			FailRequestsGreaterThanOne: &no, Resources: []replicatedResource{{Name: "nvidia.com/gpu", Replicas: 10}}}},
			strategy: sharingTimeSlicing},
		{name: "MIG resources, short names, devices and rename", config: `
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: mig-1g.18gb
      replicas: 2
      devices: ["0:1", 3, "GPU-8a5ab2b2-7ad6-4bd4-9c4d-2f7f0c0bd1a2"]
    - name: nvidia.com/mig-3g.71gb
      replicas: 3
      rename: shared-3g
      devices: 2
`, want: devicePluginFile{Version: "v1", TimeSlicing: &replicatedResources{RenameByDefault: true, Resources: []replicatedResource{
			{Name: "nvidia.com/mig-1g.18gb", Replicas: 2}, {Name: "nvidia.com/mig-3g.71gb", Rename: "nvidia.com/shared-3g", Replicas: 3}}}},
			strategy: sharingTimeSlicing},
		{name: "MPS defaults failRequestsGreaterThanOne to true", config: mps(4, "nvidia.com/gpu"),
			want: devicePluginFile{Version: "v1", MIGStrategy: ptrTo("mixed"), MPS: &replicatedResources{RenameByDefault: true,
				Resources: []replicatedResource{{Name: "nvidia.com/gpu", Replicas: 4}}}},
			strategy: sharingMPS, failGreaterThanOne: true},
		{name: "MPS wins over time-slicing", config: `
version: v1
sharing:
  timeSlicing: {resources: [{name: gpu, replicas: 2}]}
  mps: {failRequestsGreaterThanOne: false, resources: [{name: gpu, replicas: 3}]}
`, want: devicePluginFile{Version: "v1",
			TimeSlicing: &replicatedResources{Resources: []replicatedResource{{Name: "nvidia.com/gpu", Replicas: 2}}},
			MPS:         &replicatedResources{FailRequestsGreaterThanOne: &no, Resources: []replicatedResource{{Name: "nvidia.com/gpu", Replicas: 3}}}},
			strategy: sharingMPS},
		{name: "mps: null is no MPS", config: "version: v1\nsharing:\n  mps: null\n", want: devicePluginFile{Version: "v1"}, strategy: sharingNone},
		{name: "time-slicing asks for failRequestsGreaterThanOne", config: `
sharing:
  timeSlicing:
    failRequestsGreaterThanOne: true
    resources: [{name: gpu, replicas: 2}]
`, want: devicePluginFile{Version: "v1", TimeSlicing: &replicatedResources{FailRequestsGreaterThanOne: &yes,
			Resources: []replicatedResource{{Name: "nvidia.com/gpu", Replicas: 2}}}},
			strategy: sharingTimeSlicing, failGreaterThanOne: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeDevicePluginConfig([]byte(tc.config))
			if err != nil {
				t.Fatalf("decodeDevicePluginConfig: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("decodeDevicePluginConfig =\n%s\nwant\n%s", dump(got), dump(tc.want))
			}
			if s := got.sharingStrategy(); s != tc.strategy {
				t.Errorf("sharingStrategy = %s, want %s", s, tc.strategy)
			}
			if f := got.failRequestsGreaterThanOne(); f != tc.failGreaterThanOne {
				t.Errorf("failRequestsGreaterThanOne = %t, want %t", f, tc.failGreaterThanOne)
			}
		})
	}
}

func dump(f devicePluginFile) string {
	s := fmt.Sprintf("%+v", f)
	for _, rr := range []*replicatedResources{f.TimeSlicing, f.MPS} {
		if rr != nil {
			s += fmt.Sprintf("\n  %+v", *rr)
		}
	}
	return s
}

// What NVIDIA's decoders refuse, the simulated device plugin refuses.
func TestDecodeDevicePluginConfigRefusals(t *testing.T) {
	for _, tc := range []struct{ name, config, want string }{
		{"other version", "version: v2\n", "unknown version: v2"},
		{"not a mapping", "[a, b]\n", "unmarshal error"},
		{"sharing not a mapping", "version: v1\nsharing: [not, a, map]\n", "sharing"},
		{"migStrategy not a string", "flags: {migStrategy: [mixed]}\n", "flags.migStrategy"},
		{"no resources", "sharing:\n  timeSlicing: {renameByDefault: true}\n", "no resources specified"},
		{"empty resources", "sharing:\n  timeSlicing: {resources: []}\n", "no resources specified"},
		{"timeSlicing: null", "sharing:\n  timeSlicing: null\n", "no resources specified"},
		{"no name", "sharing:\n  timeSlicing: {resources: [{replicas: 2}]}\n", "no resource name specified"},
		{"no replicas", "sharing:\n  timeSlicing: {resources: [{name: gpu}]}\n", "no replicas specified"},
		{"one replica", "sharing:\n  mps: {resources: [{name: gpu, replicas: 1}]}\n", "number of replicas must be >= 2"},
		{"replicas not a number", "sharing:\n  timeSlicing: {resources: [{name: gpu, replicas: two}]}\n", "replicas"},
		{"bad resource name", "sharing:\n  timeSlicing: {resources: [{name: GPU_X, replicas: 2}]}\n", "incorrect format for resource name"},
		{"long resource name", "sharing:\n  timeSlicing: {resources: [{name: " + strings.Repeat("a", 60) + ", replicas: 2}]}\n", "63 characters or less"},
		{"devices word", "sharing:\n  timeSlicing: {resources: [{name: gpu, replicas: 2, devices: some}]}\n", "only valid string input is 'all'"},
		{"devices count", "sharing:\n  timeSlicing: {resources: [{name: gpu, replicas: 2, devices: 0}]}\n", "must be > 0"},
		{"devices item", "sharing:\n  timeSlicing: {resources: [{name: gpu, replicas: 2, devices: [gpu0]}]}\n", "unsupported type for device"},
		{"renameByDefault not a bool", "sharing:\n  timeSlicing: {renameByDefault: sure, resources: [{name: gpu, replicas: 2}]}\n", "renameByDefault"},
		{"resources without pattern", "resources:\n  gpus: [{name: gpu}]\n", "'pattern' field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeDevicePluginConfig([]byte(tc.config))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("decodeDevicePluginConfig = %+v, %v; want an error containing %q", got, err, tc.want)
			}
		})
	}
}
