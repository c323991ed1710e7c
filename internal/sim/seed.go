package sim

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/nvidia"
)

// SeedEntries returns the mig-parted entries of the nodes' initial presets, one device spec
// per GPU model filtered by device ID (the shape of the GPU Operator's default config, whose
// entries also serve several models), so the initial mig.config label values name real
// entries and re-applying them restores the initial layout.
func SeedEntries(nodes []*Node) (map[string][]nvidia.DeviceSpec, error) {
	out := map[string][]nvidia.DeviceSpec{}
	seen := map[string]map[string]bool{} // preset -> models already covered
	for _, n := range nodes {
		preset := n.initialConfig
		if preset == nvidia.AllDisabled {
			out[preset] = []nvidia.DeviceSpec{{Devices: nvidia.Devices{All: true}}}
			continue
		}
		if seen[preset][n.model.Name] {
			continue
		}
		if seen[preset] == nil {
			seen[preset] = map[string]bool{}
		}
		seen[preset][n.model.Name] = true
		t, err := presetTarget(preset, n.profiles[0])
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.name, err)
		}
		out[preset] = append(out[preset], nvidia.DeviceSpec{
			DeviceFilter: []string{n.pciDeviceID()},
			Devices:      nvidia.Devices{All: true},
			MIGEnabled:   t.MIGEnabled,
			MIGDevices:   maps.Clone(map[string]int(t.Layout)),
		})
	}
	return out, nil
}

// seedConfig adds the entries SeedEntries returns to the ConfigMap when they are missing,
// creating it when absent and never changing an entry that exists.
func seedConfig(ctx context.Context, c client.Client, reader client.Reader, key types.NamespacedName, nodes []*Node, log logr.Logger) error {
	entries, err := SeedEntries(nodes)
	if err != nil {
		return fmt.Errorf("gpusim: seeding ConfigMap %s: %w", key, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cm corev1.ConfigMap
		err := reader.Get(ctx, key, &cm)
		create := apierrors.IsNotFound(err)
		if err != nil && !create {
			return err
		}
		cfg := nvidia.Config{Version: nvidia.ConfigVersion, MIGConfigs: map[string][]nvidia.DeviceSpec{}}
		if current := cm.Data[nvidia.ConfigMapKey]; len(bytes.TrimSpace([]byte(current))) > 0 {
			if cfg, err = nvidia.ParseMIGPartedConfig([]byte(current)); err != nil {
				return fmt.Errorf("reading its mig-parted config: %w", err)
			}
		}
		var added []string
		for _, name := range slices.Sorted(maps.Keys(entries)) {
			if _, ok := cfg.MIGConfigs[name]; !ok {
				cfg.MIGConfigs[name] = entries[name]
				added = append(added, name)
			}
		}
		if len(added) == 0 {
			return nil
		}
		data, err := cfg.Marshal()
		if err != nil {
			return err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[nvidia.ConfigMapKey] = string(data)
		if create {
			cm.ObjectMeta = metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}
			err = c.Create(ctx, &cm, client.FieldOwner(FieldManager))
		} else {
			err = c.Update(ctx, &cm, client.FieldOwner(FieldManager))
		}
		if err == nil {
			log.Info("seeded the mig-parted config", "configMap", key.String(), "entries", added)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("gpusim: seeding ConfigMap %s: %w", key, err)
	}
	return nil
}

// seedDevicePluginConfig creates the device plugin's ConfigMap with gpupool's exclusive config
// (gpupool-none) when it does not exist, as the GPU Operator is deployed with a config the
// plugin can fall back to. An existing ConfigMap is never changed: its keys are gpupool's
// controller's, or the user's.
func seedDevicePluginConfig(ctx context.Context, c client.Client, reader client.Reader, key types.NamespacedName, log logr.Logger) error {
	err := reader.Get(ctx, key, &corev1.ConfigMap{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("gpusim: looking up the device plugin ConfigMap %s: %w", key, err)
	}
	data, err := nvidia.UpdateDevicePluginConfigMap(nil, nil, nil)
	if err != nil {
		return fmt.Errorf("gpusim: rendering the device plugin ConfigMap %s: %w", key, err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Data: data}
	if err := c.Create(ctx, cm, client.FieldOwner(FieldManager)); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil // created meanwhile, by gpupool's controller or another simulator
		}
		return fmt.Errorf("gpusim: creating the device plugin ConfigMap %s: %w", key, err)
	}
	log.Info("seeded the device plugin config", "configMap", key.String(), "keys", slices.Sorted(maps.Keys(data)))
	return nil
}
