package nvidia

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

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
