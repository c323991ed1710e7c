package rollout_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/rollout"
)

func TestMayBeHalfConfigured(t *testing.T) {
	node := func(cordoned bool, config, state string) *corev1.Node {
		n := &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: cordoned}, ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}}}
		if config != "" {
			n.Labels[nvidia.LabelMIGConfig] = config
		}
		if state != "" {
			n.Labels[nvidia.LabelMIGConfigState] = state
		}
		return n
	}
	verified := func(status metav1.ConditionStatus, generation int64) *v1alpha1.GPUNode {
		g := &v1alpha1.GPUNode{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
		g.Spec.ExpectedLayout = []v1alpha1.GPULayout{{Index: 0, Profiles: v1alpha1.ProfileCounts{"3g.71gb": 2}}}
		g.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionLayoutVerified, Status: status,
			ObservedGeneration: generation, Message: "GPU 0 has 7x1g.18gb, expected 2x3g.71gb"}}
		return g
	}
	cases := []struct {
		name    string
		node    *corev1.Node
		gpuNode *v1alpha1.GPUNode
		keep    bool
	}{
		{"never relabelled: released", node(true, "all-1g.18gb", "success"), verified("True", 3), false},
		{"applied and verified: released", node(true, "gpupool-0123456789", "success"), verified("True", 3), false},
		{"mig-manager failed: kept", node(true, "gpupool-0123456789", "failed"), verified("True", 3), true},
		{"not verified: kept", node(true, "gpupool-0123456789", "success"), verified("False", 3), true},
		{"verified for an older expectation: kept", node(true, "gpupool-0123456789", "success"), verified("True", 2), true},
		{"no report: kept", node(true, "gpupool-0123456789", "success"), nil, true},
		{"uncordoned by a human: not ours to undo", node(false, "gpupool-0123456789", "failed"), nil, false},
		{"label unset by hand, layout unverified: kept", node(true, "", ""), verified("False", 3), true},
		{"cordoned before any expectation and no report: released", node(true, "all-1g.18gb", "success"), nil, false},
		{"never expected anything: released", node(true, "all-1g.18gb", "success"), &v1alpha1.GPUNode{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			why := rollout.MayBeHalfConfigured(tc.node, tc.gpuNode)
			if (why != "") != tc.keep {
				t.Errorf("MayBeHalfConfigured = %q, want keep=%t", why, tc.keep)
			}
		})
	}
}
