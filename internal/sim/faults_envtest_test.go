package sim_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/sim"
)

// observedTime reads when the node's agent last published (zero when the GPUNode is gone).
func (f *fixture) observedTime(name string) time.Time {
	n := &v1alpha1.GPUNode{}
	if err := f.c.Get(context.Background(), types.NamespacedName{Name: name}, n); err != nil || n.Status.ObservedTime == nil {
		return time.Time{}
	}
	return n.Status.ObservedTime.Time
}

// The fault knobs of the host and the operands around mig-manager: a host reboot for a MIG
// mode change, a device plugin that never registers again, an agent that is down, and
// mig-manager failing every apply.
func TestHostAndOperandFaults(t *testing.T) {
	entries := map[string]string{
		"gpupool-a": perGPU(gpu0Two3),
		"gpupool-b": perGPU(gpu0Two3),
	}

	// fail-always fails every apply, touching no GPU, and is not consumed; once removed, the
	// next change applies.
	t.Run("fail-always", func(t *testing.T) {
		const name = "fault-failalways"
		f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}})
		f.addEntries(entries)
		before := f.gpus(name)
		f.annotate(name, sim.AnnotationFault, sim.FaultFailAlways)
		for _, entry := range []string{"gpupool-a", "gpupool-b"} {
			f.flip(name, entry)
			f.g.Eventually(f.state(name)).Should(Equal("failed"))
		}
		f.g.Expect(f.gpus(name)).To(Equal(before))
		f.g.Expect(f.events(name, "MIGConfigInjectedFault")()).To(ContainElement(ContainSubstring("injected fault fail-always")))
		f.g.Expect(f.node(name).Annotations).To(HaveKeyWithValue(sim.AnnotationFault, sim.FaultFailAlways), "fail-always is not consumed")
		f.annotate(name, sim.AnnotationFault, "")
		f.flip(name, "gpupool-a")
		f.g.Eventually(f.state(name)).Should(Equal("success"))
		f.g.Expect(f.gpus(name)[0].Layout()).To(Equal(two3g))
	})

	// reboot: the apply sets state rebooting with the operands paused and the GPUs as they
	// were; the agent stops first, so its report does not advance while the host is down; at
	// boot the GPUs hold the new layout, mig-manager goes pending, the agent publishes again,
	// and only then is success reported. The fault fires once.
	t.Run("reboot", func(t *testing.T) {
		const name = "fault-reboot"
		f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}})
		f.addEntries(entries)
		before := f.gpus(name)
		f.g.Eventually(func() time.Time { return f.observedTime(name) }).ShouldNot(BeZero())
		history := f.watchLabels(name, sim.LabelMIGConfigState, deployDevicePlugin)
		f.annotate(name, sim.AnnotationFault, sim.FaultReboot)
		f.annotate(name, sim.AnnotationRebootDuration, "2s")
		f.flip(name, "gpupool-a")
		f.g.Eventually(f.state(name)).Should(Equal("rebooting"))
		down := time.Now()
		f.g.Expect(f.events(name, "AgentStopped")()).To(ContainElement(ContainSubstring("the host is rebooting")),
			"the agent is down before the state says rebooting")
		last := f.observedTime(name)
		f.g.Expect(f.node(name).Labels).To(HaveKeyWithValue(deployDevicePlugin, pausedForMIG))
		f.g.Expect(f.gpus(name)).To(Equal(before), "nothing changes before the host is down")
		f.g.Consistently(func(g Gomega) {
			g.Expect(f.observedTime(name)).To(Equal(last), "the agent published while the host was down")
		}).WithTimeout(time.Second).Should(Succeed())

		f.g.Eventually(f.state(name)).Should(Equal("success"))
		f.g.Expect(time.Since(down)).To(BeNumerically(">=", time.Second), "the host stayed down")
		f.g.Expect(f.gpus(name)[0].Layout()).To(Equal(two3g))
		f.g.Expect(f.observedTime(name)).To(BeTemporally(">", last), "the agent published since the boot before success")
		f.g.Expect(f.events(name, "AgentStarted")()).NotTo(BeEmpty())
		f.g.Expect(f.events(name, "MIGConfigRebooting")()).To(ContainElement(ContainSubstring("rebooting the host (down for 2s)")))
		f.g.Eventually(func() []string { return history.of(sim.LabelMIGConfigState) }).Should(Equal([]string{"success", "", "pending", "rebooting", "pending", "success"}))
		f.g.Eventually(func() []string { return history.of(deployDevicePlugin) }).Should(Equal([]string{"true", pausedForMIG, "true"}), "paused through the reboot")
		f.g.Eventually(func() map[string]string { return f.node(name).Annotations }).ShouldNot(HaveKey(sim.AnnotationFault),
			"the fault is consumed")

		f.flip(name, "gpupool-b") // the same layout: nothing to do, no reboot
		f.g.Eventually(f.state(name)).Should(Equal("success"))
		f.g.Expect(f.events(name, "MIGConfigRebooting")()).To(HaveLen(1))
	})

	// reboot with the agent held down: mig-manager does not wait for a report that cannot
	// come, and reports success while the GPUNode still carries the report from before the
	// reboot; the agent publishes the new layout once it runs again.
	t.Run("reboot with the agent down", func(t *testing.T) {
		const name = "fault-reboot-agentdown"
		f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}})
		f.addEntries(entries)
		f.g.Eventually(func() time.Time { return f.observedTime(name) }).ShouldNot(BeZero())
		f.annotate(name, sim.AnnotationRebootDuration, "1s")
		f.annotate(name, sim.AnnotationFault, sim.FaultReboot+","+sim.FaultAgentDown)
		f.g.Eventually(f.events(name, "AgentStopped")).Should(ContainElement(ContainSubstring("fault agent-down")))
		last := f.observedTime(name)
		f.flip(name, "gpupool-a")
		f.g.Eventually(f.state(name)).Should(Equal("success"))
		f.g.Expect(f.gpus(name)[0].Layout()).To(Equal(two3g))
		f.g.Expect(f.observedTime(name)).To(Equal(last), "no report since the reboot")
		f.g.Expect(f.node(name).Annotations).To(HaveKeyWithValue(sim.AnnotationFault, sim.FaultAgentDown))

		f.annotate(name, sim.AnnotationFault, "")
		f.g.Eventually(f.events(name, "AgentStarted")).ShouldNot(BeEmpty())
		f.g.Eventually(func() time.Time { return f.observedTime(name) }).Should(BeTemporally(">", last))
		f.setExpectedLayout(name, gpu0Two3)
		f.g.Eventually(f.layoutVerified(name)).Should(HaveField("Status", metav1.ConditionTrue))
	})

	// plugin-silent: the plugin advertises normally until an apply pauses it; when it comes
	// back it advertises nothing and hands out no device, until the fault is removed.
	t.Run("plugin-silent", func(t *testing.T) {
		const name = "fault-silent"
		f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}})
		f.addEntries(entries)
		f.annotate(name, sim.AnnotationFault, sim.FaultPluginSilent)
		f.annotate(name, "test.gpupool.io/poke", "1")
		f.g.Consistently(func() string { return quantity(f.node(name), "allocatable", res1g) }).
			WithTimeout(500*time.Millisecond).Should(Equal("14"), "silent only after an apply")

		f.flip(name, "gpupool-a")
		f.g.Eventually(f.state(name)).Should(Equal("success"))
		f.g.Expect(f.gpus(name)[0].Layout()).To(Equal(two3g))
		// What it advertised goes to 0; the new 3g devices never appear.
		f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(map[corev1.ResourceName]string{res1g: "0"}))
		f.g.Expect(f.gpuResources(name, "capacity")()).To(Equal(map[corev1.ResourceName]string{res1g: "0"}))
		pod := f.bindPod("silent-pod", name, res3g, 1)
		f.g.Consistently(f.assigned(name, pod)).WithTimeout(time.Second).Should(BeEmpty(), "a silent plugin hands out nothing")

		f.annotate(name, sim.AnnotationFault, "")
		f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(map[corev1.ResourceName]string{res1g: "7", res3g: "2"}))
		f.g.Eventually(f.assigned(name, pod)).Should(HaveLen(1))
	})

	// restart-mig-manager: a new value has mig-manager apply the current label again (here
	// after wrong-layout left a GPU short), a repeated value does nothing.
	t.Run("restart-mig-manager", func(t *testing.T) {
		const name = "fault-restart"
		f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}})
		f.addEntries(entries)
		f.annotate(name, sim.AnnotationFault, sim.FaultWrongLayout)
		f.flip(name, "gpupool-a")
		f.g.Eventually(f.state(name)).Should(Equal("success"))
		f.g.Expect(f.gpus(name)[0].Layout()).To(Equal(mig.Layout{"3g.71gb": 1}))
		f.annotate(name, sim.AnnotationFault, "")
		history := f.watchLabels(name, sim.LabelMIGConfigState)
		f.annotate(name, sim.AnnotationRestartMIGManager, "1")
		f.g.Eventually(func() mig.Layout { return f.gpus(name)[0].Layout() }).Should(Equal(two3g))
		f.g.Eventually(f.state(name)).Should(Equal("success"))
		f.g.Eventually(func() []string { return history.of(sim.LabelMIGConfigState) }).Should(Equal([]string{"success", "pending", "success"}))
		f.g.Expect(f.node(name).Labels).To(HaveKeyWithValue(sim.LabelMIGConfig, "gpupool-a"), "the label is untouched")
	})

	// agent-down: the agent stops (an Event says so once it has), so a deleted GPUNode stays
	// deleted; once the fault is removed the agent runs again and recreates it.
	t.Run("agent-down", func(t *testing.T) {
		const name = "fault-agentdown"
		f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}})
		f.g.Eventually(func() time.Time { return f.observedTime(name) }).ShouldNot(BeZero())
		f.annotate(name, sim.AnnotationFault, sim.FaultAgentDown)
		f.g.Eventually(f.events(name, "AgentStopped")).Should(ContainElement(ContainSubstring("stopped: fault agent-down")))
		ctx := context.Background()
		f.g.Expect(f.c.Delete(ctx, &v1alpha1.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
		f.g.Consistently(func() bool {
			return apierrors.IsNotFound(f.c.Get(ctx, types.NamespacedName{Name: name}, &v1alpha1.GPUNode{}))
		}).WithTimeout(time.Second).Should(BeTrue(), "a stopped agent recreates nothing")

		f.annotate(name, sim.AnnotationFault, "")
		f.g.Eventually(f.events(name, "AgentStarted")).ShouldNot(BeEmpty())
		f.g.Eventually(func(g Gomega) {
			n := &v1alpha1.GPUNode{}
			g.Expect(f.c.Get(ctx, types.NamespacedName{Name: name}, n)).To(Succeed())
			g.Expect(n.Status.GPUs).To(HaveLen(2))
			g.Expect(n.Status.GPUs[0].Instances).To(HaveLen(mig.Layout{"1g.18gb": 7}.Total()))
		}).Should(Succeed())
	})
}
