package workloads

import (
	"slices"
	"testing"

	"github.com/gpupool/gpupool/internal/mig"
)

func TestPack(t *testing.T) {
	h200, ok := mig.LookupProduct("H200")
	if !ok {
		t.Fatal("no H200 in the built-in table")
	}
	gpusOn := func(perNode int, nodes ...string) []poolGPU {
		var out []poolGPU
		for _, n := range nodes {
			for range perNode {
				out = append(out, poolGPU{node: n, product: h200})
			}
		}
		return out
	}
	n := func(k int, d string) []string { return slices.Repeat([]string{d}, k) }
	for _, tc := range []struct {
		name    string
		gpus    []poolGPU
		devices []string
		want    Packing
	}{
		{"two 3g.71gb share a GPU", gpusOn(1, "a", "b"), n(3, "3g.71gb"), Packing{GPUs: 2, Nodes: 2}},
		{"right-sized, they fit one", gpusOn(1, "a", "b"), slices.Concat(n(2, "1g.18gb"), n(1, "3g.71gb")), Packing{GPUs: 1, Nodes: 1}},
		{"a node is filled before the next is opened", gpusOn(2, "a", "b"), n(3, "3g.71gb"), Packing{GPUs: 2, Nodes: 1}},
		{"seven 1g.18gb take the seven compute slices", gpusOn(1, "a", "b"), n(8, "1g.18gb"), Packing{GPUs: 2, Nodes: 2}},
		{"a whole GPU holds nothing else", gpusOn(2, "a"), []string{"", "1g.18gb"}, Packing{GPUs: 2, Nodes: 1}},
		{"what no GPU holds is counted", gpusOn(1, "a"), n(3, "3g.71gb"), Packing{GPUs: 1, Nodes: 1, Unplaced: 1}},
		{"nothing to place", gpusOn(1, "a"), nil, Packing{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pack(tc.gpus, tc.devices); got != tc.want {
				t.Errorf("pack = %+v, want %+v", got, tc.want)
			}
		})
	}
}
