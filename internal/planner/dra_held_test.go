package planner_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	. "github.com/onsi/gomega"

	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/planner"
)

// A GPU a ResourceClaim holds in a way its instances do not show (inventory GPU.DRAHeld: a
// device only an older ResourceSlice generation lists, a whole GPU allocated before its pod
// started) is neither re-carved nor offered as a free whole GPU.
func TestAGPUAClaimHoldsIsLeftAlone(t *testing.T) {
	const held = "ResourceClaim team/c holds device MIG-x, which the agent does not report on it"
	t.Run("not re-carved", func(t *testing.T) {
		g := NewWithT(t)
		c := newCluster(t)
		c.node("dra", "NVIDIA-H200", "1g.18gb:7", "1g.18gb:7")
		c.pending("claim", mig1("3g.71gb"))
		in := draInput(c, []string{"dra"}, []string{"claim"})
		in.Snapshot.Nodes[0].GPUs[0].DRAHeld = held
		res, err := planner.Plan(in)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Steps).To(HaveLen(1), "the other GPU serves the pod")
		g.Expect(res.Steps[0].GPUs).To(HaveLen(1))
		g.Expect(res.Steps[0].GPUs[0].Index).To(Equal(1), "GPU 0 is held by a claim")

		in.Snapshot.Nodes[0].GPUs[1].DRAHeld = held
		res, err = planner.Plan(in)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(res.Steps).To(BeEmpty(), "both GPUs are held by claims")
	})
	t.Run("not a free whole GPU", func(t *testing.T) {
		g := NewWithT(t)
		c := newCluster(t)
		c.node("dra", "NVIDIA-H200", "off", "1g.18gb:7")
		c.pending("whole", map[string]int64{string(demand.ResourceGPU): 1}).pending("three", mig1("3g.71gb"))
		in := draInput(c, []string{"dra"}, []string{"whole", "three"})
		in.Snapshot.Nodes[0].GPUs[0].DRAHeld = "ResourceClaim team/c holds the whole GPU and its pod has not started"
		res, err := planner.Plan(in)
		g.Expect(err).NotTo(HaveOccurred())
		// GPU 1 may become a whole GPU or 3g instances, not both: GPU 0 is the claim's, so
		// the whole-GPU pod is not taken as fitting there now.
		g.Expect(res.Served).NotTo(ContainElements(pod("whole"), pod("three")))
		var unserved []string
		for _, u := range res.Unserved {
			unserved = append(unserved, u.Pod.String())
		}
		g.Expect(append(unserved, names(res.Served)...)).To(ContainElement(pod("whole").String()),
			"the whole-GPU pod is either served or said to be unserved")
		for _, s := range res.Steps {
			for _, ch := range s.GPUs {
				g.Expect(ch.Index).To(Equal(1), "GPU 0 is held by a claim")
			}
		}
	})
}

func names(keys []types.NamespacedName) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k.String())
	}
	return out
}
