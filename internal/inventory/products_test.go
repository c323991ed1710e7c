package inventory_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// h100Profiles is the GPU-instance profile table an agent reads through NVML on an H100 80GB,
// with the memory NVML reports; rename maps built-in names to the ones a driver uses.
func h100Profiles(rename map[string]string) []v1alpha1.GPUInstanceProfile {
	type row struct {
		id          int32
		name        string
		mib         int64
		slices, max int32
		size        int32
		starts      []int32
	}
	rows := []row{
		{4, "7g.80gb", 80384, 7, 1, 8, []int32{0}},
		{3, "4g.40gb", 40192, 4, 1, 4, []int32{0}},
		{2, "3g.40gb", 40192, 3, 2, 4, []int32{0, 4}},
		{1, "2g.20gb", 19968, 2, 3, 2, []int32{0, 2, 4}},
		{9, "1g.20gb", 19968, 1, 4, 2, []int32{0, 2, 4, 6}},
		{0, "1g.10gb", 9856, 1, 7, 1, []int32{0, 1, 2, 3, 4, 5, 6}},
		{7, "1g.10gb+me", 9856, 1, 1, 1, []int32{0, 1, 2, 3, 4, 5, 6}},
	}
	out := make([]v1alpha1.GPUInstanceProfile, len(rows))
	for i, r := range rows {
		name := r.name
		if n, ok := rename[name]; ok {
			name = n
		}
		p := v1alpha1.GPUInstanceProfile{ID: r.id, Name: name, MemoryMiB: r.mib, Slices: r.slices, MaxCount: r.max}
		for _, s := range r.starts {
			p.Placements = append(p.Placements, v1alpha1.SlicePlacement{Start: s, Size: r.size})
		}
		out[i] = p
	}
	return out
}

// unknownGPUProfiles is a profile table for a product the built-in table lacks.
func unknownGPUProfiles() []v1alpha1.GPUInstanceProfile {
	return []v1alpha1.GPUInstanceProfile{
		{ID: 4, Name: "7g.96gb", MemoryMiB: 97280, Slices: 7, MaxCount: 1, Placements: []v1alpha1.SlicePlacement{{Start: 0, Size: 8}}},
		{ID: 2, Name: "3g.48gb", MemoryMiB: 48640, Slices: 3, MaxCount: 2, Placements: []v1alpha1.SlicePlacement{{Start: 0, Size: 4}, {Start: 4, Size: 4}}},
		{ID: 0, Name: "1g.12gb", MemoryMiB: 11776, Slices: 1, MaxCount: 7, Placements: []v1alpha1.SlicePlacement{
			{Start: 0, Size: 1}, {Start: 1, Size: 1}, {Start: 2, Size: 1}, {Start: 3, Size: 1}, {Start: 4, Size: 1}, {Start: 5, Size: 1}, {Start: 6, Size: 1}}},
	}
}

// withProfiles sets the profile table the agent reported for a GPU.
func withProfiles(g v1alpha1.GPUStatus, profiles []v1alpha1.GPUInstanceProfile) v1alpha1.GPUStatus {
	g.Profiles = profiles
	return g
}

// unknownGPU is a fictional product no built-in table matches.
const unknownGPU = "NVIDIA X96 96GB HBM3"

func TestProducts(t *testing.T) {
	tests := []struct {
		name string
		gpu  v1alpha1.GPUStatus
		// label is the node's nvidia.com/gpu.product label; "-" removes it.
		label           string
		wantProductName string
		// wantProduct is the Product's name; "" expects a nil Product.
		wantProduct string
		// wantBuiltin expects the very built-in *mig.Product of that name.
		wantBuiltin bool
		// resolve maps names to the canonical profile Product.Profile must find; "" must fail.
		resolve map[string]string
		// memoryMiB is a profile's expected per-instance memory.
		memoryMiB  map[string]int
		wantLayout mig.Layout
	}{{
		name:            "the report's product name finds the built-in table",
		gpu:             fixture.MIGGPU(0, h100, fixture.Instance("3g.40gb", 0, 4)),
		label:           "NVIDIA-A100-SXM4-40GB", // the report wins over the label
		wantProductName: h100,
		wantProduct:     "H100-80GB",
		wantBuiltin:     true,
		resolve:         map[string]string{"7g.80gb": "7g.80gb", "7g.79gb": "7g.80gb", "1g.5gb": ""},
		wantLayout:      mig.Layout{"3g.40gb": 1},
	}, {
		name:            "no product in the report: the node's GFD label",
		gpu:             fixture.MIGGPU(0, "", fixture.Instance("3g.40gb", 4, 4)),
		wantProductName: h100Label,
		wantProduct:     "H100-80GB",
		wantBuiltin:     true,
		wantLayout:      mig.Layout{"3g.40gb": 1},
	}, {
		name:            "H200 from its NVML name",
		gpu:             fixture.MIGGPU(0, "NVIDIA H200", fixture.Instance("3g.71gb", 0, 4)),
		wantProductName: "NVIDIA H200",
		wantProduct:     "H200-141GB",
		wantBuiltin:     true,
		wantLayout:      mig.Layout{"3g.71gb": 1},
	}, {
		name:            "neither a reported product nor a label",
		gpu:             fixture.MIGGPU(0, "", fixture.Instance("3g.40gb", 0, 4)),
		label:           "-",
		wantProductName: "",
		wantLayout:      mig.Layout{"3g.40gb": 1},
	}, {
		name:            "unknown product: nil Product, instances under their reported names",
		gpu:             fixture.MIGGPU(0, unknownGPU, fixture.Instance("1g.12gb", 0, 1), fixture.Instance("1g.12gb", 1, 1)),
		wantProductName: unknownGPU,
		wantLayout:      mig.Layout{"1g.12gb": 2},
	}, {
		// Some drivers name the H100's whole-GPU profile 7g.79gb: the report is the authority,
		// and the built-in spelling still resolves to it.
		name: "profiles the agent reports override the built-in table",
		gpu: withProfiles(fixture.MIGGPU(0, h100, fixture.Instance("7g.79gb", 0, 8)),
			h100Profiles(map[string]string{"7g.80gb": "7g.79gb"})),
		wantProductName: h100,
		wantProduct:     "H100-80GB",
		resolve: map[string]string{
			"7g.79gb": "7g.79gb", "7g.80gb": "7g.79gb", "7G.80GB": "7g.79gb",
			"3g.40gb": "3g.40gb", "3g.39gb": "3g.40gb", "1g.20gb": "1g.20gb",
			"nvidia.com/mig-1g.10gb.me": "1g.10gb+me", "1g.5gb": "",
		},
		memoryMiB:  map[string]int{"7g.79gb": 80384, "1g.10gb": 9856, "1g.20gb": 19968},
		wantLayout: mig.Layout{"7g.79gb": 1},
	}, {
		name: "an instance in the built-in spelling is read under the driver's name",
		gpu: withProfiles(fixture.MIGGPU(0, h100, fixture.Instance("7g.80gb", 0, 8)),
			h100Profiles(map[string]string{"7g.80gb": "7g.79gb"})),
		wantProductName: h100,
		wantProduct:     "H100-80GB",
		wantLayout:      mig.Layout{"7g.79gb": 1},
	}, {
		name:            "profiles reported for a product the table lacks",
		gpu:             withProfiles(fixture.MIGGPU(0, unknownGPU, fixture.Instance("3g.48gb", 4, 4)), unknownGPUProfiles()),
		wantProductName: unknownGPU,
		wantProduct:     unknownGPU,
		resolve:         map[string]string{"7g.96gb": "7g.96gb", "1g.12gb": "1g.12gb", "7g.80gb": ""},
		memoryMiB:       map[string]int{"3g.48gb": 48640},
		wantLayout:      mig.Layout{"3g.48gb": 1},
	}, {
		name: "a reported table the geometry rejects falls back to the built-in one",
		gpu: withProfiles(fixture.MIGGPU(0, h100, fixture.Instance("7g.80gb", 0, 8)), func() []v1alpha1.GPUInstanceProfile {
			ps := h100Profiles(nil)
			ps[2].Placements = nil // a 3g profile with nowhere to go
			return ps
		}()),
		wantProductName: h100,
		wantProduct:     "H100-80GB",
		wantBuiltin:     true,
		wantLayout:      mig.Layout{"7g.80gb": 1},
	}, {
		name: "a rejected table of an unknown product leaves it unknown",
		gpu: withProfiles(fixture.MIGGPU(0, unknownGPU), func() []v1alpha1.GPUInstanceProfile {
			ps := unknownGPUProfiles()
			ps[1].Placements[1].Size = 2 // sizes of one profile disagree
			return ps
		}()),
		wantProductName: unknownGPU,
		wantLayout:      mig.Layout{},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			host := fixture.GPUHost(nodeA, h100Label, nil)
			switch tc.label {
			case "":
			case "-":
				delete(host.Labels, nvidia.LabelGPUProduct)
			default:
				host.Labels[nvidia.LabelGPUProduct] = tc.label
			}
			snap := inventory.Build([]corev1.Node{host},
				[]v1alpha1.GPUNode{report(nodeA, []v1alpha1.GPUStatus{tc.gpu})}, nil, nil, inventory.Options{Now: now})
			g := snap.Nodes[0].GPUs[0]
			if g.ProductName != tc.wantProductName {
				t.Errorf("ProductName = %q, want %q", g.ProductName, tc.wantProductName)
			}
			if got := g.Layout(); !got.Equal(tc.wantLayout) {
				t.Errorf("Layout() = %v, want %v", got, tc.wantLayout)
			}
			if tc.wantProduct == "" {
				if g.Product != nil {
					t.Fatalf("Product = %s, want nil", g.Product.Name)
				}
				return
			}
			if g.Product == nil {
				t.Fatalf("Product = nil, want %s", tc.wantProduct)
			}
			if g.Product.Name != tc.wantProduct {
				t.Errorf("Product.Name = %q, want %q", g.Product.Name, tc.wantProduct)
			}
			if err := g.Product.Err(); err != nil {
				t.Errorf("Product.Err() = %v", err)
			}
			if builtin, ok := mig.LookupProduct(tc.wantProduct); ok && (g.Product == builtin) != tc.wantBuiltin {
				t.Errorf("Product is the built-in table: %v, want %v", g.Product == builtin, tc.wantBuiltin)
			}
			for name, want := range tc.resolve {
				pr, ok := g.Product.Profile(name)
				switch {
				case want == "" && ok:
					t.Errorf("Profile(%q) = %s, want none", name, pr.Name)
				case want != "" && !ok:
					t.Errorf("Profile(%q) not found, want %s (profiles %v)", name, want, g.Product.ProfileNames())
				case want != "" && pr.Name != want:
					t.Errorf("Profile(%q) = %s, want %s", name, pr.Name, want)
				}
			}
			for name, want := range tc.memoryMiB {
				if pr, ok := g.Product.Profile(name); !ok || pr.MemoryMiB != want {
					t.Errorf("Profile(%q) memory = %v, want %d MiB", name, pr, want)
				}
			}
		})
	}
}

func TestProductCache(t *testing.T) {
	// drifted is an H100 table whose driver names the 7g profile 7g.79gb.
	drifted := func() []v1alpha1.GPUInstanceProfile { return h100Profiles(map[string]string{"7g.80gb": "7g.79gb"}) }
	// otherMemory is drifted with another reading of 1g.10gb's memory.
	otherMemory := func() []v1alpha1.GPUInstanceProfile {
		ps := drifted()
		ps[5].MemoryMiB = 9984
		return ps
	}
	// twoGPUs is a node's report of two GPUs with the same profile table.
	twoGPUs := func(product string, profiles func() []v1alpha1.GPUInstanceProfile) []v1alpha1.GPUStatus {
		var ps0, ps1 []v1alpha1.GPUInstanceProfile
		if profiles != nil {
			ps0, ps1 = profiles(), profiles()
		}
		return []v1alpha1.GPUStatus{withProfiles(fixture.MIGGPU(0, product), ps0), withProfiles(fixture.MIGGPU(1, product), ps1)}
	}
	tests := []struct {
		name    string
		reports map[string][]v1alpha1.GPUStatus
		// groups lists GPUs ("node/index") that must share one *mig.Product; GPUs of different
		// groups must not.
		groups [][]string
		// builtin is the built-in product every GPU must use, when no profiles are reported.
		builtin string
	}{{
		name: "identical reports on every node share one compiled product",
		reports: map[string][]v1alpha1.GPUStatus{
			"node-a": twoGPUs(h100, drifted), "node-b": twoGPUs(h100, drifted), "node-c": twoGPUs(h100, drifted),
		},
		groups: [][]string{{"node-a/0", "node-a/1", "node-b/0", "node-b/1", "node-c/0", "node-c/1"}},
	}, {
		name: "a report that differs in one number gets its own product",
		reports: map[string][]v1alpha1.GPUStatus{
			"node-a": twoGPUs(h100, drifted), "node-b": twoGPUs(h100, otherMemory), "node-c": twoGPUs(h100, drifted),
		},
		groups: [][]string{{"node-a/0", "node-a/1", "node-c/0", "node-c/1"}, {"node-b/0", "node-b/1"}},
	}, {
		name: "without reported profiles every GPU uses the built-in product",
		reports: map[string][]v1alpha1.GPUStatus{
			"node-a": twoGPUs(h100, nil), "node-b": twoGPUs("", nil),
		},
		groups:  [][]string{{"node-a/0", "node-a/1", "node-b/0", "node-b/1"}},
		builtin: "H100-80GB",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []corev1.Node
			var reports []v1alpha1.GPUNode
			for name, gpus := range tc.reports {
				nodes = append(nodes, fixture.GPUHost(name, h100Label, nil))
				reports = append(reports, report(name, gpus))
			}
			snap := inventory.Build(nodes, reports, nil, nil, inventory.Options{Now: now})
			// product is the compiled product of GPU "node/index".
			product := func(id string) *mig.Product {
				node, index, _ := strings.Cut(id, "/")
				for _, g := range nodeNamed(t, snap, node).GPUs {
					if fmt.Sprint(g.Index) == index {
						if g.Product == nil {
							t.Fatalf("GPU %s has no product", id)
						}
						return g.Product
					}
				}
				t.Fatalf("no GPU %s", id)
				return nil
			}
			var firsts []*mig.Product
			for _, group := range tc.groups {
				first := product(group[0])
				for _, id := range group[1:] {
					if product(id) != first {
						t.Errorf("GPU %s does not share the product of GPU %s", id, group[0])
					}
				}
				for i, other := range firsts {
					if other == first {
						t.Errorf("GPU %s shares the product of GPU %s", group[0], tc.groups[i][0])
					}
				}
				firsts = append(firsts, first)
				if tc.builtin != "" && first != builtinProduct(t, tc.builtin) {
					t.Errorf("GPU %s does not use the built-in %s", group[0], tc.builtin)
				}
			}
		})
	}
}

// The agent's table is what gpupool plans with; where it differs from the built-in one the
// GPU says how, and a GPU the built-in table lacks says it is planned from its report alone.
func TestReportedTablesAgainstTheBuiltinTable(t *testing.T) {
	build := func(g v1alpha1.GPUStatus) *inventory.GPU {
		snap := inventory.Build([]corev1.Node{fixture.GPUHost(nodeA, h100Label, nil)},
			[]v1alpha1.GPUNode{report(nodeA, []v1alpha1.GPUStatus{g})}, nil, nil, inventory.Options{Now: now})
		return snap.Nodes[0].GPUs[0]
	}
	if g := build(withProfiles(fixture.MIGGPU(0, h100), h100Profiles(map[string]string{"7g.80gb": "7g.79gb"}))); g.TableDiff != "" || g.NoBuiltinTable {
		t.Errorf("a renamed profile: TableDiff %q, NoBuiltinTable %t; want neither", g.TableDiff, g.NoBuiltinTable)
	}
	fewer := h100Profiles(nil)
	fewer[4].Placements, fewer[4].MaxCount = fewer[4].Placements[:3], 3 // 1g.20gb without 6-7
	g := build(withProfiles(fixture.MIGGPU(0, h100), fewer))
	if want := "1g.20gb: at most 3 (built in: 4), placements 0-1,2-3,4-5 (built in: 0-1,2-3,4-5,6-7)"; g.TableDiff != want {
		t.Errorf("TableDiff = %q, want %q", g.TableDiff, want)
	}
	if g.Product.Fits(mig.Layout{"1g.20gb": 4}) {
		t.Error("the planner's geometry is the built-in table's, not the device's")
	}
	if g := build(withProfiles(fixture.MIGGPU(0, unknownGPU), unknownGPUProfiles())); !g.NoBuiltinTable || g.TableDiff != "" || g.Product == nil {
		t.Errorf("unknown GPU with a report: NoBuiltinTable %t, TableDiff %q, Product %v", g.NoBuiltinTable, g.TableDiff, g.Product)
	}
	if g := build(fixture.MIGGPU(0, h100)); g.TableDiff != "" || g.NoBuiltinTable {
		t.Errorf("no profiles reported: TableDiff %q, NoBuiltinTable %t", g.TableDiff, g.NoBuiltinTable)
	}
}
