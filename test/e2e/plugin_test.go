package e2e_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/triage"
)

// kubectlGpupool runs the plugin binary against the simulated cluster, as
// "kubectl gpupool ARGS" runs it, and returns its stdout; a non-zero exit fails g.
func kubectlGpupool(g Gomega, args ...string) string {
	cmd := exec.Command(plugin, append(args, "--kubeconfig="+cluster.Kubeconfig)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	g.Expect(err).NotTo(HaveOccurred(), "kubectl gpupool %v: %s", args, stderr.String())
	return stdout.String()
}

// why runs "kubectl gpupool why POD -n NS -o json" and decodes the verdict.
func (s *scenario) why(g Gomega, pod string) triage.Verdict {
	var v triage.Verdict
	out := kubectlGpupool(g, "why", pod, "-n", s.ns, "-o", "json")
	g.Expect(json.Unmarshal([]byte(out), &v)).To(Succeed(), out)
	return v
}

var _ = Describe("the kubectl gpupool plugin", func() {
	// Guards the triage users run first: four pods pending for four different reasons, each
	// named with its layer and the dimension that blocks it, on the live cluster; then the
	// plan serving the first is approved from the plugin and followed in its status.
	It("explains pods pending on partition shape, CPU, a disruption budget and outside every pool, and approves the plan", func() {
		s := newScenario("triage")
		idle, guarded := s.nodes[0], s.nodes[1]

		By("filling both GPUs of one node with pods a PodDisruptionBudget guards")
		s.deploy("guard", 2, onNode(guarded), mig1g, 7, nil)
		s.waitRunning("guard", 2, time.Minute)
		s.setPDBMinAvailable("guard", 2, 0)

		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) {
			spec.Planning.Paused = false
			spec.Disruption.MaxDisruptedNodes = ptr.To(intstr.FromInt32(1))
		})
		s.bare("shape", s.inPool(), mig3g, 1)
		s.bareWith("greedy", s.inPool(), corev1.ResourceList{mig1g: resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("1000")})
		s.bare("budget", onNode(guarded), mig7g, 1)
		s.bare("outside", map[string]string{scenarioLabel: "nowhere"}, mig1g, 1)

		plan := s.waitPlan(time.Minute, v1alpha1.PlanAwaitingApproval)
		Expect(plan.Spec.Steps).To(HaveLen(1))
		Expect(plan.Spec.Steps[0].Node).To(Equal(idle))

		By("asking why each pod is pending")
		for _, tc := range []struct {
			pod      string
			layer    triage.Layer
			blocking string
		}{
			{"shape", triage.LayerPartitionShape, mig3g},
			{"greedy", triage.LayerPlacement, "cpu"},
			{"budget", triage.LayerDisruptionBudget, "PodDisruptionBudget " + s.ns + "/guard"},
			{"outside", triage.LayerNotInPool, "nodeSelector"},
		} {
			Eventually(func(g Gomega) {
				v := s.why(g, tc.pod)
				g.Expect(v.Layer).To(Equal(tc.layer), "%s: %s", tc.pod, v.Reason)
				g.Expect(v.Blocking).To(Equal(tc.blocking), "%s: %s", tc.pod, v.Reason)
				g.Expect(v.Nodes).NotTo(BeEmpty())
				if tc.pod == "shape" {
					g.Expect(v.Plan).NotTo(BeNil(), "the live plan that serves it is named")
					g.Expect(v.Plan.Name).To(Equal(plan.Name))
				}
			}).WithTimeout(30*time.Second).WithPolling(time.Second).Should(Succeed(), s.diagnostics)
		}
		table := kubectlGpupool(Default, "why", "greedy", "-n", s.ns)
		Expect(table).To(ContainSubstring("Layer:     Placement"))
		Expect(table).To(ContainSubstring("CPU FREE/NEED"))
		fmt.Fprintf(GinkgoWriter, "%s", table)

		By("asking what gpupool would propose now, read-only, on the live cluster")
		var whatIf struct {
			Plans    []v1alpha1.RepartitionPlan     `json:"plans"`
			Unserved []struct{ Pod, Reason string } `json:"unserved"`
		}
		out := kubectlGpupool(Default, "what-if", "--live", "--policy", s.policy, "-o", "json")
		Expect(json.Unmarshal([]byte(out), &whatIf)).To(Succeed(), out)
		Expect(whatIf.Plans).To(HaveLen(1), "the planner proposes the change the live plan makes")
		Expect(whatIf.Plans[0].Spec.Steps).To(ConsistOf(HaveField("Node", idle)))
		Expect(whatIf.Unserved).To(ContainElement(SatisfyAll(HaveField("Pod", s.ns+"/greedy"), HaveField("Reason", "NodePlacement"))))
		Expect(s.plans(Default)).To(HaveLen(1), "what-if created nothing")

		By("reading the plan's status, approving it from the plugin, and following its progress")
		Expect(kubectlGpupool(Default, "status", s.policy)).To(ContainSubstring("Plan " + plan.Name + ": AwaitingApproval, 0/1 nodes done"))
		Expect(kubectlGpupool(Default, "plan", plan.Name)).To(ContainSubstring(idle))
		Expect(kubectlGpupool(Default, "approve", plan.Name)).To(ContainSubstring("plan " + plan.Name + " approved"))
		done := s.waitPhase(plan.Name, v1alpha1.PlanSucceeded, 2*time.Minute)
		Expect(done.Status.Approved).To(BeTrue())
		Eventually(func(g Gomega) {
			g.Expect(kubectlGpupool(g, "status", s.policy)).To(MatchRegexp(`(?i)plan ` + plan.Name + `: Succeeded, 1/1 nodes done`))
		}).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(Succeed())
		s.waitRunning("shape", 1, time.Minute)
		Eventually(func(g Gomega) {
			v := s.why(g, "shape")
			g.Expect(v.Layer).To(Equal(triage.LayerRunning), v.Reason)
		}).WithTimeout(30 * time.Second).WithPolling(time.Second).Should(Succeed())
	})
})

// bareWith creates an unmanaged pod with the given requests (and the same limits for the
// extended resources, which must match).
func (s *scenario) bareWith(name string, selector map[string]string, requests corev1.ResourceList) *corev1.Pod {
	spec := podSpec(selector, mig1g, 0)
	spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: requests, Limits: corev1.ResourceList{}}
	for n, q := range requests {
		if n != corev1.ResourceCPU && n != corev1.ResourceMemory {
			spec.Containers[0].Resources.Limits[n] = q
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name, Labels: map[string]string{"app": name}}, Spec: spec}
	Expect(k8s.Create(suiteCtx, pod)).To(Succeed())
	return pod
}
