package controllers

import (
	"k8s.io/apimachinery/pkg/labels"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/pool"
)

// poolStatus summarises the pool for the policy's status; the decisions are pool.Status's,
// table-tested there.
func poolStatus(policy *v1alpha1.GPUPoolPolicy, selector labels.Selector, snap *inventory.Snapshot, pending []demand.Request,
	res *planner.Result) v1alpha1.GPUPoolPolicyStatus {
	return pool.Status(policy, selector, snap, pending, res)
}

// poolNodes are the snapshot's nodes that the policy's selector picks, in the snapshot's order.
func poolNodes(snap *inventory.Snapshot, selector labels.Selector) []*inventory.Node {
	return pool.Nodes(snap, selector)
}
