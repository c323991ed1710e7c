// Package sim is a simulated NVIDIA GPU Operator for local control planes: for every simulated
// GPU node it plays NVIDIA's mig-manager (applies the mig-parted config entry named by label
// nvidia.com/mig.config, reports nvidia.com/mig.config.state) and k8s-device-plugin (advertises
// nvidia.com/mig-<profile> and nvidia.com/gpu from the current layout, hands concrete devices to
// the pods bound to the node), backed by one go-nvml mock server per node whose MIG state is only
// ever changed through NVML calls, as mig-parted changes a real GPU. It also runs gpupool's real
// node agent against that mock, so the controller meets the same GPUNode objects it meets in
// production.
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
