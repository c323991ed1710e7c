package inventory_test

import (
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nvidia"
)

func TestNodesSortedByName(t *testing.T) {
	tests := []struct {
		name  string
		nodes []string
		want  []string
	}{
		{name: "no nodes", want: nil},
		{name: "one node", nodes: []string{"gpu-1"}, want: []string{"gpu-1"}},
		{name: "reversed", nodes: []string{"gpu-3", "gpu-2", "gpu-1"}, want: []string{"gpu-1", "gpu-2", "gpu-3"}},
		{name: "byte order, not numeric order", nodes: []string{"gpu-10", "gpu-9", "a", "gpu-1"}, want: []string{"a", "gpu-1", "gpu-10", "gpu-9"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []corev1.Node
			var reports []v1alpha1.GPUNode
			var pods []corev1.Pod
			for _, n := range tc.nodes {
				nodes = append(nodes, fixture.GPUHost(n, h100Label, nil))
				reports = append(reports, report(n, []v1alpha1.GPUStatus{fixture.MIGGPU(0, h100)}))
				pods = append(pods, pod("on-"+n, onNode(n)))
			}
			snap := inventory.Build(nodes, reports, fixture.Pointers(pods), nil, inventory.Options{Now: now})
			var got []string
			for _, n := range snap.Nodes {
				got = append(got, n.Name)
				// The node's own object, GPUs and pods travel with it through the sort.
				if n.Object.Name != n.Name || len(n.GPUs) != 1 || n.Pod(nn("team/on-"+n.Name)) == nil {
					t.Errorf("node %s lost its object, GPUs or pods", n.Name)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("nodes = %v, want %v", got, tc.want)
			}
			if snap.DisruptionsAllowed == nil {
				t.Error("DisruptionsAllowed is nil")
			}
		})
	}
}

func TestNodePod(t *testing.T) {
	pods := []corev1.Pod{
		pod("team/web-1"),
		pod("batch/train"),
		pod("team/web-0"),
		pod("team-b/web-0"),
		pod("team/infer"),
		pod("team/waiting", pendingUnbound()),
		pod("team/done", phase(corev1.PodSucceeded)),
		pod("team/failed", phase(corev1.PodFailed)),
		pod("team/elsewhere", onNode("node-b")),
	}
	snap := inventory.Build([]corev1.Node{fixture.GPUHost(nodeA, h100Label, nil), fixture.GPUHost("node-b", h100Label, nil)},
		[]v1alpha1.GPUNode{report(nodeA, nil), report("node-b", nil)}, fixture.Pointers(pods), nil, inventory.Options{Now: now})
	n := nodeNamed(t, snap, nodeA)

	wantOrder := []string{"batch/train", "team/infer", "team/web-0", "team/web-1", "team-b/web-0"}
	var order []string
	for _, p := range n.Pods {
		order = append(order, p.Key.String())
	}
	if !slices.Equal(order, wantOrder) {
		t.Fatalf("pods sorted %v, want %v", order, wantOrder)
	}

	tests := []struct {
		key   string
		found bool
	}{
		{"batch/train", true},
		{"team/infer", true},
		{"team/web-0", true},
		{"team/web-1", true},
		{"team-b/web-0", true},
		{"team/waiting", false},   // not bound
		{"team/done", false},      // finished
		{"team/failed", false},    // finished
		{"team/elsewhere", false}, // another node's
		{"aaa/first", false},      // before the first
		{"zzz/last", false},       // after the last
		{"team/web-00", false},    // between two
		{"team/web", false},       // a prefix of two
		{"batch/infer", false},    // a name from another namespace
		{"/", false},              // empty key
	}
	for _, tc := range tests {
		t.Run(tc.key, func(t *testing.T) {
			p := n.Pod(nn(tc.key))
			switch {
			case tc.found && p == nil:
				t.Errorf("Pod(%s) = nil", tc.key)
			case tc.found && p.Key != nn(tc.key):
				t.Errorf("Pod(%s) = %s", tc.key, p.Key)
			case !tc.found && p != nil:
				t.Errorf("Pod(%s) = %s, want nil", tc.key, p.Key)
			}
		})
	}
	if p := (&inventory.Node{}).Pod(nn("team/web-0")); p != nil {
		t.Errorf("Pod on a node without pods = %v", p)
	}
}

// buildInputs are inputs that touch every path of Build: nodes with and without reports,
// stale and unreadable reports, reported profile tables, instances with pods, pods of every
// eviction case, init containers, pod-level resources and PDBs of every kind.
func buildInputs() ([]corev1.Node, []v1alpha1.GPUNode, []corev1.Pod, []policyv1.PodDisruptionBudget) {
	nodes := []corev1.Node{fixture.GPUHost("node-c", h100Label, nil), fixture.GPUHost(nodeA, h100Label, nil), fixture.GPUHost("node-b", h100Label, nil), fixture.GPUHost("node-d", h100Label, nil), fixture.GPUHost("node-e", h100Label, nil)}
	delete(nodes[1].Labels, nvidia.LabelGPUProduct)
	drifted := h100Profiles(map[string]string{"7g.80gb": "7g.79gb"})
	reports := []v1alpha1.GPUNode{
		report(nodeA, []v1alpha1.GPUStatus{
			fixture.WholeGPU(1, h100, "team/whole"),
			withProfiles(fixture.MIGGPU(0, "", fixture.HeldBy(fixture.Instance("3g.40gb", 4, 4), "team/web-0"), fixture.Busy(fixture.Instance("1g.10gb", 0, 1)), fixture.Instance("2g.20gb", 2, 2)), drifted),
		}),
		report("node-b", []v1alpha1.GPUStatus{withProfiles(fixture.MIGGPU(0, h100, fixture.Instance("7g.79gb", 0, 8)), drifted)}),
		report("node-c", []v1alpha1.GPUStatus{fixture.MIGGPU(0, h100)}, observedAgo(time.Hour)),
		report("node-d", nil, nvml(metav1.ConditionFalse, "no driver")),
	}
	// podLevel gives a pod pod-level limits, which the API server copies into requests.
	podLevel := func(p *corev1.Pod) {
		p.Spec.Resources = &corev1.ResourceRequirements{Limits: fixture.Resources("cpu", "3", "memory", "3Gi")}
	}
	pods := []corev1.Pod{
		pod("web-0", fixture.Requests("cpu", "1", "nvidia.com/mig-3g.40gb", "1"), fixture.WithInit("init", "cpu", "2"), fixture.Priority(10)),
		pod("whole", fixture.Requests("nvidia.com/gpu", "1"), withVolume("scratch", emptyDir())),
		pod("bare", fixture.Unowned(), podLevel),
		pod("static", mirror(), fixture.Annotated(v1alpha1.AnnotationDoNotDisrupt, "true")),
		pod("going", terminating(), fixture.Labelled("app", "web-0")),
		pod("ds", fixture.OwnedBy("apps/v1", "DaemonSet", "ds")),
		pod("unattributed", onNode("node-e"), fixture.Requests("nvidia.com/gpu", "1")),
		pod("waiting", pendingUnbound(), fixture.Requests("nvidia.com/gpu", "2")),
		pod("done", phase(corev1.PodSucceeded)),
		pod("lim", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: fixture.Resources("cpu", "1500m", "memory", "1Gi")}
		}),
	}
	pdbs := []policyv1.PodDisruptionBudget{
		pdb("web", "web-0", 0), pdb("web-too", "web-0", 1), pdb("stale", "whole", 3, staleStatus()),
		pdb("nil", "x", 1, nilSelector()), pdb("other/web", "web-0", 1), pdb("bad", "x", 1, invalidSelector()),
	}
	return nodes, reports, pods, pdbs
}

func TestBuildDoesNotModifyInputs(t *testing.T) {
	tests := []struct {
		name string
		opts inventory.Options
	}{
		{name: "default policy", opts: inventory.Options{Now: now}},
		{name: "permissive policy with an age limit", opts: inventory.Options{Now: now, MaxReportAge: time.Minute, EvictEmptyDir: true, EvictUnmanaged: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes, reports, pods, pdbs := buildInputs()
			wantNodes, wantReports, wantPods, wantPDBs := deepCopies(nodes, reports, pods, pdbs)

			snap := inventory.Build(nodes, reports, fixture.Pointers(pods), pdbs, tc.opts)
			assertUnchanged(t, "after Build", nodes, reports, pods, pdbs, wantNodes, wantReports, wantPods, wantPDBs)

			// The snapshot shares nothing writable with its inputs: the planner may change it.
			for _, n := range snap.Nodes {
				n.Object.Labels["touched"] = "yes"
				n.Object.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("1")
				n.Allocatable[corev1.ResourceMemory] = resource.MustParse("1")
				n.Requested[corev1.ResourceCPU] = resource.MustParse("99")
				for _, p := range n.Pods {
					for k := range p.Requests {
						q := p.Requests[k]
						q.Add(resource.MustParse("7"))
						p.Requests[k] = q
					}
				}
				for _, g := range n.GPUs {
					for i := range g.Instances {
						g.Instances[i].Profile = "touched"
						if g.Instances[i].Pod != nil {
							g.Instances[i].Pod.Name = "touched"
						}
					}
					for i := range g.Pods {
						g.Pods[i].Name = "touched"
					}
				}
			}
			assertUnchanged(t, "after changing the snapshot", nodes, reports, pods, pdbs, wantNodes, wantReports, wantPods, wantPDBs)
		})
	}
}

// deepCopies copies Build's inputs with the API types' generated DeepCopy.
func deepCopies(nodes []corev1.Node, reports []v1alpha1.GPUNode, pods []corev1.Pod, pdbs []policyv1.PodDisruptionBudget) (
	[]corev1.Node, []v1alpha1.GPUNode, []corev1.Pod, []policyv1.PodDisruptionBudget) {
	n := make([]corev1.Node, len(nodes))
	for i := range nodes {
		nodes[i].DeepCopyInto(&n[i])
	}
	r := make([]v1alpha1.GPUNode, len(reports))
	for i := range reports {
		reports[i].DeepCopyInto(&r[i])
	}
	p := make([]corev1.Pod, len(pods))
	for i := range pods {
		pods[i].DeepCopyInto(&p[i])
	}
	b := make([]policyv1.PodDisruptionBudget, len(pdbs))
	for i := range pdbs {
		pdbs[i].DeepCopyInto(&b[i])
	}
	return n, r, p, b
}

// assertUnchanged fails the test when an input differs from its copy taken before Build, with
// reflect.DeepEqual so that even a cache filled inside a shared Quantity counts as a change.
func assertUnchanged(t *testing.T, when string, nodes []corev1.Node, reports []v1alpha1.GPUNode, pods []corev1.Pod,
	pdbs []policyv1.PodDisruptionBudget, wantNodes []corev1.Node, wantReports []v1alpha1.GPUNode, wantPods []corev1.Pod,
	wantPDBs []policyv1.PodDisruptionBudget) {
	t.Helper()
	for i := range wantNodes {
		if !reflect.DeepEqual(nodes[i], wantNodes[i]) {
			t.Errorf("%s: node %s changed:\n got %+v\nwant %+v", when, wantNodes[i].Name, nodes[i], wantNodes[i])
		}
	}
	for i := range wantReports {
		if !reflect.DeepEqual(reports[i], wantReports[i]) {
			t.Errorf("%s: GPUNode %s changed:\n got %+v\nwant %+v", when, wantReports[i].Name, reports[i], wantReports[i])
		}
	}
	for i := range wantPods {
		if !reflect.DeepEqual(pods[i], wantPods[i]) {
			t.Errorf("%s: pod %s/%s changed:\n got %+v\nwant %+v", when, wantPods[i].Namespace, wantPods[i].Name, pods[i], wantPods[i])
		}
	}
	for i := range wantPDBs {
		if !reflect.DeepEqual(pdbs[i], wantPDBs[i]) {
			t.Errorf("%s: PDB %s/%s changed:\n got %+v\nwant %+v", when, wantPDBs[i].Namespace, wantPDBs[i].Name, pdbs[i], wantPDBs[i])
		}
	}
}
