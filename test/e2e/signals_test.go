package e2e_test

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/test/simcluster"
)

// Issue 35's signals, as an operator and a tenant meet them on a live cluster: READY says
// False whenever the pool cannot work, a human's no sticks, a plan nobody needs any more is
// withdrawn, the pod's owner reads gpupool's word on the pod, and the plan names its judge.
var _ = Describe("signals an operator can act on", func() {
	It("shows READY False for a broken pool, keeps a rejection, withdraws a plan whose pods went away, and tells the pod", func() {
		s := newScenario("signals")
		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) {
			// A long window: the withdrawal below must not wait for it.
			spec.Planning.StabilizationWindow = &metav1.Duration{Duration: 30 * time.Minute}
		})
		By("a paused pool is not READY")
		Eventually(func(g Gomega) { g.Expect(readyColumn(g, s.policy)).To(Equal("False")) }).
			WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		expectReadyReason(s.policy, pool.ReasonPaused)

		By("a selector that matches no node is not READY")
		empty := &v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: s.policy + "-empty"}, Spec: v1alpha1.GPUPoolPolicySpec{
			NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{scenarioLabel: "no-such-scenario"}},
			Catalog:      []v1alpha1.CatalogEntry{{Product: "NVIDIA-H200", MIGProfiles: []v1alpha1.MIGProfileName{"1g.18gb"}}}}}
		Expect(k8s.Create(suiteCtx, empty)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(suiteCtx, empty) })
		expectReadyReason(empty.Name, pool.ReasonNoNodes)

		By("a pending 3g pod: the plan for it waits, and the pod says so")
		s.deploy("train", 1, s.inPool(), "nvidia.com/mig-3g.71gb", 1, nil)
		s.unpauseWhenPending(1)
		expectReadyReason(s.policy, pool.ReasonObserving)
		Expect(readyColumn(Default, s.policy)).To(Equal("True"))
		rejected := s.waitPlan(time.Minute, v1alpha1.PlanAwaitingApproval)
		train := s.pods("train")[0]
		Eventually(func(g Gomega) {
			g.Expect(podEventReasons(g, s.ns, train.Name)).To(ContainElement(pool.PodReasonPlanned))
		}).
			WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)

		By("rejecting it: the same change is not proposed again, and the pod is told until when")
		annotatePlan(rejected, v1alpha1.AnnotationReject, "not during the training run")
		done := s.waitPhase(rejected.Name, v1alpha1.PlanRejected, 30*time.Second)
		Expect(done.Status.RejectedBy).To(Equal(whoAmI()), "the API server named who rejected it")
		Eventually(func(g Gomega) {
			g.Expect(podEventReasons(g, s.ns, train.Name)).To(ContainElement(pool.PodReasonRefused))
		}).
			WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
		// The pass that told the pod saw the refusal: had it proposed the change again, the
		// plan would exist by now.
		for _, p := range s.plans(Default) {
			if p.Name != rejected.Name {
				Expect(pool.SameChange(&p, rejected)).To(BeFalse(), "plan %s proposes the change rejected in %s", p.Name, rejected.Name)
			}
		}

		By("new demand gets a new plan; once its pods are gone it is withdrawn, inside the window")
		s.deploy("tune", 1, s.inPool(), "nvidia.com/mig-2g.35gb", 1, nil)
		var second *v1alpha1.RepartitionPlan
		Eventually(func(g Gomega) {
			for _, p := range s.plans(g) {
				if p.Name != rejected.Name && p.Status.Phase == v1alpha1.PlanAwaitingApproval {
					second = &p
				}
			}
			g.Expect(second).NotTo(BeNil())
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), s.diagnostics)
		for _, app := range []string{"train", "tune"} {
			Expect(k8s.Delete(suiteCtx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: app}},
				client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
		}
		withdrawn := s.waitPhase(second.Name, v1alpha1.PlanSuperseded, time.Minute)
		Expect(withdrawn.Status.Conditions).To(ContainElement(HaveField("Message", HavePrefix(pool.WithdrawPrefix))))

		By("another policy selecting the same node: both are not READY")
		twin := &v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: s.policy + "-twin"}, Spec: v1alpha1.GPUPoolPolicySpec{
			NodeSelector: v1alpha1.PoolSelector{MatchLabels: s.inPool()},
			Catalog:      []v1alpha1.CatalogEntry{{Product: "NVIDIA-H200", MIGProfiles: []v1alpha1.MIGProfileName{"1g.18gb"}}}}}
		Expect(k8s.Create(suiteCtx, twin)).To(Succeed())
		expectReadyReason(s.policy, pool.ReasonConflict)
		Expect(k8s.Delete(suiteCtx, twin)).To(Succeed())
		expectReadyReason(s.policy, pool.ReasonObserving)

		By("a catalog part that cannot take effect is not READY")
		s.editPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) {
			// An A100 profile on the H200: well-formed, so the API server takes it; only the
			// controller knows the H200 has no such profile.
			spec.Catalog[0].MIGProfiles = append(spec.Catalog[0].MIGProfiles, "3g.40gb")
		})
		expectReadyReason(s.policy, pool.ReasonSpecInvalid)
		Expect(readyColumn(Default, s.policy)).To(Equal("False"))
	})
})

// readyColumn is the READY column of kubectl get gpp for the policy, as kubectl prints it.
func readyColumn(g Gomega, policy string) string {
	root, err := simcluster.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	dir, err := exec.Command("bash", filepath.Join(root, "hack", "control-plane.sh"), "--print-dir").Output()
	g.Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(filepath.Join(strings.TrimSpace(string(dir)), "kubectl"), "--kubeconfig="+cluster.Kubeconfig,
		"get", "gpp", policy, "--no-headers", "-o", "custom-columns=READY:.status.conditions[?(@.type==\"Ready\")].status")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	g.Expect(cmd.Run()).To(Succeed(), stderr.String())
	return strings.TrimSpace(out.String())
}

// expectReadyReason waits until the policy's Ready condition has the reason (False for every
// reason but Observing).
func expectReadyReason(policy, reason string) {
	Eventually(func(g Gomega) {
		p := &v1alpha1.GPUPoolPolicy{}
		g.Expect(k8s.Get(suiteCtx, client.ObjectKey{Name: policy}, p)).To(Succeed())
		c := findCondition(p.Status.Conditions, v1alpha1.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		want := metav1.ConditionFalse
		if reason == pool.ReasonObserving {
			want = metav1.ConditionTrue
		}
		g.Expect(c.Status).To(Equal(want))
	}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed())
}

func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// podEventReasons lists the reasons of the Events about a pod.
func podEventReasons(g Gomega, ns, pod string) []string {
	var list eventsv1.EventList
	g.Expect(k8s.List(suiteCtx, &list, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Pod" && e.Regarding.Name == pod {
			out = append(out, e.Reason)
		}
	}
	return out
}

// whoAmI is the user the suite's client is authenticated as, as the API server names it.
func whoAmI() string {
	review := &authenticationv1.SelfSubjectReview{}
	Expect(k8s.Create(context.Background(), review)).To(Succeed())
	return review.Status.UserInfo.Username
}
