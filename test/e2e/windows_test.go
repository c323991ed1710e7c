package e2e_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

var _ = Describe("maintenance windows on a simulated GPU cluster", func() {
	// Guards spec.disruption.windows end to end, on the manager's real clock: a plan whose
	// only step evicts a pod is approved (Auto) before its window, says that it waits and
	// until when, touches nothing (no cordon, no eviction) until the window opens, and then
	// runs to completion.
	It("starts an evicting step only once its maintenance window opens, and says when", func() {
		s := newScenario("window")
		node := s.nodes[0]
		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) { spec.Disruption.Approval = v1alpha1.ApprovalAuto })
		victim := s.victimOnGPU0(node)
		deletions := watchDeletions(s.ns)
		trail := watchNode(node, func(n *corev1.Node) string { return fmt.Sprintf("cordoned=%v", n.Spec.Unschedulable) })

		// A daily window at the first whole minute at least 90s from now (UTC), open for five
		// minutes: time enough for the plan to be made and wait before it opens.
		start := time.Now().UTC().Add(90 * time.Second).Truncate(time.Minute).Add(time.Minute)
		s.editPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) {
			spec.Disruption.Windows = []v1alpha1.MaintenanceWindow{{Schedule: fmt.Sprintf("%d %d * * *", start.Minute(), start.Hour()),
				Duration: metav1.Duration{Duration: 5 * time.Minute}}}
		})
		s.deploy("train-3g", 1, s.inPool(), mig3g, 1, nil)
		s.unpauseWhenPending(1)

		By("the approved plan waiting for the window, saying when it opens")
		var plan *v1alpha1.RepartitionPlan
		Eventually(func(g Gomega) {
			plans := s.plans(g)
			g.Expect(plans).NotTo(BeEmpty())
			plan = &plans[len(plans)-1]
			g.Expect(plan.Status.Phase).To(Equal(v1alpha1.PlanApproved), "approved, no node started")
			c := meta.FindStatusCondition(plan.Status.Conditions, "WithinMaintenanceWindow")
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Message).To(ContainSubstring("node " + node))
			g.Expect(c.Message).To(ContainSubstring("may start at " + start.Format(time.RFC3339)))
		}).WithTimeout(time.Until(start)-5*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		Expect(plan.Spec.Steps).To(HaveLen(1))
		Expect(plan.Spec.Steps[0].Evictions).NotTo(BeEmpty(), "the step evicts the victim")

		Consistently(func(g Gomega) {
			p := getPlan(g, plan.Name)
			g.Expect(p.Status.Nodes).To(BeEmpty(), "no step starts before the window")
			g.Expect(getNode(g, node).Spec.Unschedulable).To(BeFalse(), "not cordoned before the window")
			g.Expect(victimDeletions(deletions)).To(BeEmpty(), "nothing evicted before the window")
		}).WithTimeout(time.Until(start)-2*time.Second).WithPolling(time.Second).Should(Succeed(), s.diagnostics)
		Expect(windowEvents(plan.Name)).To(Equal(1), "one Event when the wait begins")

		By("the step starting once the window is open, and running to completion")
		done := s.waitPhase(plan.Name, v1alpha1.PlanSucceeded, time.Until(start)+3*time.Minute)
		st := stepStatus(done, node)
		Expect(st.StartedTime).NotTo(BeNil())
		Expect(st.StartedTime.Time).NotTo(BeTemporally("<", start), "started inside the window")
		Expect(evicted(done)).To(ConsistOf(s.ns + "/" + victim.Name))
		Expect(meta.IsStatusConditionTrue(done.Status.Conditions, "WithinMaintenanceWindow")).To(BeTrue())
		Expect(trail.values()).To(ContainElement("cordoned=true"))
		Expect(deletions.err() + trail.err()).To(BeEmpty())
		AddReportEntry("window: window start to step start", st.StartedTime.Sub(start).Round(time.Second).String())
	})
})

// windowEvents counts the plan's OutsideMaintenanceWindow Events, each repetition of a series
// included.
func windowEvents(plan string) int {
	var list eventsv1.EventList
	Expect(k8s.List(suiteCtx, &list)).To(Succeed())
	n := 0
	for _, e := range list.Items {
		if e.Regarding.Kind == "RepartitionPlan" && e.Regarding.Name == plan && e.Reason == "OutsideMaintenanceWindow" {
			n++
			if e.Series != nil {
				n += int(e.Series.Count) - 1
			}
		}
	}
	return n
}
