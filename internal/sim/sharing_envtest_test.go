package sim_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/sim"
)

const (
	resGPU    = corev1.ResourceName("nvidia.com/gpu")
	resShared = corev1.ResourceName("nvidia.com/gpu.shared")
)

// Device plugin config keys the tests write, with their content.
const (
	keyTS4  = "ts-4"
	keyTS2  = "ts-2"
	keyMPS2 = "mps-2"
)

func sharingKeys() map[string]string {
	return withExclusive(map[string]string{
		keyTS4: timeSliced(4), keyTS2: timeSliced(2), keyMPS2: sharingConfig("mps", 2, resGPU),
	})
}

func a100Whole(name string) sim.NodeSpec {
	return sim.NodeSpec{Name: name, Model: "a100-80gb", GPUs: 2, InitialConfig: sim.PresetAllDisabled}
}

// The device plugin follows nvidia.com/device-plugin.config: ts-4 on two whole GPUs advertises
// nvidia.com/gpu.shared: 8 and no nvidia.com/gpu, in capacity and allocatable; a pod bound with
// nvidia.com/gpu.shared: 1 gets one replica <GPU-UUID>::<n>, and the agent lists it on that GPU
// of the GPUNode; back to the exclusive key advertises nvidia.com/gpu: 2 again while the
// running pod keeps its replica, which it releases only when it ends.
func TestDevicePluginFollowsSharingLabel(t *testing.T) {
	const name = "share-a100"
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{a100Whole(name)}})
	f.setDevicePluginConfig(sharingKeys())
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(map[corev1.ResourceName]string{resGPU: "2"}))

	f.label(name, sim.LabelDevicePluginConfig, keyTS4)
	for _, field := range []string{"capacity", "allocatable"} {
		f.g.Eventually(f.gpuResources(name, field)).Should(Equal(map[corev1.ResourceName]string{resShared: "8"}), field)
	}
	f.g.Expect(f.simNode(name).DevicePlugin()).To(Equal(sim.DevicePluginState{Running: true, Config: keyTS4, MIGStrategy: "mixed", Sharing: "time-slicing"}))

	gpus := f.gpus(name)
	pod := f.bindPod("shared", name, resShared, 1)
	f.g.Eventually(f.assigned(name, pod)).Should(ConsistOf(HavePrefix(gpus[0].UUID + "::")))
	ref := v1alpha1.PodReference{Namespace: pod.Namespace, Name: pod.Name}
	f.g.Eventually(f.gpuPods(name, 0)).Should(Equal([]v1alpha1.PodReference{ref}))
	held := f.assigned(name, pod)()

	f.label(name, sim.LabelDevicePluginConfig, exclusiveKey)
	for _, field := range []string{"capacity", "allocatable"} {
		f.g.Eventually(f.gpuResources(name, field)).Should(Equal(map[corev1.ResourceName]string{resGPU: "2"}), field)
	}
	f.g.Expect(f.assigned(name, pod)()).To(Equal(held), "a running pod keeps its replica across the plugin's restart")
	f.g.Expect(f.gpuPods(name, 0)()).To(Equal([]v1alpha1.PodReference{ref}))

	p := &corev1.Pod{}
	f.g.Expect(f.c.Get(context.Background(), pod, p)).To(Succeed())
	p.Status.Phase = corev1.PodSucceeded
	f.g.Expect(f.c.Status().Update(context.Background(), p)).To(Succeed())
	f.g.Eventually(f.assigned(name, pod)).Should(BeEmpty())
	f.g.Eventually(f.gpuPods(name, 0)).Should(BeEmpty())
}

// Whatever NVIDIA's config-manager or device plugin refuses makes the plugin advertise nothing
// (every nvidia.com/ resource at 0) and records a Warning saying why, until a config it accepts
// is selected: a label naming a key the ConfigMap lacks, a deleted ConfigMap (re-read on the
// ConfigMap's own change, not only the label's), and a key that does not decode. No label
// selects the ClusterPolicy's default key.
func TestDevicePluginRefusesWhatNVIDIARefuses(t *testing.T) {
	const name = "refuse-a100"
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{a100Whole(name)}})
	exclusive := map[corev1.ResourceName]string{resGPU: "2"}
	shared := map[corev1.ResourceName]string{resShared: "8"}
	nothing := map[corev1.ResourceName]string{resShared: "0"}
	f.setDevicePluginConfig(sharingKeys())
	f.label(name, sim.LabelDevicePluginConfig, keyTS4)
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(shared))

	f.label(name, sim.LabelDevicePluginConfig, "ts-9")
	for _, field := range []string{"capacity", "allocatable"} {
		f.g.Eventually(f.gpuResources(name, field)).Should(Equal(nothing), "unknown key: "+field)
	}
	f.g.Eventually(f.events(name, "DevicePluginConfigInvalid")).Should(ContainElement(ContainSubstring("specified config ts-9 does not exist")))
	f.g.Expect(f.simNode(name).DevicePlugin().Running).To(BeFalse())

	f.label(name, sim.LabelDevicePluginConfig, "")
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(exclusive), "no label: the default key, exclusive")
	f.g.Expect(f.simNode(name).DevicePlugin().Config).To(Equal(exclusiveKey))

	f.label(name, sim.LabelDevicePluginConfig, keyTS4)
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(shared))
	f.deleteDevicePluginConfig()
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(nothing), "ConfigMap deleted")

	broken := sharingKeys()
	broken[keyTS4] = "version: v1\nsharing: [not, a, map]\n"
	f.setDevicePluginConfig(broken)
	f.g.Eventually(f.events(name, "DevicePluginConfigInvalid")).Should(ContainElement(
		And(ContainSubstring("unable to parse config file ts-4"), ContainSubstring("advertises nothing"))))
	f.g.Consistently(f.gpuResources(name, "allocatable"), "300ms", pollInterval).Should(Equal(nothing))

	f.setDevicePluginConfig(sharingKeys())
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(shared))
}

// The device plugin refuses MPS under the mixed MIG strategy the ClusterPolicy sets (NVIDIA's
// validateFlags: "using --mig-strategy=mixed is not supported with MPS"), whatever the node's
// GPUs, and advertises nothing: neither the whole GPU nor the MIG devices. Time-slicing on the
// same node shares the whole GPU and the MIG devices alike.
func TestMPSUnderMixedStrategyIsRefused(t *testing.T) {
	const name = "mps-h200"
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{{Name: name, Model: "h200", GPUs: 2, InitialConfig: sim.PresetAllDisabled}}})
	f.addEntries(map[string]string{"gpupool-half": perGPU(map[int]mig.Layout{0: nil, 1: all1g})})
	f.flip(name, "gpupool-half")
	f.g.Eventually(f.state(name)).Should(Equal("success"))
	exclusive := map[corev1.ResourceName]string{resGPU: "1", res1g: "7"}
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(exclusive))

	f.setDevicePluginConfig(sharingKeys())
	f.label(name, sim.LabelDevicePluginConfig, keyMPS2)
	f.g.Eventually(f.events(name, "DevicePluginRefused")).Should(ConsistOf(
		ContainSubstring("using --mig-strategy=mixed is not supported with MPS")))
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(map[corev1.ResourceName]string{resGPU: "0", res1g: "0"}))
	f.g.Expect(f.simNode(name).DevicePlugin().Running).To(BeFalse())

	f.label(name, sim.LabelDevicePluginConfig, keyTS2)
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(map[corev1.ResourceName]string{resShared: "2", res1g + ".shared": "14"}))
	f.g.Expect(f.events(name, "DevicePluginRefused")()).To(HaveLen(1), "one Warning per refusal, not one per reconcile")
}

// Under the none strategy MPS runs on whole GPUs, up to the MPS daemon's 48 clients per device;
// 49 replicas are refused and nothing is advertised.
func TestMPSReplicasAreCapped(t *testing.T) {
	const name = "mps-cap-a100"
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{a100Whole(name)}}, testOptions{strategy: "none"})
	f.setDevicePluginConfig(withExclusive(map[string]string{
		"mps-48": sharingConfig("mps", 48, resGPU), "mps-49": sharingConfig("mps", 49, resGPU),
	}))
	f.label(name, sim.LabelDevicePluginConfig, "mps-48")
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(map[corev1.ResourceName]string{resShared: "96"}))
	f.g.Expect(f.simNode(name).DevicePlugin()).To(Equal(sim.DevicePluginState{Running: true, Config: "mps-48", MIGStrategy: "none", Sharing: "mps"}))

	// MPS refuses requests for more than one replica by default.
	two := f.bindPod("two-replicas", name, resShared, 2)
	one := f.bindPod("one-replica", name, resShared, 1)
	f.g.Eventually(f.assigned(name, one)).Should(HaveLen(1))
	f.g.Consistently(f.assigned(name, two), "300ms", pollInterval).Should(BeEmpty())

	f.label(name, sim.LabelDevicePluginConfig, "mps-49")
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(map[corev1.ResourceName]string{resShared: "0"}))
	f.g.Eventually(f.events(name, "DevicePluginRefused")).Should(ContainElement(ContainSubstring("maximum allowed replicas exceeded: 49 > 48")))
}

// Time-slicing shares MIG devices too, when the config lists their resources with
// renameByDefault: ts-2 on two all-3g GPUs (4 x 3g.71gb) advertises
// nvidia.com/mig-3g.71gb.shared: 8 and no nvidia.com/mig-3g.71gb, in capacity and allocatable;
// a pod bound with nvidia.com/mig-3g.71gb.shared: 1 gets one replica <MIG-UUID>::<n> of the
// first instance, and the agent lists it (busy) on that instance of the GPUNode; the replica
// keeps mig-manager from changing that GPU; back to the exclusive key advertises
// nvidia.com/mig-3g.71gb: 4 again while the running pod keeps its replica, which it releases
// only when it ends.
func TestTimeSlicingSharesMIGDevices(t *testing.T) {
	const name = "share-mig-h200"
	resShared3g := res3g + ".shared"
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{{Name: name, Model: "h200", GPUs: 2, InitialConfig: sim.PresetAll3g}}})
	f.addEntries(map[string]string{"gpupool-gpu0-1g": perGPU(map[int]mig.Layout{0: all1g, 1: two3g})})
	f.setDevicePluginConfig(sharingKeys())
	exclusive := map[corev1.ResourceName]string{res3g: "4"}
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(exclusive))

	f.label(name, sim.LabelDevicePluginConfig, keyTS2)
	for _, field := range []string{"capacity", "allocatable"} {
		f.g.Eventually(f.gpuResources(name, field)).Should(Equal(map[corev1.ResourceName]string{resShared3g: "8"}), field)
	}
	f.g.Expect(f.simNode(name).DevicePlugin().Sharing).To(Equal("time-slicing"))

	gpus := f.gpus(name)
	instance := gpus[0].Instances[0].UUID
	pod := f.bindPod("shared-mig", name, resShared3g, 1)
	f.g.Eventually(f.assigned(name, pod)).Should(ConsistOf(HavePrefix(instance + "::")))
	ref := &v1alpha1.PodReference{Namespace: pod.Namespace, Name: pod.Name}
	f.g.Eventually(func(g Gomega) {
		n := &v1alpha1.GPUNode{}
		g.Expect(f.c.Get(context.Background(), types.NamespacedName{Name: name}, n)).To(Succeed())
		g.Expect(n.Status.GPUs).To(HaveLen(2))
		in := n.Status.GPUs[0].Instances[0]
		g.Expect(in.UUID).To(Equal(instance))
		g.Expect(in.Pod).To(Equal(ref))
		g.Expect(in.Busy).To(BeTrue())
		g.Expect(n.Status.GPUs[0].Instances[1].Pod).To(BeNil())
	}).Should(Succeed())
	held := f.assigned(name, pod)()

	f.flip(name, "gpupool-gpu0-1g")
	f.g.Eventually(f.state(name)).Should(Equal("failed"))
	f.g.Eventually(f.events(name, "MIGConfigInUse")).Should(ContainElement(ContainSubstring(pod.String())))
	f.g.Expect(f.gpus(name)).To(Equal(gpus), "a replica holder keeps its GPU from being changed")

	f.label(name, sim.LabelDevicePluginConfig, exclusiveKey)
	for _, field := range []string{"capacity", "allocatable"} {
		f.g.Eventually(f.gpuResources(name, field)).Should(Equal(exclusive), field)
	}
	f.g.Expect(f.assigned(name, pod)()).To(Equal(held), "a running pod keeps its replica across the plugin's restart")

	p := &corev1.Pod{}
	f.g.Expect(f.c.Get(context.Background(), pod, p)).To(Succeed())
	p.Status.Phase = corev1.PodSucceeded
	f.g.Expect(f.c.Status().Update(context.Background(), p)).To(Succeed())
	f.g.Eventually(f.assigned(name, pod)).Should(BeEmpty())
	f.g.Eventually(func(g Gomega) {
		n := &v1alpha1.GPUNode{}
		g.Expect(f.c.Get(context.Background(), types.NamespacedName{Name: name}, n)).To(Succeed())
		g.Expect(n.Status.GPUs[0].Instances[0].Pod).To(BeNil())
	}).Should(Succeed())
}
