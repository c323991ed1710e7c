package agent_test

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	. "github.com/onsi/gomega"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
	"github.com/gpupool/gpupool/internal/rightsize"
)

// A Publisher's UsageRule moves the evidence thresholds at which a steady pod's summary is
// rewritten: with 4 samples and 8 periods instead of a day, the summary is written on the
// first pass, the pass reaching 4 samples and the pass reaching 8 periods, and no other; with
// the defaults, none of those 12 passes after the first writes.
func TestPublisherUsageRuleSetsWhenEvidenceIsRepublished(t *testing.T) {
	env := startEnv(t)
	for _, tc := range []struct {
		name   string
		rule   rightsize.PublishRule
		writes int
	}{
		{"shortened", rightsize.PublishRule{MinSamples: 4, MinWindow: 8 * period}, 2},
		{"defaults", rightsize.PublishRule{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s, migs := h200Node(t)
			d0 := mockDevice(t, s, 0)
			enableMIG(t, d0)
			u1g := createInstance(t, d0, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 0, true)
			migs.SetMemoryUsed(u1g, 9*1024*mibBytes)
			kubelet := &staticOwners{}
			kubelet.set(map[string][]v1alpha1.PodReference{u1g: {ref("team-a", "steady")}})
			node := "node-rule-" + tc.name
			p, clk := newPublisher(t, node, agent.NVMLReader(s))
			p.Heartbeat, p.Owners, p.Usage, p.UsageRule = agent.HeartbeatReadiness, kubelet.get, agent.NVMLUsageReader(s), tc.rule

			reconcileOnce(t, p)
			last := getNode(t, env.Client, node).ResourceVersion
			writes := 0
			for range 12 {
				clk.Step(period)
				reconcileOnce(t, p)
				if rv := getNode(t, env.Client, node).ResourceVersion; rv != last {
					writes, last = writes+1, rv
				}
			}
			g.Expect(writes).To(Equal(tc.writes))
			u := getNode(t, env.Client, node).Status.Usage
			g.Expect(u).To(HaveLen(1))
			if tc.writes > 0 {
				g.Expect(u[0].Samples).To(BeNumerically(">=", tc.rule.MinSamples))
				g.Expect(time.Duration(u[0].WindowSeconds) * time.Second).To(BeNumerically(">=", tc.rule.MinWindow))
			}
		})
	}
}
