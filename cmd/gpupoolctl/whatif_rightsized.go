package main

import (
	"fmt"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/gpupool/gpupool/internal/podrecord"
	"github.com/gpupool/gpupool/internal/rightsize"
	"github.com/gpupool/gpupool/internal/rightsize/workloads"
	"github.com/gpupool/gpupool/internal/snapshot"
)

// rightsizedHelp is --rightsized's help, and the part of what-if's long help that explains it.
const rightsizedHelp = "also say how many GPUs and nodes each pool would free if every Shrink and Grow recommendation of " +
	"kubectl gpupool rightsize were applied (from the usage the agents publish in GPUNode status.usage: a snapshot must carry it)"

// rightsizedOutput is the document's "rightsized" object: per pool, what the running GPU pods
// hold now, need packed as they ask, and need right-sized.
type rightsizedOutput struct {
	// Note says why nothing could be recommended, when no GPUNode carries usage.
	Note  string                 `json:"note,omitempty"`
	Pools []rightsizedPoolOutput `json:"pools"`
}

type rightsizedPoolOutput struct {
	Policy string `json:"policy"`
	// Pods are the GPU pods running in the pool.
	Pods int `json:"pods"`
	// NowGPUs and NowNodes are what they hold now, as the agents report it.
	NowGPUs  int `json:"nowGPUs"`
	NowNodes int `json:"nowNodes"`
	// AsAsked and Rightsized pack the pods' devices afresh onto the pool's GPUs, as the pods
	// ask for them and with the recommendations applied.
	AsAsked    packingOutput `json:"asAsked"`
	Rightsized packingOutput `json:"rightsized"`
	// FreedGPUs and FreedNodes are AsAsked minus Rightsized: whole GPUs and nodes left empty.
	FreedGPUs  int             `json:"freedGPUs"`
	FreedNodes int             `json:"freedNodes"`
	Applied    []appliedOutput `json:"applied"`
}

type packingOutput struct {
	GPUs  int `json:"gpus"`
	Nodes int `json:"nodes"`
	// Unplaced counts devices no GPU of the pool holds.
	Unplaced int `json:"unplaced,omitempty"`
}

// appliedOutput is one workload whose recommendation the right-sized packing applies.
type appliedOutput struct {
	Workload string `json:"workload"` // Kind namespace/name
	Pods     int    `json:"pods"`
	From     string `json:"from"`
	To       string `json:"to"`
}

func addRightsizedFlag(cmd *cobra.Command, wf *whatIfFlags) {
	cmd.Flags().BoolVar(&wf.rightsized, "rightsized", false, rightsizedHelp)
}

// rightsized recommends per workload of snap, as kubectl gpupool rightsize -A does with opts,
// and packs each pool's running pods as they ask and as recommended. replicaSets
// name Deployments (the live cluster's; a snapshot has none, and pods' pod-template-hash
// names them then).
func rightsized(snap *snapshot.Snapshot, replicaSets []appsv1.ReplicaSet, live bool, opts rightsize.Options) *rightsizedOutput {
	out := &rightsizedOutput{Pools: []rightsizedPoolOutput{}}
	if !workloads.UsageReported(snap.GPUNodes) {
		out.Note = "the snapshot carries no usage (GPUNode status.usage), so nothing is recommended: take it again from a " +
			"cluster whose node agents publish usage, or run what-if --live --rightsized"
		if live {
			out.Note = "no node agent publishes usage yet (GPUNode status.usage), so nothing is recommended: the agents " +
				"publish a pod's usage once they have sampled it; kubectl gpupool rightsize -A shows what they have"
		}
	}
	in := workloads.Input{Pods: podrecord.FromPods(snap.PodPointers()), ReplicaSets: replicaSets, GPUNodes: snap.GPUNodes,
		Nodes: snap.Nodes, Policies: snap.Policies}
	for _, g := range workloads.Gains(in, workloads.Recommend(in, opts)) {
		p := rightsizedPoolOutput{Policy: g.Policy, Pods: g.Pods, NowGPUs: g.NowGPUs, NowNodes: g.NowNodes,
			AsAsked:    packingOutput{GPUs: g.Before.GPUs, Nodes: g.Before.Nodes, Unplaced: g.Before.Unplaced},
			Rightsized: packingOutput{GPUs: g.After.GPUs, Nodes: g.After.Nodes, Unplaced: g.After.Unplaced},
			FreedGPUs:  g.FreedGPUs(), FreedNodes: g.FreedNodes(), Applied: []appliedOutput{}}
		for _, r := range g.Applied {
			p.Applied = append(p.Applied, appliedOutput{Workload: r.String(), Pods: len(r.Pods), From: r.Requested, To: r.Profile})
		}
		out.Pools = append(out.Pools, p)
	}
	return out
}

// liveReplicaSets lists the live cluster's ReplicaSets, to name Deployments; none when the
// user may not list them (pods' pod-template-hash names the Deployment then).
func (c *cli) liveReplicaSets() []appsv1.ReplicaSet {
	sess, err := c.open(false)
	if err != nil {
		return nil
	}
	defer sess.cancel()
	var list appsv1.ReplicaSetList
	if err := sess.client.List(sess.ctx, &list); err != nil {
		return nil
	}
	return list.Items
}

// writeRightsized renders the right-sized packing after the plan.
func writeRightsized(ew *errWriter, rs *rightsizedOutput) {
	ew.printf("\n")
	if rs.Note != "" {
		ew.wrap("Right-sized: ", "  ", rs.Note+".")
		return
	}
	ew.wrap("", "  ", "Right-sized: as if every Shrink and Grow recommendation were applied (kubectl gpupool rightsize "+
		"lists them; nothing is changed), each pool's running GPU pods packed afresh, as they ask and as recommended:")
	if len(rs.Pools) == 0 {
		ew.printf("  No pool: no policy selects a node with GPUs.\n")
	}
	for _, p := range rs.Pools {
		ew.printf("  Policy %s: %s hold %s on %s now.\n", p.Policy, plural(p.Pods, "GPU pod"), plural(p.NowGPUs, "GPU"), plural(p.NowNodes, "node"))
		ew.printf("    Packed as they ask: %s; right-sized: %s.\n", packingText(p.AsAsked), packingText(p.Rightsized))
		ew.printf("    Right-sizing frees %s and %s.\n", plural(p.FreedGPUs, "GPU"), plural(p.FreedNodes, "node"))
		if len(p.Applied) == 0 {
			ew.printf("    Applied: none (no workload here has a Shrink or Grow recommendation).\n")
		}
		for _, a := range p.Applied {
			ew.wrap("    Applied: ", "      ", fmt.Sprintf("%s %s -> %s (%s).", a.Workload, a.From, a.To, plural(a.Pods, "pod")))
		}
	}
}

func packingText(p packingOutput) string {
	s := plural(p.GPUs, "GPU") + " on " + plural(p.Nodes, "node")
	if p.Unplaced > 0 {
		s += fmt.Sprintf(" (%s no GPU of the pool holds)", plural(p.Unplaced, "device"))
	}
	return s
}
