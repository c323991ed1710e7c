package admission_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testenv"
)

// loosenablePolicy is a Manual policy with every bound at its default but set explicitly, so
// that each case below changes one thing.
func loosenablePolicy(name string) *v1.GPUPoolPolicy {
	return &v1.GPUPoolPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.GPUPoolPolicySpec{
			NodeSelector: v1.PoolSelector{MatchLabels: map[string]string{"pool": name}},
			Catalog:      []v1.CatalogEntry{{Product: "NVIDIA-H200", MIGProfiles: []v1.MIGProfileName{"1g.18gb", "3g.71gb"}}},
			Disruption: v1.DisruptionPolicy{
				Approval:                  v1.ApprovalManual,
				MaxDisruptedNodes:         ptr.To(intstr.FromInt32(2)),
				MaxReconfiguringNodes:     ptr.To(intstr.FromString("50%")),
				MaxDisruptiveStepsPerHour: ptr.To(int32(20)),
			},
			Planning: v1.PlanningPolicy{StabilizationWindow: &metav1.Duration{Duration: 2 * time.Minute}},
		},
	}
}

// TestLooseningAPolicyNeedsTheApproveVerb guards the approval model against its side door:
// whoever may edit GPUPoolPolicies but holds no "approve" verb on repartitionplans may tighten
// a policy, never loosen it (a policy switched to Auto would approve the plan waiting for a
// human; eviction switches, larger budgets and unpausing widen what runs without one). An
// approver may do both.
func TestLooseningAPolicyNeedsTheApproveVerb(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, err := testenv.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })

	objs, err := testenv.KustomizationObjects(filepath.Join(env.RepoRoot, "config", "approval"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, obj := range objs {
		g.Expect(env.Client.Create(ctx, obj)).To(Succeed(), "creating %s %s", obj.GetKind(), obj.GetName())
	}
	editor := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "policy-editor"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"gpupool.io"}, Resources: []string{"gpupoolpolicies", "gpupoolpolicies/status"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch"}}},
	}
	g.Expect(env.Client.Create(ctx, editor)).To(Succeed())
	for name, b := range map[string][2]string{
		"editor": {"editor", "policy-editor"}, "approver-edits": {"approver", "policy-editor"},
		"approver-approves": {"approver", "gpupool-plan-approver"},
	} {
		g.Expect(env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b[1]},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: b[0]}},
		})).To(Succeed())
	}
	as := func(user string) client.Client {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
		g.Expect(err).NotTo(HaveOccurred())
		return c
	}
	edit := func(c client.Client, name string, change func(*v1.GPUPoolPolicy)) error {
		p := &v1.GPUPoolPolicy{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
			return err
		}
		change(p)
		return c.Update(ctx, p)
	}

	// The API server starts enforcing a new policy within a second or so: wait until it
	// refuses. The administrator sets the policy back to Manual before each try, so a try that
	// slipped through cannot make the next one a no-op.
	g.Expect(env.Client.Create(ctx, loosenablePolicy("warm-up"))).To(Succeed())
	g.Eventually(func() error {
		if err := edit(env.Client, "warm-up", func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalManual }); err != nil {
			return err
		}
		return edit(as("editor"), "warm-up", func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalAuto })
	}).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring(
		"editor may not set spec.disruption.approval of GPUPoolPolicy warm-up to Auto (it was Manual)")))

	cases := []struct {
		name string
		// before is what the administrator stores; change is the edit tried.
		before, change func(*v1.GPUPoolPolicy)
		// refused names what the refusal says; empty means the edit tightens and is allowed.
		refused string
	}{
		{name: "manual-to-auto", change: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalAuto },
			refused: "may not set spec.disruption.approval of GPUPoolPolicy manual-to-auto to Auto (it was Manual)"},
		{name: "manual-to-autoidle", change: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalAutoIdle },
			refused: "to AutoIdle (it was Manual)"},
		{name: "autoidle-to-auto", before: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalAutoIdle },
			change: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalAuto }, refused: "to Auto (it was AutoIdle)"},
		{name: "unset-to-auto", before: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = "" },
			change: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalAuto }, refused: "to Auto (it was Manual)"},
		{name: "evict-unmanaged", change: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.EvictUnmanaged = true },
			refused: "may not turn on spec.disruption.evictUnmanaged"},
		{name: "evict-emptydir", change: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.EvictEmptyDir = true },
			refused: "may not turn on spec.disruption.evictEmptyDir"},
		{name: "more-disrupted-nodes", change: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.MaxDisruptedNodes = ptr.To(intstr.FromInt32(3)) },
			refused: "may not raise spec.disruption.maxDisruptedNodes of GPUPoolPolicy more-disrupted-nodes from 2 to 3"},
		{name: "disrupted-count-to-percent", change: func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.MaxDisruptedNodes = ptr.To(intstr.FromString("1%"))
		}, refused: "from 2 to 1%"},
		{name: "disrupted-percent-up", before: func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.MaxDisruptedNodes = ptr.To(intstr.FromString("10%"))
		}, change: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.MaxDisruptedNodes = ptr.To(intstr.FromString("20%")) },
			refused: "from 10% to 20%"},
		{name: "disrupted-unset-to-more", before: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.MaxDisruptedNodes = nil },
			change:  func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.MaxDisruptedNodes = ptr.To(intstr.FromInt32(2)) },
			refused: "from 1 to 2"},
		{name: "more-reconfiguring-nodes", change: func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.MaxReconfiguringNodes = ptr.To(intstr.FromString("60%"))
		}, refused: "may not raise spec.disruption.maxReconfiguringNodes of GPUPoolPolicy more-reconfiguring-nodes from 50% to 60%"},
		{name: "reconfiguring-percent-to-count", change: func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.MaxReconfiguringNodes = ptr.To(intstr.FromInt32(1))
		}, refused: "from 50% to 1"},
		{name: "more-steps-per-hour", change: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.MaxDisruptiveStepsPerHour = ptr.To(int32(21)) },
			refused: "may not raise spec.disruption.maxDisruptiveStepsPerHour of GPUPoolPolicy more-steps-per-hour from 20 to 21"},
		{name: "shorter-window", change: func(p *v1.GPUPoolPolicy) {
			p.Spec.Planning.StabilizationWindow = &metav1.Duration{Duration: time.Minute}
		}, refused: "may not shorten spec.planning.stabilizationWindow"},
		{name: "unpause", before: func(p *v1.GPUPoolPolicy) { p.Spec.Planning.Paused = true },
			change: func(p *v1.GPUPoolPolicy) { p.Spec.Planning.Paused = false }, refused: "may not unpause GPUPoolPolicy unpause"},
		{name: "selector-under-autoidle", before: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalAutoIdle },
			change:  func(p *v1.GPUPoolPolicy) { p.Spec.NodeSelector.MatchLabels["zone"] = "b" },
			refused: "may not change spec.nodeSelector of GPUPoolPolicy selector-under-autoidle while its approval is AutoIdle"},
		{name: "new-profile-under-auto", before: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalAuto },
			change: func(p *v1.GPUPoolPolicy) {
				p.Spec.Catalog[0].MIGProfiles = append(p.Spec.Catalog[0].MIGProfiles, "7g.141gb")
			}, refused: "may not widen spec.catalog of GPUPoolPolicy new-profile-under-auto while its approval is Auto"},
		{name: "whole-gpu-under-auto", before: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalAuto },
			change: func(p *v1.GPUPoolPolicy) { p.Spec.Catalog[0].AllowWholeGPU = true }, refused: "may not widen spec.catalog"},
		{name: "new-product-under-auto", before: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalAuto },
			change: func(p *v1.GPUPoolPolicy) {
				p.Spec.Catalog = append(p.Spec.Catalog, v1.CatalogEntry{Product: "NVIDIA-A100", MIGProfiles: []v1.MIGProfileName{"1g.10gb"}})
			}, refused: "may not widen spec.catalog"},

		// Tightening, and edits that widen nothing, are RBAC's business only.
		{name: "auto-to-manual", before: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalAuto },
			change: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalManual }},
		{name: "auto-to-autoidle", before: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalAuto },
			change: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalAutoIdle }},
		{name: "evict-unmanaged-off", before: func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.EvictUnmanaged, p.Spec.Disruption.EvictEmptyDir = true, true
		}, change: func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.EvictUnmanaged, p.Spec.Disruption.EvictEmptyDir = false, false
		}},
		{name: "fewer-disrupted-nodes", change: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.MaxDisruptedNodes = ptr.To(intstr.FromInt32(0)) }},
		{name: "disrupted-percent-down", before: func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.MaxDisruptedNodes = ptr.To(intstr.FromString("20%"))
		}, change: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.MaxDisruptedNodes = ptr.To(intstr.FromString("5%")) }},
		{name: "fewer-reconfiguring-nodes", change: func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.MaxReconfiguringNodes = ptr.To(intstr.FromString("10%"))
		}},
		{name: "fewer-steps-per-hour", change: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.MaxDisruptiveStepsPerHour = ptr.To(int32(5)) }},
		{name: "longer-window", change: func(p *v1.GPUPoolPolicy) {
			p.Spec.Planning.StabilizationWindow = &metav1.Duration{Duration: 10 * time.Minute}
		}},
		{name: "pause", change: func(p *v1.GPUPoolPolicy) { p.Spec.Planning.Paused = true }},
		{name: "selector-under-manual", change: func(p *v1.GPUPoolPolicy) { p.Spec.NodeSelector.MatchLabels["zone"] = "b" }},
		{name: "fewer-profiles-under-auto", before: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalAuto },
			change: func(p *v1.GPUPoolPolicy) { p.Spec.Catalog[0].MIGProfiles = p.Spec.Catalog[0].MIGProfiles[:1] }},
		{name: "other-fields-under-auto", before: func(p *v1.GPUPoolPolicy) { p.Spec.Disruption.Approval = v1.ApprovalAuto },
			change: func(p *v1.GPUPoolPolicy) {
				p.Spec.Disruption.PlanTTL = &metav1.Duration{Duration: 2 * time.Hour}
				p.Spec.Shapes = []v1.StandbyShape{{Resource: "nvidia.com/mig-1g.18gb", MinFree: 2}}
				p.Labels = map[string]string{"team": "ml"}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := loosenablePolicy(tc.name)
			if tc.before != nil {
				tc.before(p)
			}
			g.Expect(env.Client.Create(ctx, p)).To(Succeed())
			err := edit(as("editor"), tc.name, tc.change)
			if tc.refused == "" {
				g.Expect(err).NotTo(HaveOccurred(), "tightening needs no approve verb")
				return
			}
			g.Expect(err).To(HaveOccurred(), "an editor without the approve verb loosened the policy")
			g.Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "want a refusal, got %v", err)
			g.Expect(err.Error()).To(ContainSubstring("editor may not"))
			g.Expect(err.Error()).To(ContainSubstring(tc.refused))
			g.Expect(err.Error()).To(ContainSubstring(`needs the "approve" verb on repartitionplans`))
			g.Expect(err.Error()).To(ContainSubstring("ClusterRole gpupool-plan-approver"))
			g.Expect(edit(as("approver"), tc.name, tc.change)).To(Succeed(), "an approver may loosen the policy")
		})
	}

	t.Run("create", func(t *testing.T) {
		g := NewWithT(t)
		auto := loosenablePolicy("born-auto")
		auto.Spec.Disruption.Approval = v1.ApprovalAuto
		g.Expect(as("editor").Create(ctx, auto)).To(MatchError(ContainSubstring(
			"editor may not set spec.disruption.approval of GPUPoolPolicy born-auto to Auto: ")))
		evicting := loosenablePolicy("born-evicting")
		evicting.Spec.Disruption.EvictEmptyDir = true
		g.Expect(as("editor").Create(ctx, evicting)).To(MatchError(ContainSubstring(
			"editor may not turn on spec.disruption.evictEmptyDir of GPUPoolPolicy born-evicting")))
		g.Expect(as("editor").Create(ctx, loosenablePolicy("born-manual"))).To(Succeed(),
			"a Manual policy without eviction switches needs no approve verb")
		auto.ResourceVersion = ""
		g.Expect(as("approver").Create(ctx, auto)).To(Succeed())
	})

	t.Run("status", func(t *testing.T) {
		// The manager writes only a policy's status; the subresource is not matched, so a status
		// write never needs the verb (and cannot change the spec).
		g := NewWithT(t)
		p := &v1.GPUPoolPolicy{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "born-manual"}, p)).To(Succeed())
		p.Status.PendingPods = 3
		p.Spec.Disruption.Approval = v1.ApprovalAuto
		g.Expect(as("editor").Status().Update(ctx, p)).To(Succeed())
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: "born-manual"}, p)).To(Succeed())
		g.Expect(p.Spec.Disruption.Approval).To(Equal(v1.ApprovalManual))
		g.Expect(p.Status.PendingPods).To(Equal(int32(3)))
	})

}
