package sim_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/yaml"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/sim"
)

const (
	deployDevicePlugin = "nvidia.com/gpu.deploy.device-plugin"
	pausedForMIG       = "paused-for-mig-change"
	res1g              = corev1.ResourceName("nvidia.com/mig-1g.18gb")
	res3g              = corev1.ResourceName("nvidia.com/mig-3g.71gb")
)

var (
	all1g    = mig.Layout{"1g.18gb": 7}
	two3g    = mig.Layout{"3g.71gb": 2}
	gpu0Two3 = map[int]mig.Layout{0: two3g, 1: all1g}
)

func h200Node(name string) sim.NodeSpec {
	return sim.NodeSpec{Name: name, Model: "h200", GPUs: 2, InitialConfig: sim.PresetAll1g}
}

func quantity(n *corev1.Node, field string, r corev1.ResourceName) string {
	list := n.Status.Capacity
	if field == "allocatable" {
		list = n.Status.Allocatable
	}
	q, ok := list[r]
	if !ok {
		return "absent"
	}
	return q.String()
}

func instanceUUIDs(g sim.GPUState) []string {
	var out []string
	for _, in := range g.Instances {
		out = append(out, in.UUID)
	}
	return out
}

// A created node carries what GPU Feature Discovery, the GPU Operator and kwok would set, and
// advertises its initial layout in capacity and allocatable beside cpu, memory and pods;
// SeedConfig makes its initial mig.config value a real entry.
func TestCreatedNodeAndSeededConfig(t *testing.T) {
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{{Name: "created-a100", Model: "a100-80gb", GPUs: 3, InitialConfig: sim.PresetAllDisabled},
		{Name: "created-h200", Model: "h200", GPUs: 2, InitialConfig: sim.PresetAll1g}}, SeedConfig: true})
	n := f.node("created-a100")
	for k, v := range map[string]string{
		sim.LabelGPUProduct: "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "3", sim.LabelGPUPresent: "true",
		"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed", sim.LabelMIGConfig: "all-disabled",
		sim.LabelMIGConfigState: "success", deployDevicePlugin: "true",
	} {
		f.g.Expect(n.Labels).To(HaveKeyWithValue(k, v))
	}
	f.g.Expect(n.Annotations).To(HaveKeyWithValue("kwok.x-k8s.io/node", "fake"))
	f.g.Expect(quantity(n, "allocatable", "nvidia.com/gpu")).To(Equal("3"))
	f.g.Expect(quantity(n, "capacity", corev1.ResourceCPU)).To(Equal("128"))
	f.g.Expect(quantity(f.node("created-h200"), "allocatable", res1g)).To(Equal("14"))

	// gpusim seeds the ConfigMap beside creating the nodes, in no set order: wait for it.
	cm := &corev1.ConfigMap{}
	f.g.Eventually(func() error { return f.c.Get(context.Background(), f.cm, cm) }).WithTimeout(30 * time.Second).Should(Succeed())
	var cfg struct {
		Version    string                      `json:"version"`
		MIGConfigs map[string][]map[string]any `json:"mig-configs"`
	}
	f.g.Expect(yaml.UnmarshalStrict([]byte(cm.Data["config.yaml"]), &cfg)).To(Succeed())
	f.g.Expect(cfg.Version).To(Equal("v1"))
	f.g.Expect(cfg.MIGConfigs).To(HaveKeyWithValue("all-disabled", ConsistOf(map[string]any{"devices": "all", "mig-enabled": false})))
	// NVIDIA's H200 device ID, as its own config-default.yaml filters it.
	f.g.Expect(cfg.MIGConfigs).To(HaveKeyWithValue("all-1g", ConsistOf(map[string]any{
		"device-filter": []any{"0x233510DE"}, "devices": "all", "mig-enabled": true, "mig-devices": map[string]any{"1g.18gb": float64(7)}})))
	f.g.Expect(f.simNode("created-h200").PCIDeviceID()).To(Equal("0x233510DE"))
	f.g.Expect(f.simNode("created-a100").PCIDeviceID()).To(Equal("0x20B210DE"))
}

// The main protocol: a label flip to an entry goes pending (operands paused) then success
// (operands back); only the GPU whose multiset changes is rebuilt, the other keeps its MIG
// devices; capacity and allocatable follow the new layout through the status subresource; and
// the real agent publishes it, LayoutVerified True once expectedLayout matches.
func TestLabelFlipReconfiguresChangedGPUsOnly(t *testing.T) {
	const name = "flip-h200"
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}})
	f.addEntries(map[string]string{"gpupool-a": perGPU(gpu0Two3)})
	before := f.gpus(name)
	f.g.Eventually(func() string { return quantity(f.node(name), "allocatable", res1g) }).Should(Equal("14"))
	history := f.watchLabels(name, sim.LabelMIGConfigState, deployDevicePlugin)

	f.flip(name, "gpupool-a")
	f.g.Eventually(f.state(name)).Should(Equal("success"))

	// The watch opened on the initial "success"; the flip dropped the state, then mig-manager
	// wrote pending and finally success.
	f.g.Eventually(func() []string { return history.of(sim.LabelMIGConfigState) }).Should(Equal([]string{"success", "", "pending", "success"}))
	f.g.Eventually(func() []string { return history.of(deployDevicePlugin) }).Should(Equal([]string{"true", pausedForMIG, "true"}))

	after := f.gpus(name)
	f.g.Expect(after[0].Layout()).To(Equal(two3g))
	f.g.Expect(instanceUUIDs(after[1])).To(Equal(instanceUUIDs(before[1])), "the unchanged GPU keeps its MIG devices")

	f.g.Eventually(func(g Gomega) {
		n := f.node(name)
		for _, field := range []string{"capacity", "allocatable"} {
			g.Expect(quantity(n, field, res3g)).To(Equal("2"))
			g.Expect(quantity(n, field, res1g)).To(Equal("7"))
		}
		g.Expect(quantity(n, "allocatable", corev1.ResourceCPU)).To(Equal("128"))
	}).Should(Succeed())

	f.setExpectedLayout(name, gpu0Two3)
	f.g.Eventually(f.layoutVerified(name)).Should(And(
		HaveField("Status", metav1.ConditionTrue), HaveField("Reason", agent.ReasonLayoutMatches)))
}

// An unknown entry name fails (state failed, an Event saying why) without touching a GPU.
// mig-manager acts on label changes only, so once the entry exists the documented retry is
// unset+set of the same value, which applies it.
func TestUnknownEntryFails(t *testing.T) {
	const name = "unknown-h200"
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}})
	f.addEntries(map[string]string{"gpupool-other": perGPU(gpu0Two3)})
	before := f.gpus(name)

	history := f.watchLabels(name, sim.LabelMIGConfigState)
	f.flip(name, "gpupool-missing")
	f.g.Eventually(f.state(name)).Should(Equal("failed"))
	f.g.Eventually(f.events(name, "MIGConfigInvalid")).Should(ContainElement(ContainSubstring("selected mig-config not present: gpupool-missing")))
	f.g.Eventually(func() []string { return history.of(sim.LabelMIGConfigState) }).Should(Equal([]string{"success", "", "failed"}), "refused before pending, as mig-manager validates first")
	f.g.Expect(f.gpus(name)).To(Equal(before))
	f.g.Expect(f.node(name).Labels).To(HaveKeyWithValue(deployDevicePlugin, "true"), "nothing was paused")

	f.addEntries(map[string]string{"gpupool-missing": perGPU(gpu0Two3)})
	f.unsetConfig(name)
	f.flip(name, "gpupool-missing")
	f.g.Eventually(f.state(name)).Should(Equal("success"))
	f.g.Expect(f.gpus(name)[0].Layout()).To(Equal(two3g))
}

// A pod holding a device on a GPU whose layout would change makes mig-manager refuse (state
// failed, an Event saying "in use", operands restored, no GPU touched); an entry that changes
// only another GPU succeeds and leaves the pod's device alone. The assignment is what the
// agent publishes per instance, and it is released when the pod terminates.
func TestPodOnChangedGPURefusesReconfiguration(t *testing.T) {
	const name = "inuse-h200"
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}})
	f.addEntries(map[string]string{
		"gpupool-gpu0": perGPU(map[int]mig.Layout{0: two3g, 1: all1g}),
		"gpupool-gpu1": perGPU(map[int]mig.Layout{0: all1g, 1: two3g}),
	})
	before := f.gpus(name)
	pod := f.bindPod("holder", name, res1g, 1)
	f.g.Eventually(f.assigned(name, pod)).Should(Equal([]string{before[0].Instances[0].UUID}))

	f.g.Eventually(func(g Gomega) {
		n := &v1alpha1.GPUNode{}
		g.Expect(f.c.Get(context.Background(), types.NamespacedName{Name: name}, n)).To(Succeed())
		g.Expect(n.Status.GPUs).To(HaveLen(2))
		in := n.Status.GPUs[0].Instances[0]
		g.Expect(in.UUID).To(Equal(before[0].Instances[0].UUID))
		g.Expect(in.Pod).To(Equal(&v1alpha1.PodReference{Namespace: pod.Namespace, Name: pod.Name}))
		g.Expect(in.Busy).To(BeTrue())
		g.Expect(n.Status.GPUs[0].Instances[1].Pod).To(BeNil())
	}).Should(Succeed())

	f.flip(name, "gpupool-gpu0")
	f.g.Eventually(f.state(name)).Should(Equal("failed"))
	f.g.Eventually(f.events(name, "MIGConfigInUse")).Should(ContainElement(And(ContainSubstring("in use"), ContainSubstring(pod.String()))))
	f.g.Expect(f.gpus(name)).To(Equal(before))
	f.g.Expect(f.node(name).Labels).To(HaveKeyWithValue(deployDevicePlugin, "true"), "operands restored after the refusal")

	f.flip(name, "gpupool-gpu1")
	f.g.Eventually(f.state(name)).Should(Equal("success"))
	after := f.gpus(name)
	f.g.Expect(after[1].Layout()).To(Equal(two3g))
	f.g.Expect(instanceUUIDs(after[0])).To(Equal(instanceUUIDs(before[0])))
	f.g.Expect(f.assigned(name, pod)()).To(Equal([]string{before[0].Instances[0].UUID}), "the pod keeps its device")

	p := &corev1.Pod{}
	f.g.Expect(f.c.Get(context.Background(), pod, p)).To(Succeed())
	p.Status.Phase = corev1.PodSucceeded
	f.g.Expect(f.c.Status().Update(context.Background(), p)).To(Succeed())
	f.g.Eventually(f.assigned(name, pod)).Should(BeEmpty())
	f.g.Eventually(func(g Gomega) {
		n := &v1alpha1.GPUNode{}
		g.Expect(f.c.Get(context.Background(), types.NamespacedName{Name: name}, n)).To(Succeed())
		g.Expect(n.Status.GPUs[0].Instances[0].Pod).To(BeNil())
		g.Expect(n.Status.GPUs[0].Instances[0].Busy).To(BeFalse())
	}).Should(Succeed())
}

// A whole-GPU pod on a node with MIG disabled gets a GPU UUID, and mig-manager refuses to turn
// MIG on under it.
func TestWholeGPUPodBlocksEnablingMIG(t *testing.T) {
	const name = "whole-a100"
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{{Name: name, Model: "a100-80gb", GPUs: 1, InitialConfig: sim.PresetAllDisabled}}})
	f.addEntries(map[string]string{"gpupool-mig": perGPU(map[int]mig.Layout{0: {"1g.10gb": 7}})})
	gpu := f.gpus(name)[0]
	pod := f.bindPod("whole", name, "nvidia.com/gpu", 1)
	f.g.Eventually(f.assigned(name, pod)).Should(Equal([]string{gpu.UUID}))
	f.flip(name, "gpupool-mig")
	f.g.Eventually(f.state(name)).Should(Equal("failed"))
	f.g.Expect(f.gpus(name)[0].MIGEnabled).To(BeFalse())
}

// Fault knobs reproduce mig-manager's failure modes, from annotations and from code.
func TestFaults(t *testing.T) {
	entries := map[string]string{
		"gpupool-a": perGPU(gpu0Two3),
		"gpupool-b": perGPU(gpu0Two3),
		// changes GPU 1 only, so a sentinel pod on GPU 0 does not block it
		"gpupool-c": perGPU(map[int]mig.Layout{0: all1g, 1: two3g}),
	}

	// fail-next fails one apply, is consumed (the annotation word removed), and the next
	// value applies normally.
	t.Run("fail-next annotation", func(t *testing.T) {
		const name = "fault-failnext"
		f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}})
		f.addEntries(entries)
		before := f.gpus(name)
		f.annotate(name, sim.AnnotationFault, "fail-next")
		f.g.Eventually(func() map[string]string { return f.node(name).Annotations }).Should(HaveKey(sim.AnnotationFault))
		f.flip(name, "gpupool-a")
		f.g.Eventually(f.state(name)).Should(Equal("failed"))
		f.g.Expect(f.gpus(name)).To(Equal(before))
		f.g.Eventually(func() map[string]string { return f.node(name).Annotations }).ShouldNot(HaveKey(sim.AnnotationFault))
		f.flip(name, "gpupool-b")
		f.g.Eventually(f.state(name)).Should(Equal("success"))
		f.g.Expect(f.gpus(name)[0].Layout()).To(Equal(two3g))
	})

	// The programmatic FailNext knob, set on a running simulator, behaves the same and fires
	// once.
	t.Run("FailNext knob", func(t *testing.T) {
		const name = "fault-failnext-knob"
		f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}})
		f.addEntries(entries)
		f.simNode(name).SetFaults(sim.Faults{FailNext: true})
		f.flip(name, "gpupool-a")
		f.g.Eventually(f.state(name)).Should(Equal("failed"))
		f.flip(name, "gpupool-b")
		f.g.Eventually(f.state(name)).Should(Equal("success"))
	})

	// stuck-pending leaves the node pending with its operands paused however long, changing no
	// GPU; after the annotation is removed, a new value applies and restores the operands.
	t.Run("stuck-pending", func(t *testing.T) {
		const name = "fault-stuck"
		f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}})
		f.addEntries(entries)
		before := f.gpus(name)
		f.annotate(name, sim.AnnotationFault, "stuck-pending")
		f.flip(name, "gpupool-a")
		f.g.Eventually(f.state(name)).Should(Equal("pending"))
		f.g.Expect(f.node(name).Labels).To(HaveKeyWithValue(deployDevicePlugin, pausedForMIG))
		// A later reconcile of the node (it hands the new pod a device) leaves it pending.
		pod := f.bindPod("sentinel", name, res1g, 1)
		f.g.Eventually(f.assigned(name, pod)).Should(HaveLen(1))
		f.g.Expect(f.state(name)()).To(Equal("pending"))
		f.g.Expect(f.gpus(name)).To(Equal(before))

		f.annotate(name, sim.AnnotationFault, "")
		f.flip(name, "gpupool-c")
		f.g.Eventually(f.state(name)).Should(Equal("success"))
		f.g.Expect(f.node(name).Labels).To(HaveKeyWithValue(deployDevicePlugin, "true"))
	})

	// wrong-layout reports success with one instance fewer than asked, which the agent's
	// verification catches.
	t.Run("wrong-layout", func(t *testing.T) {
		const name = "fault-wrong"
		f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}})
		f.addEntries(entries)
		f.annotate(name, sim.AnnotationFault, "wrong-layout")
		f.flip(name, "gpupool-a")
		f.g.Eventually(f.state(name)).Should(Equal("success"))
		f.g.Expect(f.gpus(name)[0].Layout()).To(Equal(mig.Layout{"3g.71gb": 1}))
		f.g.Eventually(func() string { return quantity(f.node(name), "allocatable", res3g) }).Should(Equal("1"))
		f.setExpectedLayout(name, gpu0Two3)
		f.g.Eventually(f.layoutVerified(name)).Should(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", agent.ReasonLayoutMismatch)))
	})

	// apply-delay keeps the node pending, GPUs untouched, until the delay has passed on the
	// simulator's clock.
	t.Run("apply-delay", func(t *testing.T) {
		const name = "fault-delay"
		clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}, Clock: clock})
		f.addEntries(entries)
		before := f.gpus(name)
		f.annotate(name, sim.AnnotationApplyDelay, "1h")
		f.flip(name, "gpupool-c")
		f.g.Eventually(f.state(name)).Should(Equal("pending"))
		pod := f.bindPod("sentinel", name, res1g, 1)
		f.g.Eventually(f.assigned(name, pod)).Should(HaveLen(1))
		f.g.Expect(f.state(name)()).To(Equal("pending"))
		f.g.Expect(f.gpus(name)).To(Equal(before))

		clock.Step(time.Hour)
		f.annotate(name, "test.gpupool.io/poke", "1") // any node event wakes the reconcile
		f.g.Eventually(f.state(name)).Should(Equal("success"))
		f.g.Expect(f.gpus(name)[1].Layout()).To(Equal(two3g))
	})
}

// The device plugin leaves cpu, memory and pods as they are when it rewrites GPU resources.
func TestDevicePluginKeepsOtherResources(t *testing.T) {
	const name = "keep-h200"
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}})
	n := f.node(name)
	base := n.DeepCopy()
	n.Status.Capacity[corev1.ResourceCPU] = resource.MustParse("7")
	n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("6")
	n.Status.Allocatable[res1g] = resource.MustParse("3") // as if someone overwrote it
	f.g.Expect(f.c.Status().Patch(context.Background(), n, clientMergeFrom(base))).To(Succeed())
	f.g.Eventually(func() string { return quantity(f.node(name), "allocatable", res1g) }).Should(Equal("14"))
	got := f.node(name)
	f.g.Expect(quantity(got, "capacity", corev1.ResourceCPU)).To(Equal("7"))
	f.g.Expect(quantity(got, "allocatable", corev1.ResourceCPU)).To(Equal("6"))
}
