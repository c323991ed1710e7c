package nvidia

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
)

// ConfigVersion is the only schema version of mig-parted's config file.
const ConfigVersion = "v1"

// ConfigMapKey is the ConfigMap key mig-manager reads its config file from.
const ConfigMapKey = "config.yaml"

// DefaultMIGPartedConfigMap is the ConfigMap the GPU Operator creates in its namespace with
// NVIDIA's published mig-parted config (NVIDIA/gpu-operator assets/state-mig-manager/
// 0400_configmap.yaml, controllers/object_controls.go MigPartedDefaultConfigMapName), under
// the same key.
const DefaultMIGPartedConfigMap = "default-mig-parted-config"

// AllDisabled is the entry that turns MIG off on every GPU; the GPU Operator's default
// mig.config label value, so the config must always hold it.
const AllDisabled = "all-disabled"

// ConfigPrefix starts the name of every entry gpupool owns; entries without it belong to the
// user and are never changed or removed.
const ConfigPrefix = "gpupool-"

// MIGConfigName is the immutable mig-parted config entry for a node's complete layout. The name
// is derived from the layout itself: mig-manager never re-applies an edited entry, so a new
// layout must get a new name, and the same layout always gets the same one. GPUs are hashed in
// index order, whatever order the caller lists them in.
func MIGConfigName(targets []mig.GPUTarget) string {
	sorted := slices.Clone(targets)
	slices.SortFunc(sorted, func(a, b mig.GPUTarget) int { return a.Index - b.Index })
	h := sha256.New()
	for _, g := range sorted {
		fmt.Fprintf(h, "%d:%t=%s;", g.Index, g.MIGEnabled, g.Layout.String())
	}
	return entryName(h.Sum(nil))
}

// PlanEntryName is the mig-parted entry name a plan uses for a layout: derived from the
// layout's name and the plan's, so that two plans never share an entry and a retry of the same
// layout makes mig-manager apply it again.
func PlanEntryName(layoutName, plan string) string {
	sum := sha256.Sum256([]byte(layoutName + "/" + plan))
	return entryName(sum[:])
}

// StepEntryName is the entry name a plan's step must carry for a node whose complete target is
// targets: the planner hashes the target it planned, and the executor recomputes the name from
// the target it is about to write (the step's new layouts, the agent's report for the GPUs the
// step leaves alone). When the two differ, a GPU the plan did not mean to touch changed,
// appeared or vanished since planning, and writing the entry under the approved name would
// break the rule that a name always means one content.
func StepEntryName(targets []mig.GPUTarget, plan string) string {
	return PlanEntryName(MIGConfigName(targets), plan)
}

// entryName is ConfigPrefix and the first 10 hex digits of a digest, the form the
// RepartitionPlan CRD admits for a step's migConfigName.
func entryName(sum []byte) string { return ConfigPrefix + hex.EncodeToString(sum)[:10] }

// Config is a mig-parted config file (schema v1): named entries, each a list of device specs
// that together describe a whole node.
type Config struct {
	// Version is always ConfigVersion.
	Version string
	// MIGConfigs maps an entry name, the value of label nvidia.com/mig.config, to its specs.
	MIGConfigs map[string][]DeviceSpec
	// Foreign are entries gpupool does not own, kept verbatim as JSON: Marshal writes them as
	// they came (JSON is YAML), and nothing else reads them.
	Foreign map[string]json.RawMessage
}

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

// DeviceSpec is one item of an entry: the MIG settings for a set of GPUs.
type DeviceSpec struct {
	// DeviceFilter restricts the spec to GPUs of these device IDs or product names; nil when
	// the file has no device-filter. Only user entries carry it; a single string in the file
	// reads as a one-item list.
	DeviceFilter []string
	// Devices selects the GPUs by NVML index, or all of them.
	Devices Devices
	// MIGEnabled turns MIG mode on or off on the selected GPUs.
	MIGEnabled bool
	// MIGDevices is the multiset of MIG profiles to create per GPU; nil when MIG is disabled,
	// possibly empty (MIG on, no instances) when enabled.
	MIGDevices map[string]int
}

// Devices is mig-parted's "devices" field: the word all, or a list of GPU indexes.
type Devices struct {
	// All selects every GPU of the node; Indexes is then nil.
	All bool
	// Indexes are NVML GPU indexes.
	Indexes []int
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

// Marshal renders the config as mig-parted's YAML, byte for byte the same for the same
// content: all-disabled first, then entries by name, profiles largest first. Writing the
// ConfigMap only when these bytes change keeps reconciles from churning it.
func (c Config) Marshal() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("rendering mig-parted config: %w", err)
	}
	var b strings.Builder
	b.WriteString("version: " + ConfigVersion + "\n")
	b.WriteString("mig-configs:\n")
	names := sortedNames(c.MIGConfigs)
	for name := range c.Foreign {
		if _, own := c.MIGConfigs[name]; !own {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if specs, own := c.MIGConfigs[name]; own {
			b.WriteString("  " + yamlKey(name) + ":\n")
			writeSpecs(&b, specs)
			continue
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, c.Foreign[name]); err != nil {
			return nil, fmt.Errorf("rendering mig-parted config entry %q: %w", name, err)
		}
		b.WriteString("  " + yamlKey(name) + ": " + compact.String() + "\n")
	}
	return []byte(b.String()), nil
}

func writeSpecs(b *strings.Builder, specs []DeviceSpec) {
	for _, s := range specs {
		b.WriteString("    - devices: ")
		if s.Devices.All {
			b.WriteString("all")
		} else {
			b.WriteString("[")
			for i, d := range s.Devices.Indexes {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(strconv.Itoa(d))
			}
			b.WriteString("]")
		}
		b.WriteString("\n")
		if s.DeviceFilter != nil {
			quoted := make([]string, len(s.DeviceFilter))
			for i, f := range s.DeviceFilter {
				quoted[i] = quote(f)
			}
			b.WriteString("      device-filter: [" + strings.Join(quoted, ", ") + "]\n")
		}
		b.WriteString("      mig-enabled: " + strconv.FormatBool(s.MIGEnabled) + "\n")
		if !s.MIGEnabled {
			continue
		}
		if len(s.MIGDevices) == 0 {
			b.WriteString("      mig-devices: {}\n")
			continue
		}
		b.WriteString("      mig-devices:\n")
		profiles := make([]string, 0, len(s.MIGDevices))
		for p := range s.MIGDevices {
			profiles = append(profiles, p)
		}
		slices.SortFunc(profiles, mig.CompareProfileNames)
		for _, p := range profiles {
			b.WriteString("        " + quote(p) + ": " + strconv.Itoa(s.MIGDevices[p]) + "\n")
		}
	}
}

// sortedNames puts all-disabled first, then the other names in byte order.
func sortedNames(m map[string][]DeviceSpec) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == AllDisabled:
			return -1
		case b == AllDisabled:
			return 1
		}
		return strings.Compare(a, b)
	})
	return names
}

// plainKey is a name YAML reads back as the same string without quotes.
var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

// yamlKey leaves ordinary entry names unquoted, as people write them, and quotes the rest,
// including words YAML 1.1 would read as booleans or null.
func yamlKey(s string) string {
	if plainKey.MatchString(s) {
		switch strings.ToLower(s) {
		case "y", "n", "yes", "no", "on", "off", "true", "false", "null":
		default:
			return s
		}
	}
	return quote(s)
}

// quote writes s as a double-quoted scalar; JSON strings are valid YAML ones.
func quote(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	// Encoding a string cannot fail.
	_ = enc.Encode(s)
	return strings.TrimSuffix(buf.String(), "\n")
}

// allDisabledSpecs is the GPU Operator's all-disabled entry.
func allDisabledSpecs() []DeviceSpec {
	return []DeviceSpec{{Devices: Devices{All: true}, MIGEnabled: false}}
}

// DeviceSpecs turns a node's target layout into an entry's device specs, one per run of
// consecutive GPU indexes with the same settings (mig-parted applies a spec to every index it
// lists), in index order. Every GPU of the node must be listed once. mig-parted's apply leaves
// a GPU no spec selects as it is, but its assert fails with "not all GPUs match the specified
// config" (NVIDIA/mig-parted cmd/nvidia-mig-parted/assert/config.go), and mig-manager asserts
// before it does anything (pkg/mig/reconfigure/reconfigure.go): a partial entry would make it
// shut the node's GPU clients down and re-apply on every restart.
func DeviceSpecs(targets []mig.GPUTarget) ([]DeviceSpec, error) {
	if len(targets) == 0 {
		return nil, errors.New("no GPUs: an entry must describe at least one GPU")
	}
	sorted := slices.Clone(targets)
	slices.SortFunc(sorted, func(a, b mig.GPUTarget) int { return a.Index - b.Index })
	var specs []DeviceSpec
	var prevKey string
	for i, t := range sorted {
		if t.Index < 0 {
			return nil, fmt.Errorf("GPU index %d is negative", t.Index)
		}
		if i > 0 && sorted[i-1].Index == t.Index {
			return nil, fmt.Errorf("GPU %d listed twice", t.Index)
		}
		layout := t.Layout.Clone()
		if !t.MIGEnabled && len(layout) != 0 {
			return nil, fmt.Errorf("GPU %d has MIG disabled but a layout %s", t.Index, layout)
		}
		for p, n := range layout {
			if n < 0 {
				return nil, fmt.Errorf("GPU %d: negative count %d for %s", t.Index, n, p)
			}
			if !profileName.MatchString(p) {
				return nil, fmt.Errorf("GPU %d: invalid MIG profile name %q", t.Index, p)
			}
		}
		key := strconv.FormatBool(t.MIGEnabled) + "|" + layout.String()
		if i > 0 && key == prevKey {
			last := &specs[len(specs)-1]
			last.Devices.Indexes = append(last.Devices.Indexes, t.Index)
			continue
		}
		prevKey = key
		s := DeviceSpec{Devices: Devices{Indexes: []int{t.Index}}, MIGEnabled: t.MIGEnabled}
		if t.MIGEnabled {
			s.MIGDevices = map[string]int(layout)
		}
		specs = append(specs, s)
	}
	return specs, nil
}

// MIGPartedConfig renders a complete mig-parted config holding all-disabled and one entry per
// name, each a node's full target layout. Use UpdateConfig to change a config that is in use.
func MIGPartedConfig(entries map[string][]mig.GPUTarget) ([]byte, error) {
	cfg := Config{Version: ConfigVersion, MIGConfigs: map[string][]DeviceSpec{AllDisabled: allDisabledSpecs()}}
	for _, name := range sortedTargetNames(entries) {
		specs, err := entrySpecs(name, entries[name])
		if err != nil {
			return nil, err
		}
		cfg.MIGConfigs[name] = specs
	}
	return cfg.Marshal()
}

func sortedTargetNames(m map[string][]mig.GPUTarget) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// entrySpecs checks that name can be a label value and that it is not all-disabled, whose
// meaning the GPU Operator fixes, then builds its specs.
func entrySpecs(name string, targets []mig.GPUTarget) ([]DeviceSpec, error) {
	if name == AllDisabled {
		return nil, fmt.Errorf("mig-parted config entry %q is reserved for the GPU Operator's MIG-off layout", name)
	}
	if errs := validation.IsValidLabelValue(name); name == "" || len(errs) > 0 {
		return nil, fmt.Errorf("mig-parted config entry %q cannot be a value of label %s: %s", name, v1alpha1.LabelMIGConfig, strings.Join(errs, "; "))
	}
	specs, err := DeviceSpecs(targets)
	if err != nil {
		return nil, fmt.Errorf("mig-parted config entry %q: %w", name, err)
	}
	return specs, nil
}

// UpdateConfig returns the config to write next, given the one in the ConfigMap now (empty for
// none): it adds the entries in add, keeps all-disabled, the user's entries (names without
// ConfigPrefix, re-rendered but with the same content) and every gpupool entry named in inUse
// (the mig.config label values nodes still carry), and drops the other gpupool entries.
// Entries are immutable because mig-manager never re-applies an edited one: adding a name that
// exists with other content is an error, and so is adding a name without ConfigPrefix, which
// gpupool could never garbage-collect.
//
// Entries gpupool does not own are kept verbatim (as JSON, which is YAML to mig-parted), never
// re-read with gpupool's parser: NVIDIA's accepts names and fields gpupool does not model (say
// 1g.24gb+me,gfx), and one such entry must not stop gpupool from adding its own. An entry a
// node's label names that the ConfigMap lacks (the ClusterPolicy used to point at NVIDIA's
// default config) is taken verbatim from defaults, NVIDIA's default config, when it has one,
// so the nodes outside the pool keep working.
func UpdateConfig(current []byte, add map[string][]mig.GPUTarget, inUse []string, defaults []byte) ([]byte, error) {
	own, foreign, err := splitEntries(current)
	if err != nil {
		return nil, fmt.Errorf("reading the current mig-parted config: %w", err)
	}
	old := Config{Version: ConfigVersion, MIGConfigs: own}
	_, fallback, err := splitEntries(defaults)
	if err != nil {
		fallback = nil // NVIDIA's default config is only a source of entries, never a reason to stop
	}
	keep := make(map[string]bool, len(inUse))
	for _, n := range inUse {
		keep[n] = true
		if _, ok := foreign[n]; !ok && !strings.HasPrefix(n, ConfigPrefix) && fallback[n] != nil {
			foreign[n] = fallback[n]
		}
	}
	if _, ok := foreign[AllDisabled]; !ok && fallback[AllDisabled] != nil {
		foreign[AllDisabled] = fallback[AllDisabled]
	}
	next := Config{Version: ConfigVersion, MIGConfigs: map[string][]DeviceSpec{}, Foreign: foreign}
	for name, specs := range old.MIGConfigs {
		if keep[name] {
			next.MIGConfigs[name] = specs
		}
	}
	if _, ok := next.Foreign[AllDisabled]; !ok {
		// The GPU Operator's MIG-off entry, which its default config always has; written in
		// the form it is kept in, so a second update writes the same bytes.
		next.Foreign[AllDisabled] = json.RawMessage(`[{"devices":"all","mig-enabled":false}]`)
	}
	for _, name := range sortedTargetNames(add) {
		if !strings.HasPrefix(name, ConfigPrefix) {
			return nil, fmt.Errorf("mig-parted config entry %q: gpupool only writes entries named %s*, the others belong to the user", name, ConfigPrefix)
		}
		specs, err := entrySpecs(name, add[name])
		if err != nil {
			return nil, err
		}
		if prev, ok := old.MIGConfigs[name]; ok && specsKey(prev) != specsKey(specs) {
			return nil, fmt.Errorf("mig-parted config entry %q already exists with another layout: entries are immutable because "+
				"mig-manager never re-applies an edited entry; give the new layout a new name", name)
		}
		next.MIGConfigs[name] = specs
	}
	return next.Marshal()
}

// specsKey describes what an entry does to each GPU, independent of how its specs group the
// indexes, so an entry written with another grouping still counts as the same content.
func specsKey(specs []DeviceSpec) string {
	var parts []string
	for _, s := range specs {
		profiles := make(mig.Layout, len(s.MIGDevices))
		for p, n := range s.MIGDevices {
			profiles[p] = n
		}
		what := fmt.Sprintf("filter=%q enabled=%t devices=%s", s.DeviceFilter, s.MIGEnabled, profiles.String())
		if s.Devices.All {
			parts = append(parts, "all "+what)
			continue
		}
		for _, i := range s.Devices.Indexes {
			parts = append(parts, fmt.Sprintf("%d %s", i, what))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, "\n")
}
