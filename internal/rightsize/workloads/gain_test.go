package workloads_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/rightsize/workloads"
)

// twoNodes is pool-a on two H200 nodes of one GPU each: a Deployment's two pods share gpu-0's
// GPU on 3g.71gb each, using 9 GiB (Shrink to 1g.18gb); a Job's pod holds 3g.71gb on gpu-1 and
// uses 60 GiB (Keep).
func twoNodes() *input {
	in := base()
	in.Nodes = append(in.Nodes, fixture.GPUHost("gpu-1", "NVIDIA-H200", nil, "pool", "a"))
	in.GPUNodes = []v1alpha1.GPUNode{
		fixture.Report("gpu-0", fixture.MIGGPU(0, "NVIDIA H200",
			fixture.HeldBy(fixture.Instance("3g.71gb", 0, 4), "team/server-a"), fixture.HeldBy(fixture.Instance("3g.71gb", 4, 4), "team/server-b"))),
		fixture.Report("gpu-1", fixture.MIGGPU(0, "NVIDIA H200", fixture.HeldBy(fixture.Instance("3g.71gb", 0, 4), "team/train-x"))),
	}
	in.GPUNodes[0].Status.Usage = []v1alpha1.PodUsage{use("server-a", 9*gib, 9*gib), use("server-b", 9*gib, 9*gib)}
	in.GPUNodes[1].Status.Usage = []v1alpha1.PodUsage{use("train-x", 60*gib, 60*gib)}
	in.pods = []corev1.Pod{
		pod("server-a", fixture.OwnedBy("apps/v1", "ReplicaSet", "server-5d8f"), fixture.Labelled("pod-template-hash", "5d8f")),
		pod("server-b", fixture.OwnedBy("apps/v1", "ReplicaSet", "server-5d8f"), fixture.Labelled("pod-template-hash", "5d8f")),
		fixture.Pod("train-x", fixture.Running("gpu-1"), mig3g, fixture.OwnedBy("batch/v1", "Job", "train")),
	}
	return in
}

func gainRow(g workloads.Gain) string {
	var applied []string
	for _, r := range g.Applied {
		applied = append(applied, fmt.Sprintf("%s %s->%s", r.Key, r.Requested, r.Profile))
	}
	return fmt.Sprintf("%s pods=%d now=%d/%d before=%+v after=%+v freed=%d/%d applied=[%s]", g.Policy, g.Pods, g.NowGPUs, g.NowNodes,
		g.Before, g.After, g.FreedGPUs(), g.FreedNodes(), strings.Join(applied, ", "))
}

func TestGains(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*input)
		want []string
	}{{
		name: "the shrunk Deployment joins the Job's GPU: one GPU and one node freed",
		edit: func(*input) {},
		want: []string{"pool-a pods=3 now=2/2 before={GPUs:2 Nodes:2 Unplaced:0} after={GPUs:1 Nodes:1 Unplaced:0} freed=1/1 " +
			"applied=[Deployment team/server 3g.71gb->1g.18gb]"},
	}, {
		name: "without usage nothing is applied and nothing freed",
		edit: func(in *input) {
			for i := range in.GPUNodes {
				in.GPUNodes[i].Status.Usage = nil
			}
		},
		want: []string{"pool-a pods=3 now=2/2 before={GPUs:2 Nodes:2 Unplaced:0} after={GPUs:2 Nodes:2 Unplaced:0} freed=0/0 applied=[]"},
	}, {
		name: "a node two policies select is in no pool",
		edit: func(in *input) {
			in.Policies = append(in.Policies, v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pool-b"}, Spec: v1alpha1.GPUPoolPolicySpec{
				NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": "gpu-1"}}}})
		},
		want: []string{"pool-a pods=2 now=1/1 before={GPUs:1 Nodes:1 Unplaced:0} after={GPUs:1 Nodes:1 Unplaced:0} freed=0/0 " +
			"applied=[Deployment team/server 3g.71gb->1g.18gb]"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			in := twoNodes()
			tc.edit(in)
			results := in.recommend()
			var got []string
			for _, g := range workloads.Gains(in.Input, results) {
				got = append(got, gainRow(g))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestUsageReported(t *testing.T) {
	in := twoNodes()
	if !workloads.UsageReported(in.GPUNodes) {
		t.Error("usage on gpu-0 and gpu-1: UsageReported = false")
	}
	in.GPUNodes[0].Status.Usage, in.GPUNodes[1].Status.Usage = nil, nil
	if workloads.UsageReported(in.GPUNodes) {
		t.Error("no usage: UsageReported = true")
	}
}
