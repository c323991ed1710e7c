package mig

import "testing"

// Every board name the table lists, and the label GPU Feature Discovery writes for it,
// resolves to its own product: the catalog checks read them as that product's GPUs.
func TestProductNamesResolveToTheirProduct(t *testing.T) {
	for _, p := range Products() {
		if len(p.Names) == 0 {
			t.Errorf("%s lists no board name", p.Name)
		}
		for _, n := range p.Names {
			for _, name := range []string{n, ProductLabel(n)} {
				if got, ok := LookupProduct(name); !ok || got != p {
					t.Errorf("LookupProduct(%q) = %v, %t; want %s", name, got, ok, p.Name)
				}
			}
		}
	}
}

func TestProductLabel(t *testing.T) {
	for in, want := range map[string]string{
		"NVIDIA H100 80GB HBM3":   "NVIDIA-H100-80GB-HBM3",
		"NVIDIA A100-SXM4-80GB":   "NVIDIA-A100-SXM4-80GB",
		"  NVIDIA  H200 (NVL)\t":  "NVIDIA-H200-NVL",
		"NVIDIA RTX PRO 6000 1.5": "NVIDIA-RTX-PRO-6000-1.5",
	} {
		if got := ProductLabel(in); got != want {
			t.Errorf("ProductLabel(%q) = %q, want %q", in, got, want)
		}
	}
}
