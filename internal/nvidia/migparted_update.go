// Updating the file in mig-manager's ConfigMap: gpupool's immutable entries added and collected, others kept verbatim.

package nvidia

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/gpupool/gpupool/internal/mig"
)

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
