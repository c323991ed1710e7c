package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Node annotations that switch on the simulated operator's failure modes, so a demo or an
// end-to-end test can provoke them with kubectl. They add to the programmatic knobs
// (NodeSpec.Faults, Node.SetFaults).
const (
	// AnnotationFault holds a comma-separated list of faults:
	//   - fail-next: the next apply fails (state failed) without touching a GPU; the simulator
	//     removes the word from the annotation when it fires, so it fires once;
	//   - fail-always: every apply fails like fail-next, until the word is removed;
	//   - stuck-pending: every apply stops after setting state pending and pausing the
	//     operands, and never finishes (mig-manager's known wedge), until the annotation is
	//     removed and the label is set again;
	//   - wrong-layout: every apply creates one instance fewer than asked, on the first GPU it
	//     changes that gets any, and still reports success;
	//   - reboot: the next apply that changes a GPU needs a host reboot, as a MIG mode change
	//     does where the GPU cannot be reset (NVIDIA/mig-parted pkg/mig/reconfigure/
	//     reconfigure.go Run: applyMigModeChange fails, then with WithReboot the state becomes
	//     "rebooting" and the host reboots). The node's agent is down from the moment the
	//     state says rebooting (its GPUNode's status.observedTime stops advancing) until the
	//     host is up again after AnnotationRebootDuration; the GPUs then hold the new layout,
	//     mig-manager (started again at boot, reading state "rebooting") sets pending, waits
	//     for the agent's first report since the boot (at most 30 s, and not at all while
	//     agent-down holds the agent) and reports success. Consumed when it fires, like
	//     fail-next;
	//   - plugin-silent: once the next apply has paused the device plugin, the plugin, when it
	//     comes back, advertises none of the node's nvidia.com/ resources (all 0), as a device
	//     plugin that hangs before registering with the kubelet, until the word is removed;
	//   - agent-down: the node's gpupool agent is not running (its pod crash-loops, or was
	//     deleted with the node's DaemonSet label) while the word is there: it publishes
	//     nothing, and a deleted GPUNode is not recreated. The simulator records an Event
	//     AgentStopped on the node once the agent has stopped, and AgentStarted once it runs
	//     again.
	AnnotationFault = "sim.gpupool.io/fault"
	// AnnotationApplyDelay is a Go duration ("5s") mig-manager stays pending before it applies.
	AnnotationApplyDelay = "sim.gpupool.io/apply-delay"
	// AnnotationRebootDuration is a Go duration ("5s"): how long a reboot keeps the host down;
	// DefaultRebootDuration without it.
	AnnotationRebootDuration = "sim.gpupool.io/reboot-duration"
	// AnnotationRestartMIGManager restarts the node's mig-manager each time its value changes
	// to a new non-empty one, as deleting the nvidia-mig-manager pod does: the new pod applies
	// the node's current nvidia.com/mig.config (NVIDIA/mig-parted cmd/nvidia-mig-manager/
	// main.go start: its informer's first value is applied at once), the way an administrator
	// has it retry after fixing what made it fail, without touching the label.
	AnnotationRestartMIGManager = "sim.gpupool.io/restart-mig-manager"
)

// DefaultRebootDuration is how long the reboot fault keeps a host down unless
// AnnotationRebootDuration or Faults.RebootDuration says otherwise.
const DefaultRebootDuration = 5 * time.Second

// Fault words of AnnotationFault.
const (
	FaultFailNext     = "fail-next"
	FaultFailAlways   = "fail-always"
	FaultStuckPending = "stuck-pending"
	FaultWrongLayout  = "wrong-layout"
	FaultReboot       = "reboot"
	FaultPluginSilent = "plugin-silent"
	FaultAgentDown    = "agent-down"
)

// faultWords lists the known words, for error messages.
var faultWords = []string{FaultFailNext, FaultFailAlways, FaultStuckPending, FaultWrongLayout, FaultReboot,
	FaultPluginSilent, FaultAgentDown}

// FaultWords lists the words AnnotationFault knows.
func FaultWords() []string { return slices.Clone(faultWords) }

// Faults are a node's fault knobs.
type Faults struct {
	// FailNext fails the next apply; it is consumed when it fires.
	FailNext bool
	// FailAlways fails every apply.
	FailAlways bool
	// StuckPending leaves every apply pending forever.
	StuckPending bool
	// WrongLayout applies one instance fewer than asked and reports success.
	WrongLayout bool
	// ApplyDelay is how long an apply stays pending before the GPUs change.
	ApplyDelay time.Duration
	// Reboot makes the next apply that changes a GPU reboot the host; it is consumed when it
	// fires.
	Reboot bool
	// RebootDuration is how long the host stays down; 0 means DefaultRebootDuration.
	RebootDuration time.Duration
	// PluginSilent keeps the device plugin from advertising anything once an apply has
	// restarted it.
	PluginSilent bool
	// AgentDown stops the node's agent.
	AgentDown bool
}

// merge returns the knobs of both: a fault set in either is on, the longer delay wins.
func (f Faults) merge(o Faults) Faults {
	return Faults{
		FailNext:       f.FailNext || o.FailNext,
		FailAlways:     f.FailAlways || o.FailAlways,
		StuckPending:   f.StuckPending || o.StuckPending,
		WrongLayout:    f.WrongLayout || o.WrongLayout,
		ApplyDelay:     max(f.ApplyDelay, o.ApplyDelay),
		Reboot:         f.Reboot || o.Reboot,
		RebootDuration: max(f.RebootDuration, o.RebootDuration),
		PluginSilent:   f.PluginSilent || o.PluginSilent,
		AgentDown:      f.AgentDown || o.AgentDown,
	}
}

// rebootDuration is how long a reboot keeps the host down.
func (f Faults) rebootDuration() time.Duration {
	if f.RebootDuration > 0 {
		return f.RebootDuration
	}
	return DefaultRebootDuration
}

// ParseFaultAnnotations reads the fault knobs from a node's annotations. Unknown words and
// unparsable durations are errors, so a typo in a test does not silently test nothing.
func ParseFaultAnnotations(annotations map[string]string) (Faults, error) {
	var f Faults
	for word := range strings.SplitSeq(annotations[AnnotationFault], ",") {
		switch strings.TrimSpace(word) {
		case "":
		case FaultFailNext:
			f.FailNext = true
		case FaultFailAlways:
			f.FailAlways = true
		case FaultStuckPending:
			f.StuckPending = true
		case FaultWrongLayout:
			f.WrongLayout = true
		case FaultReboot:
			f.Reboot = true
		case FaultPluginSilent:
			f.PluginSilent = true
		case FaultAgentDown:
			f.AgentDown = true
		default:
			return Faults{}, fmt.Errorf("annotation %s: unknown fault %q (known: %s)",
				AnnotationFault, word, strings.Join(faultWords, ", "))
		}
	}
	for key, into := range map[string]*time.Duration{AnnotationApplyDelay: &f.ApplyDelay, AnnotationRebootDuration: &f.RebootDuration} {
		v, ok := annotations[key]
		if !ok {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return Faults{}, fmt.Errorf("annotation %s: %q is not a non-negative Go duration", key, v)
		}
		*into = d
	}
	return f, nil
}

// withoutFault returns the AnnotationFault value with word removed.
func withoutFault(value, word string) string {
	words := strings.Split(value, ",")
	for i := range words {
		words[i] = strings.TrimSpace(words[i])
	}
	words = slices.DeleteFunc(words, func(w string) bool { return w == word || w == "" })
	return strings.Join(words, ",")
}
