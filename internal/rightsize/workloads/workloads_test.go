package workloads_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/podrecord"
	"github.com/gpupool/gpupool/internal/rightsize"
	"github.com/gpupool/gpupool/internal/rightsize/workloads"
)

const gib = 1024

var day = int64((25 * time.Hour).Seconds())

var opts = rightsize.Options{MinWindow: 24 * time.Hour, MinSamples: 100}

// use is a pod's published usage on a 3g.71gb instance of an H200, measured for a day.
func use(key string, p95, peak int64) v1alpha1.PodUsage {
	k := fixture.Key(key, "team")
	return v1alpha1.PodUsage{Namespace: k.Namespace, Name: k.Name, P50MiB: p95, P95MiB: p95, PeakMiB: peak, CeilingMiB: 71 * gib,
		Samples: 3000, WindowSeconds: day}
}

func rs(name, deployment string) appsv1.ReplicaSet {
	return appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: "Deployment", Name: deployment, UID: "d", Controller: ptr.To(true)}}}}
}

var mig3g = fixture.Requests("nvidia.com/mig-3g.71gb", "1")

func pod(key string, opts ...fixture.PodOption) corev1.Pod {
	return fixture.Pod(key, append([]fixture.PodOption{fixture.Running("gpu-0"), mig3g}, opts...)...)
}

// base is one H200 node of pool-a, whose policy allows 1g.18gb, 2g.35gb and 3g.71gb.
func base() *input {
	node := fixture.GPUHost("gpu-0", "NVIDIA-H200", nil, "pool", "a")
	policy := v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pool-a"}, Spec: v1alpha1.GPUPoolPolicySpec{
		NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{"pool": "a"}},
		Catalog:      []v1alpha1.CatalogEntry{{Product: "H200", MIGProfiles: []v1alpha1.MIGProfileName{"1g.18gb", "2g.35gb", "3g.71gb"}}},
	}}
	return &input{Input: workloads.Input{
		Nodes:    []corev1.Node{node},
		GPUNodes: []v1alpha1.GPUNode{fixture.Report("gpu-0", fixture.MIGGPU(0, "NVIDIA H200"))},
		Policies: []v1alpha1.GPUPoolPolicy{policy},
	}}
}

// input is workloads.Input with the pods as objects, made records by recommend.
type input struct {
	workloads.Input
	pods []corev1.Pod
}

func (in *input) recommend() []workloads.Result {
	ptrs := make([]*corev1.Pod, len(in.pods))
	for i := range in.pods {
		ptrs[i] = &in.pods[i]
	}
	in.Pods = podrecord.FromPods(ptrs)
	return workloads.Recommend(in.Input, opts)
}

// row is a Result in one line: key pool pods requested->profile verdict/reason freed req/used.
func row(r workloads.Result) string {
	return fmt.Sprintf("%s %s %d %s->%s %s/%s freed=%d held=%dGi used=%dGi", r.Key, r.Pool, len(r.Pods), r.Requested, r.Profile,
		r.Verdict, r.Reason, r.FreedSlices, r.RequestedMiB/gib, r.UsedMiB/gib)
}

func TestRecommend(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*input)
		want []string
	}{{
		name: "a Deployment's pods are one workload, through their ReplicaSet",
		edit: func(in *input) {
			in.ReplicaSets = []appsv1.ReplicaSet{rs("server-5d8f", "server")}
			in.pods = []corev1.Pod{
				pod("server-b", fixture.OwnedBy("apps/v1", "ReplicaSet", "server-5d8f")),
				pod("server-a", fixture.OwnedBy("apps/v1", "ReplicaSet", "server-5d8f")),
			}
			in.GPUNodes[0].Status.Usage = []v1alpha1.PodUsage{use("server-a", 9*gib, 9*gib), use("server-b", 9*gib, 10*gib)}
		},
		want: []string{"Deployment team/server pool-a 2 3g.71gb->1g.18gb Shrink/SmallerProfileFits freed=6 held=142Gi used=18Gi"},
	}, {
		name: "without its ReplicaSet, a Deployment's pods are grouped by the ReplicaSet",
		edit: func(in *input) {
			in.pods = []corev1.Pod{pod("server-a", fixture.OwnedBy("apps/v1", "ReplicaSet", "server-5d8f"))}
			in.GPUNodes[0].Status.Usage = []v1alpha1.PodUsage{use("server-a", 9*gib, 9*gib)}
		},
		want: []string{"ReplicaSet team/server-5d8f pool-a 1 3g.71gb->1g.18gb Shrink/SmallerProfileFits freed=3 held=71Gi used=9Gi"},
	}, {
		name: "without its ReplicaSet, the pod-template-hash label names the Deployment",
		edit: func(in *input) {
			in.pods = []corev1.Pod{
				pod("server-a", fixture.OwnedBy("apps/v1", "ReplicaSet", "server-5d8f"), fixture.Labelled("pod-template-hash", "5d8f")),
				pod("server-b", fixture.OwnedBy("apps/v1", "ReplicaSet", "server-77aa"), fixture.Labelled("pod-template-hash", "77aa")),
			}
			in.GPUNodes[0].Status.Usage = []v1alpha1.PodUsage{use("server-a", 9*gib, 9*gib), use("server-b", 9*gib, 9*gib)}
		},
		want: []string{"Deployment team/server pool-a 2 3g.71gb->1g.18gb Shrink/SmallerProfileFits freed=6 held=142Gi used=18Gi"},
	}, {
		name: "finished pods, shared devices and pods without a GPU are no workload",
		edit: func(in *input) {
			done := pod("done", fixture.OwnedBy("batch/v1", "Job", "done"))
			done.Status.Phase = corev1.PodSucceeded
			in.pods = []corev1.Pod{done,
				fixture.Pod("shared", fixture.Running("gpu-0"), fixture.Requests("nvidia.com/mig-1g.18gb.shared", "1")),
				fixture.Pod("shared-gpu", fixture.Running("gpu-0"), fixture.Requests("nvidia.com/gpu.shared", "1")),
				fixture.Pod("other-vendor", fixture.Running("gpu-0"), fixture.Requests("example.com/1g.18gb", "1")),
				fixture.Pod("web", fixture.Running("gpu-0"), fixture.Requests("cpu", "1")),
				fixture.Pod("notebook", fixture.Running("gpu-0"), fixture.Requests("nvidia.com/gpu", "1"), fixture.Unowned())}
		},
		want: []string{"Pod team/notebook pool-a 1 whole GPU-> CannotTell/NoPods freed=0 held=0Gi used=0Gi"},
	}, {
		name: "a node no policy selects offers every profile without extras",
		edit: func(in *input) {
			in.Policies = nil
			in.pods = []corev1.Pod{pod("db-0", fixture.OwnedBy("apps/v1", "StatefulSet", "db"))}
			in.GPUNodes[0].Status.Usage = []v1alpha1.PodUsage{use("db-0", 20*gib, 22*gib)}
		},
		// 24 GiB with headroom: 1g.35gb (outside pool-a's catalog) holds it.
		want: []string{"StatefulSet team/db  1 3g.71gb->1g.35gb Shrink/SmallerProfileFits freed=2 held=71Gi used=20Gi"},
	}, {
		name: "the pool's catalog narrows the choice",
		edit: func(in *input) {
			in.pods = []corev1.Pod{pod("db-0", fixture.OwnedBy("apps/v1", "StatefulSet", "db"))}
			in.GPUNodes[0].Status.Usage = []v1alpha1.PodUsage{use("db-0", 20*gib, 22*gib)}
		},
		want: []string{"StatefulSet team/db pool-a 1 3g.71gb->2g.35gb Shrink/SmallerProfileFits freed=2 held=71Gi used=20Gi"},
	}, {
		name: "measured compute keeps a busy workload's compute slices",
		edit: func(in *input) {
			in.pods = []corev1.Pod{pod("train-x", fixture.OwnedBy("batch/v1", "Job", "train")), pod("train-y", fixture.OwnedBy("batch/v1", "Job", "train"))}
			in.GPUNodes[0].Status.Usage = []v1alpha1.PodUsage{use("train-x", 9*gib, 9*gib), use("train-y", 9*gib, 9*gib)}
			in.Compute = rightsize.ComputeActivity{{Namespace: "team", Name: "train-x"}: 0.2, {Namespace: "team", Name: "train-y"}: 0.9}
		},
		want: []string{"Job team/train pool-a 2 3g.71gb->3g.71gb Keep/RequestIsSmallest freed=0 held=142Gi used=18Gi"},
	}, {
		name: "a pod on a node without a report has no catalog",
		edit: func(in *input) {
			in.pods = []corev1.Pod{fixture.Pod("lost", fixture.Running("gpu-9"), mig3g, fixture.Unowned())}
		},
		want: []string{"Pod team/lost  1 3g.71gb-> CannotTell/UnknownCatalog freed=0 held=0Gi used=0Gi"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.edit(in)
			var got []string
			for _, r := range in.recommend() {
				got = append(got, row(r))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestRecommendComputeNote(t *testing.T) {
	in := base()
	in.pods = []corev1.Pod{pod("a", fixture.Unowned())}
	in.GPUNodes[0].Status.Usage = []v1alpha1.PodUsage{use("a", 9*gib, 9*gib)}
	r := in.recommend()[0]
	if r.ComputeMeasured || !strings.Contains(r.ComputeNote, "not measured") {
		t.Errorf("without compute: measured %v, note %q", r.ComputeMeasured, r.ComputeNote)
	}
	in.Compute = rightsize.ComputeActivity{types.NamespacedName{Namespace: "team", Name: "a"}: 0.1}
	r = in.recommend()[0]
	if !r.ComputeMeasured || r.Profile != "1g.18gb" {
		t.Errorf("with 10%% compute: measured %v, profile %s (%s)", r.ComputeMeasured, r.Profile, r.ComputeNote)
	}
}

// TestThePoolsPolicyChoosesTheBasis: a pod using 9 GiB at p95 and 20 GiB at its peak is
// recommended 1g.18gb when its pool holds the p95 (the default), 2g.35gb when the pool's policy
// asks for the peak (spec.rightsizing.basis), and 1g.18gb again when the caller asks for p95
// for one run (kubectl gpupool rightsize --basis p95).
func TestThePoolsPolicyChoosesTheBasis(t *testing.T) {
	in := base()
	in.pods = []corev1.Pod{pod("a", fixture.Unowned())}
	in.GPUNodes[0].Status.Usage = []v1alpha1.PodUsage{use("a", 9*gib, 20*gib)}
	if r := in.recommend()[0]; r.Profile != "1g.18gb" {
		t.Fatalf("default basis: %s (%s), want 1g.18gb", r.Profile, r.Message)
	}
	in.Policies[0].Spec.Rightsizing.Basis = v1alpha1.RightsizePeak
	if r := in.recommend()[0]; r.Profile != "2g.35gb" {
		t.Fatalf("the pool holds the peak: %s (%s), want 2g.35gb", r.Profile, r.Message)
	}
	ptrs := []*corev1.Pod{&in.pods[0]}
	in.Pods = podrecord.FromPods(ptrs)
	p95 := opts
	p95.Basis = rightsize.BasisP95
	if r := workloads.Recommend(in.Input, p95)[0]; r.Profile != "1g.18gb" {
		t.Fatalf("--basis p95 over the pool's peak: %s (%s), want 1g.18gb", r.Profile, r.Message)
	}
}
