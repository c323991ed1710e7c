package nvidia

// NVIDIA's node labels and resource names, spelled here and nowhere else in product code:
// hack/lint-rules.sh fails on such a literal outside this package (hack/nvidialiterals).
const (
	// LabelMIGConfig selects the mig-parted config entry that NVIDIA's mig-manager applies.
	LabelMIGConfig = "nvidia.com/mig.config"
	// LabelMIGConfigState is where mig-manager reports pending, rebooting, success or failed.
	LabelMIGConfigState = "nvidia.com/mig.config.state"
	// LabelDevicePluginConfig selects the k8s-device-plugin config entry (sharing settings).
	LabelDevicePluginConfig = "nvidia.com/device-plugin.config"
	// LabelGPUProduct is GPU Feature Discovery's product label, matched against catalog entries.
	LabelGPUProduct = "nvidia.com/gpu.product"
	// LabelGPUPresent marks nodes with an NVIDIA GPU; the node agent DaemonSet selects on it.
	LabelGPUPresent = "nvidia.com/gpu.present"

	// ResourcePrefix starts every extended resource NVIDIA's device plugin advertises:
	// ResourceGPU, its shared form and each MIG profile's (MIGResourcePrefix).
	ResourcePrefix = "nvidia.com/"
	// MIGResourcePrefix starts the device plugin's resource name of every MIG profile under the
	// mixed strategy, e.g. nvidia.com/mig-1g.18gb.
	MIGResourcePrefix = ResourcePrefix + "mig-"

	// DeviceClassDomain ends the names of the device classes NVIDIA's DRA driver chart installs
	// (gpu.nvidia.com, mig.nvidia.com, vfio.gpu.nvidia.com, compute-domain-*.nvidia.com).
	DeviceClassDomain = ".nvidia.com"
)
