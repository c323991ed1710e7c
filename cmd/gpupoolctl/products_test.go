package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	sigsyaml "sigs.k8s.io/yaml"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/mig"
)

// productSnapshot writes a snapshot of one node with one GPU of the product, MIG enabled and
// empty (mig-parted's all-enabled), a policy whose catalog allows every profile of the
// product, and one pod pending for the profile; it returns the file's path.
func productSnapshot(t *testing.T, p *mig.Product, profile string) string {
	t.Helper()
	node := fixture.GPUHost("gpu-node", p.Name, nil, "pool", "p")
	node.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}
	gpu := fixture.MIGGPU(0, p.Name)
	gpu.PCIDeviceID = "0x" + hex4(p.PCIDeviceIDs[0]) + "10DE"
	report := fixture.Report("gpu-node", gpu)
	report.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "GPUNode"}
	pod := fixture.Pod("team/wants-"+mig.ResourceName(profile)[len(mig.ResourcePrefix):],
		fixture.Unschedulable(fixture.Now.Add(-10*time.Minute)),
		fixture.Requests("cpu", "1", "memory", "1Gi", mig.ResourceName(profile), "1"))
	pod.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	budget := intstr.FromString("100%")
	policy := v1alpha1.GPUPoolPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "GPUPoolPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Generation: 1},
		Spec: v1alpha1.GPUPoolPolicySpec{
			NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{"pool": "p"}},
			Catalog:      []v1alpha1.CatalogEntry{{Product: p.Name}},
			Disruption:   v1alpha1.DisruptionPolicy{Approval: v1alpha1.ApprovalManual, MaxDisruptedNodes: &budget},
		},
	}
	for _, name := range p.ProfileNames() {
		policy.Spec.Catalog[0].MIGProfiles = append(policy.Spec.Catalog[0].MIGProfiles, v1alpha1.MIGProfileName(name))
	}
	list := map[string]any{"apiVersion": "v1", "kind": "List", "items": []any{node, report, pod, policy}}
	data, err := sigsyaml.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "snapshot.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func hex4(v uint16) string {
	const digits = "0123456789ABCDEF"
	return string([]byte{digits[v>>12], digits[v>>8&0xF], digits[v>>4&0xF], digits[v&0xF]})
}

// TestPlansEveryProfileOfEveryProduct is the offline what-if on every GPU of the built-in
// table (every one NVIDIA's published mig-parted config names): a pod pending for any of its
// profiles, the media and graphics variants included, gets a plan whose layout holds that
// profile and is one the product's geometry accepts, with names NVIDIA's parser reads.
func TestPlansEveryProfileOfEveryProduct(t *testing.T) {
	for _, p := range mig.Products() {
		for _, profile := range p.ProfileNames() {
			t.Run(p.Name+"/"+profile, func(t *testing.T) {
				code, out, errOut := invoke(t, "", "plan", "-f", productSnapshot(t, p, profile), "-o", "json",
					"--now", fixture.Now.Format(time.RFC3339))
				if code != exitOK || errOut != "" {
					t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, errOut)
				}
				plans, unserved, _ := decodeOutput(t, out)
				if len(plans) != 1 || len(unserved) != 0 {
					t.Fatalf("%d plans, unserved %+v; want one plan serving the pod", len(plans), unserved)
				}
				spec := plans[0].Spec
				if len(spec.Expected.Pods) != 1 {
					t.Errorf("serves %+v, want the pending pod", spec.Expected.Pods)
				}
				if len(spec.Steps) != 1 || len(spec.Steps[0].GPUs) != 1 {
					t.Fatalf("steps %+v, want one GPU changed", spec.Steps)
				}
				to := mig.Layout{}
				for name, n := range spec.Steps[0].GPUs[0].To {
					if !nvidiaParses(name) {
						t.Errorf("layout names %q, which NVIDIA's profile parser refuses", name)
					}
					to[name] = int(n)
				}
				if !p.Fits(to) || to[profile] < 1 {
					t.Errorf("target layout %s: fits %t, want one that fits and holds %s", to, p.Fits(to), profile)
				}
			})
		}
	}
}

// nvidiaParses is go-nvlib's profile grammar (pkg/nvlib/device/mig_profile.go,
// parseMigProfile): "<g>g.<gb>gb" then either "+" and comma-separated attributes or "-" and
// negated ones, never both; the attributes NVML has are me, me.all and gfx.
func nvidiaParses(name string) bool {
	base, attrs, plus := strings.Cut(name, "+")
	if b, neg, minus := strings.Cut(name, "-"); minus {
		if plus {
			return false
		}
		base, attrs, plus = b, neg, true
	}
	var g, gb int
	if n, err := fmt.Sscanf(base, "%dg.%dgb", &g, &gb); err != nil || n != 2 || base != fmt.Sprintf("%dg.%dgb", g, gb) {
		return false
	}
	if !plus {
		return true
	}
	seen := map[string]bool{}
	for a := range strings.SplitSeq(attrs, ",") {
		if !slices.Contains([]string{"me", "me.all", "gfx"}, a) || seen[a] {
			return false
		}
		seen[a] = true
	}
	return true
}
