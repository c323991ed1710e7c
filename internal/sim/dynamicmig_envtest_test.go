package sim_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupool/gpupool/internal/sim"
)

// The DynamicMIG stand-in on a real API server: at start it destroys the instances it finds
// (no claim holds them) and publishes its partitions in split slices the API server accepts;
// a claim allocated a partition of its pool gets the instance at that placement in NVML, and
// deleting the claim destroys it.
func TestDynamicMIGStandInCarvesPerClaim(t *testing.T) {
	const name = "dm-h200"
	spec := h200Node(name) // all-1g: the instances the driver finds, and destroys, at start
	spec.DynamicMIG = true
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{spec}})
	ctx := context.Background()

	slicesOfNode := func() []resourcev1.ResourceSlice {
		var list resourcev1.ResourceSliceList
		if err := f.c.List(ctx, &list); err != nil {
			return nil
		}
		return slices.DeleteFunc(list.Items, func(s resourcev1.ResourceSlice) bool {
			return s.Spec.NodeName == nil || *s.Spec.NodeName != name
		})
	}
	f.g.Eventually(slicesOfNode).Should(HaveLen(3), "the counter sets' slice and one of devices per GPU")
	for _, s := range slicesOfNode() {
		f.g.Expect(s.Spec.Pool.Name).To(Equal(name))
		f.g.Expect(s.Spec.Pool.ResourceSliceCount).To(Equal(int64(3)))
	}
	f.g.Eventually(func() int {
		n := 0
		for _, g := range f.gpus(name) {
			n += len(g.Instances)
		}
		return n
	}).Should(BeZero(), "the plugin destroys at start the instances no claim holds")
	node := f.node(name)
	f.g.Expect(node.Labels).NotTo(HaveKey(sim.LabelMIGConfig), "no mig-manager runs beside DynamicMIG")
	f.g.Expect(node.Labels).To(HaveKeyWithValue("nvidia.com/gpu.deploy.mig-manager", "false"))

	var device string
	for _, s := range slicesOfNode() {
		for _, d := range s.Spec.Devices {
			if strings.HasPrefix(d.Name, "gpu-1-mig-3g71gb-") && strings.HasSuffix(d.Name, "-4") {
				device = d.Name
			}
		}
	}
	f.g.Expect(device).NotTo(BeEmpty(), "GPU 1's 3g partition at slice 4")

	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "dm-3g"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "mig.nvidia.com"}}}}}}
	f.g.Expect(f.c.Create(ctx, claim)).To(Succeed())
	t.Cleanup(func() { _ = f.c.Delete(context.Background(), claim) })
	// What the scheduler writes when it allocates the partition.
	claim.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
		Results: []resourcev1.DeviceRequestAllocationResult{{Request: "gpu", Driver: "gpu.nvidia.com", Pool: name, Device: device}}}}
	f.g.Expect(f.c.Status().Update(ctx, claim)).To(Succeed())

	type placed struct {
		Profile string
		Start   int
		MIG     bool
	}
	onGPU1 := func() []placed {
		g := f.gpus(name)[1]
		var out []placed
		for _, in := range g.Instances {
			out = append(out, placed{in.Profile, in.Start, g.MIGEnabled})
		}
		return out
	}
	f.g.Eventually(onGPU1).Should(Equal([]placed{{"3g.71gb", 4, true}}), "the instance at the allocated placement")
	f.g.Expect(f.gpus(name)[0].Instances).To(BeEmpty())

	f.g.Expect(f.c.Delete(ctx, claim)).To(Succeed())
	f.g.Eventually(onGPU1).Should(BeEmpty(), "destroyed with its claim")
	f.g.Expect(f.gpus(name)[1].MIGEnabled).To(BeFalse(), "a Hopper GPU leaves MIG mode with its last instance")
}
