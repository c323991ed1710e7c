package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupool/gpupool/internal/mig"
)

// Presets name the initial layouts a simulated node can start in; each is also the mig.config
// label value the node starts with, and SeedEntries writes the matching mig-parted entry, like
// the default config the GPU Operator ships (which names them all-1g.10gb etc. per model).
const (
	// PresetAllDisabled: MIG off, every GPU whole; the entry the GPU Operator's default
	// config and every config gpupool writes hold, and the operator's default mig.config.
	PresetAllDisabled = "all-disabled"
	// PresetAllEnabled: MIG on, no instances.
	PresetAllEnabled = "all-enabled"
	// PresetAll1g: as many plain 1g instances as fit (7; 4 on an A30).
	PresetAll1g = "all-1g"
	// PresetAll2g: as many 2g instances as fit (3; 2 on an A30).
	PresetAll2g = "all-2g"
	// PresetAll3g: two 3g instances.
	PresetAll3g = "all-3g"
	// PresetAll4g: one 4g instance.
	PresetAll4g = "all-4g"
	// PresetAll7g: one 7g instance, the whole GPU.
	PresetAll7g = "all-7g"
	// PresetAllBalanced: mig-parted's all-balanced: 2 x 1g, 1 x 2g, 1 x 3g (A30: 2 x 1g, 1 x 2g).
	PresetAllBalanced = "all-balanced"
)

// Presets lists the preset names in a fixed order.
func Presets() []string {
	return []string{PresetAllDisabled, PresetAllEnabled, PresetAll1g, PresetAll2g, PresetAll3g, PresetAll4g, PresetAll7g, PresetAllBalanced}
}

// presetTarget is the per-GPU target of a preset on a GPU with the given profile table.
func presetTarget(preset string, table []gpuProfile) (gpuTarget, error) {
	nameOf := func(constant int) (string, int, bool) {
		for _, p := range table {
			if p.constant == constant {
				return p.slot.Name, p.slot.MaxCount, true
			}
		}
		return "", 0, false
	}
	filled := func(constant int) (gpuTarget, error) {
		name, maxCount, ok := nameOf(constant)
		if !ok {
			return gpuTarget{}, fmt.Errorf("preset %s: the GPU has no such profile", preset)
		}
		return gpuTarget{MIGEnabled: true, Layout: mig.Layout{name: maxCount}}, nil
	}
	switch preset {
	case PresetAllDisabled:
		return gpuTarget{}, nil
	case PresetAllEnabled:
		return gpuTarget{MIGEnabled: true, Layout: mig.Layout{}}, nil
	case PresetAll1g:
		return filled(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	case PresetAll2g:
		return filled(nvml.GPU_INSTANCE_PROFILE_2_SLICE)
	case PresetAll3g:
		return filled(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	case PresetAll4g:
		return filled(nvml.GPU_INSTANCE_PROFILE_4_SLICE)
	case PresetAll7g:
		return filled(nvml.GPU_INSTANCE_PROFILE_7_SLICE)
	case PresetAllBalanced:
		one, _, ok1 := nameOf(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
		two, _, ok2 := nameOf(nvml.GPU_INSTANCE_PROFILE_2_SLICE)
		if !ok1 || !ok2 {
			return gpuTarget{}, fmt.Errorf("preset %s: the GPU lacks 1g or 2g profiles", preset)
		}
		l := mig.Layout{one: 2, two: 1}
		if three, _, ok := nameOf(nvml.GPU_INSTANCE_PROFILE_3_SLICE); ok {
			l[three] = 1
		}
		return gpuTarget{MIGEnabled: true, Layout: l}, nil
	}
	return gpuTarget{}, fmt.Errorf("unknown preset %q (known: %s)", preset, strings.Join(Presets(), ", "))
}

// NodeSpec describes one simulated node.
type NodeSpec struct {
	// Name of the Node object.
	Name string
	// Model is a GPU model name or alias (see Models), e.g. "H200-141GB" or "h200".
	Model string
	// GPUs is the number of GPUs, all of Model.
	GPUs int
	// InitialConfig is a preset (see Presets): the layout every GPU starts in and the
	// nvidia.com/mig.config value the node starts with. Empty means all-disabled.
	InitialConfig string
	// Faults are the node's programmatic fault knobs from the start.
	Faults Faults
	// DRA puts NVIDIA's DRA driver on the node instead of the device plugin: its kubelet
	// plugin publishes the node's devices in a ResourceSlice (dra.go), and the device plugin
	// is not deployed there (nvidia.com/gpu.deploy.device-plugin=false).
	DRA bool
	// DynamicMIG runs that driver with its DynamicMIG feature gate (implies DRA): its kubelet
	// plugin publishes every (profile, placement) of each GPU as a partition device consuming
	// shared counters, creates the MIG instance when a claim is allocated one and destroys it
	// when the claim goes (dynamicmig.go). No mig-manager is deployed there.
	DynamicMIG bool
}

// ParseNodeSpecs reads gpusim's --nodes value: comma-separated groups
//
//	[<count>x]<model>:<gpus>[:<preset>[:dra|:dynamicmig]]
//
// ":dra" serves the group's GPUs through NVIDIA's DRA driver instead of the device plugin;
// ":dynamicmig" through that driver with its DynamicMIG feature gate, which carves an instance
// per allocated claim (the preset is then only the state the driver finds, and destroys, at
// start).
// e.g. "2xh200:8:all-1g,a100-80gb:4" is two H200 nodes with eight GPUs in all-1g and one
// A100-80GB node with four GPUs, MIG disabled. Nodes are named sim-<model alias>-<n>, n
// counting from 0 per model across groups.
func ParseNodeSpecs(s string) ([]NodeSpec, error) {
	var out []NodeSpec
	perModel := map[string]int{}
	for group := range strings.SplitSeq(s, ",") {
		group = strings.TrimSpace(group)
		if group == "" {
			continue
		}
		count := 1
		body := group
		if head, rest, ok := strings.Cut(group, "x"); ok {
			if n, err := strconv.Atoi(head); err == nil {
				if n < 1 {
					return nil, fmt.Errorf("node group %q: node count %d, want at least 1", group, n)
				}
				count, body = n, rest
			}
		}
		parts := strings.Split(body, ":")
		dra := len(parts) == 4 && parts[3] == "dra"
		dynamicMIG := len(parts) == 4 && parts[3] == "dynamicmig"
		if dra || dynamicMIG {
			parts = parts[:3]
		}
		if len(parts) < 2 || len(parts) > 3 {
			return nil, fmt.Errorf("node group %q: want [<count>x]<model>:<gpus>[:<preset>[:dra|:dynamicmig]]", group)
		}
		model, err := LookupModel(parts[0])
		if err != nil {
			return nil, fmt.Errorf("node group %q: %w", group, err)
		}
		gpus, err := strconv.Atoi(parts[1])
		if err != nil || gpus < 1 {
			return nil, fmt.Errorf("node group %q: GPU count %q is not a whole number of at least 1", group, parts[1])
		}
		preset := PresetAllDisabled
		if len(parts) == 3 {
			preset = parts[2]
		}
		if !slices.Contains(Presets(), preset) {
			return nil, fmt.Errorf("node group %q: unknown preset %q (known: %s)", group, preset, strings.Join(Presets(), ", "))
		}
		alias := model.Aliases[0]
		for range count {
			out = append(out, NodeSpec{
				Name:          fmt.Sprintf("sim-%s-%d", alias, perModel[alias]),
				Model:         model.Name,
				GPUs:          gpus,
				InitialConfig: preset,
				DRA:           dra || dynamicMIG,
				DynamicMIG:    dynamicMIG,
			})
			perModel[alias]++
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no nodes in %q", s)
	}
	return out, nil
}
