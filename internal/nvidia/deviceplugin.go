package nvidia

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
)

// The GPU Operator's device plugin reads a ConfigMap with one config file per key; label
// nvidia.com/device-plugin.config on a node names the key it applies there. gpupool owns the
// keys it writes: one per sharing setting, named after it, so a name can never come to mean
// another setting (the plugin does not re-read an edited key under an unchanged label).
const (
	// DevicePluginNone is gpupool's key for exclusive devices, always present so that a node can
	// be given back to exclusive use.
	DevicePluginNone      = ConfigPrefix + "none"
	devicePluginTSPrefix  = ConfigPrefix + "ts-"
	devicePluginMPSPrefix = ConfigPrefix + "mps-"
)

// The device plugin's resource names under the mixed MIG strategy: ResourceGPU for a
// MIG-disabled GPU, mig.ResourceName(profile) for a MIG instance and, with renameByDefault, the
// name of a shared device followed by SharedSuffix (nvidia.com/gpu.shared).
const (
	ResourceGPU  = "nvidia.com/gpu"
	SharedSuffix = ".shared"
)

// DevicePluginFile is the part of k8s-device-plugin's config file (schema v1) gpupool writes and
// reads: the MIG strategy and one sharing setting.
type DevicePluginFile struct {
	Version string             `json:"version"`
	Flags   DevicePluginFlags  `json:"flags"`
	Sharing *DevicePluginShare `json:"sharing,omitempty"`
}

// DevicePluginFlags are the plugin's flags gpupool sets.
type DevicePluginFlags struct {
	// MIGStrategy is always mixed: gpupool plans nvidia.com/mig-<profile> resources.
	MIGStrategy string `json:"migStrategy"`
}

// DevicePluginShare holds one of the two sharing modes.
type DevicePluginShare struct {
	TimeSlicing *ReplicatedResources `json:"timeSlicing,omitempty"`
	MPS         *ReplicatedResources `json:"mps,omitempty"`
}

// ReplicatedResources advertises each device of the listed resources as several replicas.
type ReplicatedResources struct {
	RenameByDefault bool                 `json:"renameByDefault"`
	Resources       []ReplicatedResource `json:"resources"`
}

// ReplicatedResource is one resource and its replica count.
type ReplicatedResource struct {
	Name     string `json:"name"`
	Replicas int32  `json:"replicas"`
}

// MaxMPSReplicas is the most replicas the device plugin's MPS control daemon accepts per GPU
// (k8s-device-plugin cmd/mps-control-daemon/mps/device.go: CUDA MPS serves at most 48 clients).
const MaxMPSReplicas = 48

// DevicePluginConfigName is the immutable key of a sharing setting: gpupool-none,
// gpupool-ts-<replicas> or gpupool-mps-<replicas>. The planner names the settings it plans
// with it, and the plan controller checks a plan's key against it.
func DevicePluginConfigName(s v1alpha1.SharingConfig) string {
	switch s.Mode {
	case v1alpha1.SharingTimeSlicing:
		return devicePluginTSPrefix + strconv.Itoa(int(s.Replicas))
	case v1alpha1.SharingMPS:
		return devicePluginMPSPrefix + strconv.Itoa(int(s.Replicas))
	}
	return DevicePluginNone
}

// ParseDevicePluginConfigName reads a key DevicePluginConfigName wrote; false for any other key.
func ParseDevicePluginConfigName(name string) (v1alpha1.SharingConfig, bool) {
	if name == DevicePluginNone {
		return v1alpha1.SharingConfig{Mode: v1alpha1.SharingNone}, true
	}
	for _, m := range []struct {
		prefix string
		mode   v1alpha1.SharingMode
	}{{devicePluginTSPrefix, v1alpha1.SharingTimeSlicing}, {devicePluginMPSPrefix, v1alpha1.SharingMPS}} {
		if rest, ok := strings.CutPrefix(name, m.prefix); ok {
			n, err := strconv.Atoi(rest)
			if err != nil || n < 2 || n > 256 || (m.mode == v1alpha1.SharingMPS && n > MaxMPSReplicas) || strconv.Itoa(n) != rest {
				return v1alpha1.SharingConfig{}, false
			}
			return v1alpha1.SharingConfig{Mode: m.mode, Replicas: int32(n)}, true
		}
	}
	return v1alpha1.SharingConfig{}, false
}

// DevicePluginConfig renders the config file of a sharing setting. Whole GPUs are shared and
// renamed to nvidia.com/gpu.shared. Time-slicing also shares every MIG device, renamed to
// nvidia.com/mig-<profile>.shared; it lists every profile gpupool knows, so that one key means
// one content on every node. MPS, which the device plugin refuses on MIG devices, shares whole
// GPUs only.
func DevicePluginConfig(s v1alpha1.SharingConfig) ([]byte, error) {
	f := DevicePluginFile{Version: ConfigVersion, Flags: DevicePluginFlags{MIGStrategy: "mixed"}}
	wholeGPUs := []ReplicatedResource{{Name: ResourceGPU, Replicas: s.Replicas}}
	switch s.Mode {
	case v1alpha1.SharingNone, "":
	case v1alpha1.SharingTimeSlicing:
		resources := wholeGPUs
		for _, name := range migResources() {
			resources = append(resources, ReplicatedResource{Name: name, Replicas: s.Replicas})
		}
		f.Sharing = &DevicePluginShare{TimeSlicing: &ReplicatedResources{RenameByDefault: true, Resources: resources}}
	case v1alpha1.SharingMPS:
		f.Sharing = &DevicePluginShare{MPS: &ReplicatedResources{RenameByDefault: true, Resources: wholeGPUs}}
	default:
		return nil, fmt.Errorf("unknown sharing mode %q", s.Mode)
	}
	if s.Mode != v1alpha1.SharingNone && s.Mode != "" && (s.Replicas < 2 || s.Replicas > 256) {
		return nil, fmt.Errorf("%s with %d replicas: replicas must be between 2 and 256", s.Mode, s.Replicas)
	}
	if s.Mode == v1alpha1.SharingMPS && s.Replicas > MaxMPSReplicas {
		return nil, fmt.Errorf("MPS with %d replicas: NVIDIA's MPS control daemon serves at most %d clients per GPU", s.Replicas, MaxMPSReplicas)
	}
	out, err := yaml.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("rendering the device plugin config: %w", err)
	}
	return out, nil
}

// migResources are the device plugin's resource names of every MIG profile of every built-in
// product, under every name drivers have given it, sorted: a time-slicing config lists them
// all. The plugin names a MIG device after the profile the driver reports and shares only the
// names the config lists, silently leaving others exclusive (k8s-device-plugin
// internal/rm/device_map.go, updateDeviceMapWithReplicas), so a driver that says 7g.79gb where
// the table says 7g.80gb would otherwise never advertise the .shared resource.
func migResources() []string {
	var out []string
	for _, p := range mig.Products() {
		for _, pr := range p.Profiles {
			out = append(out, mig.ResourceName(pr.Name))
			for _, alias := range pr.Aliases {
				out = append(out, mig.ResourceName(alias))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ParseDevicePluginConfig reads a config file strictly and says which sharing setting it
// applies to whole GPUs.
func ParseDevicePluginConfig(data []byte) (v1alpha1.SharingConfig, error) {
	var f DevicePluginFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return v1alpha1.SharingConfig{}, fmt.Errorf("reading the device plugin config: %w", err)
	}
	if f.Version != ConfigVersion {
		return v1alpha1.SharingConfig{}, fmt.Errorf("device plugin config version %q: want %q", f.Version, ConfigVersion)
	}
	if f.Sharing == nil || (f.Sharing.TimeSlicing == nil && f.Sharing.MPS == nil) {
		return v1alpha1.SharingConfig{Mode: v1alpha1.SharingNone}, nil
	}
	if f.Sharing.TimeSlicing != nil && f.Sharing.MPS != nil {
		return v1alpha1.SharingConfig{}, fmt.Errorf("device plugin config sets both timeSlicing and mps: the plugin applies one sharing mode per node")
	}
	mode, rr := v1alpha1.SharingTimeSlicing, f.Sharing.TimeSlicing
	if rr == nil {
		mode, rr = v1alpha1.SharingMPS, f.Sharing.MPS
	}
	for _, r := range rr.Resources {
		if r.Name == ResourceGPU {
			if r.Replicas < 2 {
				return v1alpha1.SharingConfig{}, fmt.Errorf("device plugin config shares %s with %d replicas: want at least 2", ResourceGPU, r.Replicas)
			}
			return v1alpha1.SharingConfig{Mode: mode, Replicas: r.Replicas}, nil
		}
	}
	return v1alpha1.SharingConfig{Mode: v1alpha1.SharingNone}, nil
}

// UpdateDevicePluginConfigMap returns the ConfigMap data to write next: the user's keys as they
// are, gpupool-none, every gpupool key a node's label still names (inUse) and the keys of add;
// gpupool's other keys are dropped.
func UpdateDevicePluginConfigMap(current map[string]string, add []v1alpha1.SharingConfig, inUse []string) (map[string]string, error) {
	next := map[string]string{}
	keep := map[string]bool{}
	for _, n := range inUse {
		keep[n] = true
	}
	for k, v := range maps.All(current) {
		if !strings.HasPrefix(k, ConfigPrefix) || keep[k] {
			next[k] = v
		}
	}
	for _, s := range append([]v1alpha1.SharingConfig{{Mode: v1alpha1.SharingNone}}, add...) {
		data, err := DevicePluginConfig(s)
		if err != nil {
			return nil, err
		}
		next[DevicePluginConfigName(s)] = string(data)
	}
	return next, nil
}
