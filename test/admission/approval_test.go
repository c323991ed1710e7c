// Package admission_test checks the admission policies gpupool ships, as the files in config/
// are, against a real kube-apiserver.
package admission_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testenv"
)

// TestOnlyApproversMayApproveOrRejectPlans guards the approval model: approving disruption is
// an authorised decision (the custom verb "approve"), not merely the right to edit a plan, and
// who made it is written by the API server, never by the client (issue 35, audit).
func TestOnlyApproversMayApproveOrRejectPlans(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, err := testenv.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })

	objs, err := testenv.KustomizationObjects(filepath.Join(env.RepoRoot, "config", "approval"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(objs).To(HaveLen(7), "the approver role, two validating policies, the decision-author policy and their bindings")
	for _, obj := range objs {
		g.Expect(env.Client.Create(ctx, obj)).To(Succeed(), "creating %s %s", obj.GetKind(), obj.GetName())
	}

	// editor may edit plans but not approve them; approver holds the shipped ClusterRole.
	editor := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "plan-editor"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"gpupool.io"}, Resources: []string{"repartitionplans"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch"}}},
	}
	g.Expect(env.Client.Create(ctx, editor)).To(Succeed())
	for user, role := range map[string]string{"editor": "plan-editor", "approver": "gpupool-plan-approver"} {
		g.Expect(env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
		})).To(Succeed())
	}
	as := func(user string) client.Client {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
		g.Expect(err).NotTo(HaveOccurred())
		return c
	}

	plan := &v1.RepartitionPlan{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-a-20261129-1f3e9a7c"},
		Spec: v1.RepartitionPlanSpec{Policy: "pool-a", Hash: "1f3e9a7c", Steps: []v1.NodeStep{{
			Node: "gpu-node-1", GPUs: []v1.GPUChange{{Index: 0, To: v1.ProfileCounts{"7g.141gb": 1}}},
		}}},
	}
	g.Expect(env.Client.Create(ctx, plan)).To(Succeed())

	annotate := func(c client.Client, key, value string) error {
		latest := &v1.RepartitionPlan{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(plan), latest); err != nil {
			return err
		}
		patch := client.MergeFrom(latest.DeepCopy())
		if latest.Annotations == nil {
			latest.Annotations = map[string]string{}
		}
		latest.Annotations[key] = value
		return c.Patch(ctx, latest, patch)
	}

	// The API server starts enforcing a new policy within a second or so: wait until it
	// refuses. Each try sets a new value, so a try that slipped through before the policy was
	// active cannot make the next one a no-op change.
	attempt := 0
	g.Eventually(func() error {
		attempt++
		return annotate(as("editor"), v1.AnnotationApprove, fmt.Sprintf("try-%d", attempt))
	}).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring(
		`editor may not approve or reject RepartitionPlan pool-a-20261129-1f3e9a7c`)))
	err = annotate(as("editor"), v1.AnnotationReject, "not now")
	g.Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "want a refusal, got %v", err)
	g.Expect(err.Error()).To(ContainSubstring(`needs the "approve" verb`))

	g.Expect(annotate(as("editor"), "team.example.com/owner", "ml-platform")).To(Succeed(),
		"other annotations are RBAC's business only")
	// The API server names the approver (the mutating policy may start a moment after the
	// validating ones: each try sets a new value, which it stamps once active).
	g.Eventually(func(g Gomega) {
		attempt++
		g.Expect(annotate(as("approver"), v1.AnnotationApprove, fmt.Sprintf("try-%d", attempt))).To(Succeed())
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		g.Expect(got.Annotations).To(HaveKeyWithValue(v1.AnnotationApprovedBy, "approver"))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(annotate(as("approver"), v1.AnnotationApprove, "1f3e9a7c")).To(Succeed())
	// Nobody writes the author by hand: not an approver naming someone else, not an editor.
	err = annotate(as("approver"), v1.AnnotationApprovedBy, "someone-else")
	g.Expect(err).To(MatchError(ContainSubstring("approver may not set them by hand")))
	err = annotate(as("editor"), v1.AnnotationRejectedBy, "approver")
	g.Expect(err).To(MatchError(ContainSubstring("editor may not set them by hand")))
	// Even alongside a decision, the name stamped is the requester's.
	latest := &v1.RepartitionPlan{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), latest)).To(Succeed())
	patch := client.MergeFrom(latest.DeepCopy())
	latest.Annotations[v1.AnnotationReject] = "not now"
	latest.Annotations[v1.AnnotationRejectedBy] = "someone-else"
	g.Expect(as("approver").Patch(ctx, latest, patch)).To(Succeed())

	got := &v1.RepartitionPlan{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
	g.Expect(got.Annotations).To(HaveKeyWithValue(v1.AnnotationApprove, "1f3e9a7c"))
	g.Expect(got.Annotations).To(HaveKeyWithValue(v1.AnnotationApprovedBy, "approver"))
	g.Expect(got.Annotations).To(HaveKeyWithValue(v1.AnnotationRejectedBy, "approver"))
	g.Expect(got.Annotations).To(HaveKeyWithValue("team.example.com/owner", "ml-platform"))

	// Creating a plan that is approved from birth needs the verb too.
	born := plan.DeepCopy()
	born.ResourceVersion = ""
	born.Name = "pre-approved"
	born.Annotations = map[string]string{v1.AnnotationApprove: "1f3e9a7c"}
	err = as("editor").Create(ctx, born)
	g.Expect(err).To(MatchError(ContainSubstring("editor may not approve or reject RepartitionPlan pre-approved")))
}
