package demand

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupool/gpupool/internal/mig"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		resource string
		kind     Kind
		profile  string
	}{
		{"nvidia.com/gpu", KindGPU, ""},
		{"nvidia.com/gpu.shared", KindShared, ""},
		{"nvidia.com/mig-1g.10gb", KindMIG, "1g.10gb"},
		{"nvidia.com/mig-1g.10gb.me", KindMIG, "1g.10gb+me"},
		{"nvidia.com/mig-3g.71gb", KindMIG, "3g.71gb"},
		{"nvidia.com/mig-7g.141gb", KindMIG, "7g.141gb"},
		{"nvidia.com/mig-1g.10gb.shared", KindShared, "1g.10gb"},
		{"nvidia.com/mig-1g.10gb.me.shared", KindShared, "1g.10gb+me"},
		{"nvidia.com/mig-1g.24gb.me.all", KindMIG, "1g.24gb+me.all"},
		{"nvidia.com/mig-1g.24gb-me", KindMIG, "1g.24gb-me"},
		// Not GPU resources, or misspelled ones the device plugin never advertises.
		{"cpu", "", ""},
		{"memory", "", ""},
		{"pods", "", ""},
		{"amd.com/gpu", "", ""},
		{"nvidia.com/GPU", "", ""},
		{"nvidia.com/gpus", "", ""},
		{"nvidia.com/gpu.sharedx", "", ""},
		{"nvidia.com/mig-", "", ""},
		{"nvidia.com/mig-1g", "", ""},
		{"nvidia.com/mig-1g.10", "", ""},
		{"nvidia.com/mig-0g.10gb", "", ""},
		{"nvidia.com/mig-1g.0gb", "", ""},
		{"nvidia.com/mig-01g.10gb", "", ""},
		{"nvidia.com/mig-1234567g.10gb", "", ""},
		{"nvidia.com/mig-1g.10GB", "", ""},
		{"nvidia.com/mig-1g.10gb+me", "", ""},
		{"nvidia.com/mig-1g.10gb.", "", ""},
		{"nvidia.com/mig-1g.10gb..me", "", ""},
		{"nvidia.com/mig-1g.10gb.Me", "", ""},
		{"nvidia.com/mig-1g.10gbme", "", ""},
		{"nvidia.com/mig-1g.10gb.shared.shared", "", ""},
		{"nvidia.com/mig-1g.10gb.shared.me", "", ""},
		{"mig-1g.10gb", "", ""},
		{"1g.10gb", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.resource, func(t *testing.T) {
			kind, profile, ok := Classify(corev1.ResourceName(tt.resource))
			if ok != (tt.kind != "") || kind != tt.kind || profile != tt.profile {
				t.Errorf("Classify(%q) = %q, %q, %v; want %q, %q, %v", tt.resource, kind, profile, ok, tt.kind, tt.profile, tt.kind != "")
			}
		})
	}
}

// FuzzClassify checks that whatever Classify accepts maps back to exactly the resource it came
// from, so the planner can turn a profile it creates into the resource name pods ask for.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{
		"nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb.me", "nvidia.com/mig-2g.35gb.shared",
		"nvidia.com/mig-1g.24gb.me.all", "nvidia.com/mig-1g.24gb-me", "nvidia.com/mig-1g.10gb+me", "cpu", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		res := corev1.ResourceName(s)
		kind, profile, ok := Classify(res)
		if !ok {
			if kind != "" || profile != "" {
				t.Fatalf("Classify(%q) rejected it but returned %q, %q", s, kind, profile)
			}
			return
		}
		var back string
		switch {
		case kind == KindGPU && profile == "":
			back = string(ResourceGPU)
		case kind == KindShared && profile == "":
			back = string(ResourceSharedGPU)
		case kind == KindMIG && profile != "":
			back = mig.ResourceName(profile)
		case kind == KindShared:
			back = mig.ResourceName(profile) + ".shared"
		default:
			t.Fatalf("Classify(%q) = %q, %q: no such combination", s, kind, profile)
		}
		if back != s {
			t.Fatalf("Classify(%q) = %q, %q, which spells %q", s, kind, profile, back)
		}
		if p, ok := mig.ProfileFromResource(back); profile != "" && (!ok || p != profile) && kind == KindMIG {
			t.Fatalf("profile %q of %q does not round-trip through the mig package: %q, %v", profile, s, p, ok)
		}
	})
}
