package pool

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/podrecord"
)

// scaleFleet is the fleet of `make bench-scale` (test/bench/scale): H200 nodes of 8 GPUs carved
// 1g.18gb:7, 10 running pods per node each holding one instance so that every GPU holds one,
// one pending 3g.71gb pod per node, one policy over all of them.
func scaleFleet(b *testing.B, nodes int) (*v1alpha1.GPUPoolPolicy, *Cluster, []*corev1.Pod) {
	const product = "NVIDIA-H200"
	p, ok := mig.LookupProduct(product)
	if !ok {
		b.Fatalf("unknown product %s", product)
	}
	layout, err := mig.ParseLayout("1g.18gb:7")
	if err != nil {
		b.Fatal(err)
	}
	placed, err := p.Place(layout, nil)
	if err != nil {
		b.Fatal(err)
	}
	// The scale bench's policy: its catalog lets the planner choose among four profiles, and
	// plans wait for a human.
	policy := policyFor("fleet", "a")
	policy.Spec.Catalog = []v1alpha1.CatalogEntry{{Product: product,
		MIGProfiles: []v1alpha1.MIGProfileName{"1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb"}}}
	policy.Spec.Disruption.Approval = v1alpha1.ApprovalManual
	c := &Cluster{Policies: []v1alpha1.GPUPoolPolicy{policy}, Heartbeats: map[string]time.Time{}}
	var pods []corev1.Pod
	for n := range nodes {
		name := fmt.Sprintf("gpu-%05d", n)
		c.Nodes = append(c.Nodes, fixture.GPUHost(name, product, nil, "pool", "a"))
		report := fixture.Report(name)
		report.Status.ObservedTime = ptr.To(metav1.NewTime(t0))
		c.Heartbeats[name] = t0
		for i := range 8 {
			g := fixture.MIGGPU(int32(i), product)
			for _, in := range placed {
				g.Instances = append(g.Instances, fixture.Instance(in.Profile, int32(in.Placement.Start), int32(in.Placement.Size)))
			}
			report.Status.GPUs = append(report.Status.GPUs, g)
		}
		for r := range 10 {
			key := fmt.Sprintf("ml/run-%05d-%d", n, r)
			gpu, instance := r%8, r/8 // GPUs 0 and 1 hold two pods, the others one
			report.Status.GPUs[gpu].Instances[instance] = fixture.HeldBy(report.Status.GPUs[gpu].Instances[instance], key)
			pods = append(pods, fixture.Pod(key, fixture.Running(name), fixture.Labelled("app", fmt.Sprintf("svc-%d", n%50)),
				fixture.Requests("cpu", "1", "memory", "4Gi", mig.ResourceName("1g.18gb"), "1")))
		}
		c.GPUNodes = append(c.GPUNodes, report)
		pods = append(pods, fixture.Pod(fmt.Sprintf("ml/pend-%05d", n), fixture.Unschedulable(t0.Add(-10*time.Minute)),
			fixture.Requests("cpu", "2", mig.ResourceName("3g.71gb"), "1")))
	}
	c.Pods = podrecord.FromPods(fixture.Pointers(pods))
	return &c.Policies[0], c, fixture.Pointers(pods)
}

// BenchmarkPass measures what the controller pays on every pass of a fleet's policy, at 1,000
// and 5,000 nodes: assembling the pass (inventory.BuildFromRecords over every node, report and
// pod, and demand's pending pods) and planning it. "assemble, records per pass" is the
// baseline: the pods' records (their requests above all) made again on every pass, as a
// controller that caches whole Pods would; "assemble" reads records made once, as the
// manager's informer keeps them, and "time/per-pass" compares the two. Allocations per op are
// the numbers to watch: the manager's memory at rest is the informer cache plus the garbage
// collector's headroom over what a pass allocates. "plan/pass" compares the planner with the
// pass assembly, measured in the same process on the same objects.
func BenchmarkPass(b *testing.B) {
	for _, nodes := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			policy, c, pods := scaleFleet(b, nodes)
			opts := Options{MaxReportAge: 2 * time.Minute}
			assemble := func(b *testing.B, records func() []*podrecord.Record) time.Duration {
				b.ReportAllocs()
				for b.Loop() {
					cluster := *c
					cluster.Pods = records()
					pass, err := NewPass(policy, &cluster, t0, opts)
					if err != nil {
						b.Fatal(err)
					}
					if len(pass.Pending) != nodes {
						b.Fatalf("%d pending pods, want %d", len(pass.Pending), nodes)
					}
				}
				return b.Elapsed() / time.Duration(b.N)
			}
			var perPass, assembly time.Duration
			b.Run("assemble, records per pass", func(b *testing.B) {
				perPass = assemble(b, func() []*podrecord.Record { return podrecord.FromPods(pods) })
			})
			b.Run("assemble", func(b *testing.B) {
				assembly = assemble(b, func() []*podrecord.Record { return c.Pods })
				if perPass > 0 {
					b.ReportMetric(float64(assembly)/float64(perPass), "time/per-pass")
				}
			})
			b.Run("plan", func(b *testing.B) {
				pass, err := NewPass(policy, c, t0, opts)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := planner.PlanWithin(pass.Input()); err != nil {
						b.Fatal(err)
					}
				}
				if assembly > 0 {
					b.ReportMetric(float64(b.Elapsed()/time.Duration(b.N))/float64(assembly), "plan/pass")
				}
			})
		})
	}
}
