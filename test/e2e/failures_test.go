package e2e_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/sim"
	"github.com/gpupool/gpupool/test/simcluster"
)

// One scenario per failure path of a node's step, each provoked with gpusim's fault knobs
// (internal/sim/faults.go) and checked for what a user of gpupool would expect to see.
var _ = Describe("failure paths on a simulated GPU cluster", func() {
	// Guards the loop a node that mig-manager cannot configure would start under Auto: the
	// failed node is reopened (its GPUs are whole) and its pod comes back to the GPU the plan
	// wants, but the node is frozen with a backoff, so no second eviction follows within the
	// minute; maxDisruptiveStepsPerHour bounds the hour. Once the fault is gone, the retry is a
	// new plan with a new mig-parted entry (entries are immutable, named per plan) and succeeds.
	It("bounds evictions while mig-manager fails every apply, and retries with a new entry once the fault is gone", func() {
		s := newScenario("retry")
		node := s.nodes[0]
		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) {
			spec.Disruption.Approval = v1alpha1.ApprovalAuto
			spec.Disruption.MaxDisruptiveStepsPerHour = ptr.To[int32](2)
		})
		victim := s.victimOnGPU0(node)
		annotateNode(node, sim.AnnotationFault, sim.FaultFailAlways)
		labels := watchLabel(node, nvidia.LabelMIGConfig)
		deletions := watchDeletions(s.ns)
		s.deploy("train-3g", 1, s.inPool(), mig3g, 1, nil)
		s.unpauseWhenPending(1)

		first := s.waitPlan(time.Minute, v1alpha1.PlanFailed)
		Expect(evicted(first)).To(ConsistOf(s.ns + "/" + victim.Name))
		failure := stepStatus(first, node)
		Expect(failure.Message).To(ContainSubstring("mig-manager reported failed for " + first.Spec.Steps[0].MIGConfigName))
		Expect(failure.Message).To(ContainSubstring("the node was reopened"))
		failedAt := failure.LastTransitionTime.Time

		By("the victim's replacement going back to GPU 0, which the plan wanted")
		back := s.waitRunning("victim", 1, 30*time.Second)[0]
		s.waitGPUHolds(node, 0, back.Name)

		By("watching while every apply still fails: the node is frozen, nothing more is evicted")
		Eventually(func(g Gomega) {
			c := s.condition(g, v1alpha1.ConditionDemandSatisfied)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Message).To(ContainSubstring("its reconfiguration failed 1 time(s) in the last day; next try after"))
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		quiet := max(time.Until(failedAt.Add(45*time.Second)), time.Second)
		Consistently(func(g Gomega) {
			g.Expect(victimDeletions(deletions)).To(HaveLen(1), "evictions of the victim")
			for _, p := range s.plans(g) {
				if p.Name != first.Name {
					g.Expect(p.Status.Nodes).To(BeEmpty(), "plan %s started a step on the frozen node", p.Name)
				}
			}
		}).WithTimeout(quiet).WithPolling(time.Second).Should(Succeed(), s.diagnostics)

		By("removing the fault; the retry comes after the backoff, with a new entry, and succeeds")
		annotateNode(node, sim.AnnotationFault, "")
		var retry *v1alpha1.RepartitionPlan
		Eventually(func(g Gomega) {
			retry = nil
			for _, p := range s.plans(g) {
				if p.Name != first.Name && p.Status.Phase == v1alpha1.PlanSucceeded {
					retry = &p
				}
			}
			g.Expect(retry).NotTo(BeNil(), "no retry succeeded")
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), s.diagnostics)
		entry := retry.Spec.Steps[0].MIGConfigName
		Expect(entry).NotTo(Equal(first.Spec.Steps[0].MIGConfigName), "a plan's entry names are its own")
		started := stepStatus(retry, node).StartedTime.Time
		Expect(started.Sub(failedAt)).To(BeNumerically(">=", time.Minute-time.Second), "the retry waited out the backoff")
		Expect(labels.values()).To(Equal([]string{"all-1g", first.Spec.Steps[0].MIGConfigName, "all-1g", entry}),
			"the failed step set the label back to the entry of the layout the GPUs kept before the node took work again")
		s.waitRunning("train-3g", 1, time.Minute)
		evictions := victimDeletions(deletions)
		Expect(evictions).To(HaveLen(2), "one eviction per attempt, within maxDisruptiveStepsPerHour 2")
		Expect(evicted(retry)).To(ConsistOf(s.ns + "/" + back.Name))
		Expect(deletions.err() + labels.err()).To(BeEmpty())
		AddReportEntry("retry: first failure to retry start", started.Sub(failedAt).Round(time.Second).String())
	})

	// Guards maxDisruptiveStepsPerHour as a cap, not a gate: with one evicting step left in the
	// hour and two nodes whose re-carve each evicts a pod, maxDisruptedNodes 2 would allow both
	// at once; the plan holds one, the other pod waits with the cap as its reason, and no
	// second eviction follows within the hour.
	It("never lets a plan exceed what is left of maxDisruptiveStepsPerHour", func() {
		s := newScenario("hourly")
		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) {
			spec.Disruption.Approval = v1alpha1.ApprovalAuto
			spec.Disruption.MaxDisruptedNodes = ptr.To(intstr.FromInt32(2))
			spec.Disruption.MaxDisruptiveStepsPerHour = ptr.To[int32](1)
		})
		victims := map[string]corev1.Pod{}
		for i, node := range s.nodes {
			victims[node] = s.victimOnGPU0Named(node, fmt.Sprintf("-%d", i))
		}
		deletions := watchDeletions(s.ns)
		// Two 4g pods: one per GPU, and only GPU 0 of each node can change (a pin holds GPU 1),
		// so serving both takes an evicting step on each node.
		s.deploy("train-4g", 2, s.inPool(), "nvidia.com/mig-4g.71gb", 1, nil)
		s.unpauseWhenPending(2)

		first := s.waitPlan(time.Minute, v1alpha1.PlanSucceeded, v1alpha1.PlanFailed)
		evicting := 0
		for _, step := range first.Spec.Steps {
			if len(step.Evictions) > 0 {
				evicting++
			}
		}
		Expect(evicting).To(Equal(1), "the plan holds no more evicting steps than the hour has left")
		Expect(first.Status.Phase).To(Equal(v1alpha1.PlanSucceeded), s.diagnostics)
		Eventually(func(g Gomega) {
			running := 0
			for _, p := range s.pods("train-4g") {
				if p.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			g.Expect(running).To(Equal(1))
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), s.diagnostics)

		Eventually(func(g Gomega) {
			c := s.condition(g, v1alpha1.ConditionDemandSatisfied)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Message).To(ContainSubstring("maxDisruptiveStepsPerHour"))
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Consistently(func(g Gomega) {
			g.Expect(victimDeletions(deletions)).To(HaveLen(1), "one eviction in the hour")
			for _, p := range s.plans(g) {
				for _, step := range p.Spec.Steps {
					if p.Name != first.Name && len(step.Evictions) > 0 {
						g.Expect(p.Status.Nodes).To(BeEmpty(), "plan %s started an evicting step past the hour's cap", p.Name)
					}
				}
			}
		}).WithTimeout(15*time.Second).WithPolling(time.Second).Should(Succeed(), s.diagnostics)
		Expect(deletions.err()).To(BeEmpty())
	})

	// Guards a reconfiguration that needs a reboot: the step waits in Configuring while
	// mig-manager says rebooting; a GPUNode report from before the reboot (the agent is still
	// down when mig-manager reports success) is not taken for the new layout; the step finishes
	// on the first report since, and the node is cordoned from the drain to that moment.
	It("waits through a reboot, judges the layout only by a report from after it, and reopens the node only at the end", func() {
		s := newScenario("reboot")
		node := s.nodes[0]
		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) { spec.Disruption.Approval = v1alpha1.ApprovalAuto })
		annotateNode(node, sim.AnnotationRebootDuration, "6s")
		annotateNode(node, sim.AnnotationFault, sim.FaultReboot)
		trail := watchNode(node, func(n *corev1.Node) string {
			return fmt.Sprintf("cordoned=%v state=%s", n.Spec.Unschedulable, n.Labels[nvidia.LabelMIGConfigState])
		})
		s.deploy("train-3g", 1, s.inPool(), mig3g, 1, nil)
		s.unpauseWhenPending(1)

		By("mig-manager rebooting the node for the change")
		var plan *v1alpha1.RepartitionPlan
		Eventually(func(g Gomega) {
			plans := s.plans(g)
			g.Expect(plans).NotTo(BeEmpty())
			plan = &plans[len(plans)-1]
			g.Expect(getNode(g, node).Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfigState, "rebooting"))
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), s.diagnostics)
		// The agent stays down after the boot too, so that mig-manager reports success while the
		// GPUNode still holds the report from before the reboot.
		annotateNode(node, sim.AnnotationFault, sim.FaultAgentDown)
		before := observedTime(Default, node)
		Expect(nodeEvents(Default, node, "AgentStopped")).To(ContainElement(ContainSubstring("the host is rebooting")))
		Eventually(func(g Gomega) {
			st := stepStatus(getPlan(g, plan.Name), node)
			g.Expect(st.State).To(Equal(v1alpha1.NodeConfiguring))
			g.Expect(st.Message).To(ContainSubstring("mig-manager is rebooting " + node))
			g.Expect(st.RebootSeenTime).NotTo(BeNil())
		}).WithTimeout(10*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)

		By("mig-manager reporting success after the boot, with no report since")
		Eventually(func(g Gomega) {
			g.Expect(getNode(g, node).Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfigState, "success"))
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		if !observedTime(Default, node).Equal(before) {
			Fail("the agent published after the reboot before the test held it down: raise the reboot duration")
		}
		// The step follows mig-manager's label at its next reconcile: wait for it, then hold.
		Eventually(func(g Gomega) {
			g.Expect(stepStatus(getPlan(g, plan.Name), node).Message).To(ContainSubstring("after a reboot; waiting for the agent's first report since"))
		}).WithTimeout(10*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Consistently(func(g Gomega) {
			st := stepStatus(getPlan(g, plan.Name), node)
			g.Expect(st.State).To(Equal(v1alpha1.NodeConfiguring))
			g.Expect(st.Message).To(ContainSubstring("after a reboot; waiting for the agent's first report since"))
			g.Expect(getNode(g, node).Spec.Unschedulable).To(BeTrue())
			g.Expect(observedTime(g, node)).To(BeTemporally("==", before))
		}).WithTimeout(4*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)

		By("the agent running again")
		annotateNode(node, sim.AnnotationFault, "")
		done := s.waitPhase(plan.Name, v1alpha1.PlanSucceeded, time.Minute)
		st := stepStatus(done, node)
		after := observedTime(Default, node)
		Expect(after).To(BeTemporally(">", st.RebootSeenTime.Time))
		Expect(st.LastTransitionTime.Time).To(BeTemporally(">=", after.Add(-time.Second)), "Done only after a report since the reboot")
		for _, change := range done.Spec.Steps[0].GPUs {
			Expect(layouts(Default, node)[change.Index]).To(Equal(expectedCounts(change.To)), "GPU %d came back in the new layout", change.Index)
		}
		s.waitRunning("train-3g", 1, time.Minute)
		Eventually(func(g Gomega) { expectOpen(g, node) }).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Expect(trail.values()).To(Equal([]string{"cordoned=false state=success", "cordoned=true state=success",
			"cordoned=true state=", "cordoned=true state=pending", "cordoned=true state=rebooting", "cordoned=true state=pending",
			"cordoned=true state=success", "cordoned=false state=success"}), "cordoned from before the relabel until the end")
		Expect(trail.err()).To(BeEmpty())
	})

	// Guards a GPUNode that disappears mid-change (the agent cannot recreate it: it is down):
	// the step fails naming the GPUNode and what to check, the plan's status is still written,
	// and the node, whose GPUs may be half-configured, stays cordoned.
	It("fails the step of a node whose GPUNode is deleted mid-change, keeps the node cordoned and still writes the plan's status", func() {
		s := newScenario("gpunode")
		node := s.nodes[0]
		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) { spec.Disruption.Approval = v1alpha1.ApprovalAuto })
		annotateNode(node, sim.AnnotationApplyDelay, "20s")
		DeferCleanup(func() {
			annotateNode(node, sim.AnnotationFault, "")
			annotateNode(node, sim.AnnotationApplyDelay, "")
		})
		s.deploy("train-3g", 1, s.inPool(), mig3g, 1, nil)
		s.unpauseWhenPending(1)
		plan := s.waitConfiguring(node, "pending")

		By("stopping the node's agent, then deleting its GPUNode")
		annotateNode(node, sim.AnnotationFault, sim.FaultAgentDown)
		Eventually(func(g Gomega) {
			g.Expect(nodeEvents(g, node, "AgentStopped")).To(ContainElement(ContainSubstring("fault agent-down")))
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Expect(k8s.Delete(suiteCtx, &v1alpha1.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: node}})).To(Succeed())

		final := s.waitPhase(plan.Name, v1alpha1.PlanFailed, 30*time.Second)
		st := stepStatus(final, node)
		Expect(st.State).To(Equal(v1alpha1.NodeFailed))
		Expect(st.Message).To(SatisfyAll(ContainSubstring("GPUNode is gone"), ContainSubstring("check the gpupool agent on "+node),
			ContainSubstring("the node stays cordoned (a GPU may be half-configured)"), ContainSubstring("kubectl uncordon "+node)))
		Expect(final.Status.Progress).To(Equal("0/1"))
		Eventually(func(g Gomega) {
			g.Expect(nodeEvents(g, node, "NodeFailed")).To(ContainElement(ContainSubstring("GPUNode is gone")))
		}).WithTimeout(10*time.Second).WithPolling(poll).Should(Succeed(), "the node's Event says why it stays cordoned")
		// kubectl describe node selects a node's Events by its UID: the step Events name it.
		Eventually(func(g Gomega) {
			g.Expect(describedNodeEvents(g, node, "NodeFailed")).To(ContainElement(ContainSubstring("GPUNode is gone")))
		}).WithTimeout(10*time.Second).WithPolling(poll).Should(Succeed(), "kubectl describe node shows why it stays cordoned")
		Consistently(func(g Gomega) {
			n := getNode(g, node)
			g.Expect(n.Spec.Unschedulable).To(BeTrue())
			g.Expect(n.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationCordonedBy, plan.Name))
			g.Expect(apierrors.IsNotFound(k8s.Get(suiteCtx, client.ObjectKey{Name: node}, &v1alpha1.GPUNode{}))).To(BeTrue())
		}).WithTimeout(3*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)

		By("the agent back, the GPUNode recreated, and the user uncordoning the node after checking it")
		annotateNode(node, sim.AnnotationFault, "")
		Eventually(func(g Gomega) { g.Expect(observedTime(g, node)).NotTo(BeZero()) }).
			WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		uncordon(node)
		Expect(getPlan(Default, plan.Name).Status.Phase).To(Equal(v1alpha1.PlanFailed))
	})

	// Guards the cordon janitor: when a policy is deleted mid-change, its plan goes with it
	// (ownerReference), but the node mig-manager is still changing is not reopened, nor after
	// mig-manager leaves a layout the agent does not verify: an Event says what to check, and
	// unsetting the label changes nothing. Once the GPUs are whole and verified, the node is
	// given back at once.
	It("keeps a node cordoned after its policy is deleted mid-change until its layout is whole and verified, then releases it", func() {
		s := newScenario("orphan")
		node := s.nodes[0]
		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) { spec.Disruption.Approval = v1alpha1.ApprovalAuto })
		annotateNode(node, sim.AnnotationApplyDelay, "8s")
		annotateNode(node, sim.AnnotationFault, sim.FaultWrongLayout)
		DeferCleanup(func() {
			annotateNode(node, sim.AnnotationFault, "")
			annotateNode(node, sim.AnnotationApplyDelay, "")
		})
		s.deploy("train-3g", 1, s.inPool(), mig3g, 1, nil)
		s.unpauseWhenPending(1)
		plan := s.waitConfiguring(node, "pending")
		entry := plan.Spec.Steps[0].MIGConfigName
		Expect(plan.Spec.Steps[0].GPUs).To(HaveLen(1))

		By("deleting the policy while mig-manager is pending")
		Expect(k8s.Delete(suiteCtx, &v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: s.policy}})).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(suiteCtx, client.ObjectKey{Name: plan.Name}, &v1alpha1.RepartitionPlan{}))
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(BeTrue(), "the plan is collected with its policy")
		Consistently(func(g Gomega) {
			n := getNode(g, node)
			if n.Labels[nvidia.LabelMIGConfigState] != "pending" {
				return
			}
			g.Expect(n.Spec.Unschedulable).To(BeTrue(), "reopened while mig-manager is pending")
		}).WithTimeout(2*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)

		By("mig-manager applying a layout the agent does not verify")
		Eventually(func(g Gomega) {
			g.Expect(getNode(g, node).Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfigState, "success"))
			g.Expect(nodeEvents(g, node, "OrphanedCordonKept")).To(ContainElement(SatisfyAll(
				ContainSubstring("plan "+plan.Name+" no longer exists while the node was being reconfigured"),
				ContainSubstring("the agent does not verify the layout the plan expected"),
				ContainSubstring("kubectl uncordon "+node))))
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Consistently(func(g Gomega) {
			n := getNode(g, node)
			g.Expect(n.Spec.Unschedulable).To(BeTrue())
			g.Expect(n.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationCordonedBy, plan.Name))
		}).WithTimeout(3*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)

		By("someone unsetting the label: the GPUs are still wrong, the node stays cordoned")
		setNodeLabel(node, nvidia.LabelMIGConfig, "")
		Consistently(func(g Gomega) {
			n := getNode(g, node)
			g.Expect(n.Spec.Unschedulable).To(BeTrue())
			g.Expect(n.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationCordonedBy, plan.Name))
		}).WithTimeout(2*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)

		By("fixing the GPUs: the fault removed and the label set again, mig-manager's documented retry")
		annotateNode(node, sim.AnnotationFault, "")
		annotateNode(node, sim.AnnotationApplyDelay, "")
		setNodeLabel(node, nvidia.LabelMIGConfig, entry)
		Eventually(func(g Gomega) {
			change := plan.Spec.Steps[0].GPUs[0]
			g.Expect(layouts(g, node)[change.Index]).To(Equal(expectedCounts(change.To)))
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Eventually(func(g Gomega) {
			report := gpuNodeOf(g, node)
			c := meta.FindStatusCondition(report.Status.Conditions, v1alpha1.ConditionLayoutVerified)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.ObservedGeneration).To(Equal(report.Generation))
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		// The janitor looks again when the agent's report changes, not only when the node does.
		Eventually(func(g Gomega) {
			expectOpen(g, node)
			g.Expect(nodeEvents(g, node, "OrphanedCordonReleased")).To(ContainElement(ContainSubstring("plan " + plan.Name + " no longer exists")))
		}).WithTimeout(10*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
	})

	// Guards the last wait of a step: the layout is verified, but the device plugin never
	// advertises the new devices, so the scheduler could not use them; the step says what it
	// waits for, fails after configureTimeout, and reopens the node, whose GPUs are whole.
	It("fails the step after configureTimeout when the device plugin never advertises the new devices, and reopens the node", func() {
		s := newScenario("silent")
		node := s.nodes[0]
		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) {
			spec.Disruption.Approval = v1alpha1.ApprovalAuto
			spec.Disruption.ConfigureTimeout = &metav1.Duration{Duration: 20 * time.Second}
		})
		annotateNode(node, sim.AnnotationFault, sim.FaultPluginSilent)
		DeferCleanup(func() { annotateNode(node, sim.AnnotationFault, "") })
		s.deploy("train-3g", 1, s.inPool(), mig3g, 1, nil)
		s.unpauseWhenPending(1)

		var plan *v1alpha1.RepartitionPlan
		var verifying time.Time
		Eventually(func(g Gomega) {
			plans := s.plans(g)
			g.Expect(plans).NotTo(BeEmpty())
			plan = &plans[len(plans)-1]
			st := stepStatus(plan, node)
			g.Expect(st.State).To(Equal(v1alpha1.NodeVerifying))
			g.Expect(st.Message).To(ContainSubstring("layout verified; waiting for the device plugin to advertise"))
			g.Expect(st.Message).To(ContainSubstring(mig3g + "="))
			verifying = st.LastTransitionTime.Time
			q := getNode(g, node).Status.Allocatable[mig1g]
			g.Expect(q.Value()).To(BeZero(), "the silent plugin advertises nothing")
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), s.diagnostics)

		final := s.waitPhase(plan.Name, v1alpha1.PlanFailed, time.Minute)
		st := stepStatus(final, node)
		Expect(st.Message).To(SatisfyAll(ContainSubstring("the device plugin did not advertise"),
			ContainSubstring("within configureTimeout 20s"), ContainSubstring("check the nvidia-device-plugin pod on "+node),
			ContainSubstring("the node was reopened: the agent shows every GPU with a whole layout")))
		Expect(st.LastTransitionTime.Sub(verifying)).To(BeNumerically(">=", 19*time.Second))
		Eventually(func(g Gomega) { expectOpen(g, node) }).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Expect(s.pods("train-3g")).To(HaveEach(HaveField("Spec.NodeName", BeEmpty())), "nothing is advertised to run on")

		By("the device plugin registering again")
		annotateNode(node, sim.AnnotationFault, "")
		s.waitRunning("train-3g", 1, time.Minute)
	})

	// Guards MPS, which NVIDIA's device plugin refuses under the mixed MIG strategy gpupool
	// needs: a catalog that allows only MPS never gets a plan that shares with it; the pending
	// pods and the policy say why. A node whose device-plugin label is set by hand to an MPS
	// config is refused by the device plugin, as NVIDIA's is: it advertises nothing.
	It("never shares with MPS under the mixed strategy, says why, and the device plugin refuses an MPS config set by hand", func() {
		s := newScenario("mps")
		node := s.nodes[0]
		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) {
			spec.Catalog[0].Sharing = &v1alpha1.SharingCatalog{MPS: &v1alpha1.MPSReplicaChoices{Replicas: []int32{2, 4}}}
		})
		s.deploy("notebook", 2, s.inPool(), "nvidia.com/gpu.shared", 1, nil)
		s.unpauseWhenPending(2)

		Eventually(func(g Gomega) {
			demand := s.condition(g, v1alpha1.ConditionDemandSatisfied)
			g.Expect(demand.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(demand.Message).To(SatisfyAll(ContainSubstring("MPS"), ContainSubstring("mixed")))
			spec := s.condition(g, v1alpha1.ConditionSpecValid)
			g.Expect(spec.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(spec.Message).To(ContainSubstring("spec.catalog[0].sharing.mps"))
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Consistently(func(g Gomega) {
			for _, p := range s.plans(g) {
				for _, step := range p.Spec.Steps {
					g.Expect(step.SharingConfig).To(Or(BeNil(), HaveField("Mode", Not(Equal(v1alpha1.SharingMPS)))), "plan %s", p.Name)
				}
			}
			g.Expect(s.pods("notebook")).To(HaveEach(HaveField("Spec.NodeName", BeEmpty())))
			expectOpen(g, node)
		}).WithTimeout(3*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)

		By("setting the node's device-plugin label by hand to an MPS config")
		const key = "site-mps-2"
		editDevicePluginConfig(func(data map[string]string) {
			data[key] = "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"
		})
		DeferCleanup(func() {
			setNodeLabel(node, nvidia.LabelDevicePluginConfig, "")
			editDevicePluginConfig(func(data map[string]string) { delete(data, key) })
		})
		setNodeLabel(node, nvidia.LabelDevicePluginConfig, key)
		Eventually(func(g Gomega) {
			n := getNode(g, node)
			for name, q := range n.Status.Allocatable {
				if strings.HasPrefix(string(name), "nvidia.com/") {
					g.Expect(q.Value()).To(BeZero(), "%s is advertised", name)
				}
			}
			g.Expect(nodeEvents(g, node, "DevicePluginRefused")).To(ContainElement(SatisfyAll(ContainSubstring("MPS"), ContainSubstring("mixed"))))
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)

		By("the label removed: the plugin starts again with the default config")
		setNodeLabel(node, nvidia.LabelDevicePluginConfig, "")
		Eventually(func(g Gomega) {
			q := getNode(g, node).Status.Allocatable[mig1g]
			g.Expect(q.Value()).To(BeEquivalentTo(14))
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
	})

	// Guards the manager's high availability: with two replicas electing a leader, the leader
	// killed mid-drain (SIGKILL, so its Lease is not released) is replaced by the other within
	// the Lease's duration, and the new leader resumes the step from the plan's status: it does
	// not evict the replacement of the pod the old leader evicted, evicts the one a
	// PodDisruptionBudget held back once it allows it, and relabels the node once.
	It("hands a plan over to the other replica within the lease when the leader is killed mid-drain, repeating no eviction or relabel", func() {
		s := newScenario("leader")
		node := s.nodes[0]
		By("running two manager replicas that elect a leader")
		replicas, err := cluster.StartManagerReplicas(suiteCtx, 2)
		DeferCleanup(func() { Expect(cluster.StopManagerReplicas(suiteCtx)).To(Succeed()) })
		Expect(err).NotTo(HaveOccurred())
		leader, standby := waitLeader(replicas)

		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) {
			spec.Planning.StabilizationWindow = &metav1.Duration{Duration: time.Minute}
		})
		first, guarded := s.twoOnGPU0(node, "first", "guarded")
		s.setPDBMinAvailable("guarded", 0, 1)
		deletions := watchDeletions(s.ns)
		labels := watchLabel(node, nvidia.LabelMIGConfig)
		s.deploy("train-3g", 1, s.inPool(), mig3g, 1, nil)
		s.unpauseWhenPending(1)
		plan := s.waitPlan(time.Minute, v1alpha1.PlanAwaitingApproval)
		Expect(evicted(plan)).To(ConsistOf(s.ns+"/"+first.Name, s.ns+"/"+guarded.Name))

		By("tightening the PodDisruptionBudget of one pod, then approving")
		s.setPDBMinAvailable("guarded", 1, 0)
		approve(plan)
		Eventually(func(g Gomega) {
			st := stepStatus(getPlan(g, plan.Name), node)
			g.Expect(st.State).To(Equal(v1alpha1.NodeDraining))
			g.Expect(st.Message).To(ContainSubstring(s.ns + "/" + guarded.Name))
			g.Expect(deletions.values()).To(ConsistOf(first.Name + " " + string(first.UID)))
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), s.diagnostics)
		n, err := evictionsCounted(leader.Metrics, s.policy)
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(BeEquivalentTo(1), "the leader evicted the first pod")

		By("killing the leader mid-drain")
		killed := time.Now()
		Expect(cluster.Kill(leader.Process)).To(Succeed())
		Eventually(func() bool { return isLeader(standby) }).WithTimeout(40*time.Second).WithPolling(poll).
			Should(BeTrue(), "the other replica never took the lease over")
		takeover := time.Since(killed)
		AddReportEntry("leader killed mid-drain: the other replica leads after", takeover.Round(100*time.Millisecond).String())
		// controller-runtime's lease is 15 s, retried every 2 s; the rest is this 2-core box's
		// load (it took 14.3 to 20.4 s across runs). Bounded so that a takeover that waits for
		// more than a lease and a half fails.
		Expect(takeover).To(BeNumerically("<", 25*time.Second), "the standby takes over within the lease")
		Consistently(func(g Gomega) {
			g.Expect(stepStatus(getPlan(g, plan.Name), node).State).To(Equal(v1alpha1.NodeDraining))
			g.Expect(deletions.values()).To(HaveLen(1), "the new leader evicted again")
		}).WithTimeout(3*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)

		By("relaxing the PodDisruptionBudget")
		s.setPDBMinAvailable("guarded", 0, 1)
		done := s.waitPhase(plan.Name, v1alpha1.PlanSucceeded, time.Minute)
		s.waitRunning("train-3g", 1, time.Minute)
		Expect(deletions.values()).To(ConsistOf(first.Name+" "+string(first.UID), guarded.Name+" "+string(guarded.UID)),
			"each pod the plan names is evicted once, its replacement never")
		n, err = evictionsCounted(standby.Metrics, s.policy)
		Expect(err).NotTo(HaveOccurred())
		Expect(n).To(BeEquivalentTo(1), "the new leader evicted only the pod the budget had held back")
		Expect(labels.values()).To(Equal([]string{"all-1g", done.Spec.Steps[0].MIGConfigName}), "relabelled once")
		Expect(deletions.err() + labels.err()).To(BeEmpty())
	})
})

// twoOnGPU0 runs one pod each of Deployments a and b (one 1g slice each) on GPU 0 of node and
// a bare pod on GPU 1, so that serving a 3g pod means evicting both, which fit again on GPU 1.
func (s *scenario) twoOnGPU0(node, a, b string) (corev1.Pod, corev1.Pod) {
	var pods []corev1.Pod
	for _, app := range []string{a, b} {
		s.deploy(app, 1, onNode(node), mig1g, 1, nil)
		pods = append(pods, s.waitRunning(app, 1, 30*time.Second)[0])
		s.waitGPUHolds(node, 0, names(pods)...)
	}
	hold := s.bare("hold", onNode(node), mig1g, 5)
	s.waitRunning(hold.Name, 1, 30*time.Second)
	s.waitGPUHolds(node, 0, append(names(pods), hold.Name)...)
	s.bare("pin", onNode(node), mig1g, 1)
	s.waitRunning("pin", 1, 30*time.Second)
	s.waitGPUHolds(node, 1, "pin")
	Expect(k8s.Delete(suiteCtx, hold, client.GracePeriodSeconds(0))).To(Succeed())
	Eventually(func() error {
		return k8s.Get(suiteCtx, client.ObjectKeyFromObject(hold), &corev1.Pod{})
	}).WithTimeout(30 * time.Second).WithPolling(poll).Should(MatchError(apierrors.IsNotFound, "IsNotFound"))
	s.waitGPUHolds(node, 0, names(pods)...)
	return pods[0], pods[1]
}

// isLeader says whether the manager replica holds the Lease, as its
// leader_election_master_status metric says.
func isLeader(r simcluster.Replica) bool {
	resp, err := http.Get("http://" + r.Metrics + "/metrics") //nolint:noctx // loopback scrape
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return false
	}
	return strings.Contains(string(body), `leader_election_master_status{name="`+simcluster.LeaseName+`"} 1`)
}

// waitLeader waits until exactly one replica leads, and returns it and another one.
func waitLeader(replicas []simcluster.Replica) (leader, other simcluster.Replica) {
	Expect(replicas).To(HaveLen(2))
	Eventually(func(g Gomega) {
		a, b := isLeader(replicas[0]), isLeader(replicas[1])
		g.Expect(a).NotTo(Equal(b), "exactly one replica leads")
		leader, other = replicas[0], replicas[1]
		if b {
			leader, other = other, leader
		}
	}).WithTimeout(40 * time.Second).WithPolling(poll).Should(Succeed())
	return leader, other
}

// victimOnGPU0 runs one pod of Deployment victim (one 1g slice) on GPU 0 of node and a bare
// pod on GPU 1, so that serving a 3g pod means evicting the victim, which fits again on GPU 1
// and, after a failure, comes back to GPU 0 (the device plugin hands out GPU 0's slices first).
func (s *scenario) victimOnGPU0(node string) corev1.Pod {
	return s.victimOnGPU0Named(node, "")
}

// victimOnGPU0Named is victimOnGPU0 with suffix on the names of its Deployment and pods, for a
// scenario that puts a victim on each of several nodes.
func (s *scenario) victimOnGPU0Named(node, suffix string) corev1.Pod {
	s.deploy("victim"+suffix, 1, onNode(node), mig1g, 1, nil)
	victim := s.waitRunning("victim"+suffix, 1, 30*time.Second)[0]
	s.waitGPUHolds(node, 0, victim.Name)
	hold := s.bare("hold"+suffix, onNode(node), mig1g, 6)
	s.waitRunning(hold.Name, 1, 30*time.Second)
	s.waitGPUHolds(node, 0, victim.Name, hold.Name)
	s.bare("pin"+suffix, onNode(node), mig1g, 1)
	s.waitRunning("pin"+suffix, 1, 30*time.Second)
	s.waitGPUHolds(node, 1, "pin"+suffix)
	Expect(k8s.Delete(suiteCtx, hold, client.GracePeriodSeconds(0))).To(Succeed())
	Eventually(func() error {
		return k8s.Get(suiteCtx, client.ObjectKeyFromObject(hold), &corev1.Pod{})
	}).WithTimeout(30 * time.Second).WithPolling(poll).Should(MatchError(apierrors.IsNotFound, "IsNotFound"))
	s.waitGPUHolds(node, 0, victim.Name)
	return victim
}

// describedNodeEvents lists the notes of the Events with reason that kubectl describe node
// shows: those naming the node's UID, or its name as the UID (the kubelet's).
func describedNodeEvents(g Gomega, node, reason string) []string {
	n := getNode(g, node)
	var list eventsv1.EventList
	g.Expect(k8s.List(suiteCtx, &list)).To(Succeed())
	var out []string
	for _, e := range list.Items {
		uid := e.Regarding.UID
		if e.Regarding.Kind == "Node" && e.Regarding.Name == node && (uid == n.UID || string(uid) == node) && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

// gpuNodeOf reads the node's GPUNode.
func gpuNodeOf(g Gomega, node string) *v1alpha1.GPUNode {
	report := &v1alpha1.GPUNode{}
	g.Expect(k8s.Get(suiteCtx, client.ObjectKey{Name: node}, report)).To(Succeed())
	return report
}

// expectedCounts is a step's target for one GPU as layouts reports it.
func expectedCounts(to v1alpha1.ProfileCounts) map[string]int {
	out := map[string]int{}
	for p, n := range to {
		if n > 0 {
			out[p] = int(n)
		}
	}
	return out
}

// victimDeletions are the deletions of the victim Deployment's pods a watchDeletions saw.
func victimDeletions(h *history) []string {
	var out []string
	for _, d := range h.values() {
		if strings.HasPrefix(d, "victim-") {
			out = append(out, d)
		}
	}
	return out
}

// waitConfiguring waits until the scenario's newest plan has relabelled node and its step is
// Configuring with mig-manager in state, and returns the plan.
func (s *scenario) waitConfiguring(node, state string) *v1alpha1.RepartitionPlan {
	var plan *v1alpha1.RepartitionPlan
	Eventually(func(g Gomega) {
		plans := s.plans(g)
		g.Expect(plans).NotTo(BeEmpty())
		plan = &plans[len(plans)-1]
		g.Expect(plan.Spec.Steps).To(HaveLen(1))
		g.Expect(stepStatus(plan, node).State).To(Equal(v1alpha1.NodeConfiguring))
		n := getNode(g, node)
		g.Expect(n.Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, plan.Spec.Steps[0].MIGConfigName))
		g.Expect(n.Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfigState, state))
	}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), s.diagnostics)
	return plan
}

// editDevicePluginConfig edits the device plugin's ConfigMap where the GPU Operator reads it,
// as an administrator adding a config of their own would.
func editDevicePluginConfig(edit func(map[string]string)) {
	Eventually(func() error {
		cm := &corev1.ConfigMap{}
		if err := k8s.Get(suiteCtx, client.ObjectKey{Namespace: simcluster.OperatorNamespace, Name: simcluster.DevicePluginConfigMap}, cm); err != nil {
			return err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		edit(cm.Data)
		return k8s.Update(suiteCtx, cm)
	}).WithTimeout(10 * time.Second).WithPolling(poll).Should(Succeed())
}
