package sim_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/rightsize"
	"github.com/gpupool/gpupool/internal/sim"
)

// Options.AgentUsageRule reaches the agents: with 5 samples and a second as the evidence the
// recommender wants, a steady pod's summary is rewritten once it holds them, long before the
// default 100 samples, where it would otherwise stay at its first one.
func TestAgentUsageRuleShortensTheEvidence(t *testing.T) {
	const name = "usage-rule-h200"
	rule := rightsize.PublishRule{MinSamples: 5, MinWindow: time.Second}
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}, AgentUsageRule: rule})
	steady := f.bindPod("steady", name, res1g, 1)
	f.g.Eventually(f.assigned(name, steady)).Should(HaveLen(1))
	p := &corev1.Pod{}
	f.g.Expect(f.c.Get(context.Background(), steady, p)).To(Succeed())
	base := p.DeepCopy()
	p.Annotations = map[string]string{sim.AnnotationUsage: "steady:9Gi"}
	f.g.Expect(f.c.Patch(context.Background(), p, client.MergeFrom(base))).To(Succeed())

	f.g.Eventually(func(g Gomega) {
		n := &v1alpha1.GPUNode{}
		g.Expect(f.c.Get(context.Background(), types.NamespacedName{Name: name}, n)).To(Succeed())
		g.Expect(n.Status.Usage).To(HaveLen(1))
		u := n.Status.Usage[0]
		g.Expect(u.Samples).To(And(BeNumerically(">=", rule.MinSamples), BeNumerically("<", rightsize.DefaultMinSamples)))
		g.Expect(time.Duration(u.WindowSeconds) * time.Second).To(BeNumerically(">=", rule.MinWindow))
	}).Should(Succeed())
}
