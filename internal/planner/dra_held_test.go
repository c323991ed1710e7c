package planner_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	. "github.com/onsi/gomega"

	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/inventory"
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

// Every pod a shared ResourceClaim is reserved for uses its device, not only the first one
// listed: a later one is no more movable than the first, even where it also holds a device
// plugin's instance on a GPU a plan could re-carve.
func TestEveryPodOfASharedClaimStays(t *testing.T) {
	g := NewWithT(t)
	c := newCluster(t)
	c.node("n", "NVIDIA-H200", "1g.18gb:7", "1g.18gb:7")
	c.running("second", "n", 1, "1g.18gb")
	first := newPod("first", nil)
	first.Spec.NodeName, first.Status.Phase = "n", corev1.PodRunning
	c.pods = append(c.pods, first)
	c.pending("big", mig1("7g.141gb"))
	gpu0 := &c.gpuNodes[0].Status.GPUs[0]
	gpu0.UUID, gpu0.Instances[0].UUID = "GPU-0", "MIG-0"
	claim := resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "shared"}}
	claim.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: "gpu.nvidia.com", Pool: "n", Device: "gpu-0-mig-1g18gb-19-0"}}}}
	claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "first"}, {Resource: "pods", Name: "second"}}
	slice := resourcev1.ResourceSlice{Spec: resourcev1.ResourceSliceSpec{Driver: "gpu.nvidia.com", NodeName: ptr.To("n"),
		Pool: resourcev1.ResourcePool{Name: "n", ResourceSliceCount: 1},
		Devices: []resourcev1.Device{{Name: "gpu-0-mig-1g18gb-19-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type": {StringValue: ptr.To("mig")}, "uuid": {StringValue: ptr.To("MIG-0")}, "parentUUID": {StringValue: ptr.To("GPU-0")}}}}}}

	in := c.input(policy(budget(2)))
	in.Snapshot = inventory.Build(c.nodes, c.gpuNodes, fixture.Pointers(c.pods), c.pdbs, inventory.Options{Now: now,
		DeviceHolders: inventory.DRAHolders([]resourcev1.ResourceClaim{claim}, []resourcev1.ResourceSlice{slice})})
	res, err := planner.Plan(in)
	g.Expect(err).NotTo(HaveOccurred())
	for _, s := range res.Steps {
		for _, e := range s.Evictions {
			g.Expect(e.Pod).NotTo(Equal(pod("second")), "the claim's second pod uses its device too")
		}
	}
	g.Expect(res.Steps).To(BeEmpty(), "GPU 0 is the claim's and GPU 1 holds one of its pods")
}
