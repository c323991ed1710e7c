package rollout

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// MayBeHalfConfigured says why a node that gpupool cordoned, and that no live plan explains
// any more (its plan or policy was deleted mid-flight), must stay cordoned: its GPUs may be
// half-configured, and reopening it would hand them to new pods. "" means its GPUs are whole
// and the cordon may be released. The node's own word counts: mig-manager's last state, and
// whether the agent verifies the layout the controller last expected.
func MayBeHalfConfigured(node *corev1.Node, gpuNode *v1alpha1.GPUNode) string {
	if !node.Spec.Unschedulable {
		// Someone uncordoned it already: a human's decision, not ours to undo.
		return ""
	}
	if state, _ := nvidia.MIGConfigState(node); state == nvidia.StateFailed {
		return "mig-manager reported failed for " + node.Labels[nvidia.LabelMIGConfig]
	}
	relabelled := strings.HasPrefix(node.Labels[nvidia.LabelMIGConfig], nvidia.ConfigPrefix)
	if gpuNode == nil {
		if !relabelled {
			// gpupool never relabelled it: its GPUs are as they were.
			return ""
		}
		return "the node has no GPU report (GPUNode) to show its GPUs are whole"
	}
	if len(gpuNode.Spec.ExpectedLayout) == 0 && !relabelled {
		// gpupool never set an expectation nor a label here: nothing of it was touched.
		return ""
	}
	// Whatever the label says now (someone may have unset it), the agent's verification of
	// the layout gpupool last expected is what shows the GPUs whole.
	c := meta.FindStatusCondition(gpuNode.Status.Conditions, v1alpha1.ConditionLayoutVerified)
	if c == nil || c.ObservedGeneration != gpuNode.Generation || c.Status != "True" {
		msg := "the agent does not verify the layout the plan expected"
		if c != nil && c.Message != "" {
			msg += ": " + c.Message
		}
		return msg
	}
	return ""
}
