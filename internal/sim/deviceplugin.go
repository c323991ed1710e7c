package sim

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// DefaultDevicePluginConfigMapName is the ConfigMap gpupool's controller writes the device
// plugin's sharing configs into; Options.DevicePluginConfigMap defaults to it, in the
// namespace of Options.ConfigMap.
const DefaultDevicePluginConfigMapName = "gpupool-device-plugin-config"

// Event reasons the simulated device plugin records on the Node. Both stand for a device
// plugin that fails to start with the config the node's label names; the real one then
// crash-loops and says why only in its log, which nobody running the simulator reads.
const (
	// reasonDevicePluginConfigInvalid: the named config does not parse; the plugin keeps
	// advertising what it advertised before.
	reasonDevicePluginConfigInvalid = "DevicePluginConfigInvalid"
	// reasonSharingUnsupported: the config asks for MPS on a node with MIG devices; the
	// simulator advertises every device exclusively.
	reasonSharingUnsupported = "DevicePluginSharingUnsupported"
)

// devicePluginMemory is what the simulated device plugin remembers about a node.
type devicePluginMemory struct {
	// warned is the note of the Warning last recorded for the config in force, so that a
	// failing config is reported once rather than on every reconcile of the node; it is
	// cleared when a config is applied, so the next failure is reported again.
	warned string
}

// invalidConfigError is a device plugin config that cannot be read, as opposed to the
// ConfigMap being unreachable.
type invalidConfigError struct{ err error }

func (e *invalidConfigError) Error() string { return e.err.Error() }
func (e *invalidConfigError) Unwrap() error { return e.err }

// readSharing reads the device plugin config the node's nvidia.com/device-plugin.config label
// names, fresh from the API server: a cached copy may not hold yet the key that gpupool's
// controller wrote just before it set the label, and advertising exclusively for that moment
// would be a flap the real plugin (which reads a synced file once the label changes) does not
// show. No label, no ConfigMap, or no such key all fall back to exclusive devices, as the real
// plugin falls back to its default config. It also returns where the setting came from, for
// the log. A key that does not parse is an *invalidConfigError.
func (r *reconciler) readSharing(ctx context.Context, name string) (v1alpha1.SharingConfig, string, error) {
	none := v1alpha1.SharingConfig{Mode: v1alpha1.SharingNone}
	if name == "" {
		return none, "no " + v1alpha1.LabelDevicePluginConfig + " label", nil
	}
	var cm corev1.ConfigMap
	if err := r.apiReader.Get(ctx, r.devicePluginConfigMap, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return none, fmt.Sprintf("ConfigMap %s does not exist", r.devicePluginConfigMap), nil
		}
		return none, "", fmt.Errorf("reading ConfigMap %s: %w", r.devicePluginConfigMap, err)
	}
	data, ok := cm.Data[name]
	if !ok {
		return none, fmt.Sprintf("ConfigMap %s has no key %q", r.devicePluginConfigMap, name), nil
	}
	s, err := nvidia.ParseDevicePluginConfig([]byte(data))
	if err != nil {
		return none, "", &invalidConfigError{fmt.Errorf("key %q of ConfigMap %s: %w", name, r.devicePluginConfigMap, err)}
	}
	if !sharesWholeGPUs(s) {
		s = none
	}
	return s, fmt.Sprintf("key %q of ConfigMap %s", name, r.devicePluginConfigMap), nil
}

// devicePlugin is the device plugin's part of a node's reconcile: it applies the sharing
// config the node's label names and makes the node's capacity and allocatable advertise the
// GPUs' current devices under it. It writes through the status subresource (a status change
// sent to the main resource is dropped) and only the nvidia.com/ keys, so cpu, memory and pods
// stay as they are. While mig-manager has the device plugin paused, the node is left alone.
//
// Time-slicing shares whole GPUs and MIG devices alike (nvidia.com/gpu.shared,
// nvidia.com/mig-<profile>.shared), MPS whole GPUs only (see advertisedDevices). A config that
// does not parse leaves the node as it is and records a Warning, as a plugin that crashes on
// start advertises nothing new. MPS on a node with MIG devices is refused as a whole (see
// checkSharing): every device is advertised exclusively and a Warning says why.
func (r *reconciler) devicePlugin(ctx context.Context, n *Node, node *corev1.Node) error {
	if node.Labels[labelDevicePluginDeploy] == pausedValue {
		return nil
	}
	name := node.Labels[v1alpha1.LabelDevicePluginConfig]
	log := logf.FromContext(ctx).WithValues("deviceConfig", name)
	gpus, err := n.GPUs()
	if err != nil {
		return fmt.Errorf("device plugin on node %s: %w", n.name, err)
	}
	sharing, source, err := r.readSharing(ctx, name)
	var invalid *invalidConfigError
	if errors.As(err, &invalid) {
		r.warnOnce(ctx, n, node, reasonDevicePluginConfigInvalid,
			fmt.Sprintf("device plugin config %q cannot be applied on node %s, devices unchanged: %v", name, n.name, invalid))
		return nil
	}
	if err != nil {
		return fmt.Errorf("device plugin on node %s: %w", n.name, err)
	}
	if err := checkSharing(gpus, sharing); err != nil {
		r.warnOnce(ctx, n, node, reasonSharingUnsupported,
			fmt.Sprintf("device plugin config %q refused on node %s, devices advertised exclusively: %v", name, n.name, err))
		sharing, source = v1alpha1.SharingConfig{Mode: v1alpha1.SharingNone}, "refused: "+err.Error()
	} else {
		n.devicePlugin.warned = ""
	}

	n.mu.Lock()
	previous := n.sharing
	n.sharing = sharing
	n.mu.Unlock()
	if previous != sharing {
		// The real plugin restarts on a new config; pods keep the devices they were given.
		log.Info("device plugin restarted with a new sharing setting", "mode", sharing.Mode, "replicas", sharing.Replicas,
			"from", source, "previousMode", previous.Mode, "previousReplicas", previous.Replicas)
	}

	patch := capacityPatch(node.Status, Capacity(gpus, sharing))
	if len(patch) == 0 {
		return nil
	}
	body, err := jsonPatchBody(map[string]any{"status": patch})
	if err != nil {
		return err
	}
	if err := r.client.Status().Patch(ctx, node, client.RawPatch(types.MergePatchType, body), client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("device plugin: patching the capacity of node %s: %w", n.name, err)
	}
	log.Info("advertised devices", "capacity", patch["capacity"])
	return nil
}

// warnOnce records a Warning on the node unless the same note was the last one recorded.
func (r *reconciler) warnOnce(ctx context.Context, n *Node, node *corev1.Node, reason, note string) {
	if n.devicePlugin.warned == note {
		return
	}
	n.devicePlugin.warned = note
	logf.FromContext(ctx).Info("device plugin cannot apply its config", "reason", reason, "message", note)
	r.devicePluginRecorder.Eventf(node, nil, corev1.EventTypeWarning, reason, "StartPlugin", "%s", note)
}

// nodesForConfigMap maps a change of the device plugin's ConfigMap to a reconcile of every
// simulated node, since any node's label may name a key that changed. The real plugin re-reads
// its config only when the label changes (or it restarts); the simulator re-reads on every
// change as well, which differs only for a key edited in place, something gpupool never does
// (its keys are named after their content).
func (r *reconciler) nodesForConfigMap(_ context.Context, o client.Object) []ctrl.Request {
	if o.GetNamespace() != r.devicePluginConfigMap.Namespace || o.GetName() != r.devicePluginConfigMap.Name {
		return nil
	}
	out := make([]ctrl.Request, 0, len(r.nodes))
	for name := range r.nodes {
		out = append(out, ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
	}
	return out
}
