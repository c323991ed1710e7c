// Reading the mig-parted entry a node's label selects, and resolving it into a target per GPU as mig-parted does.

package sim

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/gpupool/gpupool/internal/mig"
)

// migManagerNotRunning is a mig-parted ConfigMap the real mig-manager cannot start with: none
// named in the ClusterPolicy, the ConfigMap missing, or no config.yaml in it.
type migManagerNotRunning struct{ err error }

func (e *migManagerNotRunning) Error() string { return e.err.Error() }

// readEntry reads the mig-parted config file, fresh from the API server (the real mig-manager
// reads the mounted file each time it runs mig-parted), decodes it as mig-parted does and
// selects the entry named value. A *migManagerNotRunning error means there is no file to read;
// any other error is a file mig-parted refuses, or a name it does not hold.
func (r *reconciler) readEntry(ctx context.Context, op operatorSettings, value string) ([]migConfigSpec, error) {
	if op.MIGConfigMap == "" {
		return nil, &migManagerNotRunning{fmt.Errorf("ClusterPolicy %s sets no spec.migManager.config.name, and the simulator has no generated config", op.Policy)}
	}
	key := op.migConfigMap()
	var cm corev1.ConfigMap
	if err := r.apiReader.Get(ctx, key, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &migManagerNotRunning{fmt.Errorf("ConfigMap %s does not exist: mig-manager's pod cannot mount it", key)}
		}
		return nil, fmt.Errorf("reading ConfigMap %s: %w", key, err)
	}
	data, ok := cm.Data[migPartedConfigKey]
	if !ok {
		return nil, &migManagerNotRunning{fmt.Errorf("ConfigMap %s has no key %s: mig-manager finds no config file", key, migPartedConfigKey)}
	}
	f, err := decodeMIGParted([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("error parsing config file %s of ConfigMap %s: %w", migPartedConfigKey, key, err)
	}
	specs, err := f.selectMIGConfig(value)
	if err != nil {
		return nil, fmt.Errorf("error selecting MIG config from ConfigMap %s: %w", key, err)
	}
	return specs, nil
}

// matchingSpecs returns, per GPU index, the specs that select it, in file order, as
// mig-parted's WalkSelectedMigConfigForEachGPU visits them.
func (n *Node) matchingSpecs(specs []migConfigSpec) map[int][]migConfigSpec {
	out := map[int][]migConfigSpec{}
	hw := n.migDeviceID()
	for _, s := range specs {
		if !s.matchesDeviceFilter(hw) {
			continue
		}
		for i := range n.gpus {
			if s.matchesDevice(i) {
				out[i] = append(out[i], s)
			}
		}
	}
	return out
}

// alreadyApplied is mig-parted's assert of the selected entry against the GPUs: every GPU must
// be selected, and the last spec that selects it must hold: the same MIG mode and, with MIG
// on, the same profile counts.
func (n *Node) alreadyApplied(specs []migConfigSpec, gpus []GPUState) bool {
	matched := n.matchingSpecs(specs)
	for i := range n.gpus {
		if len(matched[i]) == 0 {
			return false
		}
		s := matched[i][len(matched[i])-1]
		if s.MIGEnabled != gpus[i].MIGEnabled {
			return false
		}
		if s.MIGEnabled && !maps.Equal(map[string]int(gpus[i].Layout()), s.MIGDevices) {
			return false
		}
	}
	return true
}

// resolveEntry turns an entry's specs into a target per selected GPU; a later spec overrides
// an earlier one for the same GPU, as mig-parted applies them in order. GPUs no spec selects
// are absent: mig-parted leaves them alone (an index the node does not have selects nothing).
// The whole entry is checked (profiles exist and fit) before anything changes. Counts of 0
// create nothing.
func (n *Node) resolveEntry(specs []migConfigSpec) (map[int]gpuTarget, error) {
	targets := map[int]gpuTarget{}
	for i, list := range n.matchingSpecs(specs) {
		s := list[len(list)-1]
		t := gpuTarget{MIGEnabled: s.MIGEnabled, Layout: mig.Layout{}}
		for p, c := range s.MIGDevices {
			if c > 0 {
				t.Layout[p] = c
			}
		}
		if s.MIGEnabled {
			if _, err := ChooseSlots(n.slotProfiles(i), t.Layout); err != nil {
				return nil, fmt.Errorf("GPU %d (%s): %w", i, n.model.Name, err)
			}
		}
		targets[i] = t
	}
	return targets, nil
}
