package demand

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpupool/gpupool/api/v1alpha1"
)

func TestStandby(t *testing.T) {
	got, err := Standby([]v1alpha1.StandbyShape{
		{Resource: "nvidia.com/mig-1g.10gb", MinFree: 2, Priority: 1},
		{Resource: "nvidia.com/gpu", MinFree: 1, Priority: 5},
		{Resource: "nvidia.com/gpu.shared", MinFree: 4, Priority: 1},
		{Resource: "nvidia.com/mig-3g.40gb", MinFree: 1, Priority: 5},
		{Resource: "nvidia.com/mig-1g.10gb.me", MinFree: 0},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []Shape{
		{Resource: "nvidia.com/gpu", Kind: KindGPU, MinFree: 1, Priority: 5},
		{Resource: "nvidia.com/mig-3g.40gb", Kind: KindMIG, Profile: "3g.40gb", MinFree: 1, Priority: 5},
		{Resource: "nvidia.com/gpu.shared", Kind: KindShared, MinFree: 4, Priority: 1},
		{Resource: "nvidia.com/mig-1g.10gb", Kind: KindMIG, Profile: "1g.10gb", MinFree: 2, Priority: 1},
		{Resource: "nvidia.com/mig-1g.10gb.me", Kind: KindMIG, Profile: "1g.10gb+me"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Standby = %+v\nwant      %+v", got, want)
	}

	got, err = Standby(nil)
	if err != nil || len(got) != 0 {
		t.Errorf("Standby(nil) = %v, %v; want no shapes and no error", got, err)
	}
}

func TestStandbyErrors(t *testing.T) {
	tests := []struct {
		name   string
		shapes []v1alpha1.StandbyShape
		want   []string
	}{{
		name: "duplicate resource",
		shapes: []v1alpha1.StandbyShape{
			{Resource: "nvidia.com/gpu", MinFree: 1}, {Resource: "nvidia.com/mig-1g.10gb", MinFree: 1}, {Resource: "nvidia.com/gpu", MinFree: 2},
		},
		want: []string{`spec.shapes[2].resource "nvidia.com/gpu" repeats spec.shapes[0]: keep one entry per resource`},
	}, {
		name:   "profile spelled with + instead of the resource name's .",
		shapes: []v1alpha1.StandbyShape{{Resource: "nvidia.com/gpu", MinFree: 1}, {Resource: "nvidia.com/mig-1g.10gb+me", MinFree: 1}},
		want:   []string{`spec.shapes[1].resource "nvidia.com/mig-1g.10gb+me" is not a GPU resource: want nvidia.com/gpu, nvidia.com/gpu.shared or nvidia.com/mig-<profile> such as nvidia.com/mig-1g.10gb`},
	}, {
		name:   "not a GPU resource",
		shapes: []v1alpha1.StandbyShape{{Resource: "cpu", MinFree: 1}},
		want:   []string{`spec.shapes[0].resource "cpu" is not a GPU resource`},
	}, {
		name:   "negative numbers",
		shapes: []v1alpha1.StandbyShape{{Resource: "nvidia.com/gpu", MinFree: -1, Priority: -2}},
		want: []string{
			`spec.shapes[0].minFree for "nvidia.com/gpu" is -1: it must be 0 or more`,
			`spec.shapes[0].priority for "nvidia.com/gpu" is -2: it must be 0 or more`,
		},
	}, {
		name: "every problem at once",
		shapes: []v1alpha1.StandbyShape{
			{Resource: "nvidia.com/mig-1g"}, {Resource: "nvidia.com/gpu"}, {Resource: "nvidia.com/gpu"}, {Resource: "nvidia.com/mig-1g"},
		},
		want: []string{`spec.shapes[0].resource "nvidia.com/mig-1g"`, `spec.shapes[2].resource "nvidia.com/gpu" repeats spec.shapes[1]`, `spec.shapes[3].resource "nvidia.com/mig-1g"`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Standby(tt.shapes)
			if err == nil || got != nil {
				t.Fatalf("Standby = %v, %v; want an error and no shapes", got, err)
			}
			if !strings.HasPrefix(err.Error(), "invalid standby shapes: ") {
				t.Errorf("error %q does not say what it is about", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}
