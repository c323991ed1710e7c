package admission_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/testenv"
)

// managerUser is the manager's ServiceAccount as config/base installs it.
const managerUser = "system:serviceaccount:gpupool-system:gpupool-manager"

// startWithAdmission starts an API server with the policies of config/admission installed and
// returns a client factory that impersonates a user. Every user here is bound to cluster-admin,
// so that what refuses a request is the admission policy, never RBAC.
func startWithAdmission(t *testing.T) (*testenv.Env, func(user string) client.Client) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	env, err := testenv.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	objs, err := testenv.KustomizationObjects(filepath.Join(env.RepoRoot, "config", "admission"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(objs).To(HaveLen(8), "four policies and their bindings")
	for _, obj := range objs {
		g.Expect(env.Client.Create(ctx, obj)).To(Succeed(), "creating %s %s", obj.GetKind(), obj.GetName())
	}
	g.Expect(env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "everyone-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "mallory"},
			{Kind: "ServiceAccount", Name: "gpupool-manager", Namespace: "gpupool-system"}},
	})).To(Succeed())
	return env, func(user string) client.Client {
		cfg := rest.CopyConfig(env.Config)
		// Impersonating a ServiceAccount's user name gives it the ServiceAccount groups too.
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
		g.Expect(err).NotTo(HaveOccurred())
		return c
	}
}

func authoredPlan(name string) *v1.RepartitionPlan {
	return &v1.RepartitionPlan{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.RepartitionPlanSpec{Policy: "pool-a", Hash: "1f3e9a7c", Steps: []v1.NodeStep{{
			Node: "gpu-node-1", GPUs: []v1.GPUChange{{Index: 0, To: v1.ProfileCounts{"7g.141gb": 1}}},
		}}},
	}
}

// TestOnlyTheManagerCreatesPlansAndWritesTheirStatus guards the trust boundary at the API: a
// user with every RBAC right, but who is not gpupool's manager, can neither create a
// RepartitionPlan nor write its status (where "Approved" lives), while the manager can.
func TestOnlyTheManagerCreatesPlansAndWritesTheirStatus(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	_, as := startWithAdmission(t)

	// The API server enforces a new policy within a second or so: wait until it refuses.
	attempt := 0
	g.Eventually(func() error {
		attempt++
		return as("mallory").Create(ctx, authoredPlan(fmt.Sprintf("forged-%d", attempt)))
	}).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring(
		"mallory may not create RepartitionPlans: only gpupool's manager (" + managerUser + ") makes plans")))

	plan := authoredPlan("by-the-manager")
	g.Expect(as(managerUser).Create(ctx, plan)).To(Succeed())

	forge := func(c client.Client) error {
		got := &v1.RepartitionPlan{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(plan), got); err != nil {
			return err
		}
		got.Status.Phase, got.Status.Approved = v1.PlanApproved, true
		return c.Status().Update(ctx, got)
	}
	err := forge(as("mallory"))
	g.Expect(err).To(MatchError(ContainSubstring("mallory may not write the status of RepartitionPlan by-the-manager")))
	got := &v1.RepartitionPlan{}
	g.Expect(as("mallory").Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
	g.Expect(got.Status.Phase).To(BeEmpty(), "the forged phase was not stored")

	g.Expect(forge(as(managerUser))).To(Succeed(), "the manager records a plan's progress")

	// Asking the plan controller to supersede a plan is the manager's too; other annotations
	// are RBAC's business.
	annotate := func(c client.Client, key, value string) error {
		got := &v1.RepartitionPlan{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(plan), got); err != nil {
			return err
		}
		patch := client.MergeFrom(got.DeepCopy())
		metav1.SetMetaDataAnnotation(&got.ObjectMeta, key, value)
		return c.Patch(ctx, got, patch)
	}
	g.Expect(annotate(as("mallory"), v1.AnnotationSupersede, "because")).To(MatchError(ContainSubstring(
		"mallory may not set gpupool.io/supersede on RepartitionPlan by-the-manager")))
	g.Expect(annotate(as("mallory"), "example.com/note", "reviewed")).To(Succeed(), "other annotations are not the policy's business")
	g.Expect(annotate(as(managerUser), v1.AnnotationSupersede, "superseded by a new plan")).To(Succeed())
	g.Expect(annotate(as("mallory"), v1.AnnotationSupersede, "something else")).To(MatchError(ContainSubstring("may not set gpupool.io/supersede")),
		"nor change the manager's")
	g.Expect(as("mallory").Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
	g.Expect(as("mallory").Delete(ctx, got)).To(Succeed(), "people may still delete a plan to cancel it")
}

// TestManagerMayChangeOnlyWhatAPlanNeedsOnANode guards the node-write policy: the manager may
// cordon, annotate under gpupool.io/, set the two GPU Operator labels and drop mig-manager's
// stale state label, and nothing else; other users are not this policy's business.
func TestManagerMayChangeOnlyWhatAPlanNeedsOnANode(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, as := startWithAdmission(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-1",
		Labels:      map[string]string{"pool": "a", nvidia.LabelMIGConfigState: "success", nvidia.LabelMIGConfig: "all-1g.18gb"},
		Annotations: map[string]string{"team.example.com/owner": "ml"}}}
	g.Expect(env.Client.Create(ctx, node)).To(Succeed())

	edit := nodeEditor(ctx, node, as)
	attempt := 0
	taint := func(n *corev1.Node) {
		// A new key each time: a try that slipped through before the policy was active must
		// not make the next one a duplicate.
		attempt++
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: fmt.Sprintf("evil-%d", attempt), Effect: corev1.TaintEffectNoSchedule})
	}
	g.Eventually(func() error { return edit(managerUser, taint) }).WithTimeout(30 * time.Second).
		Should(MatchError(ContainSubstring("may change only spec.unschedulable")))

	refused := map[string]func(*corev1.Node){
		"another label":           func(n *corev1.Node) { n.Labels["pool"] = "b" },
		"a new label":             func(n *corev1.Node) { n.Labels["nvidia.com/gpu.deploy.device-plugin"] = "false" },
		"the state label's value": func(n *corev1.Node) { n.Labels[nvidia.LabelMIGConfigState] = "failed" },
		"another annotation":      func(n *corev1.Node) { n.Annotations["team.example.com/owner"] = "me" },
		"an owner reference": func(n *corev1.Node) {
			n.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "u"}}
		},
	}
	for what, change := range refused {
		g.Expect(edit(managerUser, change)).To(MatchError(ContainSubstring("gpupool's manager may")), "changing %s", what)
	}

	g.Expect(edit(managerUser, func(n *corev1.Node) {
		n.Spec.Unschedulable = true
		n.Annotations[v1.AnnotationCordonedBy] = "pool-a-20261201-0a1b2c3d"
		n.Labels[nvidia.LabelMIGConfig] = "gpupool-0123456789"
		n.Labels[nvidia.LabelDevicePluginConfig] = "gpupool-ts-4"
		delete(n.Labels, nvidia.LabelMIGConfigState)
	})).To(Succeed(), "what a plan step does")
	g.Expect(edit("mallory", taint)).To(Succeed(), "other users are left to RBAC")
}

// TestOnlyTheManagerRecordsCordons guards cordon provenance at the API: a user with every RBAC
// right cannot write a gpupool.io/ annotation on a node (so cannot make gpupool take an
// admin's cordon for its own), nor write or delete gpupool's cordon ledger; the manager may
// flip spec.unschedulable only together with its cordon mark.
func TestOnlyTheManagerRecordsCordons(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, as := startWithAdmission(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-1", Labels: map[string]string{"pool": "a"},
		Annotations: map[string]string{"team.example.com/owner": "ml"}}}
	g.Expect(env.Client.Create(ctx, node)).To(Succeed())
	edit := nodeEditor(ctx, node, as)
	attempt := 0
	forge := func(n *corev1.Node) {
		// A new value each time: a try that slipped through before the policy was active must
		// not make the next one a no-op.
		attempt++
		n.Spec.Unschedulable = true
		n.Annotations[v1.AnnotationCordonedBy] = fmt.Sprintf("pool-a-20261201-never-%d", attempt)
	}
	g.Eventually(func() error { return edit("mallory", forge) }).WithTimeout(30 * time.Second).
		Should(MatchError(ContainSubstring("mallory may not add, change or remove gpupool.io/ annotations on node gpu-node-1")))
	g.Expect(edit(managerUser, func(n *corev1.Node) { delete(n.Annotations, v1.AnnotationCordonedBy) })).To(Succeed(),
		"(undo what slipped through before the policy was active)")
	g.Expect(edit("mallory", func(n *corev1.Node) { n.Spec.Unschedulable = false })).To(Succeed(), "a plain cordon is RBAC's business")
	g.Expect(edit("mallory", func(n *corev1.Node) { n.Spec.Unschedulable = true })).To(Succeed())
	g.Expect(edit("mallory", func(n *corev1.Node) { n.Annotations["team.example.com/owner"] = "me" })).To(Succeed())

	g.Expect(edit(managerUser, func(n *corev1.Node) { n.Spec.Unschedulable = false })).To(MatchError(ContainSubstring(
		"may cordon or uncordon only a node it marks")), "the manager never flips a cordon it does not mark")
	g.Expect(edit(managerUser, func(n *corev1.Node) {
		n.Annotations[v1.AnnotationCordonedBy] = "pool-a-20261201-0a1b2c3d"
		n.Annotations[v1.AnnotationWasUnschedulable] = "true"
	})).To(Succeed(), "the manager marks a node someone else cordoned")
	g.Expect(edit("mallory", func(n *corev1.Node) { delete(n.Annotations, v1.AnnotationWasUnschedulable) })).To(MatchError(
		ContainSubstring("may not add, change or remove gpupool.io/ annotations")), "nor may anyone erase that the cordon was theirs")
	g.Expect(edit(managerUser, func(n *corev1.Node) {
		delete(n.Annotations, v1.AnnotationCordonedBy)
		delete(n.Annotations, v1.AnnotationWasUnschedulable)
	})).To(Succeed(), "the manager drops its mark, leaving someone else's cordon")

	ledger := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gpupool-cordons"},
		Data: map[string]string{"gpu-node-1": `{"plan":"pool-a-20261201-never"}`}}
	g.Expect(as("mallory").Create(ctx, ledger.DeepCopy())).To(MatchError(ContainSubstring(
		"mallory may not write or delete ConfigMap gpupool-cordons")))
	g.Expect(as(managerUser).Create(ctx, ledger.DeepCopy())).To(Succeed())
	got := &corev1.ConfigMap{}
	g.Expect(as("mallory").Get(ctx, client.ObjectKeyFromObject(ledger), got)).To(Succeed(), "reading is RBAC's business")
	got.Data["gpu-node-2"] = `{"plan":"x"}`
	g.Expect(as("mallory").Update(ctx, got)).To(MatchError(ContainSubstring("may not write or delete ConfigMap gpupool-cordons")))
	g.Expect(as("mallory").Delete(ctx, got)).To(MatchError(ContainSubstring("may not write or delete ConfigMap gpupool-cordons")))
	g.Expect(as("mallory").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "other"}})).
		To(Succeed(), "other ConfigMaps are not the policy's business")
}

// nodeEditor patches node as a user with what change does to the node as read.
func nodeEditor(ctx context.Context, node *corev1.Node, as func(string) client.Client) func(string, func(*corev1.Node)) error {
	return func(user string, change func(*corev1.Node)) error {
		got := &corev1.Node{}
		if err := as(user).Get(ctx, client.ObjectKeyFromObject(node), got); err != nil {
			return err
		}
		patch := client.MergeFrom(got.DeepCopy())
		change(got)
		return as(user).Patch(ctx, got, patch)
	}
}
