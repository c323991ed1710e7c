// Package sim is a simulated NVIDIA GPU Operator for local control planes: for every simulated
// GPU node it plays NVIDIA's mig-manager (applies the mig-parted config entry named by label
// nvidia.com/mig.config, reports nvidia.com/mig.config.state) and k8s-device-plugin (advertises
// nvidia.com/mig-<profile> and nvidia.com/gpu from the current layout, hands concrete devices to
// the pods bound to the node), backed by one go-nvml mock server per node whose MIG state is only
// ever changed through NVML calls, as mig-parted changes a real GPU. It also runs gpupool's real
// node agent against that mock, so the controller meets the same GPUNode objects it meets in
// production.
//
// The device plugin applies the config that label nvidia.com/device-plugin.config names, a key
// of Options.DevicePluginConfigMap (read fresh from the API server on every change of the label
// or the ConfigMap). Time-slicing or MPS with r replicas advertises each GPU with MIG disabled
// as r devices of nvidia.com/gpu.shared, named <GPU-UUID>::<n>, and no nvidia.com/gpu.
// Time-slicing also shares MIG devices, as gpupool's time-slicing configs list every
// nvidia.com/mig-<profile> resource with renameByDefault: each MIG device is r devices of
// nvidia.com/mig-<profile>.shared, named <MIG-UUID>::<n>, and nvidia.com/mig-<profile> is not
// advertised; under MPS, MIG devices stay exclusive. A pod gets replicas of the least shared
// devices first, and the node agent lists it on the GPU or MIG device a replica belongs to, so
// it keeps mig-manager from changing that GPU like any other holder. No label, no ConfigMap or
// no such key means exclusive devices, the real plugin's default. A key that does not parse
// changes nothing advertised and records a Warning Event (DevicePluginConfigInvalid) on the
// Node, as a plugin that crashes on start would. MPS on a node with any MIG device is refused
// as a whole, as the real plugin refuses to start: every device is advertised exclusively and
// a Warning Event (DevicePluginSharingUnsupported) says "MPS is not supported on MIG devices".
// Pods keep the devices or replicas they hold when the setting changes, as running pods do on
// a real node.
//
// It exists because neither the GPU Operator nor GPUs are available where `make demo` and the
// end-to-end suite run (kwok simulates kubelets, not drivers), and because the controller's
// protocol with the operator (immutable entry names, label flips, pending/failed states, in-use
// refusals, operand pauses) can only be tested against something that keeps that protocol as
// strictly as the real one. Fault knobs (Faults, AnnotationFault, AnnotationApplyDelay) make
// the operator's known failure modes reproducible.
//
// Product code never imports this package; only cmd/gpusim and tests do.
package sim
