package nvidia

// NVIDIA's DRA driver, as kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 publishes it
// (cmd/gpu-kubelet-plugin/main.go, deployments/helm/dra-driver-nvidia-gpu/templates/
// deviceclass-gpu.yaml and deviceclass-mig.yaml): see docs/design/dra.md. Its names live here, with
// NVIDIA's other contracts, for every package that reads claims or slices.
const (
	// DRADriver is the driver name in ResourceSlices and allocation results.
	DRADriver = "gpu.nvidia.com"
	// DeviceClassGPU selects whole GPUs (attribute type == "gpu").
	DeviceClassGPU = "gpu.nvidia.com"
	// DeviceClassMIG selects MIG devices (attribute type == "mig"), chosen by profile in CEL.
	DeviceClassMIG = "mig.nvidia.com"
)
