package rightsize_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/rightsize"
)

func TestComputeActivityOf(t *testing.T) {
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	b := types.NamespacedName{Namespace: "ns", Name: "b"}
	c := types.NamespacedName{Namespace: "ns", Name: "c"}
	for _, tc := range []struct {
		name string
		act  rightsize.ComputeActivity
		pods []types.NamespacedName
		want float64 // -1: nil
	}{
		{"not measured", nil, []types.NamespacedName{a}, -1},
		{"pod missing", rightsize.ComputeActivity{b: 0.5}, []types.NamespacedName{a}, -1},
		{"busiest pod wins", rightsize.ComputeActivity{a: 0.2, b: 0.7}, []types.NamespacedName{a, b, c}, 0.7},
		{"zero is measured", rightsize.ComputeActivity{a: 0}, []types.NamespacedName{a}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.act.Of(tc.pods)
			switch {
			case tc.want < 0 && got != nil:
				t.Fatalf("got %v, want nil", *got)
			case tc.want >= 0 && (got == nil || *got != tc.want):
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
