package e2e_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testenv"
	"github.com/gpupool/gpupool/test/simcluster"
)

// pluginRun runs the plugin as "kubectl gpupool ARGS" and returns its exit code and output.
func pluginRun(args ...string) (code int, stdout, stderr string) {
	cmd := exec.Command(plugin, append(args, "--kubeconfig="+cluster.Kubeconfig)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), out.String(), errOut.String()
	}
	Expect(err).NotTo(HaveOccurred())
	return 0, out.String(), errOut.String()
}

// tenantVerdict is the part of why -o json this scenario reads.
type tenantVerdict struct {
	Layer      string                              `json:"layer"`
	Complete   bool                                `json:"complete"`
	Scheduler  string                              `json:"scheduler"`
	Plan       *struct{ Name string }              `json:"plan"`
	Demand     []struct{ Policy, Resource string } `json:"demand"`
	Unreadable []struct{ What, Right string }      `json:"unreadable"`
}

var _ = Describe("kubectl gpupool for a tenant", func() {
	// Guards point 4 of the plugin: the ML engineer confined to a namespace runs why on their
	// pending pod, impersonated with kubectl's --as, and learns what their rights show and which
	// right shows the rest; the shipped gpupool-viewer role, bound cluster-wide, adds the plan.
	It("answers why for a user who may read only their namespace, and names the rights they lack", func() {
		s := newScenario("tenant")
		user := "e2e-tenant-alice"
		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) { spec.Planning.Paused = false })
		s.bare("shape", s.inPool(), mig3g, 1)
		plan := s.waitPlan(time.Minute, v1alpha1.PlanAwaitingApproval)

		By("binding the built-in view role in the tenant's namespace only")
		Expect(k8s.Create(suiteCtx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "alice-view"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})).To(Succeed())
		why := func(g Gomega) tenantVerdict {
			code, out, errOut := pluginRun("why", "shape", "-n", s.ns, "--as="+user, "-o", "json")
			g.Expect(code).To(Equal(0), errOut)
			var v tenantVerdict
			g.Expect(json.Unmarshal([]byte(out), &v)).To(Succeed(), out)
			return v
		}
		Eventually(func(g Gomega) {
			v := why(g)
			g.Expect(v.Complete).To(BeFalse(), "the planner's inputs are not all readable")
			g.Expect(v.Scheduler).To(ContainSubstring("nodes are available"), "the scheduler's word on the pod")
			g.Expect(v.Unreadable).To(ContainElements(
				SatisfyAll(HaveField("What", "nodes"), HaveField("Right", ContainSubstring("nodes"))),
				SatisfyAll(HaveField("What", "repartitionplans"), HaveField("Right", ContainSubstring("gpupool-viewer")))))
		}).WithTimeout(30*time.Second).WithPolling(time.Second).Should(Succeed(), s.diagnostics)
		code, table, _ := pluginRun("why", "shape", "-n", s.ns, "--as="+user)
		Expect(code).To(Equal(0))
		Expect(table).To(ContainSubstring("Not seen:  - nodes: forbidden"))
		Expect(table).To(ContainSubstring("gpupool-viewer"))
		GinkgoWriter.Print(table)

		By("installing config/rbac's gpupool-viewer, which aggregates into view, and binding it to the tenant cluster-wide")
		root, err := simcluster.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		objs, err := testenv.ReadObjects(filepath.Join(root, "config", "rbac", "viewer_role.yaml"))
		Expect(err).NotTo(HaveOccurred())
		viewer := objs[0]
		viewer.SetName("gpupool-" + viewer.GetName()) // kustomize's namePrefix
		Expect(client.IgnoreAlreadyExists(k8s.Create(suiteCtx, viewer))).To(Succeed())
		Eventually(func(g Gomega) {
			view := &rbacv1.ClusterRole{}
			g.Expect(k8s.Get(suiteCtx, client.ObjectKey{Name: "view"}, view)).To(Succeed())
			g.Expect(view.Rules).To(ContainElement(HaveField("Resources", ContainElement("repartitionplans"))),
				"the aggregation label puts gpupool's objects into view")
		}).WithTimeout(30 * time.Second).WithPolling(poll).Should(Succeed())
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-alice-gpupool-viewer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "gpupool-viewer"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}}
		Expect(k8s.Create(suiteCtx, binding)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(suiteCtx, binding) })
		Eventually(func(g Gomega) {
			v := why(g)
			g.Expect(v.Plan).NotTo(BeNil(), "the plan that serves the pod")
			g.Expect(v.Plan.Name).To(Equal(plan.Name))
			g.Expect(v.Layer).To(Equal("PartitionShape"))
			g.Expect(v.Demand).To(ContainElement(SatisfyAll(HaveField("Policy", s.policy), HaveField("Resource", mig3g))))
			g.Expect(v.Unreadable).NotTo(ContainElement(HaveField("What", "repartitionplans")))
		}).WithTimeout(30*time.Second).WithPolling(time.Second).Should(Succeed(), s.diagnostics)

		By("refusing a user with no rights, named by --as, with the right to ask for")
		code, _, errOut := pluginRun("why", "shape", "-n", s.ns, "--as=e2e-nobody")
		Expect(code).To(Equal(1))
		Expect(errOut).To(ContainSubstring("you may not read pod " + s.ns + "/shape"))
		code, _, errOut = pluginRun("plan", "--as=e2e-nobody")
		Expect(code).To(Equal(1))
		Expect(errOut).To(ContainSubstring(`User "e2e-nobody" cannot list resource "repartitionplans"`))
	})
})
