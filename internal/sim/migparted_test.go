package sim

import (
	"reflect"
	"strings"
	"testing"
)

// nvidiaStyle is written by hand in the shape of NVIDIA's own config
// (NVIDIA/mig-parted deployments/systemd/config-default.yaml): entries serving several models
// through device-filter lists, a single-string filter, and the entries the GPU Operator relies
// on.
const nvidiaStyle = `version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false

  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}

  # H100-80GB, H800-80GB, A100-80GB, A800-80GB, A100-40GB, A800-40GB
  all-1g.10gb:
    - device-filter: ["0x233010DE", "0x233110DE", "0x232210DE", "0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE", "0x232410DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7

    - device-filter: ["0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 4

  all-balanced:
    # H200 141GB, H200 NVL
    - device-filter: ["0x233510DE", "0x233B10DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.18gb": 2
        "2g.35gb": 1
        "3g.71gb": 1

    # A30-24GB
    - device-filter: "0x20B710DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.6gb": 2
        "2g.12gb": 1

  all-1g.18gb.me:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.18gb+me": 1

  custom-split:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices:
        "3g.71gb": 2
    - devices: [2]
      mig-enabled: false
`

// NVIDIA-style entries decode as mig-parted reads them.
func TestDecodeMIGParted(t *testing.T) {
	f, err := decodeMIGParted([]byte(nvidiaStyle))
	if err != nil {
		t.Fatalf("decodeMIGParted: %v", err)
	}
	want := map[string][]migConfigSpec{
		"all-disabled": {{AllDevices: true}},
		"all-enabled":  {{AllDevices: true, MIGEnabled: true, MIGDevices: map[string]int{}}},
		"all-1g.10gb": {
			{DeviceFilter: []string{"0x233010DE", "0x233110DE", "0x232210DE", "0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE", "0x232410DE"},
				AllDevices: true, MIGEnabled: true, MIGDevices: map[string]int{"1g.10gb": 7}},
			{DeviceFilter: []string{"0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"},
				AllDevices: true, MIGEnabled: true, MIGDevices: map[string]int{"1g.10gb": 4}},
		},
		"all-balanced": {
			{DeviceFilter: []string{"0x233510DE", "0x233B10DE"}, AllDevices: true, MIGEnabled: true,
				MIGDevices: map[string]int{"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}},
			{DeviceFilter: []string{"0x20B710DE"}, AllDevices: true, MIGEnabled: true, MIGDevices: map[string]int{"1g.6gb": 2, "2g.12gb": 1}},
		},
		"all-1g.18gb.me": {{AllDevices: true, MIGEnabled: true, MIGDevices: map[string]int{"1g.18gb+me": 1}}},
		"custom-split": {
			{Devices: []int{0, 1}, MIGEnabled: true, MIGDevices: map[string]int{"3g.71gb": 2}},
			{Devices: []int{2}},
		},
	}
	if f.Version != "v1" || !reflect.DeepEqual(f.Configs, want) {
		t.Errorf("decodeMIGParted = %+v, want %+v", f.Configs, want)
	}
	if _, err := f.selectMIGConfig("all-balanced"); err != nil {
		t.Error(err)
	}
	if _, err := f.selectMIGConfig("gpupool-missing"); err == nil || !strings.Contains(err.Error(), "selected mig-config not present") {
		t.Errorf("selecting an unknown name: %v, want mig-parted's refusal", err)
	}
}

// Entries select GPUs as mig-parted does: by the PCI ID packed device-then-vendor, with an
// optional subsystem, NVIDIA's own filter lists included; a bare device ID is vendor-less and
// selects nothing, and so does a filter that does not parse.
func TestDeviceFilterMatching(t *testing.T) {
	h200 := migDeviceID{Device: 0x2335, Vendor: 0x10DE, HasSubsystem: true, SubsystemDevice: 0x18BE, SubsystemVendor: 0x10DE}
	h100 := migDeviceID{Device: 0x2330, Vendor: 0x10DE, HasSubsystem: true}
	f, err := decodeMIGParted([]byte(nvidiaStyle))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		spec   migConfigSpec
		hw     migDeviceID
		expect bool
	}{
		{"no filter", f.Configs["all-disabled"][0], h200, true},
		{"H200 in NVIDIA's all-balanced list", f.Configs["all-balanced"][0], h200, true},
		{"H100 not in the H200 list", f.Configs["all-balanced"][0], h100, false},
		{"H100 in NVIDIA's all-1g.10gb list", f.Configs["all-1g.10gb"][0], h100, true},
		{"lower-case hex", migConfigSpec{DeviceFilter: []string{"0x233510de"}}, h200, true},
		{"decimal", migConfigSpec{DeviceFilter: []string{"590680286"}}, h200, true}, // 0x233510DE
		{"bare device ID", migConfigSpec{DeviceFilter: []string{"0x2335"}}, h200, false},
		{"go-nvml's H200 mock ID", migConfigSpec{DeviceFilter: []string{"0x233310DE"}}, h200, false},
		{"subsystem matches", migConfigSpec{DeviceFilter: []string{"0x233510DE:0x18BE10DE"}}, h200, true},
		{"subsystem differs", migConfigSpec{DeviceFilter: []string{"0x233510DE:0x18BF10DE"}}, h200, false},
		{"unparsable", migConfigSpec{DeviceFilter: []string{"H200"}}, h200, false},
		{"empty string in a list", migConfigSpec{DeviceFilter: []string{""}}, h200, false},
	} {
		if got := tc.spec.matchesDeviceFilter(tc.hw); got != tc.expect {
			t.Errorf("%s: matchesDeviceFilter = %t, want %t", tc.name, got, tc.expect)
		}
	}
	one, err := decodeMIGParted([]byte("version: v1\nmig-configs:\n  e:\n  - {device-filter: \"\", devices: all, mig-enabled: false}\n"))
	if err != nil || !one.Configs["e"][0].matchesDeviceFilter(h100) {
		t.Errorf("device-filter \"\" as a string must filter nothing: %+v, %v", one.Configs, err)
	}
	spec := f.Configs["custom-split"][0]
	for i, want := range []bool{true, true, false} {
		if got := spec.matchesDevice(i); got != want {
			t.Errorf("devices [0, 1] matches GPU %d = %t, want %t", i, got, want)
		}
	}
}

// What mig-parted's decoders refuse, the simulated mig-manager refuses.
func TestDecodeMIGPartedRefusals(t *testing.T) {
	entry := func(item string) string { return "version: v1\nmig-configs:\n  e:\n  - " + item + "\n" }
	for _, tc := range []struct{ name, config, want string }{
		{"empty file", "", "unknown version"},
		{"no version", "mig-configs:\n  e:\n  - {devices: all, mig-enabled: false}\n", "missing 'version' field"},
		{"other version", "version: v2\nmig-configs: {}\n", "unknown version: v2"},
		{"unknown top-level field", "version: v1\nmig-configs:\n  e:\n  - {devices: all, mig-enabled: false}\nextra: 1\n", "unexpected field: extra"},
		{"no entries", "version: v1\nmig-configs: {}\n", "at least one entry in 'mig-configs'"},
		{"empty entry", "version: v1\nmig-configs:\n  e: []\n", "at least one entry in 'e'"},
		{"unknown field in a spec", entry("{devices: all, mig-enabled: false, placement: 0}"), "unexpected field: placement"},
		{"misspelt field", entry(`{devices: all, mig-enabled: true, mig-device: {"1g.10gb": 1}}`), "unexpected field: mig-device"},
		{"no devices", entry("{mig-enabled: false}"), "missing required field: devices"},
		{"no mig-enabled", entry("{devices: all}"), "missing required field: mig-enabled"},
		{"devices word", entry("{devices: some, mig-enabled: false}"), "invalid string input for 'devices'"},
		{"devices null", entry("{devices: null, mig-enabled: false}"), "invalid string input for 'devices'"},
		{"devices not ints", entry("{devices: [0.5], mig-enabled: false}"), "devices"},
		{"mig-enabled not a bool", entry("{devices: all, mig-enabled: \"yes\"}"), "mig-enabled"},
		{"device-filter numbers", entry("{device-filter: [1, 2], devices: all, mig-enabled: false}"), "device-filter"},
		{"negative count", entry(`{devices: all, mig-enabled: true, mig-devices: {"1g.10gb": -1}}`), "invalid count"},
		{"only zero counts", entry(`{devices: all, mig-enabled: true, mig-devices: {"1g.10gb": 0}}`), "all counts for all MigProfiles are 0"},
		{"bad profile", entry(`{devices: all, mig-enabled: true, mig-devices: {"1g": 1}}`), "invalid format for '1g'"},
		{"bad attribute", entry(`{devices: all, mig-enabled: true, mig-devices: {"1g.10gb+9x": 1}}`), "attribute begins with a number"},
		{"both attribute signs", entry(`{devices: all, mig-enabled: true, mig-devices: {"1g.10gb+me-x": 1}}`), "both"},
		{"MIG on without devices", entry("{devices: all, mig-enabled: true}"), "missing required field 'mig-devices'"},
		{"MIG on, devices null", entry("{devices: all, mig-enabled: true, mig-devices: null}"), "missing required field 'mig-devices'"},
		{"MIG off with devices", entry(`{devices: all, mig-enabled: false, mig-devices: {"1g.10gb": 1}}`), "MIG devices included"},
		{"a spec that is not a mapping", entry("all"), "cannot unmarshal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeMIGParted([]byte(tc.config))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("decodeMIGParted = %+v, %v; want an error containing %q", got, err, tc.want)
			}
		})
	}
}

// mig-parted's profile syntax: [<c>c.]<g>g.<gb>gb with attributes after + or -.
func TestCheckProfileName(t *testing.T) {
	for _, ok := range []string{"1g.10gb", "7g.141gb", "1c.2g.20gb", "1g.18gb+me", "1g.24gb+me.all", "1g.24gb-me", "1g.24gb+gfx", "2g.48gb+me,gfx"} {
		if err := checkProfileName(ok); err != nil {
			t.Errorf("checkProfileName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "1g", "g.10gb", "1g.10", "1x.1g.10gb", "1g.10gb+", "1g.10gb+me,me", "1g.10gb+.me", "1g.10gb+m_e", "1g.10gb.4c.x"} {
		if err := checkProfileName(bad); err == nil {
			t.Errorf("checkProfileName(%q) = nil, want an error", bad)
		}
	}
}

// The simulator writes seeded entries in a form its own decoder (and so mig-parted) reads back.
func TestEncodeMIGPartedRoundTrip(t *testing.T) {
	f, err := decodeMIGParted([]byte(nvidiaStyle))
	if err != nil {
		t.Fatal(err)
	}
	data, err := encodeMIGParted(f)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeMIGParted(data)
	if err != nil {
		t.Fatalf("decoding\n%s: %v", data, err)
	}
	if !reflect.DeepEqual(back, f) {
		t.Errorf("round trip =\n%+v\nwant\n%+v", back, f)
	}
}
