package admission_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testenv"
)

// agentUser is the node agent's ServiceAccount as config/agent installs it.
const agentUser = "system:serviceaccount:gpupool-agent:gpupool-agent"

// nodeNameKey is the user extra in which pod-bound service-account tokens carry the pod's node
// (k8s.io/apiserver/pkg/authentication/serviceaccount.NodeNameKey).
const nodeNameKey = "authentication.kubernetes.io/node-name"

// startWithAgentPolicies starts an API server with config/agent's admission policies
// installed, as shipped, and returns a client factory acting as a user, with the node-name
// claim of an agent's pod-bound token when node is not empty. Every user here is bound to
// cluster-admin, so that what refuses a request is an admission policy, never RBAC.
func startWithAgentPolicies(t *testing.T) func(user, node string) client.Client {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	env, err := testenv.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	objs, err := testenv.KustomizationObjects(filepath.Join(env.RepoRoot, "config", "agent"))
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, obj := range objs {
		if strings.HasPrefix(obj.GetKind(), "ValidatingAdmissionPolicy") {
			g.Expect(env.Client.Create(ctx, obj)).To(Succeed(), "creating %s %s", obj.GetKind(), obj.GetName())
			names = append(names, obj.GetKind()+" "+obj.GetName())
		}
	}
	g.Expect(names).To(ContainElements("ValidatingAdmissionPolicy gpupool-agent-heartbeat-authorship",
		"ValidatingAdmissionPolicyBinding gpupool-agent-heartbeat-authorship"))
	// (The API server makes kube-node-lease itself.)
	g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpupool-agent"}})).To(Succeed())
	g.Expect(env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "everyone-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "mallory"},
			{Kind: "ServiceAccount", Name: "gpupool-agent", Namespace: "gpupool-agent"}},
	})).To(Succeed())
	return func(user, node string) client.Client {
		cfg := rest.CopyConfig(env.Config)
		// Impersonating a ServiceAccount's user name gives it the ServiceAccount groups too;
		// the extra is what the agent's projected token carries.
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		if node != "" {
			cfg.Impersonate.Extra = map[string][]string{nodeNameKey: {node}}
		}
		c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
		g.Expect(err).NotTo(HaveOccurred())
		return c
	}
}

// heartbeatLease is node's heartbeat Lease as the agent writes it, renewed at renew.
func heartbeatLease(namespace, node string, renew time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: node, Labels: map[string]string{v1.LabelAgentLease: "true"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(v1.AgentLeaseHolder(node)), LeaseDurationSeconds: ptr.To(int32(120)),
			RenewTime: ptr.To(metav1.NewMicroTime(renew))},
	}
}

// TestOnlyTheAgentWritesHeartbeatLeases guards issue 34's forged heartbeat: a user with every
// RBAC right renewed a dead agent's Lease 33 times and kept its node in planning, so the
// planner cordoned and drained on a stale report. Under config/agent's policies nobody but
// the agent's ServiceAccount creates or updates a Lease the manager could take for a
// heartbeat (held by gpupool-agent/<node> or labelled gpupool.io/agent-lease), wherever it
// is; the agent still renews its own, and other Leases are nobody's business here.
func TestOnlyTheAgentWritesHeartbeatLeases(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	as := startWithAgentPolicies(t)
	mallory := as("mallory", "")
	agent := as(agentUser, "gpu-1")
	now := time.Now()

	// The API server enforces a new policy within a second or so: wait until it refuses.
	forged := "mallory may not write the heartbeat Lease gpupool-agent/gpu-1: only the gpupool node agent (" + agentUser + ") renews a node's heartbeat"
	g.Eventually(func() error {
		return mallory.Create(ctx, heartbeatLease("gpupool-agent", "gpu-1", now), client.DryRunAll)
	}).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring(forged)))

	// The holder alone, or the label alone, makes a Lease a heartbeat, in any namespace.
	unlabelled := heartbeatLease("gpupool-agent", "gpu-1", now)
	unlabelled.Labels = nil
	g.Expect(mallory.Create(ctx, unlabelled)).To(MatchError(ContainSubstring(forged)))
	otherHolder := heartbeatLease("gpupool-agent", "gpu-1", now)
	otherHolder.Spec.HolderIdentity = ptr.To("mallory")
	g.Expect(mallory.Create(ctx, otherHolder)).To(MatchError(ContainSubstring(forged)))
	g.Expect(mallory.Create(ctx, heartbeatLease("default", "gpu-1", now))).To(MatchError(ContainSubstring(
		"mallory may not write the heartbeat Lease default/gpu-1")))

	// Leases that are no agent's heartbeat pass, the kubelets' own among them.
	g.Expect(mallory.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "gpupool-agent", Name: "election"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("mallory")}})).To(Succeed())
	g.Expect(mallory.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-node-lease", Name: "gpu-1"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("gpu-1"), RenewTime: ptr.To(metav1.NewMicroTime(now))}})).To(Succeed())

	// The agent on gpu-1 creates and renews its own.
	lease := heartbeatLease("gpupool-agent", "gpu-1", now)
	g.Expect(agent.Create(ctx, lease)).To(Succeed())
	lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now.Add(30 * time.Second)))
	g.Expect(agent.Update(ctx, lease)).To(Succeed(), "the agent renews its heartbeat")

	// The agent goes silent; renewing its Lease for it is refused, patch or update ...
	for i := range 3 {
		got := &coordinationv1.Lease{}
		g.Expect(mallory.Get(ctx, client.ObjectKeyFromObject(lease), got)).To(Succeed())
		patch := client.MergeFrom(got.DeepCopy())
		got.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now.Add(time.Duration(i+2) * time.Minute)))
		g.Expect(mallory.Patch(ctx, got, patch)).To(MatchError(ContainSubstring(forged)), "forged renewal %d", i+1)
		g.Expect(mallory.Update(ctx, got)).To(MatchError(ContainSubstring(forged)), "forged renewal %d", i+1)
	}
	// ... and so is turning it into someone else's first and back.
	got := &coordinationv1.Lease{}
	g.Expect(mallory.Get(ctx, client.ObjectKeyFromObject(lease), got)).To(Succeed())
	got.Labels, got.Spec.HolderIdentity = nil, ptr.To("mallory")
	g.Expect(mallory.Update(ctx, got)).To(MatchError(ContainSubstring(forged)))
	g.Expect(mallory.Get(ctx, client.ObjectKeyFromObject(lease), got)).To(Succeed())
	g.Expect(got.Spec.RenewTime.Time).To(BeTemporally("~", lease.Spec.RenewTime.Time, time.Millisecond), "no forged renewal was stored")

	// Deleting it takes the heartbeat away, which leaves the node out of planning: allowed.
	g.Expect(mallory.Delete(ctx, got)).To(Succeed())

	// A pod-bound token names the node: the agent's own policy keeps it to its node's Lease.
	g.Expect(agent.Create(ctx, heartbeatLease("gpupool-agent", "gpu-2", now))).To(MatchError(ContainSubstring(
		"the gpupool agent on node gpu-1 may only write the GPUNode and the heartbeat Lease named gpu-1, not gpu-2")))
	g.Expect(fmt.Sprint(as(agentUser, "").Create(ctx, heartbeatLease("gpupool-agent", "gpu-1", now)))).To(ContainSubstring(
		"carry no node-name claim"), "the agent's ServiceAccount without a pod-bound token writes no heartbeat either")
}
