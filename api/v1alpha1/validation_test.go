package v1alpha1_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testenv"
)

// validPolicy is a policy the API server accepts; each invalid case breaks one thing in it.
func validPolicy(name string) *v1.GPUPoolPolicy {
	return &v1.GPUPoolPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.GPUPoolPolicySpec{
			NodeSelector: v1.PoolSelector{MatchLabels: map[string]string{"pool": "a"}},
			Catalog: []v1.CatalogEntry{{
				Product:     "NVIDIA-H200",
				MIGProfiles: []v1.MIGProfileName{"1g.18gb", "3g.71gb"},
			}},
			Shapes: []v1.StandbyShape{{Resource: "nvidia.com/mig-1g.18gb", MinFree: 1}},
		},
	}
}

// validPlan is a plan the API server accepts.
func validPlan(name string) *v1.RepartitionPlan {
	return &v1.RepartitionPlan{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.RepartitionPlanSpec{
			Policy: "pool-a",
			Hash:   "1f3e9a7c",
			Steps: []v1.NodeStep{{
				Node:          "gpu-node-1",
				MIGConfigName: "gpupool-6b2d41a0c9",
				GPUs: []v1.GPUChange{{
					Index: 0,
					From:  v1.ProfileCounts{"1g.18gb": 7},
					To:    v1.ProfileCounts{"3g.71gb": 2},
				}},
			}},
		},
	}
}

// placementOpening opens 3g.71gb at memory slices 4-7 of GPU 0, keeping the 1g partitions
// there free.
func placementOpening() *v1.PlacementOpening {
	return &v1.PlacementOpening{
		Driver: "gpu.nvidia.com", GPU: 0, Profile: "3g.71gb", Start: 4, Size: 4,
		Device:   "gpu-0-mig-3g71gb-4-4",
		Claim:    v1.PodReference{Namespace: "team", Name: "trainer-gpu"},
		KeepFree: []string{"gpu-0-mig-1g18gb-4-1", "gpu-0-mig-1g18gb-5-1"},
	}
}

func duration(s string) *metav1.Duration {
	// The API server parses durations itself; the Go value only carries the string through JSON.
	d := &metav1.Duration{}
	Expect(d.UnmarshalJSON([]byte(`"` + s + `"`))).To(Succeed())
	return d
}

// expectInvalid creates obj and expects a 422 whose message names field and says what is wrong.
func expectInvalid(obj client.Object, field, message string) {
	ctx := context.Background()
	err := env.Client.Create(ctx, obj)
	Expect(err).To(HaveOccurred(), "the API server accepted an object that breaks %s", field)
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got: %v", err)
	Expect(err.Error()).To(ContainSubstring(field))
	Expect(err.Error()).To(ContainSubstring(message))
}

var _ = Describe("GPUPoolPolicy validation", func() {
	It("accepts the baseline policy and fills in the documented defaults", func(ctx SpecContext) {
		p := validPolicy("defaults")
		Expect(env.Client.Create(ctx, p)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.Client.Delete(ctx, p)).To(Succeed()) })

		got := &v1.GPUPoolPolicy{}
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), got)).To(Succeed())
		d := got.Spec.Disruption
		Expect(d.Approval).To(Equal(v1.ApprovalManual))
		Expect(*d.MaxDisruptedNodes).To(Equal(intstr.FromInt32(1)))
		Expect(*d.MaxReconfiguringNodes).To(Equal(intstr.FromString("50%")))
		Expect(d.DrainTimeout.Duration.String()).To(Equal("15m0s"))
		Expect(d.ConfigureTimeout.Duration.String()).To(Equal("10m0s"))
		Expect(d.PlanTTL.Duration.String()).To(Equal("1h0m0s"))
		Expect(got.Spec.Planning.MinPendingAge.Duration.String()).To(Equal("30s"))
		Expect(got.Spec.Planning.StabilizationWindow.Duration.String()).To(Equal("2m0s"))
	})

	DescribeTable("accepts a selector with a requirement only some nodes meet",
		func(sel v1.PoolSelector) {
			p := validPolicy("narrow")
			p.Spec.NodeSelector = sel
			Expect(p.Spec.NodeSelector.NarrowsPool()).To(BeTrue(), "the Go rule and the CRD's disagree")
			Expect(env.Client.Create(context.Background(), p)).To(Succeed())
			Expect(env.Client.Delete(context.Background(), p)).To(Succeed())
		},
		Entry("Exists on a pool label", v1.PoolSelector{MatchExpressions: []v1.PoolSelectorRequirement{{Key: "gpupool.io/pool", Operator: "Exists"}}}),
		Entry("In on a pool label, beside DoesNotExist", v1.PoolSelector{MatchExpressions: []v1.PoolSelectorRequirement{
			{Key: "drain", Operator: "DoesNotExist"}, {Key: "pool", Operator: "In", Values: []string{"a", "b"}}}}),
		Entry("named hosts", v1.PoolSelector{MatchExpressions: []v1.PoolSelectorRequirement{
			{Key: "kubernetes.io/hostname", Operator: "In", Values: []string{"gpu-1", "gpu-2"}}}}),
		Entry("one host by matchLabels, beside the operating system", v1.PoolSelector{MatchLabels: map[string]string{
			"kubernetes.io/hostname": "gpu-1", "kubernetes.io/os": "linux"}}),
		Entry("GPU nodes, beside the architecture", v1.PoolSelector{MatchLabels: map[string]string{
			"nvidia.com/gpu.present": "true", "kubernetes.io/arch": "amd64"}}),
	)

	DescribeTable("rejects an invalid policy with a message naming the field",
		func(mutate func(*v1.GPUPoolPolicy), field, message string) {
			p := validPolicy("invalid")
			mutate(p)
			if message == "must select something" {
				Expect(p.Spec.NodeSelector.NarrowsPool()).To(BeFalse(), "the Go rule and the CRD's disagree")
			}
			expectInvalid(p, field, message)
		},
		Entry("unknown approval mode", func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.Approval = "Sometimes"
		}, "spec.disruption.approval", `supported values: "Manual", "AutoIdle", "Auto"`),
		Entry("negative disruption budget", func(p *v1.GPUPoolPolicy) {
			b := intstr.FromInt32(-1)
			p.Spec.Disruption.MaxDisruptedNodes = &b
		}, "spec.disruption.maxDisruptedNodes", "non-negative count or a percentage"),
		Entry("budget percentage over 100%", func(p *v1.GPUPoolPolicy) {
			b := intstr.FromString("150%")
			p.Spec.Disruption.MaxDisruptedNodes = &b
		}, "spec.disruption.maxDisruptedNodes", "non-negative count or a percentage"),
		Entry("budget that is neither a count nor a percentage", func(p *v1.GPUPoolPolicy) {
			b := intstr.FromString("two")
			p.Spec.Disruption.MaxDisruptedNodes = &b
		}, "spec.disruption.maxDisruptedNodes", "non-negative count or a percentage"),
		Entry("reconfiguring budget percentage over 100%", func(p *v1.GPUPoolPolicy) {
			b := intstr.FromString("101%")
			p.Spec.Disruption.MaxReconfiguringNodes = &b
		}, "spec.disruption.maxReconfiguringNodes", "non-negative count or a percentage"),
		Entry("negative reconfiguring budget", func(p *v1.GPUPoolPolicy) {
			b := intstr.FromInt32(-2)
			p.Spec.Disruption.MaxReconfiguringNodes = &b
		}, "spec.disruption.maxReconfiguringNodes", "non-negative count or a percentage"),
		Entry("bad MIG profile name in the catalog", func(p *v1.GPUPoolPolicy) {
			p.Spec.Catalog[0].MIGProfiles = []v1.MIGProfileName{"3g.71"}
		}, "spec.catalog[0].migProfiles[0]", "should match"),
		Entry("duplicate standby shapes for one resource", func(p *v1.GPUPoolPolicy) {
			p.Spec.Shapes = append(p.Spec.Shapes, v1.StandbyShape{Resource: "nvidia.com/mig-1g.18gb", MinFree: 3})
		}, "spec.shapes[1]", "Duplicate value"),
		Entry("duplicate catalog product", func(p *v1.GPUPoolPolicy) {
			p.Spec.Catalog = append(p.Spec.Catalog, p.Spec.Catalog[0])
		}, "spec.catalog[1]", "Duplicate value"),
		Entry("negative duration", func(p *v1.GPUPoolPolicy) {
			p.Spec.Planning.MinPendingAge = duration("-30s")
		}, "spec.planning.minPendingAge", "should match"),
		Entry("shape resource that is no GPU resource", func(p *v1.GPUPoolPolicy) {
			p.Spec.Shapes[0].Resource = "nvidia.com/mig-9g.1gb"
		}, "spec.shapes[0].resource", "should match"),
		Entry("negative standby count", func(p *v1.GPUPoolPolicy) {
			p.Spec.Shapes[0].MinFree = -1
		}, "spec.shapes[0].minFree", "should be greater than or equal to 0"),
		Entry("catalog entry that allows nothing", func(p *v1.GPUPoolPolicy) {
			p.Spec.Catalog[0].MIGProfiles = nil
		}, "spec.catalog[0]", "allow at least one of migProfiles, allowWholeGPU or sharing"),
		Entry("MPS beyond the 48 clients CUDA allows", func(p *v1.GPUPoolPolicy) {
			p.Spec.Catalog[0].Sharing = &v1.SharingCatalog{MPS: &v1.MPSReplicaChoices{Replicas: []int32{64}}}
		}, "spec.catalog[0].sharing.mps.replicas[0]", "should be less than or equal to 48"),
		Entry("time-slicing with a single replica", func(p *v1.GPUPoolPolicy) {
			p.Spec.Catalog[0].Sharing = &v1.SharingCatalog{TimeSlicing: &v1.ReplicaChoices{Replicas: []int32{1}}}
		}, "spec.catalog[0].sharing.timeSlicing.replicas[0]", "should be greater than or equal to 2"),
		Entry("empty node selector that would take every node", func(p *v1.GPUPoolPolicy) {
			p.Spec.NodeSelector = v1.PoolSelector{}
		}, "spec.nodeSelector", "must select something"),
		Entry("matchLabels: {} that would take every node", func(p *v1.GPUPoolPolicy) {
			p.Spec.NodeSelector = v1.PoolSelector{MatchLabels: map[string]string{}}
		}, "spec.nodeSelector", "must select something"),
		Entry("matchExpressions: [] that would take every node", func(p *v1.GPUPoolPolicy) {
			p.Spec.NodeSelector = v1.PoolSelector{MatchExpressions: []v1.PoolSelectorRequirement{}}
		}, "spec.nodeSelector", "must select something"),
		Entry("only DoesNotExist, which every node without the label meets", func(p *v1.GPUPoolPolicy) {
			p.Spec.NodeSelector = v1.PoolSelector{MatchExpressions: []v1.PoolSelectorRequirement{{Key: "gpupool.io/excluded", Operator: "DoesNotExist"}}}
		}, "spec.nodeSelector", "must select something"),
		Entry("only NotIn, which every node without the label meets", func(p *v1.GPUPoolPolicy) {
			p.Spec.NodeSelector = v1.PoolSelector{MatchExpressions: []v1.PoolSelectorRequirement{
				{Key: "pool", Operator: "NotIn", Values: []string{"cpu"}}, {Key: "drain", Operator: "DoesNotExist"}}}
		}, "spec.nodeSelector", "must select something"),
		Entry("only the operating system, which every node has", func(p *v1.GPUPoolPolicy) {
			p.Spec.NodeSelector = v1.PoolSelector{MatchLabels: map[string]string{"kubernetes.io/os": "linux"},
				MatchExpressions: []v1.PoolSelectorRequirement{{Key: "kubernetes.io/arch", Operator: "In", Values: []string{"amd64", "arm64"}}}}
		}, "spec.nodeSelector", "must select something"),
		Entry("only Exists on the hostname, which the kubelet sets on every node", func(p *v1.GPUPoolPolicy) {
			p.Spec.NodeSelector = v1.PoolSelector{MatchExpressions: []v1.PoolSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: "Exists"}}}
		}, "spec.nodeSelector", "must select something"),
		Entry("selector operator Kubernetes does not have", func(p *v1.GPUPoolPolicy) {
			p.Spec.NodeSelector = v1.PoolSelector{MatchExpressions: []v1.PoolSelectorRequirement{{Key: "pool", Operator: "Gt", Values: []string{"1"}}}}
		}, "spec.nodeSelector.matchExpressions[0].operator", `supported values: "In", "NotIn", "Exists", "DoesNotExist"`),
		Entry("In without values", func(p *v1.GPUPoolPolicy) {
			p.Spec.NodeSelector = v1.PoolSelector{MatchExpressions: []v1.PoolSelectorRequirement{{Key: "pool", Operator: "In"}}}
		}, "spec.nodeSelector.matchExpressions[0]", "values must be non-empty for In and NotIn"),
		Entry("Exists with values", func(p *v1.GPUPoolPolicy) {
			p.Spec.NodeSelector = v1.PoolSelector{MatchExpressions: []v1.PoolSelectorRequirement{{Key: "pool", Operator: "Exists", Values: []string{"a"}}}}
		}, "spec.nodeSelector.matchExpressions[0]", "empty for Exists and DoesNotExist"),
		Entry("label key that is no qualified name", func(p *v1.GPUPoolPolicy) {
			p.Spec.NodeSelector = v1.PoolSelector{MatchLabels: map[string]string{"bad key!": "a"}}
		}, "spec.nodeSelector.matchLabels", "label keys must be qualified names"),
		Entry("expression key that is no qualified name", func(p *v1.GPUPoolPolicy) {
			p.Spec.NodeSelector = v1.PoolSelector{MatchExpressions: []v1.PoolSelectorRequirement{{Key: "-pool", Operator: "Exists"}}}
		}, "spec.nodeSelector.matchExpressions[0].key", "should match"),
		Entry("label value too long", func(p *v1.GPUPoolPolicy) {
			p.Spec.NodeSelector = v1.PoolSelector{MatchLabels: map[string]string{"pool": strings.Repeat("a", 64)}}
		}, "spec.nodeSelector.matchLabels", "at most 63 characters"),
		Entry("drainTimeout of zero, which would fail every drain", func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.DrainTimeout = duration("0s")
		}, "spec.disruption.drainTimeout", "must be a duration between 1s and 168h"),
		Entry("configureTimeout beyond a day", func(p *v1.GPUPoolPolicy) {
			p.Spec.Disruption.ConfigureTimeout = duration("25h")
		}, "spec.disruption.configureTimeout", "must be a duration between 1s and 24h"),
		Entry("stabilizationWindow beyond a day", func(p *v1.GPUPoolPolicy) {
			p.Spec.Planning.StabilizationWindow = duration("48h")
		}, "spec.planning.stabilizationWindow", "must be a duration between 0s and 24h"),
	)

	It("accepts minPendingAge: 0s, which plans at once", func(ctx SpecContext) {
		p := validPolicy("at-once")
		p.Spec.Planning.MinPendingAge = duration("0s")
		Expect(env.Client.Create(ctx, p)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.Client.Delete(ctx, p)).To(Succeed()) })
		got := &v1.GPUPoolPolicy{}
		Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), got)).To(Succeed())
		Expect(got.Spec.Planning.MinPendingAge.Duration).To(BeZero(), "zero is kept, not replaced by the default")
	})

	It("accepts the RTX PRO Blackwell's media and graphics variants in catalogs, shapes and plans", func(ctx SpecContext) {
		p := validPolicy("blackwell-variants")
		p.Spec.Catalog = []v1.CatalogEntry{{
			Product:     "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
			MIGProfiles: []v1.MIGProfileName{"1g.24gb+gfx", "2g.48gb-me", "1g.24gb+me.all", "1g.24gb+me,gfx", "4g.96gb"},
		}}
		p.Spec.Shapes = []v1.StandbyShape{
			{Resource: "nvidia.com/mig-1g.24gb.gfx", MinFree: 1},
			{Resource: "nvidia.com/mig-1g.24gb-me", MinFree: 1},
			{Resource: "nvidia.com/mig-1g.24gb.me.all", MinFree: 1},
		}
		Expect(env.Client.Create(ctx, p)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.Client.Delete(ctx, p)).To(Succeed()) })

		plan := validPlan("blackwell-variants")
		plan.Spec.Steps[0].GPUs[0].From = v1.ProfileCounts{"1g.24gb": 4}
		plan.Spec.Steps[0].GPUs[0].To = v1.ProfileCounts{"1g.24gb+me.all": 1, "1g.24gb-me": 3}
		Expect(env.Client.Create(ctx, plan)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.Client.Delete(ctx, plan)).To(Succeed()) })
	})

	DescribeTable("rejects profile attributes NVIDIA's parser does not know",
		func(profile v1.MIGProfileName) {
			p := validPolicy("bad-attribute")
			p.Spec.Catalog[0].MIGProfiles = []v1.MIGProfileName{profile}
			expectInvalid(p, "spec.catalog[0].migProfiles[0]", "should match")
		},
		Entry("unknown attribute", v1.MIGProfileName("1g.24gb+foo")),
		Entry("both + and -", v1.MIGProfileName("1g.24gb+gfx-me")),
		Entry("negated graphics", v1.MIGProfileName("1g.24gb-gfx")),
		Entry("empty attribute", v1.MIGProfileName("1g.24gb+")),
	)

	// kubectl sends whatever a user typed; a Go client could not even encode these values.
	DescribeTable("rejects values typed by hand with a message naming the field",
		func(path []string, value any, field, message string) {
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(validPolicy("invalid"))
			Expect(err).NotTo(HaveOccurred())
			u := &unstructured.Unstructured{Object: obj}
			u.SetGroupVersionKind(v1.GroupVersion.WithKind("GPUPoolPolicy"))
			Expect(unstructured.SetNestedField(u.Object, value, path...)).To(Succeed())
			expectInvalid(u, field, message)
		},
		Entry("malformed duration", []string{"spec", "disruption", "drainTimeout"}, "15 minutes",
			"spec.disruption.drainTimeout", "should match"),
		Entry("duration without a unit", []string{"spec", "planning", "stabilizationWindow"}, "120",
			"spec.planning.stabilizationWindow", "should match"),
		Entry("right-sizing basis that is no statistic gpupool keeps", []string{"spec", "rightsizing", "basis"}, "p50",
			"spec.rightsizing.basis", "Unsupported value"),
		Entry("approval mode in the wrong case", []string{"spec", "disruption", "approval"}, "manual",
			"spec.disruption.approval", `supported values: "Manual", "AutoIdle", "Auto"`),
		// The old pattern accepted it; Go cannot decode it, which once kept the manager's
		// policy informer from ever syncing.
		Entry("planTTL too large for any duration type", []string{"spec", "disruption", "planTTL"}, "9999999999h",
			"spec.disruption.planTTL", "must be a duration between 1m and 720h"),
		Entry("planTTL of a year", []string{"spec", "disruption", "planTTL"}, "8761h",
			"spec.disruption.planTTL", "must be a duration between 1m and 720h"),
	)
})

var _ = Describe("RepartitionPlan validation", func() {
	DescribeTable("rejects an invalid plan with a message naming the field",
		func(mutate func(*v1.RepartitionPlan), field, message string) {
			p := validPlan("invalid")
			mutate(p)
			expectInvalid(p, field, message)
		},
		Entry("no steps", func(p *v1.RepartitionPlan) {
			p.Spec.Steps = nil
		}, "spec.steps", "Required value"),
		Entry("hash that is not hex", func(p *v1.RepartitionPlan) {
			p.Spec.Hash = "not-a-hash"
		}, "spec.hash", "should match"),
		Entry("target layout with an unknown profile", func(p *v1.RepartitionPlan) {
			p.Spec.Steps[0].GPUs[0].To = v1.ProfileCounts{"9g.1": 1}
		}, "spec.steps[0].gpus[0].to", "keys must be MIG profile names"),
		Entry("more instances of a profile than a GPU holds", func(p *v1.RepartitionPlan) {
			p.Spec.Steps[0].GPUs[0].To = v1.ProfileCounts{"1g.18gb": 8}
		}, "spec.steps[0].gpus[0].to", "between 0 and 7"),
		Entry("step that changes nothing", func(p *v1.RepartitionPlan) {
			p.Spec.Steps[0].GPUs = nil
		}, "spec.steps[0]", "changes at least one GPU layout or the sharing config"),
		Entry("sharing None with replicas", func(p *v1.RepartitionPlan) {
			p.Spec.Steps[0].SharingConfig = &v1.SharingConfig{Mode: v1.SharingNone, Replicas: 4}
		}, "spec.steps[0].sharingConfig", "forbidden for None"),
		Entry("two steps for one node", func(p *v1.RepartitionPlan) {
			p.Spec.Steps = append(p.Spec.Steps, p.Spec.Steps[0])
		}, "spec.steps[1]", "Duplicate value"),
		Entry("a plan that evicts but says it is not disruptive", func(p *v1.RepartitionPlan) {
			p.Spec.Steps[0].Evictions = []v1.Eviction{{PodReference: v1.PodReference{Namespace: "team", Name: "infer"}, UID: "u"}}
			p.Spec.Steps[0].Disruptive = true
		}, "spec.disruptive", "disruptive must be true exactly when some step evicts a pod"),
		Entry("a step that evicts but says it is not disruptive", func(p *v1.RepartitionPlan) {
			p.Spec.Steps[0].Evictions = []v1.Eviction{{PodReference: v1.PodReference{Namespace: "team", Name: "infer"}, UID: "u"}}
			p.Spec.Disruptive = true
		}, "spec.steps[0].disruptive", "disruptive must be true exactly when the step evicts a pod"),
		Entry("a disruptive plan that evicts nothing", func(p *v1.RepartitionPlan) {
			p.Spec.Disruptive = true
		}, "spec.disruptive", "disruptive must be true exactly when some step evicts a pod"),
		Entry("a step naming an entry gpupool does not own", func(p *v1.RepartitionPlan) {
			p.Spec.Steps[0].MIGConfigName = "all-disabled"
		}, "spec.steps[0].migConfigName", "should match"),
		Entry("a sharing key gpupool does not own", func(p *v1.RepartitionPlan) {
			p.Spec.Steps[0].SharingConfig = &v1.SharingConfig{Mode: v1.SharingTimeSlicing, Replicas: 4}
			p.Spec.Steps[0].SharingConfigName = "default"
		}, "spec.steps[0].sharingConfigName", "should match"),
		Entry("a placement step that also relabels the node", func(p *v1.RepartitionPlan) {
			p.Spec.Steps[0].Placement = placementOpening()
		}, "spec.steps[0].placement", "a placement step moves claims only"),
		Entry("a placement step that taints the device its claim needs", func(p *v1.RepartitionPlan) {
			p.Spec.Steps[0].MIGConfigName = ""
			p.Spec.Steps[0].Placement = placementOpening()
			p.Spec.Steps[0].Placement.KeepFree = append(p.Spec.Steps[0].Placement.KeepFree, p.Spec.Steps[0].Placement.Device)
		}, "spec.steps[0].placement.keepFree", "the device the pending claim needs is never tainted"),
	)

	It("accepts a placement step that moves a claim on a DynamicMIG node", func(ctx SpecContext) {
		p := validPlan("placement")
		p.Spec.Steps[0].MIGConfigName = ""
		p.Spec.Steps[0].Placement = placementOpening()
		Expect(env.Client.Create(ctx, p)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.Client.Delete(ctx, p)).To(Succeed()) })
	})

	It("refuses any edit of spec once created, but allows status and approval", func(ctx SpecContext) {
		p := validPlan("immutable")
		Expect(env.Client.Create(ctx, p)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.Client.Delete(ctx, p)).To(Succeed()) })

		edited := p.DeepCopy()
		edited.Spec.Steps[0].GPUs[0].To = v1.ProfileCounts{"7g.141gb": 1}
		err := env.Client.Update(ctx, edited)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got: %v", err)
		Expect(err.Error()).To(ContainSubstring("spec"))
		Expect(err.Error()).To(ContainSubstring("spec is immutable"))

		approved := p.DeepCopy()
		approved.Annotations = map[string]string{v1.AnnotationApprove: p.Spec.Hash}
		Expect(env.Client.Update(ctx, approved)).To(Succeed())

		approved.Status.Phase = v1.PlanApproved
		approved.Status.Approved = true
		Expect(env.Client.Status().Update(ctx, approved)).To(Succeed())

		bad := approved.DeepCopy()
		bad.Status.Phase = "Done"
		err = env.Client.Status().Update(ctx, bad)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got: %v", err)
		Expect(err.Error()).To(ContainSubstring("status.phase"))
	})

	It("refuses any change of the approval mode a plan was made under", func(ctx SpecContext) {
		p := validPlan("recorded-mode")
		p.Spec.Approval = v1.ApprovalManual
		Expect(env.Client.Create(ctx, p)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.Client.Delete(ctx, p)).To(Succeed()) })

		loosened := p.DeepCopy()
		loosened.Spec.Approval = v1.ApprovalAuto
		err := env.Client.Update(ctx, loosened)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got: %v", err)
		Expect(err.Error()).To(ContainSubstring("spec.approval"))
		Expect(err.Error()).To(ContainSubstring("approval is immutable"))

		dropped := p.DeepCopy()
		dropped.Spec.Approval = ""
		err = env.Client.Update(ctx, dropped)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "removing the field is a change too, got: %v", err)
		Expect(err.Error()).To(ContainSubstring("spec is immutable"))

		expectInvalid(func() client.Object { q := validPlan("unknown-mode"); q.Spec.Approval = "Always"; return q }(),
			"spec.approval", "Unsupported value")
	})

	It("refuses adding the approval mode to a plan made without one", func(ctx SpecContext) {
		p := validPlan("legacy")
		Expect(env.Client.Create(ctx, p)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.Client.Delete(ctx, p)).To(Succeed()) })
		added := p.DeepCopy()
		added.Spec.Approval = v1.ApprovalAuto
		err := env.Client.Update(ctx, added)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got: %v", err)
		Expect(err.Error()).To(ContainSubstring("spec is immutable"))
	})
})

var _ = Describe("GPUNode validation", func() {
	It("rejects an expected layout with a bad profile name", func() {
		n := &v1.GPUNode{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-x"},
			Spec: v1.GPUNodeSpec{ExpectedLayout: []v1.GPULayout{
				{Index: 0, Profiles: v1.ProfileCounts{"3g": 1}},
			}},
		}
		expectInvalid(n, "spec.expectedLayout[0].profiles", "keys must be MIG profile names")
	})

	It("bounds the agent's usage summaries", func(ctx SpecContext) {
		n := &v1.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-usage"}}
		Expect(env.Client.Create(ctx, n)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.Client.Delete(ctx, n)).To(Succeed()) })
		statusInvalid := func(usage []v1.PodUsage, field, message string) {
			m := n.DeepCopy()
			m.Status.Usage = usage
			err := env.Client.Status().Update(ctx, m)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got: %v", err)
			Expect(err.Error()).To(And(ContainSubstring(field), ContainSubstring(message)))
		}
		statusInvalid([]v1.PodUsage{{Namespace: "a", Name: "p", P95MiB: -1}}, "status.usage[0].p95MiB", "greater than or equal to 0")
		many := make([]v1.PodUsage, 513)
		for i := range many {
			many[i] = v1.PodUsage{Namespace: "a", Name: fmt.Sprintf("p-%d", i)}
		}
		statusInvalid(many, "status.usage", "must have at most 512 items")

		n.Status.Usage = []v1.PodUsage{{Namespace: "a", Name: "p", P50MiB: 9000, P95MiB: 9500, PeakMiB: 10000, CeilingMiB: 72704, Samples: 100, WindowSeconds: 86400}}
		Expect(env.Client.Status().Update(ctx, n)).To(Succeed())
	})
})

var _ = Describe("the samples in config/samples", func() {
	It("are all accepted by the API server", func(ctx SpecContext) {
		dir := filepath.Join(env.RepoRoot, "config", "samples")
		files, err := filepath.Glob(filepath.Join(dir, "gpupool_v1alpha1_*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(files).To(HaveLen(3), "one sample per kind")

		// `kubectl apply -k config/samples` applies what a user creates, the policy; the plan and
		// GPUNode samples document what only gpupool's components may write (test/admission
		// applies the kustomization with the admission policies in force). Every sample still
		// passes the API server's schema, checked here.
		kustomization := readObjects(filepath.Join(dir, "kustomization.yaml"))
		Expect(kustomization).To(HaveLen(1))
		resources, _, err := unstructured.NestedStringSlice(kustomization[0].Object, "resources")
		Expect(err).NotTo(HaveOccurred())
		Expect(resources).To(ConsistOf("gpupool_v1alpha1_gpupoolpolicy.yaml"))

		kinds := map[string]bool{}
		for _, file := range files {
			for _, obj := range readObjects(file) {
				Expect(env.Client.Create(ctx, obj)).To(Succeed(), "creating %s from %s", obj.GetName(), file)
				kinds[obj.GetKind()] = true
				DeferCleanup(func(ctx SpecContext) { Expect(env.Client.Delete(ctx, obj)).To(Succeed()) })
			}
		}
		Expect(kinds).To(HaveKey("GPUPoolPolicy"))
		Expect(kinds).To(HaveKey("RepartitionPlan"))
		Expect(kinds).To(HaveKey("GPUNode"))
	})
})

// readObjects decodes every document of a multi-document YAML file.
func readObjects(file string) []*unstructured.Unstructured {
	objs, err := testenv.ReadObjects(file)
	Expect(err).NotTo(HaveOccurred())
	return objs
}
