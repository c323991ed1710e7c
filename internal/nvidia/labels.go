package nvidia

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// State is a value mig-manager writes into label nvidia.com/mig.config.state.
type State string

// The states mig-manager reports while it applies the entry named by nvidia.com/mig.config.
const (
	// StatePending means mig-manager saw a new label value and is applying it.
	StatePending State = "pending"
	// StateRebooting means the GPU needed a host reboot to change MIG mode.
	StateRebooting State = "rebooting"
	// StateSuccess means the entry is applied and the paused operands are back.
	StateSuccess State = "success"
	// StateFailed means mig-manager gave up, e.g. because a process still holds a changed GPU.
	StateFailed State = "failed"
)

// LabelDeployPrefix starts the GPU Operator's per-operand deploy labels, e.g.
// nvidia.com/gpu.deploy.device-plugin.
const LabelDeployPrefix = "nvidia.com/gpu.deploy."

// PausedForMIGChange is the deploy label value mig-manager sets while it has an operand
// (device plugin, GPU Feature Discovery, DCGM) stopped for a MIG change.
const PausedForMIGChange = "paused-for-mig-change"

// DefaultConfigureTimeout is how long ConfigureOutcome waits when given no timeout; it is the
// policy's default configureTimeout.
const DefaultConfigureTimeout = 10 * time.Minute

// MIGConfigState returns the node's nvidia.com/mig.config.state, and whether it holds one of
// the four values mig-manager writes.
func MIGConfigState(node *corev1.Node) (State, bool) {
	if node == nil {
		return "", false
	}
	v, ok := node.Labels[v1alpha1.LabelMIGConfigState]
	if !ok {
		return "", false
	}
	s := State(v)
	switch s {
	case StatePending, StateRebooting, StateSuccess, StateFailed:
		return s, true
	}
	return s, false
}

// RequestMIGConfig sets the node's labels to ask mig-manager for the named entry. It also
// removes nvidia.com/mig.config.state: mig-manager only rewrites the state once it notices the
// new value, so a "success" or "failed" left from the previous entry would otherwise be read as
// the outcome of this one. The caller patches the node with the result.
func RequestMIGConfig(node *corev1.Node, name string) {
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Labels[v1alpha1.LabelMIGConfig] = name
	delete(node.Labels, v1alpha1.LabelMIGConfigState)
}

// Outcome is how a requested MIG reconfiguration of a node stands.
type Outcome string

// Outcomes of ConfigureOutcome.
const (
	// ConfigWaiting means mig-manager has not finished yet; look again later.
	ConfigWaiting Outcome = "Waiting"
	// ConfigApplied means mig-manager reports success for the wanted entry.
	ConfigApplied Outcome = "Applied"
	// ConfigFailed means mig-manager reports that it failed to apply the wanted entry.
	ConfigFailed Outcome = "Failed"
	// ConfigTimedOut means no success or failure within the timeout; mig-manager can stay pending
	// for ever when pausing the operands times out, so this counts as a failure.
	ConfigTimedOut Outcome = "TimedOut"
)

// ConfigureOutcome tells how the reconfiguration of node to entry wantConfig stands, given when
// the label was flipped (since, written by RequestMIGConfig) and the time now, and explains it
// in a sentence for Events and conditions. A timeout of zero or less means
// DefaultConfigureTimeout.
func ConfigureOutcome(node *corev1.Node, wantConfig string, since, now time.Time, timeout time.Duration) (Outcome, string) {
	if timeout <= 0 {
		timeout = DefaultConfigureTimeout
	}
	if node == nil {
		return ConfigFailed, fmt.Sprintf("cannot apply MIG config %s: the node no longer exists", wantConfig)
	}
	elapsed := now.Sub(since)
	late := elapsed > timeout
	took := elapsed.Truncate(time.Second)

	got, ok := node.Labels[v1alpha1.LabelMIGConfig]
	if !ok || got != wantConfig {
		current := "unset"
		if ok {
			current = fmt.Sprintf("%q", got)
		}
		msg := fmt.Sprintf("node %s has label %s %s, not %q: something else changed it, or gpupool's write has not landed",
			node.Name, v1alpha1.LabelMIGConfig, current, wantConfig)
		if late {
			return ConfigTimedOut, fmt.Sprintf("%s after %s (timeout %s)", msg, took, timeout)
		}
		return ConfigWaiting, msg
	}

	state, known := MIGConfigState(node)
	switch {
	case known && state == StateSuccess:
		return ConfigApplied, fmt.Sprintf("mig-manager applied MIG config %s on node %s", wantConfig, node.Name)
	case known && state == StateFailed:
		return ConfigFailed, fmt.Sprintf("mig-manager failed to apply MIG config %s on node %s: read the nvidia-mig-manager pod's log "+
			"on that node (a process still holding a GPU is the usual cause); retry with a new entry name or by unsetting and setting %s",
			wantConfig, node.Name, v1alpha1.LabelMIGConfig)
	}

	where := "no state reported yet"
	if state != "" {
		where = fmt.Sprintf("state %q", string(state))
	}
	paused := ""
	if ops := PausedOperands(node); len(ops) > 0 {
		paused = "; paused operands: " + strings.Join(ops, ", ")
	}
	if late {
		return ConfigTimedOut, fmt.Sprintf("mig-manager has not applied MIG config %s on node %s after %s (timeout %s), %s%s: "+
			"mig-manager can stay pending when pausing GPU operands times out; check the nvidia-mig-manager pod on that node",
			wantConfig, node.Name, took, timeout, where, paused)
	}
	return ConfigWaiting, fmt.Sprintf("waiting for mig-manager to apply MIG config %s on node %s for %s, %s%s",
		wantConfig, node.Name, took, where, paused)
}

// PausedOperands returns, sorted, the nvidia.com/gpu.deploy.* labels of the node that
// mig-manager set to paused-for-mig-change: the GPU operands it stopped and has not yet
// restored, which a stuck reconfiguration leaves behind.
func PausedOperands(node *corev1.Node) []string {
	if node == nil {
		return nil
	}
	var out []string
	for k, v := range node.Labels {
		if strings.HasPrefix(k, LabelDeployPrefix) && v == PausedForMIGChange {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
