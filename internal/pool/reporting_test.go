package pool_test

import (
	"fmt"
	"testing"

	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/pool"
)

func TestUnreported(t *testing.T) {
	node := func(name, blocker string, unreported bool) *inventory.Node {
		return &inventory.Node{Name: name, Blocker: blocker, Unreported: unreported}
	}
	many := []*inventory.Node{node("ok", "", false)}
	for i := range 7 {
		many = append(many, node(fmt.Sprintf("n%d", i), "no GPUNode report", true))
	}
	for _, tc := range []struct {
		name string
		pool []*inventory.Node
		want string
	}{
		{name: "empty pool", want: ""},
		{name: "every node reports", pool: []*inventory.Node{node("a", "", false), node("b", "", false)}, want: ""},
		{
			// A node blocked for another reason (a pod the agent has not attributed) is planned
			// around, not unseen: it is not counted.
			name: "blocked but reporting", pool: []*inventory.Node{node("a", "unattributed GPU pod", false)}, want: "",
		},
		{
			name: "one stale report",
			pool: []*inventory.Node{node("a", "", false), node("b", "the GPUNode report is 3m0s old (limit 2m0s): is the agent healthy?", true)},
			want: "1 of 2 pool node(s) are left out of planning, their GPUs unseen: b (the GPUNode report is 3m0s old (limit 2m0s): is the agent healthy?)",
		},
		{
			name: "more than are named",
			pool: many,
			want: "7 of 8 pool node(s) are left out of planning, their GPUs unseen: n0 (no GPUNode report); n1 (no GPUNode report); " +
				"n2 (no GPUNode report); n3 (no GPUNode report); n4 (no GPUNode report); and 2 more",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pool.Unreported(tc.pool); got != tc.want {
				t.Errorf("Unreported:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}
