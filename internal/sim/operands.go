// The GPU Operator operands mig-manager pauses while it changes MIG settings, and the label changes that pause and restore them.

package sim

// Operand deploy labels mig-manager pauses while it changes MIG settings
// (reconfigure.go shutdownKubernetesGPUClients: device plugin, GPU Feature Discovery, DCGM
// exporter, DCGM, NVSM, and since mig-parted v0.15.0, commit 4224297a, "client": any
// third-party DaemonSet that selects nvidia.com/gpu.deploy.client=true, such as NVIDIA's DRA
// kubelet plugin where it is deployed so). An operand is paused only when its label is set and
// not "false" (maybeSetPaused); restoring writes "true".
var pausableOperands = []string{
	labelDeployPrefix + "device-plugin",
	labelDeployPrefix + "gpu-feature-discovery",
	labelDeployPrefix + "dcgm-exporter",
	labelDeployPrefix + "dcgm",
	labelDeployPrefix + "nvsm",
	labelDeployClient,
}

// labelDeployClient is the GPU Operator's label for third-party GPU clients (mig-parted
// pkg/mig/reconfigure/reconfigure.go gpuClientDeployLabel).
const labelDeployClient = labelDeployPrefix + "client"

// pausedValue is the deploy label value of a paused operand (reconfigure.go maybeSetPaused).
const pausedValue = "paused-for-mig-change"

// labelDevicePluginDeploy is the device plugin's deploy label; the simulated device plugin
// does not update the node while it is paused.
const labelDevicePluginDeploy = labelDeployPrefix + "device-plugin"

// pauseLabels are the label changes that pause every deployed operand. Pausing the device
// plugin under the plugin-silent fault arms it: the plugin comes back silent.
func (r *reconciler) pauseLabels(n *Node, labels map[string]string, faults Faults) map[string]*string {
	if faults.PluginSilent && labels[labelDevicePluginDeploy] != "" {
		n.pluginSilent = true
	}
	out := map[string]*string{}
	for _, k := range pausableOperands {
		if v := labels[k]; v != "" && v != "false" && v != pausedValue {
			out[k] = ptrTo(pausedValue)
		}
	}
	return out
}

// restoreLabels are the label changes that bring back every paused operand.
func restoreLabels(labels map[string]string) map[string]*string {
	out := map[string]*string{}
	for _, k := range pausableOperands {
		if labels[k] == pausedValue {
			out[k] = ptrTo("true")
		}
	}
	return out
}
