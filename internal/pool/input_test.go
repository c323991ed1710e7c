package pool

import (
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/podrecord"
)

// TestAPassLeavesItsInputAlone guards what lets the controller hand a pass the informer
// cache's own objects (client.UnsafeDisableDeepCopy): building the pass and planning from it
// never write into the nodes, reports, pods, PDBs, plans or policies they read.
func TestAPassLeavesItsInputAlone(t *testing.T) {
	const h100 = "NVIDIA H100 80GB HBM3"
	held := fixture.HeldBy(fixture.Instance("1g.10gb", 0, 1), "team/infer")
	policy := v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: v1alpha1.GPUPoolPolicySpec{
		NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{"pool": "a"}},
		Catalog: []v1alpha1.CatalogEntry{{Product: "NVIDIA-H100-80GB-HBM3",
			MIGProfiles: []v1alpha1.MIGProfileName{"1g.10gb", "3g.40gb", "7g.80gb"}}}}}
	c := &Cluster{
		Policies: []v1alpha1.GPUPoolPolicy{policy},
		Nodes: []corev1.Node{fixture.GPUHost("gpu-1", "NVIDIA-H100-80GB-HBM3", nil, "pool", "a"),
			fixture.GPUHost("gpu-2", "NVIDIA-H100-80GB-HBM3", nil, "pool", "a")},
		GPUNodes: []v1alpha1.GPUNode{
			fixture.Report("gpu-1", fixture.MIGGPU(0, h100, held, fixture.Instance("1g.10gb", 1, 1)), fixture.WholeGPU(1, h100)),
			fixture.Report("gpu-2", fixture.MIGGPU(0, h100, fixture.Instance("7g.80gb", 0, 8))),
		},
		Pods: podrecord.FromPods(fixture.Pointers([]corev1.Pod{
			fixture.Pod("team/infer", fixture.Running("gpu-1"), fixture.Requests("cpu", "1", "nvidia.com/mig-1g.10gb", "1")),
			fixture.Pod("team/train", fixture.Unschedulable(fixture.Now.Add(-time.Hour)), fixture.Requests("nvidia.com/mig-3g.40gb", "1")),
			fixture.Pod("team/big", fixture.Unschedulable(fixture.Now.Add(-time.Hour)),
				fixture.Requests("nvidia.com/gpu", "2"), fixture.WithInit("setup", "cpu", "2")),
		})),
		PDBs:       []policyv1.PodDisruptionBudget{fixture.PDB("team/infer", "infer", 1)},
		Heartbeats: map[string]time.Time{"gpu-1": fixture.Now},
	}
	before := deepCopyCluster(c)
	pass, err := NewPass(&c.Policies[0], c, fixture.Now, Options{MaxReportAge: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	res, err := planner.PlanWithin(pass.Input())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) == 0 {
		t.Fatalf("the pass plans nothing, so it exercises too little: unserved %+v", res.Unserved)
	}
	after := deepCopyCluster(c)
	if !maps.Equal(before.Heartbeats, after.Heartbeats) {
		t.Errorf("the pass or the planner wrote into the heartbeats")
	}
	before.Heartbeats, after.Heartbeats = nil, nil
	if !equality.Semantic.DeepEqual(before, after) {
		t.Errorf("the pass or the planner wrote into the objects it read")
	}
}

func deepCopyCluster(c *Cluster) *Cluster {
	out := &Cluster{Heartbeats: map[string]time.Time{}}
	for _, p := range c.Policies {
		out.Policies = append(out.Policies, *p.DeepCopy())
	}
	for _, n := range c.Nodes {
		out.Nodes = append(out.Nodes, *n.DeepCopy())
	}
	for _, g := range c.GPUNodes {
		out.GPUNodes = append(out.GPUNodes, *g.DeepCopy())
	}
	for _, p := range c.Pods {
		out.Pods = append(out.Pods, p.DeepCopy())
	}
	for _, b := range c.PDBs {
		out.PDBs = append(out.PDBs, *b.DeepCopy())
	}
	for _, p := range c.Plans {
		out.Plans = append(out.Plans, *p.DeepCopy())
	}
	for k, v := range c.Heartbeats {
		out.Heartbeats[k] = v
	}
	return out
}
