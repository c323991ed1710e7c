// Writing mig-parted config files: byte-stable YAML, and entries' device specs built from target layouts.

package nvidia

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpupool/gpupool/internal/mig"
)

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
		return nil, fmt.Errorf("mig-parted config entry %q cannot be a value of label %s: %s", name, LabelMIGConfig, strings.Join(errs, "; "))
	}
	specs, err := DeviceSpecs(targets)
	if err != nil {
		return nil, fmt.Errorf("mig-parted config entry %q: %w", name, err)
	}
	return specs, nil
}
