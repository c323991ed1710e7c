package nvidia

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
)

// OperatorConfigInput is everything the content of gpupool's two ConfigMaps for the GPU
// Operator depends on: what they hold now, NVIDIA's default mig-parted config, the steps of the
// live plans and the config names the nodes' labels carry. DesiredOperatorConfig turns it into
// the content to write; one writer in the manager applies it whenever any of it changes.
type OperatorConfigInput struct {
	// MIGParted is the mig-parted config file gpupool's ConfigMap holds now (key ConfigMapKey);
	// nil when the ConfigMap does not exist.
	MIGParted []byte
	// DevicePlugin is the data of gpupool's device-plugin ConfigMap now; nil when it does not
	// exist.
	DevicePlugin map[string]string
	// Defaults is NVIDIA's default mig-parted config (DefaultMIGPartedConfigMap); nil when the
	// operator has none. Nodes outside every pool still carry labels naming its entries.
	Defaults []byte
	// Steps are the steps of every live plan (v1alpha1.PlanPhase.Running).
	Steps []StepConfig
	// MIGConfigLabels are the values of nvidia.com/mig.config on the nodes.
	MIGConfigLabels []string
	// KeepExisting keeps every gpupool entry the config holds now, named or not: set while a
	// node stays cordoned by a plan that was deleted mid-change (its GPUs may be
	// half-configured, and the entry its label named, which nobody can recompute, is what
	// mig-manager's retry needs once someone sets the label again).
	KeepExisting bool
	// SharingLabels are the values of nvidia.com/device-plugin.config on the nodes.
	SharingLabels []string
}

// StepConfig is what one step of a live plan needs from the ConfigMaps.
type StepConfig struct {
	// Plan is the plan's name, part of the name of the step's entry (StepEntryName).
	Plan string
	// Node is the step's node, for messages.
	Node string
	// MIGConfigName is the step's mig-parted entry (spec.steps[].migConfigName).
	MIGConfigName string
	// PreviousMIGConfig is the entry a failed step sets the node's label back to.
	PreviousMIGConfig string
	// SharingConfigName and Sharing are the step's device-plugin key and the setting it names;
	// empty and nil when the step does not change sharing.
	SharingConfigName string
	Sharing           *v1alpha1.SharingConfig
	// Write is set when the step asks for its entry and key now: it is past its drain under its
	// own plan's cordon. Entries of other live steps are kept where they exist but not added:
	// an entry written early would freeze the node's target before the step checks it.
	Write bool
	// Targets is the node's complete target as the step would write it now
	// (inventory.NodeTarget); nil when the node's report cannot be read. The entry is written
	// only when the target still hashes to MIGConfigName, so a name always means one content.
	Targets []mig.GPUTarget
}

// OperatorConfig is the content to write into gpupool's two ConfigMaps.
type OperatorConfig struct {
	// MIGParted is the mig-parted config file, as Config.Marshal renders it.
	MIGParted []byte
	// DevicePlugin is the whole data of the device-plugin ConfigMap.
	DevicePlugin map[string]string
	// Problems says, one line each, which entry or key a step asks for or a node's label names
	// that the config cannot hold, and why. A step waits for its entry, and cancels itself when
	// its target drifted.
	Problems []string
	// StepsWaiting is set when a step asks for an entry or key the config does not hold: what
	// it waits on (the node's report) may still change, where a label's problem will not.
	StepsWaiting bool
}

// DesiredOperatorConfig computes the content of gpupool's two ConfigMaps.
//
// The mig-parted config holds every entry it holds now that does not start with ConfigPrefix
// (the user's and all-disabled, verbatim), all-disabled, every entry a node's label names
// (taken from NVIDIA's default config when the ConfigMap lacks one that is not gpupool's), the
// entries live plans name, and the entry of each step that asks for it. gpupool's other
// entries are dropped.
//
// Entries are immutable, because mig-manager never re-applies an edited entry under an unchanged
// label: an entry that exists keeps its content, specs and all, however it is grouped. The one
// exception is an entry whose content is not what its name means, which only a hand edit
// produces: when a step asking for it lets gpupool compute what the name means, that content is
// written back (see repairing below); otherwise it is kept as it is, since its true content is
// known to nobody.
//
// The device-plugin ConfigMap holds the user's keys verbatim, gpupool-none, every gpupool key
// a node's label or a live plan names and the key of each step that asks for it. A gpupool key
// names its setting (ParseDevicePluginConfigName), so a missing one a node's label names is
// written again, and one whose content applies another setting is written back; one that
// applies its setting keeps its bytes.
//
// An error means the current mig-parted file cannot be read at all: rewriting it would lose
// the entries of others, so nothing should be written until a person fixes it.
func DesiredOperatorConfig(in OperatorConfigInput) (OperatorConfig, error) {
	var out OperatorConfig
	mp, problems, waiting, err := desiredMIGParted(in)
	if err != nil {
		return OperatorConfig{}, err
	}
	out.MIGParted, out.Problems, out.StepsWaiting = mp, problems, waiting
	dp, problems, waiting := desiredDevicePlugin(in)
	out.DevicePlugin, out.Problems, out.StepsWaiting = dp, append(out.Problems, problems...), out.StepsWaiting || waiting
	return out, nil
}

// desiredMIGParted is the mig-parted half of DesiredOperatorConfig.
func desiredMIGParted(in OperatorConfigInput) (data []byte, problems []string, waiting bool, err error) {
	own, broken, foreign, err := readEntries(in.MIGParted)
	if err != nil {
		return nil, nil, false, fmt.Errorf("reading the current mig-parted config: %w", err)
	}
	_, fallback, err := splitEntries(in.Defaults)
	if err != nil {
		fallback = nil // NVIDIA's default config is only a source of entries, never a reason to stop
	}
	keep := map[string]bool{}
	for _, n := range in.MIGConfigLabels {
		if n != "" {
			keep[n] = true
		}
	}
	if in.KeepExisting {
		for n := range own {
			keep[n] = true
		}
	}
	computed := map[string][]DeviceSpec{}
	for _, s := range in.Steps {
		for _, n := range []string{s.MIGConfigName, s.PreviousMIGConfig} {
			if n != "" {
				keep[n] = true
			}
		}
		if !s.Write || s.MIGConfigName == "" {
			continue
		}
		specs, why := stepSpecs(s)
		if why != "" {
			problems = append(problems, fmt.Sprintf("entry %s of plan %s's step on %s is not written: %s", s.MIGConfigName, s.Plan, s.Node, why))
			waiting = true
			continue
		}
		computed[s.MIGConfigName] = specs
	}

	next := Config{Version: ConfigVersion, MIGConfigs: map[string][]DeviceSpec{}, Foreign: foreign}
	for _, name := range slices.Sorted(maps.Keys(keep)) {
		if strings.HasPrefix(name, ConfigPrefix) {
			continue
		}
		if _, ok := foreign[name]; !ok {
			if raw, ok := fallback[name]; ok {
				next.Foreign[name] = raw
			} else if name != AllDisabled {
				problems = append(problems, fmt.Sprintf("entry %s, which a node's %s names, is in neither gpupool's mig-parted config nor NVIDIA's default one: "+
					"add it to gpupool's ConfigMap by hand or relabel the node", name, LabelMIGConfig))
			}
		}
	}
	if _, ok := next.Foreign[AllDisabled]; !ok {
		if raw, ok := fallback[AllDisabled]; ok {
			next.Foreign[AllDisabled] = raw
		} else {
			// The GPU Operator's MIG-off entry, in the form UpdateConfig keeps it, so that the
			// two write the same bytes.
			next.Foreign[AllDisabled] = json.RawMessage(`[{"devices":"all","mig-enabled":false}]`)
		}
	}
	for name := range keep {
		if !strings.HasPrefix(name, ConfigPrefix) {
			continue
		}
		switch specs, ok := own[name]; {
		case ok:
			next.MIGConfigs[name] = specs
		case broken[name] != nil:
			// Unreadable, and no step asks for it: kept verbatim for whoever broke it to see.
			next.Foreign[name] = broken[name]
		}
	}
	for name, specs := range computed {
		if prev, ok := own[name]; ok && specsKey(prev) == specsKey(specs) {
			continue // the same content, however grouped: never rewritten
		}
		// Added, or repaired: the entry a step asks for holds what its name means. A hand
		// edit would otherwise be applied by mig-manager under a name the plan approved for
		// another layout, and the step would fail verification against the layout it expects.
		delete(next.Foreign, name)
		next.MIGConfigs[name] = specs
	}
	for _, name := range slices.Sorted(maps.Keys(keep)) {
		_, parsed := next.MIGConfigs[name]
		_, raw := next.Foreign[name]
		if strings.HasPrefix(name, ConfigPrefix) && !parsed && !raw && slices.Contains(in.MIGConfigLabels, name) {
			problems = append(problems, fmt.Sprintf("entry %s, which a node's %s names, is gone from gpupool's mig-parted config and no running step can "+
				"say what it holds; mig-manager on that node cannot apply it until the node is relabelled", name, LabelMIGConfig))
		}
	}
	if data, err = next.Marshal(); err != nil {
		return nil, nil, false, err
	}
	return data, problems, waiting, nil
}

// stepSpecs is the entry a step asks for, or why it cannot be written.
func stepSpecs(s StepConfig) ([]DeviceSpec, string) {
	if s.Targets == nil {
		return nil, "the node's GPUNode report cannot be read"
	}
	if StepEntryName(s.Targets, s.Plan) != s.MIGConfigName {
		return nil, "the node's target no longer hashes to the entry's name (a GPU the step leaves alone changed, appeared or vanished since planning)"
	}
	specs, err := entrySpecs(s.MIGConfigName, s.Targets)
	if err != nil {
		return nil, err.Error()
	}
	return specs, ""
}

// readEntries reads a mig-parted config for the writer: gpupool's entries parsed (own), or
// verbatim when they do not parse (broken: only a hand edit makes one), and every other entry
// verbatim (foreign). Unlike splitEntries it does not give up on one broken gpupool entry,
// which the writer may be able to repair. An empty file has no entries.
func readEntries(data []byte) (own map[string][]DeviceSpec, broken, foreign map[string]json.RawMessage, err error) {
	own, broken, foreign = map[string][]DeviceSpec{}, map[string]json.RawMessage{}, map[string]json.RawMessage{}
	if len(bytes.TrimSpace(data)) == 0 {
		return own, broken, foreign, nil
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, nil, nil, err
	}
	var top struct {
		Version    string                     `json:"version"`
		MIGConfigs map[string]json.RawMessage `json:"mig-configs"`
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&top); err != nil {
		return nil, nil, nil, fmt.Errorf("not a mig-parted config with version and mig-configs: %w", err)
	}
	if top.Version != ConfigVersion {
		return nil, nil, nil, fmt.Errorf("unknown version %q: mig-parted reads %q", top.Version, ConfigVersion)
	}
	for name, raw := range top.MIGConfigs {
		if !strings.HasPrefix(name, ConfigPrefix) {
			foreign[name] = raw
			continue
		}
		parsed, err := parseEntries(json.RawMessage(`{` + quote(name) + `:` + string(raw) + `}`))
		if err != nil || (Config{Version: ConfigVersion, MIGConfigs: parsed}).Validate() != nil {
			broken[name] = raw
			continue
		}
		own[name] = parsed[name]
	}
	return own, broken, foreign, nil
}

// desiredDevicePlugin is the device-plugin half of DesiredOperatorConfig.
func desiredDevicePlugin(in OperatorConfigInput) (next map[string]string, problems []string, waiting bool) {
	next = map[string]string{}
	for k, v := range in.DevicePlugin {
		if !strings.HasPrefix(k, ConfigPrefix) {
			next[k] = v
		}
	}
	// write holds the keys whose content gpupool renders when missing or wrong; keep those it
	// only keeps as they are.
	write := map[string]bool{DevicePluginNone: true}
	keep := map[string]bool{}
	for _, n := range in.SharingLabels {
		if strings.HasPrefix(n, ConfigPrefix) {
			write[n] = true
		}
	}
	for _, s := range in.Steps {
		if s.SharingConfigName == "" {
			continue
		}
		keep[s.SharingConfigName] = true
		if !s.Write {
			continue
		}
		if s.Sharing != nil && DevicePluginConfigName(*s.Sharing) != s.SharingConfigName {
			problems = append(problems, fmt.Sprintf("key %s of plan %s's step on %s is not written: gpupool names %s %d %s",
				s.SharingConfigName, s.Plan, s.Node, s.Sharing.Mode, s.Sharing.Replicas, DevicePluginConfigName(*s.Sharing)))
			waiting = true
			continue
		}
		write[s.SharingConfigName] = true
	}
	for name := range keep {
		if cur, ok := in.DevicePlugin[name]; ok {
			next[name] = cur
		}
	}
	for _, name := range slices.Sorted(maps.Keys(write)) {
		setting, ok := ParseDevicePluginConfigName(name)
		if !ok {
			// A gpupool key gpupool never names: kept where it exists, never made up.
			if cur, exists := in.DevicePlugin[name]; exists {
				next[name] = cur
			} else {
				problems = append(problems, fmt.Sprintf("key %s, which a node's %s names, is not one gpupool writes: relabel the node",
					name, LabelDevicePluginConfig))
			}
			continue
		}
		if cur, ok := in.DevicePlugin[name]; ok {
			if got, err := ParseDevicePluginConfig([]byte(cur)); err == nil && got == normalSharing(setting) {
				next[name] = cur // applies its setting: kept byte for byte
				continue
			}
		}
		data, err := DevicePluginConfig(setting)
		if err != nil {
			problems = append(problems, fmt.Sprintf("key %s is not written: %v", name, err))
			continue
		}
		next[name] = string(data)
	}
	return next, problems, waiting
}

// normalSharing is a setting as ParseDevicePluginConfig reads it back.
func normalSharing(s v1alpha1.SharingConfig) v1alpha1.SharingConfig {
	if s.Mode == v1alpha1.SharingNone || s.Mode == "" {
		return v1alpha1.SharingConfig{Mode: v1alpha1.SharingNone}
	}
	return s
}
