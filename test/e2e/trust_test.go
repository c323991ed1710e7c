package e2e_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/sim"
	"github.com/gpupool/gpupool/test/simcluster"
)

var _ = Describe("the trust boundary", func() {
	// Guards the admission policies as the simulated cluster installs them, with the manager
	// running as its ServiceAccount under its real RBAC: a user allowed everything by RBAC (and
	// the cluster admin) cannot create a plan, not even a perfect copy of what the manager would
	// make, nor write the status of the manager's own plan to approve it; nothing is cordoned
	// and nothing evicted, and the manager's plan still waits for a human.
	It("refuses plans and plan status written by anyone but the manager, and nothing is disrupted", func() {
		s := newScenario("forgery")
		node := s.nodes[0]
		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) { spec.Disruption.Approval = v1alpha1.ApprovalAuto })
		victim := s.pin("victim", node, 1)

		mallory := impersonating("mallory", "cluster-admin")
		policy := &v1alpha1.GPUPoolPolicy{}
		Expect(k8s.Get(suiteCtx, client.ObjectKey{Name: s.policy}, policy)).To(Succeed())
		forged := &v1alpha1.RepartitionPlan{
			ObjectMeta: metav1.ObjectMeta{Name: s.policy + "-forged",
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(policy, v1alpha1.GroupVersion.WithKind("GPUPoolPolicy"))}},
			Spec: v1alpha1.RepartitionPlanSpec{Policy: s.policy, Disruptive: true, Steps: []v1alpha1.NodeStep{{
				Node: node, MIGConfigName: "gpupool-0123456789", Disruptive: true,
				GPUs: []v1alpha1.GPUChange{{Index: 0, From: v1alpha1.ProfileCounts{"1g.18gb": 7}, To: v1alpha1.ProfileCounts{"7g.141gb": 1}}},
				Evictions: []v1alpha1.Eviction{{PodReference: v1alpha1.PodReference{Namespace: s.ns, Name: victim.Name},
					UID: string(victim.UID), Reason: "holds 1g.18gb on GPU 0"}},
			}}},
		}
		forged.Spec.Hash = v1alpha1.HashSteps(forged.Spec.Steps)
		Expect(mallory.Create(suiteCtx, forged.DeepCopy())).To(MatchError(ContainSubstring(
			"mallory may not create RepartitionPlans: only gpupool's manager")))
		Expect(k8s.Create(suiteCtx, forged.DeepCopy())).To(MatchError(ContainSubstring("may not create RepartitionPlans")),
			"not even the cluster admin makes plans")

		// The manager's own plan, for pending 3g pods, waits for a human under Manual.
		s.editPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) { spec.Disruption.Approval = v1alpha1.ApprovalManual })
		s.deploy("train-3g", 1, s.inPool(), mig3g, 1, nil)
		s.unpauseWhenPending(1)
		plan := s.waitPlan(time.Minute, v1alpha1.PlanAwaitingApproval)
		plan.Status.Phase, plan.Status.Approved = v1alpha1.PlanApproved, true
		Expect(mallory.Status().Update(suiteCtx, plan)).To(MatchError(ContainSubstring(
			"mallory may not write the status of RepartitionPlan " + plan.Name)))

		Consistently(func(g Gomega) {
			p := getPlan(g, plan.Name)
			g.Expect(p.Status.Phase).To(Equal(v1alpha1.PlanAwaitingApproval))
			g.Expect(p.Status.Approved).To(BeFalse())
			expectOpen(g, node)
			g.Expect(s.pods("victim")).To(ConsistOf(HaveField("UID", victim.UID)), "nothing was evicted")
		}).WithTimeout(3*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
	})
})

var _ = Describe("loosening a policy", func() {
	// Guards approval against a policy edit: a user who may edit GPUPoolPolicies but holds no
	// approve verb cannot turn a Manual pool Auto (nor unpause it, nor switch evictions on),
	// so the plan waiting for a human still waits, and nothing is evicted.
	It("refuses a policy edit that would run a waiting plan without a human, and nothing is disrupted", func() {
		s := newScenario("loosen")
		node := s.nodes[0]
		s.createPolicy(nil)
		victim := s.pin("victim", node, 1)
		s.deploy("train-3g", 1, s.inPool(), mig3g, 1, nil)
		s.unpauseWhenPending(1)
		plan := s.waitPlan(time.Minute, v1alpha1.PlanAwaitingApproval)

		Expect(k8s.Create(suiteCtx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-policy-editor"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"gpupoolpolicies"},
				Verbs: []string{"get", "list", "watch", "patch", "update"}}},
		})).To(Or(Succeed(), MatchError(ContainSubstring("already exists"))))
		editor := impersonating("policy-editor", "e2e-policy-editor")
		loosen := func(edit func(*v1alpha1.GPUPoolPolicySpec)) error {
			p := &v1alpha1.GPUPoolPolicy{}
			Expect(editor.Get(suiteCtx, client.ObjectKey{Name: s.policy}, p)).To(Succeed())
			patch := client.MergeFrom(p.DeepCopy())
			edit(&p.Spec)
			return editor.Patch(suiteCtx, p, patch)
		}
		Expect(loosen(func(spec *v1alpha1.GPUPoolPolicySpec) { spec.Disruption.Approval = v1alpha1.ApprovalAuto })).To(MatchError(
			ContainSubstring("policy-editor may not set spec.disruption.approval of GPUPoolPolicy " + s.policy + " to Auto")))
		Expect(loosen(func(spec *v1alpha1.GPUPoolPolicySpec) { spec.Disruption.EvictUnmanaged = true })).To(MatchError(
			ContainSubstring("may not turn on spec.disruption.evictUnmanaged")))
		Expect(loosen(func(spec *v1alpha1.GPUPoolPolicySpec) {
			spec.Disruption.PlanTTL = &metav1.Duration{Duration: 2 * time.Hour}
		})).
			To(Succeed(), "what does not widen disruption needs only RBAC")

		Consistently(func(g Gomega) {
			p := getPlan(g, plan.Name)
			g.Expect(p.Status.Phase).To(Equal(v1alpha1.PlanAwaitingApproval))
			expectOpen(g, node)
			g.Expect(s.pods("victim")).To(ConsistOf(HaveField("UID", victim.UID)), "nothing was evicted")
		}).WithTimeout(3*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
	})
})

var _ = Describe("agent liveness", func() {
	// Guards the heartbeat: gpusim's agents act as the agent's ServiceAccount under
	// config/agent's policies, as the DaemonSet's pods do. When a node's agent stops, a user
	// with every RBAC right cannot renew its Lease for it (nor create one), so its report goes
	// stale and the node is left out of planning, named on the policy.
	It("refuses a forged Lease renewal, and a node whose agent stopped is left out of planning", func() {
		s := newScenario("liveness")
		node := s.nodes[0]
		s.createPolicy(nil)
		annotateNode(node, sim.AnnotationFault, sim.FaultAgentDown)
		DeferCleanup(func() { annotateNode(node, sim.AnnotationFault, "") })
		Eventually(func(g Gomega) {
			g.Expect(nodeEvents(g, node, "AgentStopped")).To(ContainElement(ContainSubstring("fault agent-down")))
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)

		mallory := impersonating("mallory", "cluster-admin")
		lease := &coordinationv1.Lease{}
		Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: simcluster.AgentNamespace, Name: node}, lease)).To(Succeed())
		renewed := lease.DeepCopy()
		renewed.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		Expect(mallory.Update(suiteCtx, renewed)).To(MatchError(ContainSubstring("mallory")), "a forged renewal is refused")
		Expect(mallory.Create(suiteCtx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: node,
			Labels: map[string]string{v1alpha1.LabelAgentLease: "true"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(v1alpha1.AgentLeaseHolder(node)), RenewTime: &metav1.MicroTime{Time: time.Now()}}})).
			To(MatchError(ContainSubstring("mallory")), "and so is a forged Lease elsewhere")

		Eventually(func(g Gomega) {
			c := s.condition(g, v1alpha1.ConditionDegraded)
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Message).To(ContainSubstring(node))
		}).WithTimeout(4*time.Minute).WithPolling(time.Second).Should(Succeed(), s.diagnostics)
	})
})

var _ = Describe("cordon provenance", func() {
	// Guards who cordoned a node, as gpupool goes by it: a user who may patch nodes (a label
	// tool, an on-call engineer) cannot write gpupool's cordon annotation on an admin-cordoned
	// node, so the cordon janitor never takes that cordon for gpupool's and never reopens it,
	// and nobody but the manager writes gpupool's cordon ledger.
	It("refuses a forged cordon annotation and a forged ledger, and uncordons nothing", func() {
		s := newScenario("provenance")
		node := s.nodes[0]
		s.createPolicy(nil)
		Expect(k8s.Create(suiteCtx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-node-patcher"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "patch", "update"}},
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "create", "update", "patch", "delete"}}},
		})).To(Or(Succeed(), MatchError(ContainSubstring("already exists"))))
		mallory := impersonating("node-patcher", "e2e-node-patcher")

		// The admin cordons the node for maintenance.
		n := getNode(Default, node)
		patch := client.MergeFrom(n.DeepCopy())
		n.Spec.Unschedulable = true
		Expect(k8s.Patch(suiteCtx, n, patch)).To(Succeed())
		DeferCleanup(uncordon, node)

		n = getNode(Default, node)
		patch = client.MergeFrom(n.DeepCopy())
		metav1.SetMetaDataAnnotation(&n.ObjectMeta, v1alpha1.AnnotationCordonedBy, s.policy+"-never-existed")
		Expect(mallory.Patch(suiteCtx, n, patch)).To(MatchError(ContainSubstring(
			"node-patcher may not add, change or remove gpupool.io/ annotations on node " + node)))
		ledger := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: simcluster.OperatorNamespace, Name: "gpupool-cordons"},
			Data: map[string]string{node: `{"plan":"` + s.policy + `-never-existed"}`}}
		err := mallory.Create(suiteCtx, ledger)
		if apierrors.IsAlreadyExists(err) {
			got := &corev1.ConfigMap{}
			Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(ledger), got)).To(Succeed())
			got.Data = ledger.Data
			err = mallory.Update(suiteCtx, got)
		}
		Expect(err).To(MatchError(ContainSubstring("node-patcher may not write or delete ConfigMap gpupool-cordons")))

		Consistently(func(g Gomega) {
			got := getNode(g, node)
			g.Expect(got.Spec.Unschedulable).To(BeTrue(), "the admin's cordon stays")
			g.Expect(got.Annotations).NotTo(HaveKey(v1alpha1.AnnotationCordonedBy))
		}).WithTimeout(3*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
	})
})

// impersonating returns a client acting as user, bound to clusterRole first, so that what
// refuses its requests is admission, not RBAC.
func impersonating(user, clusterRole string) client.Client {
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}}
	Expect(client.IgnoreAlreadyExists(k8s.Create(suiteCtx, binding))).To(Succeed())
	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	return c
}
