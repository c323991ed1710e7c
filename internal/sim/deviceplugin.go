package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// LabelDevicePluginConfig names the device plugin config key to apply on a node; the GPU
// Operator runs NVIDIA's config-manager with NODE_LABEL set to it
// (NVIDIA/gpu-operator assets/state-device-plugin/0500_daemonset.yaml,
// NVIDIA/k8s-device-plugin cmd/config-manager/main.go DefaultConfigLabel).
const LabelDevicePluginConfig = "nvidia.com/device-plugin.config"

// Event reasons the simulated device plugin records on the Node. The real plugin says why it
// does not start only in its log (and crash-loops), which nobody running the simulator reads.
const (
	// reasonDevicePluginConfigInvalid: config-manager cannot select a config (the ConfigMap is
	// missing or empty, the label or the default names a key it lacks) or the selected file
	// does not decode.
	reasonDevicePluginConfigInvalid = "DevicePluginConfigInvalid"
	// reasonDevicePluginRefused: the plugin decoded its config but refuses to start with it on
	// these GPUs (MPS under the mixed strategy, MPS with MIG devices, too many MPS replicas,
	// an unusable MIG layout under the single strategy).
	reasonDevicePluginRefused = "DevicePluginRefused"
)

// devicePluginMemory is what the simulated device plugin remembers about a node.
type devicePluginMemory struct {
	// warned is the note of the Warning last recorded, so that a refusal is reported once
	// rather than on every reconcile of the node; it is cleared when the plugin starts, so the
	// next refusal is reported again.
	warned string
}

// refusal is a config the device plugin (or its config-manager) will not run with, as opposed
// to the API server being unreachable.
type refusal struct {
	reason string
	err    error
}

func (e *refusal) Error() string { return e.err.Error() }
func (e *refusal) Unwrap() error { return e.err }

// refuse is the device plugin refusing its config, as NVIDIA's does: it advertises nothing.
func refuse(format string, args ...any) error {
	return &refusal{reason: reasonDevicePluginConfigInvalid, err: fmt.Errorf(format, args...)}
}

// selectConfig is NVIDIA's config-manager (cmd/config-manager/main.go updateConfigName) over
// the ConfigMap named by the ClusterPolicy, read fresh from the API server in the operator's
// namespace: a cached copy may not hold yet the key gpupool's controller wrote just before it
// set the label. The ConfigMap's keys are the available configs. A set label must name one;
// an unset label takes spec.devicePlugin.config.default, which must exist when set, else the
// empty config (FALLBACK_STRATEGIES=empty). A missing ConfigMap keeps the plugin's pod from
// starting at all, and an empty one has no configs to choose from. The chosen file is then
// decoded, and the MIG strategy is the ClusterPolicy's (env MIG_STRATEGY) when it sets one,
// else the file's flags.migStrategy, else none. Errors the plugin would not start with are
// *refusal.
func (r *reconciler) selectConfig(ctx context.Context, op operatorSettings, label string) (pluginRun, error) {
	run := pluginRun{}
	if op.DevicePluginConfigMap != "" {
		key := op.devicePluginConfigMap()
		var cm corev1.ConfigMap
		if err := r.apiReader.Get(ctx, key, &cm); err != nil {
			if apierrors.IsNotFound(err) {
				return pluginRun{}, refuse(
					"ConfigMap %s does not exist: the device plugin's pod cannot mount it", key)
			}
			return pluginRun{}, fmt.Errorf("reading ConfigMap %s: %w", key, err)
		}
		files := map[string][]byte{}
		for k, v := range cm.Data {
			files[k] = []byte(v)
		}
		maps.Copy(files, cm.BinaryData)
		if len(files) == 0 {
			return pluginRun{}, refuse("ConfigMap %s: no configuration files available", key)
		}
		name := label
		if name == "" {
			name = op.DevicePluginDefault
		}
		if name != "" {
			data, ok := files[name]
			if !ok {
				return pluginRun{}, refuse("specified config %s does not exist in ConfigMap %s (keys: %v)",
					name, key, slices.Sorted(maps.Keys(files)))
			}
			f, err := decodeDevicePluginConfig(data)
			if err != nil {
				return pluginRun{}, refuse("unable to parse config file %s of ConfigMap %s: %v", name, key, err)
			}
			run.key, run.file = name, f
		}
	}
	run.strategy = migStrategyNone
	switch {
	case op.MIGStrategy != "":
		run.strategy = op.MIGStrategy
	case run.file.MIGStrategy != nil:
		run.strategy = *run.file.MIGStrategy
	}
	return run, nil
}

// devicePlugin is the device plugin's part of a node's reconcile: it selects and decodes the
// config, starts with it on the GPUs as they are now (see advertise) and makes the node's
// capacity and allocatable advertise the devices. A plugin that refuses to start advertises
// nothing: every nvidia.com/ resource of the node goes to 0, until a config it accepts is
// selected. It writes through the status subresource (a status change sent to the main
// resource is dropped) and only the nvidia.com/ keys, so cpu, memory and pods stay as they
// are. While mig-manager has the device plugin paused, the node is left alone. Under the
// plugin-silent fault, once an apply has restarted it, the plugin advertises nothing, without
// an Event (a plugin that hangs before it registers with the kubelet says nothing), until the
// fault is removed.
func (r *reconciler) devicePlugin(ctx context.Context, n *Node, node *corev1.Node, op operatorSettings, annotated Faults) error {
	if v := node.Labels[labelDevicePluginDeploy]; v == pausedValue || n.dra {
		return nil // paused by mig-manager, or not deployed on a node the DRA driver serves
	}
	label := node.Labels[LabelDevicePluginConfig]
	log := logf.FromContext(ctx).WithValues("deviceConfig", label)
	if n.pluginSilent {
		if annotated.merge(n.peekFaults()).PluginSilent {
			return r.silentPlugin(ctx, n, node)
		}
		n.pluginSilent = false
		log.Info("fault plugin-silent removed: the device plugin registers again")
	}
	gpus, err := n.GPUs()
	if err != nil {
		return fmt.Errorf("device plugin on node %s: %w", n.name, err)
	}
	run, err := r.selectConfig(ctx, op, label)
	var devices []device
	if err == nil {
		if devices, err = advertise(gpus, run); err != nil {
			err = &refusal{reason: reasonDevicePluginRefused, err: err}
		}
	}
	var refused *refusal
	if err != nil && !errors.As(err, &refused) {
		return fmt.Errorf("device plugin on node %s: %w", n.name, err)
	}

	n.mu.Lock()
	previous := n.plugin
	if refused != nil {
		n.plugin = nil
	} else {
		n.plugin = &run
	}
	n.mu.Unlock()

	want := capacityOf(devices)
	if refused != nil {
		r.warnOnce(ctx, n, node, refused.reason, fmt.Sprintf("device plugin on node %s does not start and advertises nothing: %v", n.name, refused))
		want = nothingAdvertised(node.Status)
	} else {
		n.devicePlugin.warned = ""
		if previous == nil || !sameRun(*previous, run) {
			// The real plugin restarts on a new config; pods keep the devices they were given.
			log.Info("device plugin started", "config", run.key, "migStrategy", run.strategy, "sharing", run.file.sharingStrategy())
		}
	}

	patch, err := r.patchCapacity(ctx, node, want)
	if err != nil || len(patch) == 0 {
		return err
	}
	log.Info("advertised devices", "capacity", patch["capacity"])
	return nil
}

// patchCapacity writes the device-plugin resources of the node's status so that they equal
// want, and returns what it changed. The patch carries the resourceVersion the node was read
// at: the difference is computed from that read, and written over a newer node (the cache can
// lag the simulator's own last write) it would bring back a resource that is already gone, as
// a zero that the real kubelet never shows. The API server refuses such a stale patch with a
// conflict, and the reconcile runs again on the newer node.
func (r *reconciler) patchCapacity(ctx context.Context, node *corev1.Node, want corev1.ResourceList) (map[string]map[corev1.ResourceName]*string, error) {
	patch := capacityPatch(node.Status, want)
	if len(patch) == 0 {
		return nil, nil
	}
	body, err := jsonPatchBody(map[string]any{
		"metadata": map[string]any{"resourceVersion": node.ResourceVersion},
		"status":   patch,
	})
	if err != nil {
		return nil, err
	}
	if err := r.client.Status().Patch(ctx, node, client.RawPatch(types.MergePatchType, body), client.FieldOwner(FieldManager)); err != nil {
		return nil, fmt.Errorf("device plugin: patching the capacity of node %s: %w", node.Name, err)
	}
	return patch, nil
}

// silentPlugin is the plugin-silent fault: the node advertises none of its device-plugin
// resources, and no device is handed out.
func (r *reconciler) silentPlugin(ctx context.Context, n *Node, node *corev1.Node) error {
	n.mu.Lock()
	n.plugin = nil
	n.mu.Unlock()
	patch, err := r.patchCapacity(ctx, node, nothingAdvertised(node.Status))
	if err != nil || len(patch) == 0 {
		return err
	}
	logf.FromContext(ctx).Info("fault plugin-silent: the device plugin advertises nothing", "capacity", patch["capacity"])
	return nil
}

func sameRun(a, b pluginRun) bool { return reflect.DeepEqual(a, b) }

// warnOnce records a Warning on the node unless the same note was the last one recorded.
func (r *reconciler) warnOnce(ctx context.Context, n *Node, node *corev1.Node, reason, note string) {
	if n.devicePlugin.warned == note {
		return
	}
	n.devicePlugin.warned = note
	logf.FromContext(ctx).Info("device plugin does not start", "reason", reason, "message", note)
	r.devicePluginRecorder.Eventf(node, nil, corev1.EventTypeWarning, reason, "StartPlugin", "%s", note)
}

// nodesForConfigMap maps a change of the device plugin's ConfigMap (the one the ClusterPolicy
// names, in its namespace) to a reconcile of every simulated node, since any node's label may
// name a key that changed. The real
// device plugin re-reads its config only when the label changes (or it restarts); the
// simulator re-reads on every change as well, which differs only for a key edited in place,
// something gpupool never does (its keys are named after their content).
func (r *reconciler) nodesForConfigMap(ctx context.Context, o client.Object) []ctrl.Request {
	op, err := readClusterPolicy(ctx, r.client, r.clusterPolicy)
	if err != nil || o.GetNamespace() != op.Namespace || o.GetName() != op.DevicePluginConfigMap {
		return nil
	}
	return r.allNodes()
}

// allNodes is a reconcile request for every simulated node.
func (r *reconciler) allNodes() []ctrl.Request {
	out := make([]ctrl.Request, 0, len(r.nodes))
	for name := range r.nodes {
		out = append(out, ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
	}
	return out
}
