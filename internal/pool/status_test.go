package pool_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/podrecord"
	"github.com/gpupool/gpupool/internal/pool"
)

// statusOf runs one pass of the policy over the cluster and summarises it as the controller
// writes it into the policy's status.
func statusOf(t *testing.T, policy *v1alpha1.GPUPoolPolicy, c *pool.Cluster) v1alpha1.GPUPoolPolicyStatus {
	t.Helper()
	c.Policies = []v1alpha1.GPUPoolPolicy{*policy}
	pass, err := pool.NewPass(policy, c, fixture.Now, pool.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := planner.PlanWithin(pass.Input())
	if err != nil {
		t.Fatal(err)
	}
	return pool.Status(policy, pass.Selector, pass.Snapshot, pass.Pending, res)
}

// statusPool is two H200 nodes and an A100 node. The catalog allows 1g and 2g on the H200
// (not 3g, nor whole GPUs) and whole GPUs on the A100.
func statusPool(pending ...corev1.Pod) (*v1alpha1.GPUPoolPolicy, *pool.Cluster) {
	const h200, a100 = "NVIDIA H200", "NVIDIA A100-SXM4-80GB"
	policy := &v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: v1alpha1.GPUPoolPolicySpec{
		NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{"pool": "a"}},
		Catalog: []v1alpha1.CatalogEntry{
			{Product: "NVIDIA-H200", MIGProfiles: []v1alpha1.MIGProfileName{"1g.18gb", "2g.35gb"}},
			{Product: "A100", MIGProfiles: []v1alpha1.MIGProfileName{"1g.10gb"}, AllowWholeGPU: true},
		}}}
	sevenOf := func(profile string) []v1alpha1.MIGInstance {
		var out []v1alpha1.MIGInstance
		for i := range int32(7) {
			out = append(out, fixture.Instance(profile, i, 1))
		}
		return out
	}
	return policy, &pool.Cluster{
		Nodes: []corev1.Node{fixture.GPUHost("h200-1", "NVIDIA-H200", nil, "pool", "a"),
			fixture.GPUHost("h200-2", "NVIDIA-H200", nil, "pool", "a"),
			fixture.GPUHost("a100-1", "NVIDIA-A100-SXM4-80GB", nil, "pool", "a")},
		GPUNodes: []v1alpha1.GPUNode{
			fixture.Report("h200-1", fixture.MIGGPU(0, h200, sevenOf("1g.18gb")...)),
			fixture.Report("h200-2", fixture.MIGGPU(0, h200, fixture.Instance("2g.35gb", 0, 2), fixture.Instance("2g.35gb", 2, 2),
				fixture.Instance("2g.35gb", 4, 2))),
			fixture.Report("a100-1", fixture.MIGGPU(0, a100, sevenOf("1g.10gb")...)),
		},
		Pods: podrecord.FromPods(fixture.Pointers(pending)),
	}
}

func pendingPod(name, resource string) corev1.Pod {
	return fixture.Pod("team/"+name, fixture.Unschedulable(fixture.Now.Add(-time.Hour)), fixture.Requests(resource, "1"))
}

// TestStatusFeasibleNodesFollowTheCatalog guards FEASIBLE: a node counts as feasible for a
// shape only when the policy's catalog entry for its GPU product allows the shape (the
// profile, or allowWholeGPU), as the planner plans, not whenever the product could do it.
func TestStatusFeasibleNodesFollowTheCatalog(t *testing.T) {
	for _, tc := range []struct {
		name, resource     string
		feasible, eligible int32
	}{
		{name: "a profile the H200's catalog entry forbids is feasible nowhere", resource: "nvidia.com/mig-3g.71gb", feasible: 0, eligible: 3},
		{name: "a profile the H200's entry allows is feasible on both H200s", resource: "nvidia.com/mig-2g.35gb", feasible: 2, eligible: 3},
		{name: "whole GPUs only where allowWholeGPU is set", resource: "nvidia.com/gpu", feasible: 1, eligible: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy, c := statusPool(pendingPod("p", tc.resource))
			st := statusOf(t, policy, c)
			if len(st.Demand) != 1 || st.Demand[0].Resource != tc.resource {
				t.Fatalf("demand %+v, want one row for %s", st.Demand, tc.resource)
			}
			if d := st.Demand[0]; d.FeasibleNodes != tc.feasible || d.EligibleNodes != tc.eligible {
				t.Errorf("%s: feasible/eligible %d/%d, want %d/%d", tc.resource, d.FeasibleNodes, d.EligibleNodes, tc.feasible, tc.eligible)
			}
		})
	}
}

// TestStatusStrandedCountsInstances guards the one unit of "stranded": free MIG instances,
// whatever their size, in the per-profile rows and in the pool's total alike (the total is
// what the alert's sum of gpupool_stranded_slices reads), never compute slices in one and
// instances in the other.
func TestStatusStrandedCountsInstances(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pending []corev1.Pod
		want    map[string]int32
	}{
		// Nothing pends: every free instance is stranded, a 2g instance counting one.
		{name: "nothing pending", want: map[string]int32{"1g.10gb": 7, "1g.18gb": 7, "2g.35gb": 3}},
		{name: "a pending 2g pod uses one 2g instance", pending: []corev1.Pod{pendingPod("p", "nvidia.com/mig-2g.35gb")},
			want: map[string]int32{"1g.10gb": 7, "1g.18gb": 7, "2g.35gb": 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy, c := statusPool(tc.pending...)
			st := statusOf(t, policy, c)
			var sum int32
			got := map[string]int32{}
			for _, s := range st.Pool.Slices {
				if s.Stranded > s.Free {
					t.Errorf("%s: %d stranded of %d free instances", s.Profile, s.Stranded, s.Free)
				}
				if s.Stranded > 0 {
					got[s.Profile] = s.Stranded
				}
				sum += s.Stranded
			}
			for profile, n := range tc.want {
				if got[profile] != n {
					t.Errorf("%s: %d stranded, want %d (all: %v)", profile, got[profile], n, got)
				}
			}
			if st.Pool.StrandedSlices != sum {
				t.Errorf("pool total %d stranded, the profiles sum to %d", st.Pool.StrandedSlices, sum)
			}
		})
	}
}

// TestStatusNamesProductsAsTheCatalogDoes guards the spelling of GPU models in the status:
// the nvidia.com/gpu.product label users write in the catalog (NVIDIA-H200), never the
// built-in table's key (H200-141GB).
func TestStatusNamesProductsAsTheCatalogDoes(t *testing.T) {
	policy, c := statusPool()
	st := statusOf(t, policy, c)
	want := map[string]int32{"NVIDIA-H200": 2, "NVIDIA-A100-SXM4-80GB": 1}
	if len(st.Pool.GPUsByProduct) != len(want) {
		t.Fatalf("gpusByProduct %v, want %v", st.Pool.GPUsByProduct, want)
	}
	for name, n := range want {
		if st.Pool.GPUsByProduct[name] != n {
			t.Errorf("gpusByProduct %v, want %v", st.Pool.GPUsByProduct, want)
		}
	}
}
