package rollout_test

import (
	"testing"

	. "github.com/onsi/gomega"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/rollout"
)

// TestRebootVictims: a step whose MIG mode change may reboot its node starts only while
// nothing but its evictions and DaemonSet or static pods runs there.
func TestRebootVictims(t *testing.T) {
	risky := v1alpha1.NodeStep{Node: "gpu-1", RebootRisk: "the GPU Operator runs mig-manager with WITH_REBOOT",
		Evictions: []v1alpha1.Eviction{{PodReference: v1alpha1.PodReference{Namespace: "ml", Name: "train"}}}}
	evicted := rollout.NodePod{Namespace: "ml", Name: "train"}
	daemon := rollout.NodePod{Namespace: "kube-system", Name: "dcgm-exporter", NodeLocal: true}
	leaving := rollout.NodePod{Namespace: "web", Name: "old", Gone: true}
	web := rollout.NodePod{Namespace: "web", Name: "frontend"}
	cases := []struct {
		name string
		step v1alpha1.NodeStep
		pods []rollout.NodePod
		want string
	}{
		{name: "only what the step evicts, node-local and leaving pods", step: risky, pods: []rollout.NodePod{evicted, daemon, leaving}},
		{name: "a pod started since planning", step: risky, pods: []rollout.NodePod{evicted, web},
			want: "pod(s) web/frontend, which the step does not evict, run on gpu-1 now: a reboot would kill them"},
		{name: "no reboot risk: not this check's business", step: v1alpha1.NodeStep{Node: "gpu-1"}, pods: []rollout.NodePod{web}},
		{name: "many pods are counted, three named", step: risky, pods: []rollout.NodePod{{Namespace: "a", Name: "1"},
			{Namespace: "a", Name: "2"}, {Namespace: "a", Name: "3"}, {Namespace: "a", Name: "4"}, {Namespace: "a", Name: "5"}},
			want: "pod(s) a/1, a/2, a/3 and 2 more"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := rollout.RebootVictims(tc.step, tc.pods)
			if tc.want == "" {
				g.Expect(got).To(BeEmpty())
				return
			}
			g.Expect(got).To(ContainSubstring(tc.want))
			g.Expect(got).To(ContainSubstring("WITH_REBOOT"))
		})
	}
}
