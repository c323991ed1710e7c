package pool

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func TestProblems(t *testing.T) {
	base := func() v1alpha1.GPUPoolPolicySpec {
		return v1alpha1.GPUPoolPolicySpec{
			NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{"pool": "a"}},
			Catalog:      []v1alpha1.CatalogEntry{{Product: "NVIDIA-H200", MIGProfiles: []v1alpha1.MIGProfileName{"1g.18gb", "3g.71gb"}}},
		}
	}
	cases := []struct {
		name     string
		mutate   func(*v1alpha1.GPUPoolPolicySpec)
		field    string // "" when the spec has no problem
		message  string
		blocking bool
	}{
		{name: "a valid spec", mutate: func(*v1alpha1.GPUPoolPolicySpec) {}},
		{name: "a selector that selects every node", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.NodeSelector = v1alpha1.PoolSelector{MatchLabels: map[string]string{}}
		}, field: "spec.nodeSelector", message: "selects every node", blocking: true},
		{name: "a selector of only DoesNotExist, stored before the API's rule", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.NodeSelector = v1alpha1.PoolSelector{MatchExpressions: []v1alpha1.PoolSelectorRequirement{{Key: "gpupool.io/off", Operator: "DoesNotExist"}}}
		}, field: "spec.nodeSelector", message: "may select every node", blocking: true},
		{name: "a selector of only the operating system, stored before the API's rule", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.NodeSelector = v1alpha1.PoolSelector{MatchLabels: map[string]string{"kubernetes.io/os": "linux"}}
		}, field: "spec.nodeSelector", message: "may select every node", blocking: true},
		{name: "a selector that does not parse", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.NodeSelector = v1alpha1.PoolSelector{MatchExpressions: []v1alpha1.PoolSelectorRequirement{{Key: "pool", Operator: "Gt"}}}
		}, field: "spec.nodeSelector", message: "cannot be parsed", blocking: true},
		{name: "a label value that does not parse", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.NodeSelector = v1alpha1.PoolSelector{MatchLabels: map[string]string{"pool": "a b"}}
		}, field: "spec.nodeSelector", message: "cannot be parsed", blocking: true},
		{name: "a duration stored before the bounds", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.Disruption.PlanTTL = &metav1.Duration{Duration: 10000 * time.Hour}
		}, field: "spec.disruption.planTTL", message: "outside 1m0s..720h0m0s", blocking: true},
		{name: "zero drain timeout from before the bounds", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.Disruption.DrainTimeout = &metav1.Duration{}
		}, field: "spec.disruption.drainTimeout", message: "outside 1s..168h0m0s", blocking: true},
		{name: "minPendingAge zero is fine", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.Planning.MinPendingAge = &metav1.Duration{}
		}},
		{name: "a profile the product does not have", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.Catalog[0].MIGProfiles = append(s.Catalog[0].MIGProfiles, "3g.40gb")
		}, field: "spec.catalog[0].migProfiles", message: "H200-141GB has no MIG profile 3g.40gb"},
		{name: "an unknown product is the agent's to describe", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.Catalog[0].Product = "NVIDIA-Z9000"
			s.Catalog[0].MIGProfiles = []v1alpha1.MIGProfileName{"2g.33gb"}
		}},
		{name: "MPS the device plugin refuses under the mixed strategy", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.Catalog[0].Sharing = &v1alpha1.SharingCatalog{MPS: &v1alpha1.MPSReplicaChoices{Replicas: []int32{4}}}
		}, field: "spec.catalog[0].sharing.mps", message: "allow spec.catalog[0].sharing.timeSlicing to share them at all"},
		{name: "an entry an earlier one shadows", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.Catalog = []v1alpha1.CatalogEntry{{Product: "H100", AllowWholeGPU: true}, {Product: "H100-NVL", AllowWholeGPU: true}}
		}, field: "spec.catalog[1].product", message: `entry "H100-NVL" is never used`},
		{name: "the more specific entry first shadows nothing", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.Catalog = []v1alpha1.CatalogEntry{{Product: "H100-NVL", AllowWholeGPU: true}, {Product: "H100", AllowWholeGPU: true}}
		}},
		// The planner matches the canonical name on every GPU of a built-in product, so an entry
		// spelling the label of an H100 80GB board never applies after "H100-80GB", though
		// neither name contains the other.
		{name: "an entry an earlier one takes whole under another spelling", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.Catalog = []v1alpha1.CatalogEntry{{Product: "H100-80GB", AllowWholeGPU: true}, {Product: "NVIDIA H100 80GB HBM3", AllowWholeGPU: true}}
		}, field: "spec.catalog[1].product", message: `entry "NVIDIA H100 80GB HBM3" is never used on a GPU gpupool knows: ` +
			`spec.catalog[0] ("H100-80GB") takes every H100-80GB GPU`},
		{name: "an entry whose every product earlier entries take", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.Catalog = []v1alpha1.CatalogEntry{{Product: "H100", AllowWholeGPU: true}, {Product: "NVIDIA-H200", AllowWholeGPU: true},
				{Product: "NVL", AllowWholeGPU: true}}
		}, field: "spec.catalog[2].product", message: `spec.catalog[0] ("H100") takes every H100-94GB GPU`},
		{name: "an entry that still has a product of its own", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.Catalog = []v1alpha1.CatalogEntry{{Product: "NVL", AllowWholeGPU: true}, {Product: "H100", AllowWholeGPU: true}}
		}},
		// "H100" applies to the 80, 94 and 96GB H100s, whose profiles differ: 1g.10gb is only
		// the 80GB's, and the others never use it, which nothing told the user.
		{name: "a profile of one product under a name that several match", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.Catalog = []v1alpha1.CatalogEntry{{Product: "H100", MIGProfiles: []v1alpha1.MIGProfileName{"1g.10gb"}}}
		}, field: "spec.catalog[0].migProfiles", message: `"H100" applies to H100-80GB, H100-94GB, H100-96GB, but MIG profile 1g.10gb ` +
			`exists on H100-80GB only, so it is never used on H100-94GB and H100-96GB: give each product its own entry (such as "H100-80GB")`},
		// "H20" is also a substring of every H200's and GH200's names.
		{name: "a product name inside another product's", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.Catalog = []v1alpha1.CatalogEntry{{Product: "H20", MIGProfiles: []v1alpha1.MIGProfileName{"1g.12gb"}}}
		}, field: "spec.catalog[0].migProfiles", message: "exists on H100-96GB only, so it is never used on H200-141GB and GH200-144GB"},
		{name: "a profile none of the products has", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.Catalog = []v1alpha1.CatalogEntry{{Product: "A100", MIGProfiles: []v1alpha1.MIGProfileName{"1g.18gb"}}}
		}, field: "spec.catalog[0].migProfiles", message: `"A100" applies to A100-40GB, A100-80GB, and none has MIG profile 1g.18gb`},
		{name: "specific entries first leave the general one a single product", mutate: func(s *v1alpha1.GPUPoolPolicySpec) {
			s.Catalog = []v1alpha1.CatalogEntry{{Product: "H100-94GB", MIGProfiles: []v1alpha1.MIGProfileName{"1g.12gb"}},
				{Product: "H100-96GB", MIGProfiles: []v1alpha1.MIGProfileName{"1g.12gb"}},
				{Product: "H100", MIGProfiles: []v1alpha1.MIGProfileName{"1g.10gb", "3g.40gb"}}}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := base()
			tc.mutate(&spec)
			got := Problems(&spec)
			if tc.field == "" {
				if len(got) > 0 {
					t.Fatalf("problems %v, want none", got)
				}
				return
			}
			if len(got) == 0 {
				t.Fatalf("no problem, want %s: %s", tc.field, tc.message)
			}
			p := got[0]
			if p.Field != tc.field || !strings.Contains(p.Message, tc.message) || p.Blocking != tc.blocking {
				t.Errorf("got %+v, want field %s, message containing %q, blocking %t", p, tc.field, tc.message, tc.blocking)
			}
		})
	}
}

func TestBlockingProblemsComeFirst(t *testing.T) {
	spec := v1alpha1.GPUPoolPolicySpec{
		NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{"pool": "a"}},
		Catalog:      []v1alpha1.CatalogEntry{{Product: "NVIDIA-H200", MIGProfiles: []v1alpha1.MIGProfileName{"3g.40gb"}}},
	}
	spec.Planning.StabilizationWindow = &metav1.Duration{Duration: 48 * time.Hour}
	got := Problems(&spec)
	if len(got) != 2 || !got[0].Blocking || got[1].Blocking {
		t.Fatalf("got %v, want the blocking duration problem before the catalog one", got)
	}
	if msg := Message(got, 1); !strings.Contains(msg, "and 1 more") {
		t.Errorf("Message(got, 1) = %q, want it to say how many it left out", msg)
	}
}
