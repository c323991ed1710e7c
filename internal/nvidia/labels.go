package nvidia

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
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

// MIGConfigState returns the node's nvidia.com/mig.config.state, and whether it holds one of
// the four values mig-manager writes.
func MIGConfigState(node *corev1.Node) (State, bool) {
	if node == nil {
		return "", false
	}
	v, ok := node.Labels[LabelMIGConfigState]
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
	node.Labels[LabelMIGConfig] = name
	delete(node.Labels, LabelMIGConfigState)
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
