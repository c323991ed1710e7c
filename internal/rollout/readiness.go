package rollout

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupool/gpupool/internal/nvidia"
)

// Verdict is what one readiness check says of a node whose GPUs were reconfigured.
type Verdict string

// Verdicts.
const (
	// Ready: the check holds; the next one is asked.
	Ready Verdict = "ok"
	// Wait: not yet; the step waits, with the check's message (and its actions, if any).
	Wait Verdict = "wait"
	// Fail: it did not come within configureTimeout; the step fails with the check's message.
	Fail Verdict = "fail"
)

// CheckResult is a readiness check's verdict, with the step's message and what to do while
// waiting.
type CheckResult struct {
	Verdict Verdict
	Message string
	Actions []Action
}

// Check is one thing that must hold before a reconfigured node may take work again.
type Check struct {
	// Name says which check a step waits on, for tests and logs.
	Name  string
	Judge func(in StepInput) CheckResult
}

// Readiness checks of the relabel protocol, asked in the order of MIGReadiness.
var (
	// CheckLayoutVerified: the agent verified the target layout against NVML.
	CheckLayoutVerified = Check{Name: "LayoutVerified", Judge: layoutVerified}
	// CheckSharingAdvertised: the device plugin advertises the step's sharing setting.
	CheckSharingAdvertised = Check{Name: "SharingAdvertised", Judge: sharingAdvertised}
	// CheckDRASlicesPublished: NVIDIA's DRA driver, where it serves the node, lists the new
	// MIG devices.
	CheckDRASlicesPublished = Check{Name: "DRASlicesPublished", Judge: draSlicesPublished}
	// CheckDevicePluginAdvertised: the device plugin, where it serves the node, advertises the
	// new layout.
	CheckDevicePluginAdvertised = Check{Name: "DevicePluginAdvertised", Judge: devicePluginAdvertised}
)

// MIGReadiness are the checks a relabelled node passes, in order, before it is reopened: the
// layout first, since nothing else means anything until the GPUs have it.
var MIGReadiness = []Check{CheckLayoutVerified, CheckSharingAdvertised, CheckDRASlicesPublished, CheckDevicePluginAdvertised}

// Judge asks the checks in order: the first that is not Ready decides; Ready when all are.
func Judge(checks []Check, in StepInput) (string, CheckResult) {
	for _, c := range checks {
		if r := c.Judge(in); r.Verdict != Ready {
			return c.Name, r
		}
	}
	return "", CheckResult{Verdict: Ready}
}

func timedOut(in StepInput) bool { return in.Waited() >= in.Limits.Configure }

func layoutVerified(in StepInput) CheckResult {
	switch {
	case in.Obs.Verified == metav1.ConditionTrue:
		return CheckResult{Verdict: Ready}
	case timedOut(in):
		return CheckResult{Verdict: Fail, Message: "the agent did not verify the layout within configureTimeout " +
			in.Limits.Configure.String() + ": " + in.Obs.VerifyMessage}
	}
	return CheckResult{Verdict: Wait, Message: "waiting for the agent to verify the layout"}
}

// sharingAdvertised waits for the device plugin's sharing once the layout is right. Its key
// was written with the mig-parted entry, at least the propagation wait before the MIG relabel,
// so the device-plugin label is flipped now.
func sharingAdvertised(in StepInput) CheckResult {
	step, obs := in.Step, in.Obs
	switch {
	case step.SharingConfigName == "" || obs.SharingAdvertised:
		return CheckResult{Verdict: Ready}
	case timedOut(in):
		return CheckResult{Verdict: Fail, Message: "the device plugin did not advertise " + obs.SharedResource + " for " +
			step.SharingConfigName + " within configureTimeout " + in.Limits.Configure.String()}
	case obs.SharingConfig != step.SharingConfigName:
		return CheckResult{Verdict: Wait, Message: "layout verified; relabelled " + nvidia.LabelDevicePluginConfig + "=" +
			step.SharingConfigName, Actions: []Action{ActionRelabelSharing}}
	}
	return CheckResult{Verdict: Wait, Message: "waiting for the device plugin to advertise " + obs.SharedResource}
}

// draSlicesPublished waits, on a node NVIDIA's DRA driver serves, for its slices to list the
// instances NVML reports. The driver discovers MIG devices only when its kubelet plugin starts
// (dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/nvlib.go); mig-manager restarts it with each
// change when its DaemonSet selects nvidia.com/gpu.deploy.client=true (mig-parted
// pkg/mig/reconfigure/reconfigure.go, v0.15.0). Until then claims cannot be allocated the new
// instances, so the step is not done.
func draSlicesPublished(in StepInput) CheckResult {
	obs := in.Obs
	switch {
	case !obs.DRADriver || obs.DRAStale == "":
		return CheckResult{Verdict: Ready}
	case timedOut(in):
		return CheckResult{Verdict: Fail, Message: "NVIDIA's DRA driver did not publish the new MIG devices within configureTimeout " +
			in.Limits.Configure.String() + " (" + obs.DRAStale + "): its kubelet plugin rescans only when it starts; restart it on " +
			in.Step.Node + ", and let mig-manager do so with every change by giving its DaemonSet the nodeSelector nvidia.com/gpu.deploy.client=true"}
	}
	return CheckResult{Verdict: Wait, Message: "layout verified; waiting for NVIDIA's DRA driver to publish the new MIG devices (" +
		obs.DRAStale + ")"}
}

// devicePluginAdvertised waits, on a node the device plugin serves, for its allocatable to
// show the new layout: mig-manager restarts the plugin after a change, and until it advertises
// the new devices the scheduler cannot use them.
func devicePluginAdvertised(in StepInput) CheckResult {
	obs := in.Obs
	switch {
	case obs.DRADriver || obs.ExclusiveAdvertised:
		return CheckResult{Verdict: Ready}
	case timedOut(in):
		return CheckResult{Verdict: Fail, Message: "the device plugin did not advertise " + obs.ExclusiveResources +
			" within configureTimeout " + in.Limits.Configure.String() + ": check the nvidia-device-plugin pod on " + in.Step.Node}
	}
	return CheckResult{Verdict: Wait, Message: "layout verified; waiting for the device plugin to advertise " + obs.ExclusiveResources}
}
