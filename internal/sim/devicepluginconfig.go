package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The simulated device plugin's own reading of k8s-device-plugin's config file, written from
// NVIDIA's schema rather than from gpupool's writer (internal/nvidia). It follows, in
// NVIDIA/k8s-device-plugin api/config/v1:
//
//   - config.go parseConfigFrom: sigs.k8s.io/yaml's Unmarshal (so, unlike mig-parted, unknown
//     fields are ignored), an empty version read as "v1", any other version refused; and
//     NewConfig: failRequestsGreaterThanOne defaults to true under MPS;
//   - flags.go: flags.migStrategy, which the environment (MIG_STRATEGY, set by the GPU
//     Operator from ClusterPolicy spec.mig.strategy) overrides;
//   - sharing.go: sharing.timeSlicing and sharing.mps; MPS wins when both are given;
//   - replicas.go ReplicatedResources/ReplicatedResource/ReplicatedDevices.UnmarshalJSON:
//     resources required and non-empty, each with a name and replicas >= 2, devices "all"
//     (the default), a count > 0 or a list of GPU indexes, MIG indexes or UUIDs, and rename;
//   - resources.go ResourceName.UnmarshalJSON: "nvidia.com/" prepended when missing, at most
//     63 characters, the part after the slash a DNS subdomain;
//   - config.go DisableResourceNamingInConfig, which the plugin applies before use: rename is
//     forced to <name>.shared under renameByDefault and to nothing otherwise, and devices to
//     all, so both are read (and refused when malformed) but never change what is advertised.

// Device plugin MIG strategies (api/config/v1/consts.go).
const (
	migStrategyNone   = "none"
	migStrategySingle = "single"
	migStrategyMixed  = "mixed"
)

// devicePluginVersion is the only version of the device plugin's config schema.
const devicePluginVersion = "v1"

// sharedSuffix is what renameByDefault appends to a shared resource's name
// (DefaultSharedResourceNameSuffix): nvidia.com/gpu.shared, nvidia.com/mig-<profile>.shared.
const sharedSuffix = ".shared"

// maxResourceNameLength is the longest resource name the plugin accepts.
const maxResourceNameLength = 63

// devicePluginFile is a decoded device plugin config file. The zero value is the empty config
// (no file), which leaves every flag at its default.
type devicePluginFile struct {
	Version string
	// MIGStrategy is flags.migStrategy; nil when unset.
	MIGStrategy *string
	// TimeSlicing and MPS are the sharing sections; nil when absent (an MPS section written
	// as null is absent too).
	TimeSlicing *replicatedResources
	MPS         *replicatedResources
}

// replicatedResources is one sharing section.
type replicatedResources struct {
	RenameByDefault bool
	// FailRequestsGreaterThanOne is nil when unset.
	FailRequestsGreaterThanOne *bool
	Resources                  []replicatedResource
}

// replicatedResource is one resource of a sharing section.
type replicatedResource struct {
	// Name is the fully qualified resource name, e.g. nvidia.com/gpu.
	Name string
	// Rename is as written (qualified), or "" when absent.
	Rename   string
	Replicas int
}

// Sharing strategies, as SharingStrategy names them.
const (
	sharingNone        = "none"
	sharingTimeSlicing = "time-slicing"
	sharingMPS         = "mps"
)

// sharingStrategy is the active strategy: MPS when its section is present, else time-slicing
// when its section is, else none. Decoding already refuses sections without a replicated
// resource, so present means replicated.
func (f devicePluginFile) sharingStrategy() string {
	switch {
	case f.MPS != nil:
		return sharingMPS
	case f.TimeSlicing != nil:
		return sharingTimeSlicing
	}
	return sharingNone
}

// replicated is the active sharing section, nil when there is none.
func (f devicePluginFile) replicated() *replicatedResources {
	if f.MPS != nil {
		return f.MPS
	}
	return f.TimeSlicing
}

// failRequestsGreaterThanOne is whether requests for more than one replica are refused:
// as written, or true under MPS when unset.
func (f devicePluginFile) failRequestsGreaterThanOne() bool {
	rr := f.replicated()
	switch {
	case rr == nil:
		return false
	case rr.FailRequestsGreaterThanOne != nil:
		return *rr.FailRequestsGreaterThanOne
	}
	return f.sharingStrategy() == sharingMPS
}

// decodeDevicePluginConfig reads one device plugin config file as the plugin does.
func decodeDevicePluginConfig(data []byte) (devicePluginFile, error) {
	top, err := yamlObject(data)
	if err != nil {
		return devicePluginFile{}, err
	}
	var f devicePluginFile
	if raw, ok := top["version"]; ok {
		if err := json.Unmarshal(raw, &f.Version); err != nil {
			return devicePluginFile{}, fmt.Errorf("unmarshal error: version: %w", err)
		}
	}
	if raw, ok := top["flags"]; ok {
		var flags map[string]json.RawMessage
		if err := json.Unmarshal(raw, &flags); err != nil {
			return devicePluginFile{}, fmt.Errorf("unmarshal error: flags: %w", err)
		}
		if v, ok := flags["migStrategy"]; ok {
			if err := json.Unmarshal(v, &f.MIGStrategy); err != nil {
				return devicePluginFile{}, fmt.Errorf("unmarshal error: flags.migStrategy: %w", err)
			}
		}
	}
	if raw, ok := top["resources"]; ok {
		if err := checkResources(raw); err != nil {
			return devicePluginFile{}, fmt.Errorf("unmarshal error: resources: %w", err)
		}
	}
	if raw, ok := top["sharing"]; ok {
		var sharing map[string]json.RawMessage
		if err := json.Unmarshal(raw, &sharing); err != nil {
			return devicePluginFile{}, fmt.Errorf("unmarshal error: sharing: %w", err)
		}
		if v, ok := sharing["timeSlicing"]; ok {
			// A struct field in NVIDIA's type: even null reaches its decoder, which then finds
			// no resources.
			if f.TimeSlicing, err = decodeReplicatedResources(v); err != nil {
				return devicePluginFile{}, fmt.Errorf("unmarshal error: sharing.timeSlicing: %w", err)
			}
		}
		if v, ok := sharing["mps"]; ok && string(v) != "null" {
			if f.MPS, err = decodeReplicatedResources(v); err != nil {
				return devicePluginFile{}, fmt.Errorf("unmarshal error: sharing.mps: %w", err)
			}
		}
	}
	if f.Version == "" {
		f.Version = devicePluginVersion
	}
	if f.Version != devicePluginVersion {
		return devicePluginFile{}, fmt.Errorf("unknown version: %v", f.Version)
	}
	return f, nil
}

func decodeReplicatedResources(raw json.RawMessage) (*replicatedResources, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	rr := &replicatedResources{}
	if v, ok := fields["renameByDefault"]; ok {
		if err := json.Unmarshal(v, &rr.RenameByDefault); err != nil {
			return nil, fmt.Errorf("renameByDefault: %w", err)
		}
	}
	if v, ok := fields["failRequestsGreaterThanOne"]; ok {
		if err := json.Unmarshal(v, &rr.FailRequestsGreaterThanOne); err != nil {
			return nil, fmt.Errorf("failRequestsGreaterThanOne: %w", err)
		}
	}
	v, ok := fields["resources"]
	if !ok {
		return nil, errors.New("no resources specified")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return nil, fmt.Errorf("resources: %w", err)
	}
	if len(items) == 0 {
		return nil, errors.New("no resources specified")
	}
	for i, item := range items {
		r, err := decodeReplicatedResource(item)
		if err != nil {
			return nil, fmt.Errorf("resources[%d]: %w", i, err)
		}
		rr.Resources = append(rr.Resources, r)
	}
	return rr, nil
}

func decodeReplicatedResource(raw json.RawMessage) (replicatedResource, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return replicatedResource{}, err
	}
	var r replicatedResource
	v, ok := fields["name"]
	if !ok {
		return replicatedResource{}, errors.New("no resource name specified")
	}
	var err error
	if r.Name, err = decodeResourceName(v); err != nil {
		return replicatedResource{}, fmt.Errorf("name: %w", err)
	}
	devices, ok := fields["devices"]
	if !ok {
		devices = json.RawMessage(`"all"`)
	}
	if err := checkReplicatedDevices(devices); err != nil {
		return replicatedResource{}, fmt.Errorf("devices: %w", err)
	}
	v, ok = fields["replicas"]
	if !ok {
		return replicatedResource{}, errors.New("no replicas specified")
	}
	if err := json.Unmarshal(v, &r.Replicas); err != nil {
		return replicatedResource{}, fmt.Errorf("replicas: %w", err)
	}
	if r.Replicas < 2 {
		return replicatedResource{}, errors.New("number of replicas must be >= 2")
	}
	if v, ok := fields["rename"]; ok {
		if r.Rename, err = decodeResourceName(v); err != nil {
			return replicatedResource{}, fmt.Errorf("rename: %w", err)
		}
	}
	return r, nil
}

// decodeResourceName reads a resource name as ResourceName.UnmarshalJSON.
func decodeResourceName(raw json.RawMessage) (string, error) {
	var n string
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", err
	}
	if !strings.HasPrefix(n, resourcePrefix) {
		n = resourcePrefix + n
	}
	if len(n) > maxResourceNameLength {
		return "", fmt.Errorf("fully-qualified resource name must be %v characters or less: %v", maxResourceNameLength, n)
	}
	if errs := validation.IsDNS1123Subdomain(strings.TrimPrefix(n, resourcePrefix)); len(errs) > 0 {
		return "", fmt.Errorf("incorrect format for resource name '%v': %v", n, errs)
	}
	return n, nil
}

// checkReplicatedDevices refuses what ReplicatedDevices.UnmarshalJSON refuses.
func checkReplicatedDevices(raw json.RawMessage) error {
	var word string
	if err := json.Unmarshal(raw, &word); err == nil {
		if word != "all" {
			return fmt.Errorf("devices set as '%v' but the only valid string input is 'all'", word)
		}
		return nil
	}
	var count int
	if err := json.Unmarshal(raw, &count); err == nil {
		if count <= 0 {
			return fmt.Errorf("devices set as '%v' but a count of devices must be > 0", count)
		}
		return nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("unrecognized type for devices spec: %v", string(raw))
	}
	for _, item := range list {
		var index uint64
		if err := json.Unmarshal(item, &index); err == nil {
			continue
		}
		var ref string
		if err := json.Unmarshal(item, &ref); err == nil && (isGPUIndex(ref) || isMIGIndex(ref) || isDeviceUUID(ref)) {
			continue
		}
		return fmt.Errorf("unsupported type for device in devices list: %s", item)
	}
	return nil
}

func isGPUIndex(s string) bool {
	_, err := strconv.ParseUint(s, 10, 0)
	return err == nil
}

func isMIGIndex(s string) bool {
	gpu, mig, ok := strings.Cut(s, ":")
	return ok && isGPUIndex(gpu) && isGPUIndex(mig)
}

// isDeviceUUID accepts GPU-<uuid>, MIG-<uuid> and MIG-GPU-<uuid>/<gi>/<ci>.
func isDeviceUUID(s string) bool {
	if rest, ok := strings.CutPrefix(s, "GPU-"); ok {
		_, err := uuid.Parse(rest)
		return err == nil
	}
	rest, ok := strings.CutPrefix(s, "MIG-")
	if !ok {
		return false
	}
	if _, err := uuid.Parse(rest); err == nil {
		return true
	}
	parts := strings.SplitN(rest, "/", 3)
	return len(parts) == 3 && strings.HasPrefix(parts[0], "GPU-") && isDeviceUUID(parts[0]) && isGPUIndex(parts[1]) && isGPUIndex(parts[2])
}

// checkResources refuses a resources section the plugin cannot decode: lists gpus and mig of
// items with a pattern and a valid name. The plugin then ignores the section
// (DisableResourceNamingInConfig), and so does the simulator.
func checkResources(raw json.RawMessage) error {
	var lists map[string]json.RawMessage
	if err := json.Unmarshal(raw, &lists); err != nil {
		return err
	}
	for _, key := range []string{"gpus", "mig"} {
		v, ok := lists[key]
		if !ok {
			continue
		}
		var items []map[string]json.RawMessage
		if err := json.Unmarshal(v, &items); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		for i, item := range items {
			pattern, hasPattern := item["pattern"]
			name, hasName := item["name"]
			if !hasPattern {
				return fmt.Errorf("%s[%d]: resources must have a 'pattern' field set", key, i)
			}
			if !hasName {
				return fmt.Errorf("%s[%d]: resources must have a 'name' field set", key, i)
			}
			var p string
			if err := json.Unmarshal(pattern, &p); err != nil {
				return fmt.Errorf("%s[%d].pattern: %w", key, i, err)
			}
			if _, err := decodeResourceName(name); err != nil {
				return fmt.Errorf("%s[%d].name: %w", key, i, err)
			}
		}
	}
	return nil
}
