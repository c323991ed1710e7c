package sim_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/sim"
)

const (
	resGPU    = corev1.ResourceName("nvidia.com/gpu")
	resShared = corev1.ResourceName("nvidia.com/gpu.shared")
)

var (
	ts4  = v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: 4}
	ts2  = v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: 2}
	mps2 = v1alpha1.SharingConfig{Mode: v1alpha1.SharingMPS, Replicas: 2}
)

func a100Whole(name string) sim.NodeSpec {
	return sim.NodeSpec{Name: name, Model: "a100-80gb", GPUs: 2, InitialConfig: sim.PresetAllDisabled}
}

// The device plugin follows nvidia.com/device-plugin.config: gpupool-ts-4 on two whole GPUs
// advertises nvidia.com/gpu.shared: 8 and no nvidia.com/gpu, in capacity and allocatable; a
// pod bound with nvidia.com/gpu.shared: 1 gets one replica <GPU-UUID>::<n>, and the agent lists
// it on that GPU of the GPUNode; back to gpupool-none advertises nvidia.com/gpu: 2 again while
// the running pod keeps its replica, which it releases only when it ends.
func TestDevicePluginFollowsSharingLabel(t *testing.T) {
	const name = "share-a100"
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{a100Whole(name)}})
	f.setDevicePluginConfig(f.sharingConfigs(ts4))
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(map[corev1.ResourceName]string{resGPU: "2"}))

	f.label(name, v1alpha1.LabelDevicePluginConfig, nvidia.DevicePluginConfigName(ts4))
	for _, field := range []string{"capacity", "allocatable"} {
		f.g.Eventually(f.gpuResources(name, field)).Should(Equal(map[corev1.ResourceName]string{resShared: "8"}), field)
	}
	f.g.Expect(f.simNode(name).Sharing()).To(Equal(ts4))

	gpus := f.gpus(name)
	pod := f.bindPod("shared", name, resShared, 1)
	f.g.Eventually(f.assigned(name, pod)).Should(ConsistOf(HavePrefix(gpus[0].UUID + "::")))
	ref := v1alpha1.PodReference{Namespace: pod.Namespace, Name: pod.Name}
	f.g.Eventually(f.gpuPods(name, 0)).Should(Equal([]v1alpha1.PodReference{ref}))
	held := f.assigned(name, pod)()

	f.label(name, v1alpha1.LabelDevicePluginConfig, nvidia.DevicePluginNone)
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

// Whatever the plugin cannot find falls back to exclusive devices, as the real plugin falls
// back to its default config: a label naming a key the ConfigMap lacks, and a deleted
// ConfigMap (re-read on the ConfigMap's own change, not only the label's). A key that does not
// parse changes nothing the node advertises and records a Warning saying why, as a crashing
// plugin would; fixing the key applies it.
func TestDevicePluginFallsBackToExclusive(t *testing.T) {
	const name = "fallback-a100"
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{a100Whole(name)}})
	exclusive := map[corev1.ResourceName]string{resGPU: "2"}
	shared := map[corev1.ResourceName]string{resShared: "8"}
	f.setDevicePluginConfig(f.sharingConfigs(ts4))
	f.label(name, v1alpha1.LabelDevicePluginConfig, nvidia.DevicePluginConfigName(ts4))
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(shared))

	f.label(name, v1alpha1.LabelDevicePluginConfig, "gpupool-ts-9")
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(exclusive), "unknown key")

	f.label(name, v1alpha1.LabelDevicePluginConfig, nvidia.DevicePluginConfigName(ts4))
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(shared))
	f.deleteDevicePluginConfig()
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(exclusive), "ConfigMap deleted")

	broken := f.sharingConfigs(ts4)
	broken[nvidia.DevicePluginConfigName(ts4)] = "version: v1\nsharing: [not, a, map]\n"
	f.setDevicePluginConfig(broken)
	f.g.Eventually(f.events(name, "DevicePluginConfigInvalid")).Should(ConsistOf(
		And(ContainSubstring(`"gpupool-ts-4"`), ContainSubstring("devices unchanged"))))
	f.g.Expect(f.gpuResources(name, "allocatable")()).To(Equal(exclusive), "a crashing plugin advertises nothing new")

	f.setDevicePluginConfig(f.sharingConfigs(ts4))
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(shared))
}

// MPS on a node with MIG devices is refused as a whole, as the real plugin refuses to start:
// the whole GPU stays nvidia.com/gpu, the MIG devices stay as they are, and a Warning says "MPS
// is not supported on MIG devices". Time-slicing on the same node shares the whole GPU and the
// MIG devices alike.
func TestMPSOnMIGNodeIsRefused(t *testing.T) {
	const name = "mps-h200"
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{{Name: name, Model: "h200", GPUs: 2, InitialConfig: sim.PresetAllDisabled}}})
	f.addEntries(map[string][]nvidia.DeviceSpec{"gpupool-half": perGPU(map[int]mig.Layout{0: nil, 1: all1g})})
	f.flip(name, "gpupool-half")
	f.g.Eventually(f.state(name)).Should(Equal("success"))
	exclusive := map[corev1.ResourceName]string{resGPU: "1", res1g: "7"}
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(exclusive))

	f.setDevicePluginConfig(f.sharingConfigs(mps2, ts2))
	f.label(name, v1alpha1.LabelDevicePluginConfig, nvidia.DevicePluginConfigName(mps2))
	f.g.Eventually(f.events(name, "DevicePluginSharingUnsupported")).Should(ConsistOf(
		And(ContainSubstring("MPS is not supported on MIG devices"), ContainSubstring(`"gpupool-mps-2"`))))
	f.g.Expect(f.gpuResources(name, "allocatable")()).To(Equal(exclusive))
	f.g.Expect(f.simNode(name).Sharing().Mode).To(Equal(v1alpha1.SharingNone))

	f.label(name, v1alpha1.LabelDevicePluginConfig, nvidia.DevicePluginConfigName(ts2))
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(map[corev1.ResourceName]string{resShared: "2", res1g + ".shared": "14"}))
	f.g.Expect(f.events(name, "DevicePluginSharingUnsupported")()).To(HaveLen(1), "one Warning per refusal, not one per reconcile")
}

// Time-slicing shares MIG devices too, as gpupool's time-slicing configs list every MIG
// resource with renameByDefault: gpupool-ts-2 on two all-3g GPUs (4 x 3g.71gb) advertises
// nvidia.com/mig-3g.71gb.shared: 8 and no nvidia.com/mig-3g.71gb, in capacity and allocatable;
// a pod bound with nvidia.com/mig-3g.71gb.shared: 1 gets one replica <MIG-UUID>::<n> of the
// first instance, and the agent lists it (busy) on that instance of the GPUNode; the replica
// keeps mig-manager from changing that GPU; back to gpupool-none advertises
// nvidia.com/mig-3g.71gb: 4 again while the running pod keeps its replica, which it releases
// only when it ends.
func TestTimeSlicingSharesMIGDevices(t *testing.T) {
	const name = "share-mig-h200"
	resShared3g := res3g + ".shared"
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{{Name: name, Model: "h200", GPUs: 2, InitialConfig: sim.PresetAll3g}}})
	f.addEntries(map[string][]nvidia.DeviceSpec{"gpupool-gpu0-1g": perGPU(map[int]mig.Layout{0: all1g, 1: two3g})})
	f.setDevicePluginConfig(f.sharingConfigs(ts2))
	exclusive := map[corev1.ResourceName]string{res3g: "4"}
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(exclusive))

	f.label(name, v1alpha1.LabelDevicePluginConfig, nvidia.DevicePluginConfigName(ts2))
	for _, field := range []string{"capacity", "allocatable"} {
		f.g.Eventually(f.gpuResources(name, field)).Should(Equal(map[corev1.ResourceName]string{resShared3g: "8"}), field)
	}
	f.g.Expect(f.simNode(name).Sharing()).To(Equal(ts2))

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

	f.label(name, v1alpha1.LabelDevicePluginConfig, nvidia.DevicePluginNone)
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
