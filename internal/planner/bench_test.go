package planner_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/planner"
)

// benchCluster is a fragmented H200 pool: 8 GPUs per node carved in a mix of layouts, some
// instances busy, and 10 pending pods per node from 24 workloads (classes), so that the
// planner faces real choices at every size.
func benchCluster(b testing.TB, nodes int) *cluster {
	rng := rand.New(rand.NewPCG(42, uint64(nodes)))
	c := newCluster(b)
	layouts := []string{"1g.18gb:7", "1g.18gb:7", "3g.71gb:2", "2g.35gb:3,1g.18gb:1", "7g.141gb:1"}
	for n := range nodes {
		name := fmt.Sprintf("gpu-%05d", n)
		gpus := make([]string, 8)
		for i := range gpus {
			gpus[i] = layouts[rng.IntN(len(layouts))]
		}
		c.node(name, "NVIDIA-H200", gpus...)
		for i, l := range gpus {
			if rng.IntN(3) != 0 {
				continue
			}
			profile := map[string]string{"1g.18gb:7": "1g.18gb", "3g.71gb:2": "3g.71gb",
				"2g.35gb:3,1g.18gb:1": "2g.35gb", "7g.141gb:1": "7g.141gb"}[l]
			c.running(fmt.Sprintf("run-%05d-%d", n, i), name, i, profile, fixture.Labelled("app", fmt.Sprintf("svc-%d", rng.IntN(50))))
		}
	}
	profiles := []string{"1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}
	for p := range nodes * 10 {
		w := rng.IntN(24)
		c.pending(fmt.Sprintf("pend-%06d", p), mig1(profiles[w%len(profiles)]),
			fixture.Priority(int32(w%3)*10), cpu(fmt.Sprint(1+w%4)))
	}
	return c
}

// BenchmarkPlan measures one planning pass at 10 to 5,000 nodes with 10 pending pods per node.
// The baseline, measured in the same process on the same objects, is building the snapshot
// (inventory.Build and demand.Pending), which the controller pays on every pass anyway;
// "plan/snapshot" says how many times that the planning itself costs.
func BenchmarkPlan(b *testing.B) {
	for _, nodes := range []int{10, 100, 1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			c := benchCluster(b, nodes)
			pol := policy()
			// Both budgets at 10%: the same number of changed nodes as before maxReconfiguringNodes
			// existed, so the timings compare with earlier runs.
			pol.Spec.Disruption.MaxDisruptedNodes = ptr.To(intstr.FromString("10%"))
			pol.Spec.Disruption.MaxReconfiguringNodes = ptr.To(intstr.FromString("10%"))

			start := time.Now()
			snap := inventory.Build(c.nodes, c.gpuNodes, fixture.Pointers(c.pods), c.pdbs, inventory.Options{Now: now})
			pending, _ := demand.Pending(fixture.Pointers(c.pods), now, 30*time.Second)
			baseline := time.Since(start)
			in := planner.Input{Snapshot: snap, Pending: pending, Policy: pol, Now: now}

			b.ReportAllocs()
			b.ResetTimer()
			var res *planner.Result
			for b.Loop() {
				var err error
				if res, err = planner.Plan(in); err != nil {
					b.Fatal(err)
				}
			}
			perOp := b.Elapsed() / time.Duration(b.N)
			b.ReportMetric(float64(perOp.Milliseconds()), "ms/plan")
			b.ReportMetric(float64(perOp)/float64(baseline), "plan/snapshot")
			b.ReportMetric(float64(len(res.Served)), "served")
			b.ReportMetric(float64(len(res.Steps)), "nodes-changed")
		})
	}
}
