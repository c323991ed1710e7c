package planner_test

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/gpupool/gpupool/internal/planner"
)

// draInput is c's input with the named nodes served by NVIDIA's DRA driver and the named
// pending pods asking through its claims (demand.PendingWithClaims marks them so).
func draInput(c *cluster, draNodes, claimPods []string) planner.Input {
	in := c.input(policy(budget(2)))
	for _, n := range in.Snapshot.Nodes {
		for _, name := range draNodes {
			if n.Name == name {
				n.DRA = true
			}
		}
	}
	for i := range in.Pending {
		for _, name := range claimPods {
			if in.Pending[i].Pod == pod(name) {
				in.Pending[i].ViaClaims = true
			}
		}
	}
	return in
}

// A claim pod is served only on a node NVIDIA's DRA driver serves, and a device-plugin pod
// only elsewhere: the driver and the device plugin never share a GPU, so a 3g carved on the
// wrong node would serve nobody.
func TestClaimDemandIsServedOnDRANodesOnly(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t)
	c.node("dp", "NVIDIA-H200", "1g.18gb:7")
	c.node("dra", "NVIDIA-H200", "1g.18gb:7")
	c.pending("claim", mig1("3g.71gb")).pending("plugin", mig1("3g.71gb"))

	res, err := planner.Plan(draInput(c, []string{"dra"}, []string{"claim"}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Served).To(ConsistOf(pod("claim"), pod("plugin")), "one plan serves both")
	// One GPU of either node could hold both 3g instances; each pod's own node must get one.
	g.Expect(res.Steps).To(HaveLen(2))
	for _, s := range res.Steps {
		g.Expect(s.GPUs).To(HaveLen(1), "node %s", s.Node)
		g.Expect(s.GPUs[0].To.String()).To(ContainSubstring("3g.71gb:1"), "node %s", s.Node)
	}
}

func TestClaimDemandWithoutADRANodeSaysSo(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t)
	c.node("dp", "NVIDIA-H200", "1g.18gb:7")
	c.pending("claim", mig1("3g.71gb"))

	res, err := planner.Plan(draInput(c, nil, []string{"claim"}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Steps).To(BeEmpty(), "carving the device plugin's node would serve no claim")
	g.Expect(res.Unserved).To(HaveLen(1))
	g.Expect(res.Unserved[0].Reason).To(Equal(planner.ReasonNotInPool))
	g.Expect(res.Unserved[0].Message).To(ContainSubstring("NVIDIA's DRA driver publishes no device there"))

	// And the reverse: a device-plugin pod on a pool the DRA driver serves.
	c = newCluster(t)
	c.node("dra", "NVIDIA-H200", "1g.18gb:7")
	c.pending("plugin", mig1("3g.71gb"))
	res, err = planner.Plan(draInput(c, []string{"dra"}, nil))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Steps).To(BeEmpty())
	g.Expect(res.Unserved[0].Message).To(ContainSubstring("NVIDIA's DRA driver serves its GPUs and the pod asks the device plugin"))
}
