package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/nvidia"
)

func gatePlan(name, hash string) *v1.RepartitionPlan {
	return &v1.RepartitionPlan{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.RepartitionPlanSpec{Policy: "pool-a", Hash: hash, Disruptive: true, Steps: []v1.NodeStep{{
			Node: "gpu-1", MIGConfigName: "gpupool-7a7a7a7a7a", GPUs: []v1.GPUChange{{Index: 0, To: v1.ProfileCounts{"7g.141gb": 1}}},
		}}},
	}
}

// TestApprovalGate guards the approval model end to end: a disruptive plan under Manual waits,
// an approval naming another hash is ignored and said so, the plan's own hash approves it, a
// rejection is final, and an unapproved plan expires after planTTL.
func TestApprovalGate(t *testing.T) {
	g := NewWithT(t)
	env, clock := startPlanController(t)
	ctx := context.Background()
	policy := poolPolicy("pool-a", map[string]string{"pool": "nowhere"})
	policy.Spec.Disruption.PlanTTL = &metav1.Duration{Duration: 10 * time.Minute}
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	// The plans' node is in the pool: a plan naming a node outside it is refused outright.
	gpuNode(t, env, "gpu-1", 1, map[string]string{"pool": "nowhere", nvidia.LabelGPUProduct: "NVIDIA-H200"})

	phase := func(p *v1.RepartitionPlan) func(Gomega) v1.PlanPhase {
		return func(g Gomega) v1.PlanPhase {
			got := &v1.RepartitionPlan{}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), got)).To(Succeed())
			return got.Status.Phase
		}
	}
	annotate := func(p *v1.RepartitionPlan, key, value string) {
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), got)).To(Succeed())
		patch := client.MergeFrom(got.DeepCopy())
		if got.Annotations == nil {
			got.Annotations = map[string]string{}
		}
		got.Annotations[key] = value
		g.Expect(env.Client.Patch(ctx, got, patch)).To(Succeed())
	}

	approved := gatePlan("pool-a-approved", "1f3e9a7c00000001")
	createPlan(t, env, approved)
	g.Eventually(phase(approved)).WithTimeout(30 * time.Second).Should(Equal(v1.PlanAwaitingApproval))

	annotate(approved, v1.AnnotationApprove, "deadbeef")
	g.Eventually(func(g Gomega) {
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(approved), got)).To(Succeed())
		c := meta.FindStatusCondition(got.Status.Conditions, controllers.ConditionApproved)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal("ApprovalHashMismatch"))
		g.Expect(c.Message).To(ContainSubstring(`gpupool.io/approve="deadbeef" names another plan's hash`))
		g.Expect(got.Status.Phase).To(Equal(v1.PlanAwaitingApproval), "an approval never carries over to another plan")
	}).WithTimeout(30 * time.Second).Should(Succeed())

	annotate(approved, v1.AnnotationApprove, approved.Spec.Hash)
	g.Eventually(func(g Gomega) {
		got := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(approved), got)).To(Succeed())
		g.Expect(got.Status.Approved).To(BeTrue())
		g.Expect(got.Status.ApprovedTime).NotTo(BeNil())
		// Past the gate the plan is revalidated; its node does not exist in this test, so it is
		// cancelled before any disruption. The gate's part is that it got past.
		g.Expect(got.Status.Phase).To(BeElementOf(v1.PlanApproved, v1.PlanExecuting, v1.PlanSuperseded))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	rejected := gatePlan("pool-a-rejected", "1f3e9a7c00000002")
	createPlan(t, env, rejected)
	annotate(rejected, v1.AnnotationReject, "not during the training run")
	g.Eventually(phase(rejected)).WithTimeout(30 * time.Second).Should(Equal(v1.PlanRejected))
	annotate(rejected, v1.AnnotationApprove, rejected.Spec.Hash)
	g.Consistently(phase(rejected)).WithTimeout(2*time.Second).WithPolling(250*time.Millisecond).
		Should(Equal(v1.PlanRejected), "a rejection is final")

	expiring := gatePlan("pool-a-expiring", "1f3e9a7c00000003")
	createPlan(t, env, expiring)
	g.Eventually(phase(expiring)).WithTimeout(30 * time.Second).Should(Equal(v1.PlanAwaitingApproval))
	clock.Step(11 * time.Minute)
	// The controller's wake-up runs on real time; any event makes it look at the new time.
	annotate(expiring, "team.example.com/nudge", "1")
	g.Eventually(phase(expiring)).WithTimeout(30 * time.Second).Should(Equal(v1.PlanExpired))
}
