package e2e_test

import (
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/rollout"
	"github.com/gpupool/gpupool/internal/sim"
	"github.com/gpupool/gpupool/test/simcluster"
)

var _ = Describe("gpupool on a simulated GPU cluster", func() {
	// Guards the main loop under Manual approval: demand that no current layout serves gets a
	// plan that waits for a human and changes nothing meanwhile, even when approved with
	// another plan's hash; the approval bound to the plan's hash applies it, and the pods run. Reports the time from Pending to Running.
	It("proposes a plan for pending 3g pods on an all-1g pool, applies it once approved by hash, and the pods run", func() {
		s := newScenario("approve")
		node := s.nodes[0]
		s.createPolicy(nil)

		submitted := time.Now()
		s.deploy("train-3g", 2, s.inPool(), mig3g, 1, nil)
		s.unpauseWhenPending(2)
		plan := s.waitPlan(time.Minute, v1alpha1.PlanAwaitingApproval)
		proposed := time.Now()
		Expect(plan.Status.Approved).To(BeFalse())
		Expect(plan.Spec.Steps).To(HaveLen(1))
		Expect(plan.Spec.Steps[0].Node).To(Equal(node))
		Expect(evicted(plan)).To(BeEmpty())
		Expect(plan.Spec.Expected.Pods).To(HaveLen(2))
		// Nothing happens without the approval, nor with one that names another hash.
		held := time.Now()
		annotatePlan(plan, v1alpha1.AnnotationApprove, "0123456789abcdef")
		Eventually(func(g Gomega) {
			g.Expect(getPlan(g, plan.Name).Status.Conditions).To(ContainElement(SatisfyAll(
				HaveField("Type", controllers.ConditionApproved), HaveField("Reason", rollout.ReasonHashMismatch))))
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Consistently(func(g Gomega) {
			p := getPlan(g, plan.Name)
			g.Expect(p.Status.Phase).To(Equal(v1alpha1.PlanAwaitingApproval))
			g.Expect(p.Status.Approved).To(BeFalse())
			expectOpen(g, node)
			g.Expect(getNode(g, node).Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, "all-1g"))
		}).WithTimeout(2*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Expect(s.pods("train-3g")).To(HaveEach(HaveField("Spec.NodeName", BeEmpty())))

		approve(plan)
		approved := time.Now()
		done := s.waitPhase(plan.Name, v1alpha1.PlanSucceeded, 2*time.Minute)
		succeeded := time.Now()
		Expect(done.Status.Approved).To(BeTrue())
		Expect(done.Status.ApprovedBy).To(Equal(whoAmI()), "the API server named the approver (issue 35, audit)")
		Expect(done.Status.Conditions).To(ContainElement(SatisfyAll(
			HaveField("Type", controllers.ConditionApproved), HaveField("Reason", rollout.ReasonApprovedByUser),
			HaveField("Message", ContainSubstring("approved by "+whoAmI())))))
		s.waitRunning("train-3g", 2, time.Minute)
		running := time.Now()
		threeG := 0
		for _, counts := range layouts(Default, node) {
			threeG += counts["3g.71gb"]
		}
		Expect(threeG).To(BeNumerically(">=", 2), "the agent reports the new 3g.71gb instances")
		Eventually(func(g Gomega) { expectOpen(g, node) }).WithTimeout(30 * time.Second).WithPolling(poll).Should(Succeed())

		// The entry went where the GPU Operator mounts it from: the namespace in the
		// ClusterPolicy's status, not gpupool's own; and the policy says the operator is set up.
		cm := &corev1.ConfigMap{}
		Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: simcluster.OperatorNamespace, Name: simcluster.MIGConfigMap}, cm)).To(Succeed())
		Expect(cm.Data["config.yaml"]).To(ContainSubstring(done.Spec.Steps[0].MIGConfigName))
		Expect(apierrors.IsNotFound(k8s.Get(suiteCtx, client.ObjectKey{Namespace: simcluster.Namespace, Name: simcluster.MIGConfigMap},
			&corev1.ConfigMap{}))).To(BeTrue(), "nothing is written into gpupool's own namespace")
		policy := &v1alpha1.GPUPoolPolicy{}
		Expect(k8s.Get(suiteCtx, client.ObjectKey{Name: s.policy}, policy)).To(Succeed())
		Expect(policy.Status.Conditions).To(ContainElement(SatisfyAll(HaveField("Type", v1alpha1.ConditionGPUOperatorConfigured),
			HaveField("Status", metav1.ConditionTrue))))

		// The measurement leaves out the time the test itself held the plan unapproved.
		ms := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
		took := running.Sub(submitted) - approved.Sub(held)
		AddReportEntry("3g pods Pending -> Running (approval taken as instant)", ms(took))
		fmt.Fprintf(GinkgoWriter, "3g pods Pending -> Running: %s with an instant approval (plan proposed %s after submission, "+
			"minPendingAge being 2s; plan Succeeded %s after approval; pods Running %s after that); the test held "+
			"the plan unapproved another %s\n", ms(took), ms(proposed.Sub(submitted)), ms(succeeded.Sub(approved)),
			ms(running.Sub(succeeded)), ms(approved.Sub(held)))
	})

	// Guards draining through the Eviction API: a PodDisruptionBudget that blocks an eviction
	// holds the node's step in Draining, with a message that names the blocked pod, and the
	// plan resumes on its own once the budget allows it. The plan is proposed while the budget
	// allows the eviction (the planner never plans one it forbids) and approved after it
	// tightened; the policy keeps the proposed plan during its stabilization window.
	It("waits in Draining while a PodDisruptionBudget blocks an eviction and resumes when it allows it", func() {
		s := newScenario("pdb")
		x, y := s.nodes[0], s.nodes[1]
		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) {
			spec.Disruption.MaxDisruptedNodes = ptr.To(intstr.FromInt32(2))
			spec.Planning.StabilizationWindow = &metav1.Duration{Duration: time.Minute}
		})
		// x: GPU 0 pinned by a bare pod, GPU 1 runs the guarded pod, which fits again on GPU 0.
		s.pin("pin-x", x, 1)
		guarded := s.onGPU1(x, "guarded", 1, nil, "pin-x")
		s.setPDBMinAvailable("guarded", 0, 1)
		// y: GPU 0 full of a bare pod, GPU 1 idle.
		s.pin("pin-y", y, 7)
		s.deploy("big-7g", 2, s.inPool(), mig7g, 1, nil)
		s.unpauseWhenPending(2)

		plan := s.waitPlan(time.Minute, v1alpha1.PlanAwaitingApproval)
		Expect(plan.Spec.Steps).To(HaveLen(2))
		Expect(evicted(plan)).To(ConsistOf(s.keys(guarded)))

		By("tightening the PodDisruptionBudget so that it allows no eviction, then approving")
		s.setPDBMinAvailable("guarded", 1, 0)
		Expect(getPlan(Default, plan.Name).Status.Phase).To(Equal(v1alpha1.PlanAwaitingApproval), s.diagnostics)
		approve(plan)

		Eventually(func(g Gomega) {
			st := stepStatus(getPlan(g, plan.Name), x)
			g.Expect(st.State).To(Equal(v1alpha1.NodeDraining))
			g.Expect(st.Message).To(ContainSubstring("blocked by PodDisruptionBudgets"))
			g.Expect(st.Message).To(ContainSubstring(s.ns + "/" + guarded[0].Name))
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Expect(s.pods("guarded")).To(ConsistOf(HaveField("UID", guarded[0].UID)))

		By("relaxing the PodDisruptionBudget")
		s.setPDBMinAvailable("guarded", 0, 1)
		done := s.waitPhase(plan.Name, v1alpha1.PlanSucceeded, 2*time.Minute)
		Expect(stepStatus(done, x).State).To(Equal(v1alpha1.NodeDone))
		s.waitRunning("big-7g", 2, time.Minute)
		replacement := s.waitRunning("guarded", 1, time.Minute)
		Expect(replacement[0].UID).NotTo(Equal(guarded[0].UID))
	})

	// Guards the reaction to mig-manager's "failed": the step fails, and since the agent shows
	// every GPU with its old layout whole, gpupool reopens the node instead of leaving it
	// cordoned.
	It("fails the node's step when mig-manager reports failed, and does not leave the node cordoned", func() {
		s := newScenario("fail")
		node := s.nodes[0]
		s.createPolicy(nil)
		annotateNode(node, sim.AnnotationFault, sim.FaultFailNext)
		s.deploy("train-3g", 1, s.inPool(), mig3g, 1, nil)
		s.unpauseWhenPending(1)
		plan := s.waitPlan(time.Minute, v1alpha1.PlanAwaitingApproval)
		approve(plan)

		before := getNode(Default, node).Labels[nvidia.LabelMIGConfig]
		final := s.waitPhase(plan.Name, v1alpha1.PlanFailed, 2*time.Minute)
		st := stepStatus(final, node)
		Expect(st.State).To(Equal(v1alpha1.NodeFailed))
		Expect(st.Message).To(ContainSubstring("mig-manager reported failed"))
		Expect(st.Message).To(ContainSubstring("was set back to " + before))
		Expect(st.Message).To(ContainSubstring("reopened"))
		Eventually(func(g Gomega) { expectOpen(g, node) }).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Expect(getNode(Default, node).Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, before),
			"the node takes work again only under the label that names the layout its GPUs kept")
		Expect(layouts(Default, node)).To(HaveEach(Equal(map[string]int{"1g.18gb": 7})))
		Expect(getNode(Default, node).Annotations[sim.AnnotationFault]).NotTo(ContainSubstring(sim.FaultFailNext),
			"the simulator consumes fail-next when it fires")
		expectRestartChangesNothing(s, node)
	})

	// Guards configureTimeout: mig-manager wedged in "pending" fails the step once the timeout
	// passes, with a message that says so, and the untouched node is reopened.
	It("fails the node's step when mig-manager stays pending past configureTimeout, and does not leave the node cordoned", func() {
		s := newScenario("wedge")
		node := s.nodes[0]
		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) {
			spec.Disruption.ConfigureTimeout = &metav1.Duration{Duration: 5 * time.Second}
		})
		annotateNode(node, sim.AnnotationFault, sim.FaultStuckPending)
		s.deploy("train-3g", 1, s.inPool(), mig3g, 1, nil)
		s.unpauseWhenPending(1)
		plan := s.waitPlan(time.Minute, v1alpha1.PlanAwaitingApproval)
		approve(plan)

		before := getNode(Default, node).Labels[nvidia.LabelMIGConfig]
		final := s.waitPhase(plan.Name, v1alpha1.PlanFailed, 2*time.Minute)
		st := stepStatus(final, node)
		Expect(st.State).To(Equal(v1alpha1.NodeFailed))
		Expect(st.Message).To(ContainSubstring("configureTimeout 5s"))
		Expect(st.Message).To(ContainSubstring(`"pending"`))
		Expect(st.Message).To(ContainSubstring("was set back to " + before))
		Eventually(func(g Gomega) { expectOpen(g, node) }).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Expect(getNode(Default, node).Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, before))
		Expect(layouts(Default, node)).To(HaveEach(Equal(map[string]int{"1g.18gb": 7})))
		// The wedge clears (an operator upgrade restarts mig-manager): it applies what the label
		// names, the layout the GPUs have, and nothing under the node's pods changes.
		annotateNode(node, sim.AnnotationFault, "")
		expectRestartChangesNothing(s, node)
	})

	// Guards gpupool.io/do-not-disrupt: the planner never lists such a pod in evictions, even
	// where evicting it would be the cheapest change (one pod instead of two), and executing
	// a plan on its node leaves it running, the same pod throughout.
	It("never evicts a pod annotated do-not-disrupt, even when a plan changes its node", func() {
		s := newScenario("dnd")
		node := s.nodes[0]
		s.createPolicy(nil)
		s.deploy("keep", 1, onNode(node), mig1g, 1, map[string]string{v1alpha1.AnnotationDoNotDisrupt: "true"})
		keep := s.waitRunning("keep", 1, 30*time.Second)[0]
		s.waitGPUHolds(node, 0, keep.Name)
		others := s.onGPU1(node, "others", 2, nil, keep.Name)
		deletions := watchDeletions(s.ns)
		s.deploy("big-7g", 1, s.inPool(), mig7g, 1, nil)
		s.unpauseWhenPending(1)

		plan := s.waitPlan(time.Minute, v1alpha1.PlanAwaitingApproval)
		Expect(evicted(plan)).To(ConsistOf(s.keys(others)))
		Expect(plan.Spec.Steps).To(ConsistOf(HaveField("GPUs", ConsistOf(HaveField("Index", int32(1))))))
		approve(plan)
		s.waitPhase(plan.Name, v1alpha1.PlanSucceeded, 2*time.Minute)
		s.waitRunning("big-7g", 1, time.Minute)
		s.waitRunning("others", 2, time.Minute)

		now := s.waitRunning("keep", 1, time.Minute)
		Expect(now[0].UID).To(Equal(keep.UID))
		for _, d := range deletions.values() {
			Expect(d).NotTo(HaveSuffix(string(keep.UID)), "the do-not-disrupt pod was deleted")
		}
		Expect(deletions.err()).To(BeEmpty())
		var all v1alpha1.RepartitionPlanList
		Expect(k8s.List(suiteCtx, &all)).To(Succeed())
		for i := range all.Items {
			Expect(evicted(&all.Items[i])).NotTo(ContainElement(s.ns+"/"+keep.Name), "plan %s", all.Items[i].Name)
		}
	})

	// Guards crash safety: every step's progress lives in the plan's status, so a manager
	// killed mid-plan and replaced resumes where it stopped: the plan completes, the pod
	// evicted before the crash is not evicted again (the new manager counts no eviction, and
	// only that pod is deleted), and the node is relabelled exactly once.
	It("completes a plan after the manager is killed mid-plan, with no repeated eviction or relabel", func() {
		s := newScenario("restart")
		node := s.nodes[0]
		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) { spec.Disruption.Approval = v1alpha1.ApprovalAuto })
		// mig-manager holds every apply 10s, so the plan is caught after its eviction and relabel.
		annotateNode(node, sim.AnnotationApplyDelay, "10s")
		s.pin("pin", node, 1)
		victim := s.onGPU1(node, "victim", 1, nil, "pin")[0]
		labels := watchLabel(node, nvidia.LabelMIGConfig)
		deletions := watchDeletions(s.ns)
		s.deploy("big-7g", 1, s.inPool(), mig7g, 1, nil)
		s.unpauseWhenPending(1)

		var plan *v1alpha1.RepartitionPlan
		Eventually(func(g Gomega) {
			plans := s.plans(g)
			g.Expect(plans).NotTo(BeEmpty())
			plan = &plans[len(plans)-1]
			g.Expect(plan.Spec.Steps).To(HaveLen(1))
			if state := stepStatus(plan, node).State; state == v1alpha1.NodeVerifying || state == v1alpha1.NodeDone {
				StopTrying("the step went past Configuring before the test could kill the manager: raise the apply delay").Now()
			}
			g.Expect(stepStatus(plan, node).State).To(Equal(v1alpha1.NodeConfiguring))
			g.Expect(getNode(g, node).Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfig, plan.Spec.Steps[0].MIGConfigName))
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Expect(evicted(plan)).To(ConsistOf(s.ns + "/" + victim.Name))
		before, err := evictionsCounted(cluster.ManagerMetrics, s.policy)
		Expect(err).NotTo(HaveOccurred())
		Expect(before).To(BeNumerically(">=", 1), "the first manager evicted the pod")

		By("killing the manager mid-plan and starting a new one")
		Expect(cluster.KillManager()).To(Succeed())
		Expect(cluster.StartManager(suiteCtx)).To(Succeed())

		done := s.waitPhase(plan.Name, v1alpha1.PlanSucceeded, 2*time.Minute)
		s.waitRunning("big-7g", 1, time.Minute)
		after, err := evictionsCounted(cluster.ManagerMetrics, s.policy)
		Expect(err).NotTo(HaveOccurred())
		Expect(after).To(BeZero(), "the new manager evicted again")
		Expect(deletions.values()).To(ConsistOf(victim.Name+" "+string(victim.UID)), "only the victim is deleted, once")
		Expect(labels.values()).To(Equal([]string{"all-1g", done.Spec.Steps[0].MIGConfigName}),
			"nvidia.com/mig.config changes once, to the plan's entry")
		Expect(deletions.err() + labels.err()).To(BeEmpty())
	})

	// Guards approval AutoIdle: a plan that would evict a running pod is never applied without
	// a human's approval, while one that only re-carves idle GPUs is applied without asking.
	// The disruptive plan is proposed under Manual (AutoIdle's planner plans no eviction at
	// all) and then the policy switches to AutoIdle: the plan made under Manual is never
	// approved by that edit; it is superseded by what the policy would make under AutoIdle, an
	// idle-only plan.
	It("applies idle-only plans without approval under AutoIdle and leaves a plan that evicts waiting", func() {
		s := newScenario("autoidle")
		v1, v2 := s.nodes[0], s.nodes[1]
		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) {
			spec.Disruption.MaxDisruptedNodes = ptr.To(intstr.FromInt32(2))
			spec.Planning.StabilizationWindow = &metav1.Duration{Duration: 15 * time.Second}
		})
		s.pin("pin-v1", v1, 7)
		s.pin("pin-v2", v2, 1)
		busy := s.onGPU1(v2, "busy", 1, nil, "pin-v2")[0]
		s.deploy("big-7g", 2, s.inPool(), mig7g, 1, nil)
		s.unpauseWhenPending(2)

		disruptive := s.waitPlan(time.Minute, v1alpha1.PlanAwaitingApproval)
		Expect(disruptive.Spec.Disruptive).To(BeTrue())
		Expect(evicted(disruptive)).To(ConsistOf(s.ns + "/" + busy.Name))

		By("switching the policy to AutoIdle")
		s.editPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) { spec.Disruption.Approval = v1alpha1.ApprovalAutoIdle })
		Consistently(func(g Gomega) {
			p := getPlan(g, disruptive.Name)
			g.Expect(p.Status.Phase).To(BeElementOf(v1alpha1.PlanAwaitingApproval, v1alpha1.PlanSuperseded))
			g.Expect(p.Status.Approved).To(BeFalse())
			expectOpen(g, v2)
			g.Expect(s.pods("busy")).To(ConsistOf(HaveField("UID", busy.UID)))
		}).WithTimeout(5*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)

		By("waiting for the idle-only plan that replaces it")
		var idle *v1alpha1.RepartitionPlan
		Eventually(func(g Gomega) {
			idle = nil
			for _, p := range s.plans(g) {
				if p.Name != disruptive.Name && p.Status.Phase == v1alpha1.PlanSucceeded {
					idle = &p
				}
			}
			g.Expect(idle).NotTo(BeNil())
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Expect(idle.Spec.Disruptive).To(BeFalse())
		Expect(evicted(idle)).To(BeEmpty())
		Expect(idle.Spec.Steps).To(ConsistOf(HaveField("Node", v1)))
		Expect(idle.Annotations).NotTo(HaveKey(v1alpha1.AnnotationApprove))
		Expect(idle.Status.Conditions).To(ContainElement(SatisfyAll(
			HaveField("Type", controllers.ConditionApproved), HaveField("Reason", rollout.ReasonApprovedByPolicy))))
		Eventually(func(g Gomega) {
			g.Expect(s.pods("big-7g")).To(ContainElement(HaveField("Status.Phase", corev1.PodRunning)))
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), s.diagnostics)

		p := getPlan(Default, disruptive.Name)
		Expect(p.Status.Approved).To(BeFalse())
		Expect(p.Status.Phase).To(Equal(v1alpha1.PlanSuperseded))
		Expect(s.pods("busy")).To(ConsistOf(HaveField("UID", busy.UID)))
		Expect(getNode(Default, v2).Spec.Unschedulable).To(BeFalse())
		Expect(s.pods("big-7g")).To(ContainElement(HaveField("Status.Phase", corev1.PodPending)))
	})
	// Guards sharing with the unchanged device plugin: pods asking for a time-sliced share of a
	// GPU (nvidia.com/gpu.shared) wait on an all-1g node, a plan turns the idle node into
	// MIG-disabled GPUs with the fewest time-slicing replicas that serve them, and once it is
	// approved the device plugin advertises the replicas and the pods run.
	It("turns an idle node into time-sliced GPUs for pending shared pods once approved, and they run", func() {
		s := newScenario("sharing")
		plan := s.timeSlicedPlan("notebook", "nvidia.com/gpu.shared", 3)
		step := plan.Spec.Steps[0]
		Expect(step.SharingConfigName).To(Equal("gpupool-ts-2"), "2 replicas x 2 GPUs serve 3 pods")
		Expect(step.SharingConfig).To(Equal(&v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: 2}))
		Expect(step.GPUs).To(HaveEach(HaveField("To", BeEmpty())), "MIG goes off on both GPUs")
		s.runApproved(plan, "notebook", 3, "nvidia.com/gpu.shared", 4, mig1g)
	})

	// Guards time-slicing of MIG devices: pods asking for a share of a 3g instance
	// (nvidia.com/mig-3g.71gb.shared) wait on an all-1g node; the approved plan carves the GPUs
	// into 3g instances and time-slices them, and the pods run on the replicas.
	It("carves and time-slices 3g instances for pending pods asking for a share of one, once approved, and they run", func() {
		s := newScenario("migsharing")
		plan := s.timeSlicedPlan("shared-3g", "nvidia.com/mig-3g.71gb.shared", 5)
		step := plan.Spec.Steps[0]
		Expect(step.SharingConfigName).To(Equal("gpupool-ts-2"), "2 GPUs x 2 instances x 2 replicas serve 5 pods")
		Expect(step.GPUs).To(ConsistOf(
			HaveField("To", v1alpha1.ProfileCounts{"3g.71gb": 2}), HaveField("To", v1alpha1.ProfileCounts{"3g.71gb": 2})))
		s.runApproved(plan, "shared-3g", 5, "nvidia.com/mig-3g.71gb.shared", 8, mig3g)
	})
})

// Guards cross-node consolidation, make before break: a pending 7g pod that only node x may
// run needs x's GPU 1, where a small Deployment pod runs that cannot come back on x (GPU 0 is
// full). The plan moves it to node y, whose GPUs are whole 7g instances with no 1g slice: y is
// re-carved first, and the small pod is evicted (through the Eviction API, its
// PodDisruptionBudget allowing it) only once y's step is done. The 7g pod runs, and the small
// pod's replacement runs on y: no pod that ran before is left pending.
var _ = Describe("cross-node moves", func() {
	It("moves a small pod to a landing carved on another node so that a 7g pod fits, carving before evicting", func() {
		s := newScenario("move")
		x, y := s.nodes[0], s.nodes[1]
		s.createPolicy(nil)
		s.pin("pin-x", x, 7)
		s.deploy("small", 1, s.inPool(), mig1g, 1, nil)
		small := s.waitRunning("small", 1, 30*time.Second)
		Expect(small[0].Spec.NodeName).To(Equal(x), "only x has 1g slices")
		s.waitGPUHolds(x, 1, small[0].Name)
		s.setPDBMinAvailable("small", 0, 1)
		s.deploy("big-7g", 1, onNode(x), mig7g, 1, nil)
		s.unpauseWhenPending(1)

		plan := s.waitPlan(time.Minute, v1alpha1.PlanAwaitingApproval)
		Expect(plan.Spec.Steps).To(HaveLen(2), s.diagnostics)
		var stepX, stepY v1alpha1.NodeStep
		for _, st := range plan.Spec.Steps {
			switch st.Node {
			case x:
				stepX = st
			case y:
				stepY = st
			}
		}
		Expect(stepX.Evictions).To(ConsistOf(SatisfyAll(HaveField("Name", small[0].Name), HaveField("LandingNode", y))))
		Expect(stepX.WaitsFor).To(ConsistOf(y), "the mover waits for its landing")
		Expect(stepY.Evictions).To(BeEmpty(), "the landing only re-carves an idle GPU")

		approve(plan)
		sawWaiting := false
		Eventually(func(g Gomega) {
			p := getPlan(g, plan.Name)
			if slices.ContainsFunc(p.Status.Waiting, func(w v1alpha1.NodeWait) bool { return w.Node == x && slices.Contains(w.For, y) }) {
				sawWaiting = true
			}
			pod := &corev1.Pod{}
			err := k8s.Get(suiteCtx, client.ObjectKeyFromObject(&small[0]), pod)
			if apierrors.IsNotFound(err) || (err == nil && pod.DeletionTimestamp != nil) {
				// Not g.Expect: an eviction before the landing is done fails the spec at once.
				Expect(stepStatus(p, y).State).To(Equal(v1alpha1.NodeDone), "the small pod was evicted before its landing on %s was carved", y)
			}
			g.Expect(p.Status.Phase).To(Equal(v1alpha1.PlanSucceeded))
		}).WithTimeout(3*time.Minute).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Expect(sawWaiting).To(BeTrue(), "the plan's status showed %s waiting for %s", x, y)

		s.waitRunning("big-7g", 1, time.Minute)
		Eventually(func(g Gomega) {
			pods := s.pods("small")
			g.Expect(pods).To(HaveLen(1))
			g.Expect(pods[0].UID).NotTo(Equal(small[0].UID))
			g.Expect(pods[0].Spec.NodeName).To(Equal(y))
			g.Expect(pods[0].Status.Phase).To(Equal(corev1.PodRunning))
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Expect(s.pods("pin-x")).To(ConsistOf(HaveField("Status.Phase", corev1.PodRunning)), "the pinned pod never moved")
	})
})

// expectRestartChangesNothing restarts the simulated mig-manager on a node that took work
// again after a failed step (as an operator upgrade or a reboot does): it applies the label's
// current value at once, and no GPU of the node in service changes.
func expectRestartChangesNothing(s *scenario, node string) {
	GinkgoHelper()
	want := layouts(Default, node)
	annotateNode(node, sim.AnnotationRestartMIGManager, "after-failed-step")
	Eventually(func(g Gomega) {
		g.Expect(getNode(g, node).Labels).To(HaveKeyWithValue(nvidia.LabelMIGConfigState, "success"))
	}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
	Consistently(func(g Gomega) {
		g.Expect(layouts(g, node)).To(Equal(want), "a restarted mig-manager re-carves nothing on a node in service")
		expectOpen(g, node)
	}).WithTimeout(3*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
}
