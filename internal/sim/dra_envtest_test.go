package sim_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/sim"
)

// The DRA driver stand-in publishes the node's MIG devices in the real driver's shape, the
// device plugin advertises nothing there, and after a re-carve the slice shows the new
// instances only because mig-manager bounced the plugin (it rescans only at start).
func TestDRAStandInPublishesAndRepublishesAfterACarve(t *testing.T) {
	const name = "dra-h200"
	spec := h200Node(name)
	spec.DRA = true
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{spec}})
	f.addEntries(map[string]string{"gpupool-a": perGPU(gpu0Two3)})

	slice := func() *resourcev1.ResourceSlice {
		s := &resourcev1.ResourceSlice{}
		if err := f.c.Get(context.Background(), types.NamespacedName{Name: name + "-gpu.nvidia.com"}, s); err != nil {
			return nil
		}
		return s
	}
	devices := func() []string {
		s := slice()
		if s == nil {
			return nil
		}
		var out []string
		for _, d := range s.Spec.Devices {
			out = append(out, d.Name)
		}
		slices.Sort(out)
		return out
	}
	f.g.Eventually(devices).Should(HaveLen(14), "two GPUs of seven 1g.18gb devices")
	s := slice()
	f.g.Expect(s.Spec.Driver).To(Equal("gpu.nvidia.com"))
	f.g.Expect(s.Spec.Pool.Name).To(Equal(name))
	f.g.Expect(*s.Spec.NodeName).To(Equal(name))
	// gpu-<minor>-mig-<profile>-<NVML's GPU instance profile ID>-<start>; go-nvml's mock
	// reports the profile's constant as its ID (real NVML says 19 for a 1g profile).
	isFirst := func(d resourcev1.Device) bool {
		return strings.HasPrefix(d.Name, "gpu-0-mig-1g18gb-") && strings.HasSuffix(d.Name, "-0")
	}
	f.g.Expect(slices.ContainsFunc(s.Spec.Devices, isFirst)).To(BeTrue(), "devices %v", devices())
	first := s.Spec.Devices[slices.IndexFunc(s.Spec.Devices, isFirst)]
	f.g.Expect(*first.Attributes["type"].StringValue).To(Equal("mig"))
	f.g.Expect(*first.Attributes["profile"].StringValue).To(Equal("1g.18gb"))
	f.g.Expect(*first.Attributes["uuid"].StringValue).To(Equal(f.gpus(name)[0].Instances[0].UUID))
	f.g.Expect(first.Capacity).To(HaveKey(resourcev1.QualifiedName("memorySlice0")))
	for r := range f.node(name).Status.Allocatable {
		f.g.Expect(strings.HasPrefix(string(r), "nvidia.com/")).To(BeFalse(), "the device plugin is not deployed here: %s", r)
	}

	history := f.watchLabels(name, sim.LabelMIGConfigState, "nvidia.com/gpu.deploy.client")
	f.flip(name, "gpupool-a")
	f.g.Eventually(f.state(name)).Should(Equal("success"))
	f.g.Eventually(func() []string { return history.of("nvidia.com/gpu.deploy.client") }).Should(Equal([]string{"true", "paused-for-mig-change", "true"}),
		"mig-manager bounces the plugin with the change")
	f.g.Eventually(func() int {
		return len(slices.DeleteFunc(devices(), func(d string) bool { return !strings.HasPrefix(d, "gpu-0-mig-3g71gb-") }))
	}).Should(Equal(2), "republished after the restart: GPU 0's two 3g.71gb devices")
	f.g.Expect(devices()).To(HaveLen(2 + 7))
	f.g.Expect(slice().Spec.Pool.Generation).To(BeNumerically(">", s.Spec.Pool.Generation))
}
