package admission_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/gpupool/gpupool/internal/testenv"
)

// TestSamplesApplyWithTheAdmissionPoliciesInForce guards `kubectl apply -k config/samples` on
// an installed gpupool: it used to list a RepartitionPlan and a GPUNode, which the admission
// policies let only the manager and a node's agent write, so the command failed for everyone.
// It applies what a user creates (the policy); the plan sample stays refused, as it must.
func TestSamplesApplyWithTheAdmissionPoliciesInForce(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, as := startWithAdmission(t)
	admin := as("mallory")

	plan, err := testenv.ReadObjects(filepath.Join(env.RepoRoot, "config", "samples", "gpupool_v1alpha1_repartitionplan.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	// The policies are in force once a cluster admin's plan is refused.
	g.Eventually(func() bool {
		err := admin.Create(ctx, plan[0].DeepCopy())
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
	}).WithTimeout(30*time.Second).Should(BeTrue(), "the plan-authorship policy refuses a plan not made by the manager")

	objs, err := testenv.KustomizationObjects(filepath.Join(env.RepoRoot, "config", "samples"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(objs).NotTo(BeEmpty())
	for _, obj := range objs {
		g.Expect(admin.Create(ctx, obj)).To(Succeed(), "kubectl apply -k config/samples: %s %s", obj.GetKind(), obj.GetName())
	}
}
