// Reading mig-parted config files: the strict parser, the per-entry reads an update needs, and Validate.

package nvidia

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// splitEntries reads a mig-parted config for an update: gpupool's own entries parsed (they
// must be well-formed, gpupool wrote them), every other entry kept raw. An empty file has none.
func splitEntries(data []byte) (map[string][]DeviceSpec, map[string]json.RawMessage, error) {
	own, foreign := map[string][]DeviceSpec{}, map[string]json.RawMessage{}
	if len(bytes.TrimSpace(data)) == 0 {
		return own, foreign, nil
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, nil, err
	}
	var top struct {
		Version    string                     `json:"version"`
		MIGConfigs map[string]json.RawMessage `json:"mig-configs"`
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&top); err != nil {
		return nil, nil, fmt.Errorf("not a mig-parted config with version and mig-configs: %w", err)
	}
	if top.Version != ConfigVersion {
		return nil, nil, fmt.Errorf("unknown version %q: mig-parted reads %q", top.Version, ConfigVersion)
	}
	for name, raw := range top.MIGConfigs {
		// all-disabled is the GPU Operator's name, kept verbatim like the user's entries.
		if !strings.HasPrefix(name, ConfigPrefix) {
			foreign[name] = raw
			continue
		}
		parsed, err := parseEntries(json.RawMessage(`{"` + name + `":` + string(raw) + `}`))
		if err != nil {
			return nil, nil, err
		}
		own[name] = parsed[name]
	}
	return own, foreign, nil
}

// HasEntry reports whether a mig-parted config file holds the named gpupool entry, well-formed.
// Only that entry is read: the rest of the file belongs to the user and to NVIDIA, whose parser
// accepts names and values gpupool's does not model (1g.24gb+me,gfx, mig-enabled: null), and a
// step must not wait forever on an entry it wrote because somebody else's reads differently.
func HasEntry(data []byte, name string) bool {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return false
	}
	var top struct {
		Version    string                     `json:"version"`
		MIGConfigs map[string]json.RawMessage `json:"mig-configs"`
	}
	if err := json.Unmarshal(js, &top); err != nil || top.Version != ConfigVersion {
		return false
	}
	raw, ok := top.MIGConfigs[name]
	if !ok {
		return false
	}
	parsed, err := parseEntries(json.RawMessage(`{` + strconv.Quote(name) + `:` + string(raw) + `}`))
	return err == nil && len(parsed[name]) > 0
}

// profileName accepts mig-parted's profile syntax: [<C>c.]<G>g.<M>gb with optional attributes
// such as +me or +me.all.
var profileName = regexp.MustCompile(`^([0-9]+c\.)?[0-9]+g\.[0-9]+gb([+-][a-z0-9.]+)*$`)

// ParseMIGPartedConfig reads a mig-parted config file at least as strictly as mig-parted does:
// unknown fields, a missing or other version, missing required fields, MIG devices on a GPU
// with MIG disabled, counts all zero and duplicate keys are errors, so a file it accepts is one
// mig-manager accepts. It is stricter in places (a null mig-enabled, a negative GPU index,
// attribute spellings gpupool does not write), so it is for reading gpupool's own entries:
// entries of others are kept verbatim (UpdateConfig) and never judged by it (HasEntry).
func ParseMIGPartedConfig(data []byte) (Config, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return Config{}, fmt.Errorf("parsing mig-parted config: %w", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil || top == nil {
		return Config{}, errors.New("parsing mig-parted config: not a mapping with version and mig-configs")
	}
	cfg := Config{}
	for k, v := range top {
		switch k {
		case "version":
			if err := json.Unmarshal(v, &cfg.Version); err != nil {
				return Config{}, fmt.Errorf("parsing mig-parted config: version: %w", err)
			}
		case "mig-configs":
			if cfg.MIGConfigs, err = parseEntries(v); err != nil {
				return Config{}, fmt.Errorf("parsing mig-parted config: %w", err)
			}
		default:
			return Config{}, fmt.Errorf("parsing mig-parted config: unexpected field %q", k)
		}
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("parsing mig-parted config: %w", err)
	}
	return cfg, nil
}

func parseEntries(raw json.RawMessage) (map[string][]DeviceSpec, error) {
	var entries map[string][]json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("mig-configs: %w", err)
	}
	out := make(map[string][]DeviceSpec, len(entries))
	for name, items := range entries {
		specs := make([]DeviceSpec, 0, len(items))
		for i, item := range items {
			s, err := parseDeviceSpec(item)
			if err != nil {
				return nil, fmt.Errorf("mig-configs %q item %d: %w", name, i, err)
			}
			specs = append(specs, s)
		}
		out[name] = specs
	}
	return out, nil
}

func parseDeviceSpec(raw json.RawMessage) (DeviceSpec, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return DeviceSpec{}, errors.New("not a mapping")
	}
	for _, required := range []string{"devices", "mig-enabled"} {
		if _, ok := fields[required]; !ok {
			return DeviceSpec{}, fmt.Errorf("missing required field %q", required)
		}
	}
	s := DeviceSpec{}
	for k, v := range fields {
		var err error
		switch k {
		case "device-filter":
			s.DeviceFilter, err = parseDeviceFilter(v)
		case "devices":
			s.Devices, err = parseDevices(v)
		case "mig-enabled":
			err = unmarshalNonNull(v, &s.MIGEnabled)
		case "mig-devices":
			// null decodes to no map, as in mig-parted (api/spec/v1/spec.go), which then
			// refuses it on a GPU with MIG enabled: validate does the same.
			err = json.Unmarshal(v, &s.MIGDevices)
		default:
			err = errors.New("unexpected field")
		}
		if err != nil {
			return DeviceSpec{}, fmt.Errorf("%s: %w", k, err)
		}
	}
	if !s.MIGEnabled && len(s.MIGDevices) == 0 {
		// "mig-devices: {}" on a disabled GPU says nothing; drop it so equal specs compare equal.
		s.MIGDevices = nil
	}
	return s, nil
}

func unmarshalNonNull(raw json.RawMessage, v any) error {
	if string(bytes.TrimSpace(raw)) == "null" {
		return errors.New("must not be null")
	}
	return json.Unmarshal(raw, v)
}

func parseDeviceFilter(raw json.RawMessage) ([]string, error) {
	var one string
	if err := unmarshalNonNull(raw, &one); err == nil {
		return []string{one}, nil
	}
	var list []string
	if err := unmarshalNonNull(raw, &list); err != nil {
		return nil, errors.New("must be a string or a list of strings")
	}
	return list, nil
}

func parseDevices(raw json.RawMessage) (Devices, error) {
	var word string
	if err := unmarshalNonNull(raw, &word); err == nil {
		if word != "all" {
			return Devices{}, fmt.Errorf("invalid value %q: must be all or a list of GPU indexes", word)
		}
		return Devices{All: true}, nil
	}
	var list []int
	if err := unmarshalNonNull(raw, &list); err != nil {
		return Devices{}, errors.New("must be all or a list of GPU indexes")
	}
	return Devices{Indexes: list}, nil
}

// Validate checks what mig-parted requires of a config, so gpupool never writes a file that
// mig-manager would reject (and with it every entry, the user's included).
func (c Config) Validate() error {
	if c.Version != ConfigVersion {
		return fmt.Errorf("unknown version %q: mig-parted reads %q", c.Version, ConfigVersion)
	}
	if len(c.MIGConfigs)+len(c.Foreign) == 0 {
		return errors.New("mig-configs: at least one entry is required")
	}
	for _, name := range sortedNames(c.MIGConfigs) {
		specs := c.MIGConfigs[name]
		if name == "" {
			return errors.New("mig-configs: entry with an empty name")
		}
		if len(specs) == 0 {
			return fmt.Errorf("mig-configs %q: at least one item is required", name)
		}
		for i, s := range specs {
			if err := s.validate(); err != nil {
				return fmt.Errorf("mig-configs %q item %d: %w", name, i, err)
			}
		}
	}
	return nil
}

func (s DeviceSpec) validate() error {
	if s.Devices.All && s.Devices.Indexes != nil {
		return errors.New("devices: both all and a list of indexes")
	}
	if !s.Devices.All && s.Devices.Indexes == nil {
		return errors.New("devices: missing")
	}
	for _, i := range s.Devices.Indexes {
		if i < 0 {
			return fmt.Errorf("devices: negative GPU index %d", i)
		}
	}
	if s.MIGEnabled && s.MIGDevices == nil {
		return errors.New("mig-devices is required when mig-enabled is true")
	}
	if !s.MIGEnabled && len(s.MIGDevices) != 0 {
		return errors.New("mig-devices listed while mig-enabled is false")
	}
	for p, n := range s.MIGDevices {
		if !profileName.MatchString(p) {
			return fmt.Errorf("mig-devices: invalid MIG profile name %q", p)
		}
		if n < 0 {
			return fmt.Errorf("mig-devices: negative count %d for %s", n, p)
		}
	}
	// mig-parted refuses a non-empty map whose counts are all zero, while an empty one means MIG
	// on with no instances (mig-parted pkg/types/mig_config.go, AssertValidFormat).
	if len(s.MIGDevices) > 0 && !slices.ContainsFunc(slices.Collect(maps.Values(s.MIGDevices)), func(n int) bool { return n > 0 }) {
		return errors.New("mig-devices: every count is 0 (write {} for MIG on with no instances)")
	}
	return nil
}
