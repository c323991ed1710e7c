// Package sim is a simulated NVIDIA GPU Operator for local control planes: for every simulated
// GPU node it plays NVIDIA's mig-manager (applies the mig-parted config entry named by label
// nvidia.com/mig.config, reports nvidia.com/mig.config.state) and k8s-device-plugin (advertises
// nvidia.com/mig-<profile> and nvidia.com/gpu from the current layout, hands concrete devices to
// the pods bound to the node), backed by one go-nvml mock server per node whose MIG state is only
// ever changed through NVML calls, as mig-parted changes a real GPU. It also runs gpupool's real
// node agent against that mock, so the controller meets the same GPUNode objects it meets in
// production.
//
// The simulator behaves like NVIDIA's components, not like gpupool: it never imports gpupool's
// own writers and readers of the operator's formats (internal/nvidia, internal/planner), so a
// mistake in what gpupool writes is refused here as the real operator would refuse it. It reads
// mig-parted's config file and the device plugin's with its own decoders, written from NVIDIA's
// schemas (migparted.go, devicepluginconfig.go, each citing the NVIDIA files it follows), and
// takes its settings where the GPU Operator takes them (clusterpolicy.go): the ClusterPolicy's
// spec.mig.strategy, spec.migManager.config.name and spec.devicePlugin.config.name and
// .default, with both ConfigMaps read only in the ClusterPolicy's status.namespace.
//
// mig-manager validates the file and the selected name first: a file mig-parted's decoder
// refuses (unknown field, other version, negative count, ...) or a name it lacks sets state
// failed without pending or pausing anything. An entry that already holds on every GPU
// succeeds at once; otherwise it goes pending, pauses the operands, refuses GPUs in use, and
// rebuilds only the GPUs whose layout changes. Entries select GPUs by index and by
// device-filter against the GPUs' PCI IDs, the ones NVIDIA's own config lists (models.go).
//
// The device plugin applies the key of the device plugin ConfigMap that label
// nvidia.com/device-plugin.config names (the ClusterPolicy's default key without the label),
// read fresh from the API server on every change of the label or the ConfigMap, under the
// ClusterPolicy's MIG strategy. Each resource a sharing config lists is advertised as replicas
// <UUID>::<n>, renamed <name>.shared under renameByDefault (nvidia.com/gpu.shared,
// nvidia.com/mig-<profile>.shared); resources not listed stay exclusive. What NVIDIA's
// config-manager or plugin refuses (a key the ConfigMap lacks, a missing ConfigMap, a file
// that does not decode, MPS under the mixed strategy, more than 48 MPS replicas, MPS with MIG
// devices) makes the plugin advertise nothing: every nvidia.com/ resource of the node goes to
// 0, with a Warning Event (DevicePluginConfigInvalid or DevicePluginRefused) saying why, until
// a config it accepts is selected. A pod gets replicas of the least shared devices first, and
// the node agent lists it on the GPU or MIG device a replica belongs to, so it keeps
// mig-manager from changing that GPU like any other holder. Pods keep the devices or replicas
// they hold when the setting changes, as running pods do on a real node.
//
// A node may be served by NVIDIA's DRA driver instead of the device plugin (NodeSpec.DRA,
// dra.go: static MIG devices published when its kubelet plugin starts), or by that driver in
// its DynamicMIG mode (NodeSpec.DynamicMIG, dynamicmig.go): every profile and placement is a
// partition device on the GPU's shared counters, the real scheduler's allocator picks one, and
// the instance is created in NVML at that placement when the claim is allocated and destroyed
// when it goes; no mig-manager runs there.
//
// It exists because neither the GPU Operator nor GPUs are available where `make demo` and the
// end-to-end suite run (kwok simulates kubelets, not drivers), and because the controller's
// protocol with the operator (immutable entry names, label flips, pending/failed states, in-use
// refusals, operand pauses) can only be tested against something that keeps that protocol as
// strictly as the real one. Fault knobs (Faults, AnnotationFault, AnnotationApplyDelay,
// AnnotationRebootDuration) make the operator's known failure modes reproducible: mig-manager
// failing, wedged, applying the wrong layout or rebooting the host for a MIG mode change, the
// device plugin not registering again, and the node's agent down. Each node's agent runs under
// the simulator's control for that, stopped while the host reboots or the agent-down fault
// holds it, and started again (as a new pod) afterwards.
//
// Product code never imports this package; only cmd/gpusim and tests do.
package sim
