package agent_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
	"github.com/gpupool/gpupool/internal/testenv"
)

// nodeNameKey is the user extra in which pod-bound service-account tokens
// carry the pod's node (k8s.io/apiserver/pkg/authentication/serviceaccount.NodeNameKey).
const nodeNameKey = "authentication.kubernetes.io/node-name"

// readObjects decodes every document of a multi-document YAML file.
func readObjects(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := testenv.ReadObjects(file)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// installAgentConfig creates everything config/agent's kustomization lists,
// from the shipped files, and returns the objects by kind.
func installAgentConfig(t *testing.T, env *testenv.Env) map[string]*unstructured.Unstructured {
	t.Helper()
	dir := filepath.Join(env.RepoRoot, "config", "agent")
	kustomization := readObjects(t, filepath.Join(dir, "kustomization.yaml"))
	if len(kustomization) != 1 {
		t.Fatalf("kustomization.yaml holds %d documents", len(kustomization))
	}
	files, _, err := unstructured.NestedStringSlice(kustomization[0].Object, "resources")
	if err != nil || len(files) == 0 {
		t.Fatalf("kustomization.yaml resources: %v %v", files, err)
	}
	byKind := map[string]*unstructured.Unstructured{}
	var created []*unstructured.Unstructured
	for _, f := range files {
		for _, obj := range readObjects(t, filepath.Join(dir, f)) {
			byKind[obj.GetKind()] = obj
			err := env.Client.Create(context.Background(), obj)
			// envtest runs no namespace controller, so a namespace is never
			// deleted; it is kept for the next test in this process.
			if obj.GetKind() == "Namespace" && apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				t.Fatalf("creating %s %s from %s: %v", obj.GetKind(), obj.GetName(), f, err)
			}
			if obj.GetKind() != "Namespace" {
				created = append(created, obj)
			}
		}
	}
	t.Cleanup(func() {
		for _, obj := range slices.Backward(created) {
			if err := env.Client.Delete(context.Background(), obj); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
		}
		// The API server stops enforcing a deleted policy shortly after, not at once: wait, so
		// that the tests after this one, which write heartbeat Leases as the admin, are not
		// refused by heartbeat_authorship_policy.yaml.
		probe := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "policies-gone",
			Labels: map[string]string{v1alpha1.LabelAgentLease: "true"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(v1alpha1.AgentLeaseHolder("policies-gone"))}}
		NewWithT(t).Eventually(func() error {
			return env.Client.Create(context.Background(), probe.DeepCopy(), client.DryRunAll)
		}).WithTimeout(30*time.Second).Should(Succeed(), "the admin writes a heartbeat Lease once config/agent's policies are gone")
	})
	for _, kind := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "DaemonSet"} {
		if byKind[kind] == nil {
			t.Fatalf("config/agent ships no %s", kind)
		}
	}
	return byKind
}

// impersonate returns a client acting as user, with the node-name claim when node is not empty.
func impersonate(t *testing.T, env *testenv.Env, user, node string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{nodeNameKey: {node}}
	}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The shipped admission policy lets each node's agent write only the GPUNode
// named after the node in its token, and RBAC gives it nothing more than
// publishing needs. The agent itself (a Publisher) is the writer.
func TestAdmissionPolicyConfinesAgentToItsNode(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	ctx := context.Background()
	cfg := installAgentConfig(t, env)

	// The DaemonSet runs as the ServiceAccount that the policy and the binding name.
	sa := cfg["ServiceAccount"]
	dsAccount, _, _ := unstructured.NestedString(cfg["DaemonSet"].Object, "spec", "template", "spec", "serviceAccountName")
	g.Expect(dsAccount).To(Equal(sa.GetName()))
	g.Expect(cfg["DaemonSet"].GetNamespace()).To(Equal(sa.GetNamespace()))
	user := "system:serviceaccount:" + sa.GetNamespace() + ":" + sa.GetName()

	s, _ := h200Node(t)
	agentA := impersonate(t, env, user, "node-a")
	publish := func(c client.Client, node string) error {
		p := &agent.Publisher{Client: c, NodeName: node, Read: agent.NVMLReader(s), Clock: env.Clock, Period: period}
		_, err := p.Reconcile(ctx, p.Request())
		return err
	}
	for _, name := range []string{"node-a", "node-c"} {
		deleteNodeAtCleanup(t, env.Client, name)
	}

	// Policies and RBAC take effect shortly after creation; probe with a dry run.
	wrongNode := "the gpupool agent on node node-a may only write the GPUNode and the heartbeat Lease named node-a, not node-b"
	g.Eventually(func() error {
		return agentA.Create(ctx, &v1alpha1.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}, client.DryRunAll)
	}).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring(wrongNode)))

	// Its own node: created and published.
	g.Expect(publish(agentA, "node-a")).To(Succeed())
	g.Expect(condition(getNode(t, env.Client, "node-a"), v1alpha1.ConditionNVMLReady).Status).To(Equal(metav1.ConditionTrue))

	// Another node's GPUNode: neither created...
	intruder := &agent.Publisher{Client: agentA, NodeName: "node-b", Read: agent.NVMLReader(s), Clock: env.Clock, Period: period}
	_, err := intruder.Reconcile(ctx, intruder.Request())
	g.Expect(err).To(MatchError(ContainSubstring(wrongNode)))
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
	g.Expect(intruder.ReadyCheck(nil)).To(MatchError("GPUNode node-b status not published yet, or its last write failed"), "a refused agent is not ready")
	g.Expect(apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Name: "node-b"}, &v1alpha1.GPUNode{}))).To(BeTrue())

	// ...nor its status written when it exists.
	g.Expect(env.Client.Create(ctx, &v1alpha1.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}})).To(Succeed())
	g.Expect(publish(agentA, "node-c")).To(MatchError(ContainSubstring("the gpupool agent on node node-a may only write the GPUNode and the heartbeat Lease named node-a, not node-c")))
	g.Expect(getNode(t, env.Client, "node-c").Status).To(Equal(v1alpha1.GPUNodeStatus{}))

	// A token without the node-name claim writes nothing.
	g.Expect(publish(impersonate(t, env, user, ""), "node-e")).To(MatchError(ContainSubstring("the gpupool agent's credentials carry no node-name claim")))

	// The agent may create its GPUNode only with an empty spec.
	err = impersonate(t, env, user, "node-d").Create(ctx, &v1alpha1.GPUNode{
		ObjectMeta: metav1.ObjectMeta{Name: "node-d"},
		Spec:       v1alpha1.GPUNodeSpec{ExpectedLayout: []v1alpha1.GPULayout{{Index: 0}}},
	})
	g.Expect(err).To(MatchError(ContainSubstring("the gpupool agent may create its GPUNode only with an empty spec")))

	// RBAC: no spec writes and no deletes, even on its own node.
	own := getNode(t, env.Client, "node-a")
	own.Spec.ExpectedLayout = []v1alpha1.GPULayout{{Index: 0}}
	g.Expect(apierrors.IsForbidden(agentA.Update(ctx, own))).To(BeTrue(), "spec update")
	g.Expect(apierrors.IsForbidden(agentA.Delete(ctx, own))).To(BeTrue(), "delete")

	// The heartbeat: the agent renews the Lease named after its node, in its own namespace.
	ns := sa.GetNamespace()
	leased := &agent.Publisher{Client: agentA, NodeName: "node-a", Read: agent.NVMLReader(s), Clock: env.Clock, Period: period, LeaseNamespace: ns}
	_, err = leased.Reconcile(ctx, leased.Request())
	g.Expect(err).NotTo(HaveOccurred())
	lease := &coordinationv1.Lease{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "node-a"}, lease)).To(Succeed())
	g.Expect(lease.Spec.HolderIdentity).To(HaveValue(Equal(v1alpha1.AgentLeaseHolder("node-a"))))
	g.Expect(lease.Labels).To(HaveKeyWithValue(v1alpha1.LabelAgentLease, "true"))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), lease) })
	// Not another node's Lease, not one held by anyone else, not in another namespace.
	forged := func(name, holder, namespace string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
	}
	g.Expect(agentA.Create(ctx, forged("node-b", v1alpha1.AgentLeaseHolder("node-b"), ns), client.DryRunAll)).To(MatchError(ContainSubstring(wrongNode)))
	g.Expect(agentA.Create(ctx, forged("node-a", "someone", ns), client.DryRunAll)).To(MatchError(ContainSubstring(
		"the heartbeat Lease of the gpupool agent on node node-a must be held by gpupool-agent/node-a")))
	g.Expect(apierrors.IsForbidden(agentA.Create(ctx, forged("node-a", v1alpha1.AgentLeaseHolder("node-a"), "default"), client.DryRunAll))).To(BeTrue(),
		"RBAC: Leases in the agent's namespace only")

	// Anyone else, the controller included, is not subject to the policy.
	node := getNode(t, env.Client, "node-c")
	node.Spec.ExpectedLayout = []v1alpha1.GPULayout{{Index: 0}}
	g.Expect(env.Client.Update(ctx, node)).To(Succeed())
}
