package planner_test

import (
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/planner"
)

// now is the planning time of every test: the fixtures' clock.
var now = fixture.Now

// cluster builds real API objects the way the API server and the agent would hold them, so
// that tests exercise inventory.Build and demand.Pending as well as the planner.
type cluster struct {
	t        testing.TB
	nodes    []corev1.Node
	gpuNodes []v1alpha1.GPUNode
	pods     []corev1.Pod
	pdbs     []policyv1.PodDisruptionBudget
}

func newCluster(t testing.TB) *cluster { return &cluster{t: t} }

// node adds a pool node with one GPU per layout ("1g.18gb:7", or "off" for MIG disabled).
func (c *cluster) node(name, product string, layouts ...string) *cluster {
	p, ok := mig.LookupProduct(product)
	if !ok {
		c.t.Fatalf("unknown product %s", product)
	}
	c.nodes = append(c.nodes, fixture.GPUHost(name, product, nil, "pool", "a"))
	gn := fixture.Report(name)
	gn.Status.ObservedTime = ptr.To(metav1.NewTime(now))
	for i, l := range layouts {
		g := v1alpha1.GPUStatus{Index: int32(i), Product: product, MIGMode: &v1alpha1.MIGModeStatus{Current: "Enabled"}}
		if l == "off" {
			g.MIGMode.Current = "Disabled"
		} else {
			layout, err := mig.ParseLayout(l)
			if err != nil {
				c.t.Fatal(err)
			}
			placed, err := p.Place(layout, nil)
			if err != nil {
				c.t.Fatalf("layout %s on %s: %v", l, product, err)
			}
			for _, in := range placed {
				g.Instances = append(g.Instances, v1alpha1.MIGInstance{Profile: in.Profile,
					Placement: v1alpha1.SlicePlacement{Start: int32(in.Placement.Start), Size: int32(in.Placement.Size)}})
			}
		}
		gn.Status.GPUs = append(gn.Status.GPUs, g)
	}
	c.gpuNodes = append(c.gpuNodes, gn)
	return c
}

// podOpt changes one thing of a pod.
type podOpt = fixture.PodOption

func nodeSelector(k, v string) podOpt {
	return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{k: v} }
}

func cpu(q string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse(q)
	}
}

// newPod is a pod of a ReplicaSet (fixture.Pod) asking for one CPU, 1Gi and the given counts of
// other resources.
func newPod(name string, resources map[string]int64, opts ...podOpt) corev1.Pod {
	kv := []string{"cpu", "1", "memory", "1Gi"}
	for r, n := range resources {
		kv = append(kv, r, strconv.FormatInt(n, 10))
	}
	return fixture.Pod(name, append([]podOpt{fixture.Requests(kv...)}, opts...)...)
}

// running binds a pod holding `count` free instances of profile on one GPU of a node (or the
// whole GPU with profile "gpu").
func (c *cluster) running(name, node string, gpu int, profile string, opts ...podOpt) *cluster {
	res := map[string]int64{}
	if profile == "gpu" {
		res["nvidia.com/gpu"] = 1
	} else {
		res[mig.ResourceName(profile)] = 1
	}
	p := newPod(name, res, opts...)
	p.Spec.NodeName = node
	p.Status.Phase = corev1.PodRunning
	c.pods = append(c.pods, p)
	ref := &v1alpha1.PodReference{Namespace: p.Namespace, Name: p.Name}
	for i := range c.gpuNodes {
		if c.gpuNodes[i].Name != node {
			continue
		}
		g := &c.gpuNodes[i].Status.GPUs[gpu]
		if profile == "gpu" {
			g.Pods = append(g.Pods, *ref)
			return c
		}
		for k := range g.Instances {
			if g.Instances[k].Profile == profile && g.Instances[k].Pod == nil {
				g.Instances[k].Pod, g.Instances[k].Busy = ref, true
				return c
			}
		}
	}
	c.t.Fatalf("no free %s on %s GPU %d", profile, node, gpu)
	return c
}

// pending adds an unschedulable pod asking for resources.
func (c *cluster) pending(name string, resources map[string]int64, opts ...podOpt) *cluster {
	c.pods = append(c.pods, newPod(name, resources, append([]podOpt{fixture.Unschedulable(now.Add(-10 * time.Minute))}, opts...)...))
	return c
}

func (c *cluster) pdb(name, label string, allowed int32) *cluster {
	c.pdbs = append(c.pdbs, fixture.PDB(name, label, allowed))
	return c
}

// input assembles the planner's input the way the controller does.
func (c *cluster) input(policy *v1alpha1.GPUPoolPolicy) planner.Input {
	snap := inventory.Build(c.nodes, c.gpuNodes, fixture.Pointers(c.pods), c.pdbs, inventory.Options{Now: now})
	pending, _ := demand.Pending(fixture.Pointers(c.pods), now, 30*time.Second)
	return planner.Input{Snapshot: snap, Pending: pending, Policy: policy, Now: now}
}

func (c *cluster) plan(policy *v1alpha1.GPUPoolPolicy) *planner.Result {
	c.t.Helper()
	res, err := planner.Plan(c.input(policy))
	if err != nil {
		c.t.Fatal(err)
	}
	return res
}

type policyOpt func(*v1alpha1.GPUPoolPolicy)

func approval(m v1alpha1.ApprovalMode) policyOpt {
	return func(p *v1alpha1.GPUPoolPolicy) { p.Spec.Disruption.Approval = m }
}

// budget bounds both kinds of change to n nodes: nodes that evict and nodes that only re-carve
// idle GPUs.
func budget(n int) policyOpt {
	return func(p *v1alpha1.GPUPoolPolicy) {
		p.Spec.Disruption.MaxDisruptedNodes = ptr.To(intstr.FromInt(n))
		p.Spec.Disruption.MaxReconfiguringNodes = ptr.To(intstr.FromInt(n))
	}
}

func catalog(product string, wholeGPU bool, profiles ...string) policyOpt {
	return func(p *v1alpha1.GPUPoolPolicy) {
		e := v1alpha1.CatalogEntry{Product: product, AllowWholeGPU: wholeGPU}
		for _, pr := range profiles {
			e.MIGProfiles = append(e.MIGProfiles, v1alpha1.MIGProfileName(pr))
		}
		p.Spec.Catalog = append(p.Spec.Catalog, e)
	}
}

func standby(resource string, minFree int32) policyOpt {
	return func(p *v1alpha1.GPUPoolPolicy) {
		p.Spec.Shapes = append(p.Spec.Shapes, v1alpha1.StandbyShape{Resource: resource, MinFree: minFree})
	}
}

func policy(opts ...policyOpt) *v1alpha1.GPUPoolPolicy {
	p := &v1alpha1.GPUPoolPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-a"},
		Spec: v1alpha1.GPUPoolPolicySpec{
			NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{"pool": "a"}},
			Disruption:   v1alpha1.DisruptionPolicy{Approval: v1alpha1.ApprovalManual},
		},
	}
	for _, o := range opts {
		o(p)
	}
	if len(p.Spec.Catalog) == 0 {
		catalog("H200", false, "1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")(p)
	}
	return p
}

func mig1(profile string) map[string]int64 { return map[string]int64{mig.ResourceName(profile): 1} }

func itoa(i int) string { return strconv.Itoa(i) }

func ptrIntOrString(s string) *intstr.IntOrString { v := intstr.Parse(s); return &v }
