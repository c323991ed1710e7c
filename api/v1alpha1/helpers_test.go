package v1alpha1

import (
	"maps"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPoolSelectorSelects holds the one meaning of pool membership: an empty selector selects
// no node (never the whole cluster), a selector that does not parse selects none either, and
// otherwise the selector matches as a Kubernetes label selector does.
func TestPoolSelectorSelects(t *testing.T) {
	gpu := map[string]string{"pool": "a", "kubernetes.io/os": "linux"}
	cpu := map[string]string{"kubernetes.io/os": "linux"}
	for _, tc := range []struct {
		name     string
		sel      PoolSelector
		empty    bool
		parseErr bool
		gpu, cpu bool
	}{
		{name: "zero value selects nothing", sel: PoolSelector{}, empty: true},
		{name: "empty but non-nil fields select nothing", empty: true,
			sel: PoolSelector{MatchLabels: map[string]string{}, MatchExpressions: []PoolSelectorRequirement{}}},
		{name: "matchLabels", sel: PoolSelector{MatchLabels: map[string]string{"pool": "a"}}, gpu: true},
		{name: "matchLabels of another pool", sel: PoolSelector{MatchLabels: map[string]string{"pool": "b"}}},
		{name: "Exists", gpu: true,
			sel: PoolSelector{MatchExpressions: []PoolSelectorRequirement{{Key: "pool", Operator: metav1.LabelSelectorOpExists}}}},
		{name: "NotIn alone matches what lacks the label", gpu: true, cpu: true,
			sel: PoolSelector{MatchExpressions: []PoolSelectorRequirement{{Key: "pool", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"b"}}}}},
		{name: "labels and expressions both hold",
			sel: PoolSelector{MatchLabels: map[string]string{"pool": "a"},
				MatchExpressions: []PoolSelectorRequirement{{Key: "zone", Operator: metav1.LabelSelectorOpExists}}}},
		{name: "unparsable selects nothing", parseErr: true,
			sel: PoolSelector{MatchExpressions: []PoolSelectorRequirement{{Key: "pool", Operator: metav1.LabelSelectorOpIn}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.sel.IsEmpty(); got != tc.empty {
				t.Errorf("IsEmpty() = %v, want %v", got, tc.empty)
			}
			sel, err := tc.sel.Selector()
			if (err != nil) != tc.parseErr {
				t.Fatalf("Selector() error = %v, want error %v", err, tc.parseErr)
			}
			if err == nil && tc.empty && !sel.Empty() && sel.Matches(nil) {
				t.Errorf("Selector() of an empty selector matches a node without labels")
			}
			if got := tc.sel.Selects(gpu); got != tc.gpu {
				t.Errorf("Selects(gpu node) = %v, want %v", got, tc.gpu)
			}
			if got := tc.sel.Selects(cpu); got != tc.cpu {
				t.Errorf("Selects(cpu node) = %v, want %v", got, tc.cpu)
			}
			if got := tc.sel.Selects(nil); got && (tc.empty || tc.parseErr) {
				t.Errorf("Selects(no labels) = true for a selector that selects nothing")
			}
		})
	}
}

// TestPoolSelectorAsSelectorKeepsKubernetesMeaning pins what validation relies on: AsSelector
// reads an empty selector as Kubernetes does (every node), so pool.Problems can report it.
func TestPoolSelectorAsSelectorKeepsKubernetesMeaning(t *testing.T) {
	sel, err := PoolSelector{}.AsSelector()
	if err != nil || !sel.Empty() {
		t.Fatalf("AsSelector() of an empty selector = %v, %v; want the empty (match-everything) selector", sel, err)
	}
}

// TestGPUStatusProfileCounts holds a GPU report to its profile multiset: one count per
// instance, by the reported name, and an empty (not nil) multiset without instances.
func TestGPUStatusProfileCounts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		instances []string
		want      ProfileCounts
	}{
		{name: "no instance", want: ProfileCounts{}},
		{name: "one of each", instances: []string{"7g.141gb"}, want: ProfileCounts{"7g.141gb": 1}},
		{name: "repeats count", instances: []string{"1g.18gb", "3g.71gb", "1g.18gb", "1g.18gb"},
			want: ProfileCounts{"1g.18gb": 3, "3g.71gb": 1}},
		{name: "attributes are part of the name", instances: []string{"1g.18gb", "1g.18gb+me"},
			want: ProfileCounts{"1g.18gb": 1, "1g.18gb+me": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := GPUStatus{Index: 0}
			for _, p := range tc.instances {
				g.Instances = append(g.Instances, MIGInstance{Profile: p})
			}
			got := g.ProfileCounts()
			if got == nil || !maps.Equal(got, tc.want) {
				t.Errorf("ProfileCounts() = %v, want %v", got, tc.want)
			}
		})
	}
}
