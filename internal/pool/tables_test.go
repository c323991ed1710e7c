package pool_test

import (
	"fmt"
	"strings"
	"testing"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/pool"
)

func TestMIGTablesMatch(t *testing.T) {
	h200, _ := mig.LookupProduct("H200-141GB")
	gpu := func(index int, diff string, noBuiltin bool) *inventory.GPU {
		return &inventory.GPU{Index: index, Product: h200, ProductName: "NVIDIA X96", TableDiff: diff, NoBuiltinTable: noBuiltin}
	}
	node := func(name string, gpus ...*inventory.GPU) *inventory.Node {
		return &inventory.Node{Name: name, GPUs: gpus}
	}
	const diff = "1g.35gb: at most 3 (built in: 4)"
	var many []*inventory.Node
	for i := range 5 {
		many = append(many, node(fmt.Sprintf("n%d", i), gpu(0, diff, false)))
	}
	for _, tc := range []struct {
		name       string
		pool       []*inventory.Node
		wantTrue   bool
		wantReason string
		wantIn     []string
	}{
		{name: "empty pool", wantTrue: true, wantReason: v1alpha1.ReasonTablesMatch},
		{name: "every table matches", pool: []*inventory.Node{node("a", gpu(0, "", false), gpu(1, "", false))},
			wantTrue: true, wantReason: v1alpha1.ReasonTablesMatch},
		{name: "one GPU differs", pool: []*inventory.Node{node("a", gpu(0, "", false)), node("b", gpu(0, "", false), gpu(3, diff, false))},
			wantReason: v1alpha1.ReasonDeviceTableDiffers,
			wantIn:     []string{"1 GPU(s)", "b GPU 3 (H200-141GB): 1g.35gb: at most 3 (built in: 4)", "plans with what they report"}},
		{name: "a difference outranks an unknown GPU", pool: []*inventory.Node{node("a", gpu(0, "", true)), node("b", gpu(1, diff, false))},
			wantReason: v1alpha1.ReasonDeviceTableDiffers, wantIn: []string{"b GPU 1"}},
		{name: "unknown GPU", pool: []*inventory.Node{node("a", gpu(0, "", true))},
			wantReason: v1alpha1.ReasonNoBuiltinTable, wantIn: []string{"a GPU 0 (NVIDIA X96)", "report alone"}},
		{name: "more than are named", pool: many, wantReason: v1alpha1.ReasonDeviceTableDiffers,
			wantIn: []string{"5 GPU(s)", "n0 GPU 0", "n2 GPU 0", "; and 2 more"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := pool.MIGTablesMatch(tc.pool)
			if c.True != tc.wantTrue || c.Reason != tc.wantReason {
				t.Errorf("got %t/%s, want %t/%s (%s)", c.True, c.Reason, tc.wantTrue, tc.wantReason, c.Message)
			}
			for _, w := range tc.wantIn {
				if !strings.Contains(c.Message, w) {
					t.Errorf("message lacks %q: %s", w, c.Message)
				}
			}
			if strings.Contains(c.Message, "n3 GPU") {
				t.Errorf("names more GPUs than it should: %s", c.Message)
			}
		})
	}
}

func TestDRASlicesCurrent(t *testing.T) {
	nodes := []*inventory.Node{{Name: "a"}, {Name: "b", DRAStale: "its DRA ResourceSlices miss 2 of the MIG instances NVML reports and list 7 it does not"}}
	if c := pool.DRASlicesCurrent(nodes[:1]); !c.True || c.Reason != pool.ReasonSlicesCurrent {
		t.Errorf("current: %+v", c)
	}
	c := pool.DRASlicesCurrent(nodes)
	if c.True || c.Reason != pool.ReasonSlicesStale || !strings.Contains(c.Message, "on 1 node(s)") ||
		!strings.Contains(c.Message, "b: its DRA ResourceSlices miss 2") || !strings.Contains(c.Message, "until the driver's kubelet plugin restarts") {
		t.Errorf("stale: %+v", c)
	}
}
