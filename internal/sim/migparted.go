package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// The simulated mig-manager's own reading of mig-parted's config file. It is written from
// NVIDIA's schema, not from gpupool's writer (internal/nvidia), so that a mistake in what gpupool
// writes is refused here as the real mig-manager would refuse it. The behaviour follows, in
// NVIDIA/mig-parted:
//
//   - api/spec/v1/spec.go: Spec.UnmarshalJSON and MigConfigSpec.UnmarshalJSON (version "v1",
//     the only top-level fields version and mig-configs, required devices and mig-enabled,
//     unknown fields refused, device-filter a string or a list of strings, devices "all" or a
//     list of ints, mig-devices required when MIG is on and refused when it is off);
//   - pkg/types/mig_config.go: MigConfig.AssertValidFormat (profile names well formed, no
//     negative count, not every count zero);
//   - go-nvlib pkg/nvlib/device/mig_profile.go, vendored there: the profile syntax
//     [<c>c.]<g>g.<gb>gb[+attr,...|-attr,...];
//   - cmd/nvidia-mig-parted/assert/assert.go: the file is read with sigs.k8s.io/yaml's
//     Unmarshal (YAML to JSON, then the JSON decoders above) and the selected name must be
//     one of mig-configs ("selected mig-config not present");
//   - api/spec/v1/helpers.go and pkg/types/device.go: how a spec selects GPUs (below,
//     migDeviceID).

// migPartedConfigKey is the key of the ConfigMap named by ClusterPolicy
// spec.migManager.config.name that mig-manager reads: the GPU Operator mounts that ConfigMap
// at /mig-parted-config and sets CONFIG_FILE=/mig-parted-config/config.yaml
// (NVIDIA/gpu-operator controllers/object_controls.go TransformMIGManager,
// assets/state-mig-manager/0600_daemonset.yaml).
const migPartedConfigKey = "config.yaml"

// migPartedVersion is the only version of mig-parted's config schema (api/spec/v1).
const migPartedVersion = "v1"

// migPartedFile is a decoded mig-parted config file.
type migPartedFile struct {
	Version string
	// Configs maps an entry name (a value of label nvidia.com/mig.config) to its specs; nil
	// when the file has no mig-configs at all, which mig-parted's decoder lets through (every
	// name is then "not present").
	Configs map[string][]migConfigSpec
}

// migConfigSpec is one item of an entry.
type migConfigSpec struct {
	// DeviceFilter lists the device-filter strings; empty when the field is absent. A single
	// string is a one-item list, except the empty string (also what null reads as), which
	// filters nothing, as in mig-parted's MatchesDeviceFilter; an empty string inside a list
	// is kept, and matches no GPU.
	DeviceFilter []string
	// AllDevices is devices: all; Devices otherwise lists GPU indexes as written (negative or
	// too large indexes are accepted by mig-parted and simply select no GPU).
	AllDevices bool
	Devices    []int
	MIGEnabled bool
	// MIGDevices is nil when the field is absent or null, possibly empty otherwise.
	MIGDevices map[string]int
}

// yamlObject reads a YAML document as sigs.k8s.io/yaml does for NVIDIA's decoders (YAML to JSON,
// then JSON), keeping each top-level field raw for the caller to decode as NVIDIA's types do.
func yamlObject(data []byte) (map[string]json.RawMessage, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("unmarshal error: %w", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return nil, fmt.Errorf("unmarshal error: %w", err)
	}
	return top, nil
}

// decodeMIGParted reads a mig-parted config file as mig-parted does.
func decodeMIGParted(data []byte) (migPartedFile, error) {
	top, err := yamlObject(data)
	if err != nil {
		return migPartedFile{}, err
	}
	if _, ok := top["version"]; !ok && len(top) > 0 {
		return migPartedFile{}, errors.New("unable to parse with missing 'version' field")
	}
	var f migPartedFile
	if raw, ok := top["version"]; ok {
		if err := json.Unmarshal(raw, &f.Version); err != nil {
			return migPartedFile{}, fmt.Errorf("version: %w", err)
		}
	}
	if f.Version != migPartedVersion {
		return migPartedFile{}, fmt.Errorf("unknown version: %v", f.Version)
	}
	for _, k := range slices.Sorted(maps.Keys(top)) {
		switch k {
		case "version":
		case "mig-configs":
			if f.Configs, err = decodeMIGConfigs(top[k]); err != nil {
				return migPartedFile{}, err
			}
		default:
			return migPartedFile{}, fmt.Errorf("unexpected field: %v", k)
		}
	}
	return f, nil
}

func decodeMIGConfigs(raw json.RawMessage) (map[string][]migConfigSpec, error) {
	var entries map[string][]json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("mig-configs: %w", err)
	}
	if len(entries) == 0 {
		return nil, errors.New("at least one entry in 'mig-configs' is required")
	}
	out := make(map[string][]migConfigSpec, len(entries))
	for _, name := range slices.Sorted(maps.Keys(entries)) {
		items := entries[name]
		if len(items) == 0 {
			return nil, fmt.Errorf("at least one entry in '%v' is required", name)
		}
		specs := make([]migConfigSpec, 0, len(items))
		for i, item := range items {
			s, err := decodeMIGConfigSpec(item)
			if err != nil {
				return nil, fmt.Errorf("mig-configs %q item %d: %w", name, i, err)
			}
			specs = append(specs, s)
		}
		out[name] = specs
	}
	return out, nil
}

func decodeMIGConfigSpec(raw json.RawMessage) (migConfigSpec, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return migConfigSpec{}, err
	}
	for _, required := range []string{"devices", "mig-enabled"} {
		if _, ok := fields[required]; !ok {
			return migConfigSpec{}, fmt.Errorf("missing required field: %v", required)
		}
	}
	var s migConfigSpec
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		v := fields[k]
		switch k {
		case "device-filter":
			var one string
			errOne := json.Unmarshal(v, &one)
			if errOne == nil {
				// A string, or null: "" filters nothing (MatchesDeviceFilter skips it).
				if one != "" {
					s.DeviceFilter = []string{one}
				}
				break
			}
			var list []string
			if errList := json.Unmarshal(v, &list); errList != nil {
				return migConfigSpec{}, fmt.Errorf("device-filter: (%w, %w)", errOne, errList)
			}
			s.DeviceFilter = list
		case "devices":
			var word string
			errWord := json.Unmarshal(v, &word)
			if errWord == nil {
				if word != "all" {
					return migConfigSpec{}, fmt.Errorf("invalid string input for 'devices': %v", word)
				}
				s.AllDevices = true
				break
			}
			var list []int
			if errList := json.Unmarshal(v, &list); errList != nil {
				return migConfigSpec{}, fmt.Errorf("devices: (%w, %w)", errWord, errList)
			}
			s.Devices = list
		case "mig-enabled":
			if err := json.Unmarshal(v, &s.MIGEnabled); err != nil {
				return migConfigSpec{}, fmt.Errorf("mig-enabled: %w", err)
			}
		case "mig-devices":
			devices := map[string]int{}
			if err := json.Unmarshal(v, &devices); err != nil {
				return migConfigSpec{}, fmt.Errorf("mig-devices: %w", err)
			}
			if err := assertValidMIGDevices(devices); err != nil {
				return migConfigSpec{}, fmt.Errorf("error validating values in 'mig-devices' field: %w", err)
			}
			s.MIGDevices = devices
		default:
			return migConfigSpec{}, fmt.Errorf("unexpected field: %v", k)
		}
	}
	if s.MIGEnabled && s.MIGDevices == nil {
		return migConfigSpec{}, errors.New("missing required field 'mig-devices' when 'mig-enabled' is true")
	}
	if !s.MIGEnabled && len(s.MIGDevices) != 0 {
		return migConfigSpec{}, errors.New("MIG devices included when 'mig-enabled' is false")
	}
	return s, nil
}

// assertValidMIGDevices is mig-parted's check of a mig-devices map: every name a well-formed
// profile, no negative count, and at least one positive count unless the map is empty.
func assertValidMIGDevices(devices map[string]int) error {
	if len(devices) == 0 {
		return nil
	}
	for _, p := range slices.Sorted(maps.Keys(devices)) {
		if err := checkProfileName(p); err != nil {
			return fmt.Errorf("invalid format for '%v': %w", p, err)
		}
		if devices[p] < 0 {
			return fmt.Errorf("invalid count for '%v': %d", p, devices[p])
		}
	}
	for _, n := range devices {
		if n > 0 {
			return nil
		}
	}
	return errors.New("all counts for all MigProfiles are 0")
}

// checkProfileName accepts MIG profile names of the form [<c>c.]<g>g.<gb>gb with optional
// attributes after "+" (e.g. 1g.18gb+me, 1g.24gb+me.all) or after "-" (1g.24gb-me), but not
// both, as go-nvlib's parser does.
func checkProfileName(p string) error {
	if p == "" {
		return errors.New("profile is the empty string")
	}
	base, attrs, plus := strings.Cut(p, "+")
	if _, _, minus := strings.Cut(p, "-"); minus {
		if plus {
			return errors.New("contains both '+/-' attributes")
		}
		base, attrs, _ = strings.Cut(p, "-")
	}
	fields := strings.SplitN(base, ".", 3)
	suffixes := []string{"g", "gb"}
	if len(fields) == 3 {
		suffixes = []string{"c", "g", "gb"}
	} else if len(fields) != 2 {
		return errors.New("parsed wrong number of fields, expected 2 or 3")
	}
	for i, f := range fields {
		num, ok := strings.CutSuffix(f, suffixes[i])
		if strings.TrimSpace(f) != f || !ok {
			return fmt.Errorf("malformed field %q, want <n>%s", f, suffixes[i])
		}
		if _, err := strconv.Atoi(num); err != nil {
			return fmt.Errorf("malformed number in %q", f)
		}
	}
	if attrs == "" && base == p {
		return nil
	}
	seen := map[string]bool{}
	for a := range strings.SplitSeq(attrs, ",") {
		switch {
		case a == "":
			return errors.New("empty attribute in list")
		case seen[a]:
			return errors.New("non unique attribute in list")
		case a[0] >= '0' && a[0] <= '9':
			return errors.New("attribute begins with a number")
		case a[0] == '.' || a[len(a)-1] == '.':
			return errors.New("attribute begins/ends with a dot")
		}
		for _, c := range a {
			if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '.' {
				return errors.New("non alpha-numeric character or digit in attribute")
			}
		}
		seen[a] = true
	}
	return nil
}

// selectMIGConfig returns the entry named name, as mig-parted's assert --valid-config does
// before mig-manager changes anything.
func (f migPartedFile) selectMIGConfig(name string) ([]migConfigSpec, error) {
	specs, ok := f.Configs[name]
	if !ok {
		return nil, fmt.Errorf("selected mig-config not present: %v", name)
	}
	return specs, nil
}

// migDeviceID is a GPU's PCI identity as mig-parted compares it with device-filter
// (pkg/types/device.go): the 16-bit device and vendor IDs, and the subsystem's.
type migDeviceID struct {
	Device, Vendor                   uint16
	SubsystemDevice, SubsystemVendor uint16
	HasSubsystem                     bool
}

// deviceIDFromPacked splits NVML's packed PCI ID (device ID in the high 16 bits, vendor ID in
// the low 16, e.g. 0x233510DE) as mig-parted does.
func deviceIDFromPacked(packed uint32) (device, vendor uint16) {
	return uint16(packed >> 16), uint16(packed & 0xFFFF)
}

// parseDeviceFilter reads one device-filter string as mig-parted's NewDeviceIDFromString:
// "<device><vendor>" as one number of any Go base (e.g. 0x233510DE: device 0x2335, vendor
// 0x10DE), optionally ":<subdevice><subvendor>". A bare "0x2335" is therefore device 0,
// vendor 0x2335, and matches no NVIDIA GPU.
func parseDeviceFilter(s string) (migDeviceID, error) {
	parts := strings.Split(s, ":")
	if len(parts) > 2 {
		return migDeviceID{}, fmt.Errorf("invalid DeviceID format %q", s)
	}
	raw, err := strconv.ParseUint(parts[0], 0, 32)
	if err != nil {
		return migDeviceID{}, fmt.Errorf("unable to create DeviceID from string %q: %w", s, err)
	}
	var id migDeviceID
	id.Device, id.Vendor = deviceIDFromPacked(uint32(raw))
	if len(parts) == 2 {
		sub, err := strconv.ParseUint(parts[1], 0, 32)
		if err != nil {
			return migDeviceID{}, fmt.Errorf("unable to create Subsystem from string %q: %w", s, err)
		}
		id.SubsystemDevice, id.SubsystemVendor = deviceIDFromPacked(uint32(sub))
		id.HasSubsystem = true
	}
	return id, nil
}

// matches is mig-parted's DeviceID.Matches: device and vendor must be equal, and the
// subsystem too when the filter names one.
func (filter migDeviceID) matches(hw migDeviceID) bool {
	if filter.Device != hw.Device || filter.Vendor != hw.Vendor {
		return false
	}
	return !filter.HasSubsystem || (filter.SubsystemDevice == hw.SubsystemDevice && filter.SubsystemVendor == hw.SubsystemVendor)
}

// matchesDeviceFilter is mig-parted's MigConfigSpec.MatchesDeviceFilter: no filter (or only an
// empty string) selects every GPU; otherwise one of the strings must match. A string that does
// not parse becomes the zero ID, as mig-parted ignores the parse error, and matches nothing.
func (s migConfigSpec) matchesDeviceFilter(hw migDeviceID) bool {
	if len(s.DeviceFilter) == 0 {
		return true
	}
	for _, f := range s.DeviceFilter {
		id, _ := parseDeviceFilter(f)
		if id.matches(hw) {
			return true
		}
	}
	return false
}

// matchesDevice is mig-parted's MatchesDevices: devices: all, or the index listed.
func (s migConfigSpec) matchesDevice(index int) bool {
	return s.AllDevices || slices.Contains(s.Devices, index)
}
