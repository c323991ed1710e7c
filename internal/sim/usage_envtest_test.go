package sim_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/sim"
)

// A pod's declared usage reaches its GPUNode's status.usage through the real agent: the mock
// NVML reports it on the pod's MIG device and the agent samples and publishes it; a pod
// without the annotation gets no entry.
func TestDeclaredUsageIsPublished(t *testing.T) {
	const name = "usage-h200"
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}})
	steady := f.bindPod("steady", name, res1g, 1)
	quiet := f.bindPod("quiet", name, res1g, 1)
	f.g.Eventually(f.assigned(name, steady)).Should(HaveLen(1))
	f.g.Eventually(f.assigned(name, quiet)).Should(HaveLen(1))
	p := &corev1.Pod{}
	f.g.Expect(f.c.Get(context.Background(), steady, p)).To(Succeed())
	base := p.DeepCopy()
	p.Annotations = map[string]string{sim.AnnotationUsage: "steady:9Gi"}
	f.g.Expect(f.c.Patch(context.Background(), p, client.MergeFrom(base))).To(Succeed())

	f.g.Eventually(func(g Gomega) {
		n := &v1alpha1.GPUNode{}
		g.Expect(f.c.Get(context.Background(), types.NamespacedName{Name: name}, n)).To(Succeed())
		g.Expect(n.Status.Usage).To(HaveLen(1), "only the pod that declares its use")
		u := n.Status.Usage[0]
		g.Expect(u.Name).To(Equal(steady.Name))
		// The histogram's buckets are 5% wide: its percentiles are their upper bounds.
		g.Expect(u.P95MiB).To(BeNumerically("~", 9*1024, 0.06*9*1024))
		g.Expect(u.PeakMiB).To(BeNumerically("~", 9*1024, 0.06*9*1024))
		g.Expect(u.CeilingMiB).To(BeNumerically(">", 16*1024), "the 1g.18gb instance's memory")
		g.Expect(u.FlatAtCeiling).To(BeFalse())
	}).Should(Succeed())
}
