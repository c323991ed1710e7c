package sim

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// seedEntries returns the mig-parted entries of the nodes' initial presets, one spec per GPU
// model filtered by its PCI ID (the shape of NVIDIA's config-default.yaml, whose entries also
// serve several models), so the initial mig.config label values name real entries and
// re-applying them restores the initial layout.
func seedEntries(nodes []*Node) (map[string][]migConfigSpec, error) {
	out := map[string][]migConfigSpec{}
	seen := map[string]map[string]bool{} // preset -> models already covered
	for _, n := range nodes {
		preset := n.initialConfig
		if preset == PresetAllDisabled {
			out[preset] = []migConfigSpec{{AllDevices: true}}
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
		out[preset] = append(out[preset], migConfigSpec{
			DeviceFilter: []string{n.PCIDeviceID()},
			AllDevices:   true,
			MIGEnabled:   t.MIGEnabled,
			MIGDevices:   maps.Clone(map[string]int(t.Layout)),
		})
	}
	return out, nil
}

// encodeMIGParted writes a mig-parted config file in NVIDIA's format.
func encodeMIGParted(f migPartedFile) ([]byte, error) {
	configs := map[string]any{}
	for name, specs := range f.Configs {
		items := make([]any, 0, len(specs))
		for _, s := range specs {
			item := map[string]any{"mig-enabled": s.MIGEnabled}
			if s.AllDevices {
				item["devices"] = "all"
			} else {
				item["devices"] = s.Devices
			}
			if len(s.DeviceFilter) > 0 {
				item["device-filter"] = s.DeviceFilter
			}
			if s.MIGDevices != nil {
				item["mig-devices"] = s.MIGDevices
			}
			items = append(items, item)
		}
		configs[name] = items
	}
	return yaml.Marshal(map[string]any{"version": migPartedVersion, "mig-configs": configs})
}

// waitClusterPolicy reads the ClusterPolicy, waiting up to timeout for it (and its
// status.namespace) to appear.
func waitClusterPolicy(ctx context.Context, reader client.Reader, name string, timeout time.Duration) (operatorSettings, error) {
	var op operatorSettings
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		op, last = readClusterPolicy(ctx, reader, name)
		return last == nil, nil
	})
	if err != nil {
		return operatorSettings{}, fmt.Errorf("gpusim: waiting for the GPU Operator's ClusterPolicy: %w (last: %w)", err, last)
	}
	return op, nil
}

// seedConfig adds the entries seedEntries returns to the mig-parted ConfigMap the ClusterPolicy
// names, creating it when absent and never changing an entry that exists.
func seedConfig(ctx context.Context, c client.Client, reader client.Reader, op operatorSettings, nodes []*Node, log logr.Logger) error {
	if op.MIGConfigMap == "" {
		return fmt.Errorf("gpusim: ClusterPolicy %s names no mig-parted ConfigMap (spec.migManager.config.name) to seed", op.Policy)
	}
	key := op.migConfigMap()
	entries, err := seedEntries(nodes)
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
		cfg := migPartedFile{Version: migPartedVersion, Configs: map[string][]migConfigSpec{}}
		if current := cm.Data[migPartedConfigKey]; len(bytes.TrimSpace([]byte(current))) > 0 {
			if cfg, err = decodeMIGParted([]byte(current)); err != nil {
				return fmt.Errorf("reading its mig-parted config: %w", err)
			}
			if cfg.Configs == nil {
				cfg.Configs = map[string][]migConfigSpec{}
			}
		}
		var added []string
		for _, name := range slices.Sorted(maps.Keys(entries)) {
			if _, ok := cfg.Configs[name]; !ok {
				cfg.Configs[name] = entries[name]
				added = append(added, name)
			}
		}
		if len(added) == 0 {
			return nil
		}
		data, err := encodeMIGParted(cfg)
		if err != nil {
			return err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[migPartedConfigKey] = string(data)
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

// seedDevicePluginConfig creates the device plugin's ConfigMap the ClusterPolicy names when it
// does not exist, holding one exclusive config under the ClusterPolicy's default key
// (spec.devicePlugin.config.default, or "default" when unset), as the GPU Operator is deployed
// with a config the plugin can fall back to. An existing ConfigMap is never changed: its keys
// are gpupool's controller's, or the user's.
func seedDevicePluginConfig(ctx context.Context, c client.Client, reader client.Reader, op operatorSettings, log logr.Logger) error {
	if op.DevicePluginConfigMap == "" {
		return nil
	}
	key := op.devicePluginConfigMap()
	err := reader.Get(ctx, key, &corev1.ConfigMap{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("gpusim: looking up the device plugin ConfigMap %s: %w", key, err)
	}
	name := op.DevicePluginDefault
	if name == "" {
		name = "default"
	}
	data := map[string]string{name: exclusiveDevicePluginConfig(op.MIGStrategy)}
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

// exclusiveDevicePluginConfig is a device plugin config file without sharing.
func exclusiveDevicePluginConfig(strategy string) string {
	if strategy == "" {
		strategy = migStrategyMixed
	}
	return "version: v1\nflags:\n  migStrategy: " + strategy + "\n"
}
