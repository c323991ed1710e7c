package inventory_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/inventory"
)

func TestNodeBlockers(t *testing.T) {
	const noReport = "no GPUNode report: is the gpupool agent running on this node?"
	// gpus is node-a's usual hardware: GPU 0 with a 1g.10gb instance held by team/held and a
	// free one, GPU 1 with MIG off held by team/whole.
	gpus := func() []v1alpha1.GPUStatus {
		return []v1alpha1.GPUStatus{
			fixture.MIGGPU(0, h100, fixture.HeldBy(fixture.Instance("1g.10gb", 0, 1), "team/held"), fixture.Instance("1g.10gb", 1, 1)),
			fixture.WholeGPU(1, h100, "team/whole"),
		}
	}
	tests := []struct {
		name     string
		reports  []v1alpha1.GPUNode
		pods     []corev1.Pod
		maxAge   time.Duration
		beats    map[string]time.Time
		blocker  string
		wantGPUs int
		// unreported: the blocker is the report's (missing, unreadable or stale), not a pod's.
		unreported bool
	}{{
		name:       "no GPUNode report",
		blocker:    noReport,
		unreported: true,
	}, {
		name:       "only another node's report",
		reports:    []v1alpha1.GPUNode{report("node-b", gpus())},
		blocker:    noReport,
		unreported: true,
	}, {
		name:       "NVMLReady False, with the agent's message",
		reports:    []v1alpha1.GPUNode{report(nodeA, gpus(), nvml(metav1.ConditionFalse, "nvmlInit: driver/library version mismatch"))},
		blocker:    "the agent cannot read NVML: nvmlInit: driver/library version mismatch",
		unreported: true,
	}, {
		name:       "NVMLReady Unknown without a message",
		reports:    []v1alpha1.GPUNode{report(nodeA, gpus(), nvml(metav1.ConditionUnknown, ""))},
		blocker:    "the agent cannot read NVML",
		unreported: true,
	}, {
		name:       "no NVMLReady condition yet",
		reports:    []v1alpha1.GPUNode{report(nodeA, gpus(), noConditions())},
		blocker:    "the agent cannot read NVML",
		unreported: true,
	}, {
		name:       "stale report, with its age and the limit",
		reports:    []v1alpha1.GPUNode{report(nodeA, gpus(), observedAgo(10*time.Minute+400*time.Millisecond))},
		maxAge:     5 * time.Minute,
		blocker:    "the GPUNode report is 10m0s old (limit 5m0s): is the agent healthy?",
		unreported: true,
	}, {
		// An agent with a Lease writes its report only on change: an old report is fresh while
		// the agent renews its Lease.
		name:     "an old report with a fresh heartbeat is fresh",
		reports:  []v1alpha1.GPUNode{report(nodeA, gpus(), observedAgo(3*time.Hour))},
		maxAge:   5 * time.Minute,
		beats:    map[string]time.Time{nodeA: now.Add(-20 * time.Second)},
		wantGPUs: 2,
	}, {
		name:       "an old report with a stale heartbeat is stale, by the heartbeat's age",
		reports:    []v1alpha1.GPUNode{report(nodeA, gpus(), observedAgo(3*time.Hour))},
		maxAge:     5 * time.Minute,
		beats:      map[string]time.Time{nodeA: now.Add(-7 * time.Minute)},
		blocker:    "the agent's last heartbeat is 7m0s old (limit 5m0s): is the agent healthy?",
		unreported: true,
	}, {
		name:    "another node's heartbeat says nothing of this one",
		reports: []v1alpha1.GPUNode{report(nodeA, gpus(), observedAgo(10*time.Minute))},
		maxAge:  5 * time.Minute,
		beats:   map[string]time.Time{"node-b": now},
		blocker: "the GPUNode report is 10m0s old (limit 5m0s): is the agent healthy?", unreported: true,
	}, {
		name:     "a fresh report beside a stale heartbeat is fresh (an agent from before Leases)",
		reports:  []v1alpha1.GPUNode{report(nodeA, gpus(), observedAgo(10*time.Second))},
		maxAge:   5 * time.Minute,
		beats:    map[string]time.Time{nodeA: now.Add(-time.Hour)},
		wantGPUs: 2,
	}, {
		name:       "a heartbeat does not stand in for a report without observedTime",
		reports:    []v1alpha1.GPUNode{report(nodeA, gpus(), neverObserved())},
		maxAge:     5 * time.Minute,
		beats:      map[string]time.Time{nodeA: now},
		blocker:    "the GPUNode report has no observedTime",
		unreported: true,
	}, {
		name:     "a report exactly as old as the limit is fresh",
		reports:  []v1alpha1.GPUNode{report(nodeA, gpus(), observedAgo(5*time.Minute))},
		maxAge:   5 * time.Minute,
		wantGPUs: 2,
	}, {
		name:     "a report from a clock slightly ahead is fresh",
		reports:  []v1alpha1.GPUNode{report(nodeA, gpus(), observedAgo(-3*time.Second))},
		maxAge:   5 * time.Minute,
		wantGPUs: 2,
	}, {
		name:       "a report dated past the clock skew is not believed",
		reports:    []v1alpha1.GPUNode{report(nodeA, gpus(), observedAgo(-24*time.Hour))},
		maxAge:     5 * time.Minute,
		blocker:    "the GPUNode report is dated 24h0m0s in the future (more than 1m0s ahead of the manager's clock): check the node's clock",
		unreported: true,
	}, {
		name:       "a heartbeat dated past the clock skew does not keep an old report fresh",
		reports:    []v1alpha1.GPUNode{report(nodeA, gpus(), observedAgo(10*time.Minute))},
		maxAge:     5 * time.Minute,
		beats:      map[string]time.Time{nodeA: now.Add(time.Hour)},
		blocker:    "the GPUNode report is 10m0s old (limit 5m0s): is the agent healthy?",
		unreported: true,
	}, {
		name:     "a future-dated report with a credible fresh heartbeat is fresh",
		reports:  []v1alpha1.GPUNode{report(nodeA, gpus(), observedAgo(-time.Hour))},
		maxAge:   5 * time.Minute,
		beats:    map[string]time.Time{nodeA: now.Add(-10 * time.Second)},
		wantGPUs: 2,
	}, {
		name:     "MaxReportAge 0 disables the age check",
		reports:  []v1alpha1.GPUNode{report(nodeA, gpus(), observedAgo(72*time.Hour))},
		wantGPUs: 2,
	}, {
		name:     "MaxReportAge 0 accepts a report without observedTime",
		reports:  []v1alpha1.GPUNode{report(nodeA, gpus(), neverObserved())},
		wantGPUs: 2,
	}, {
		name:       "with MaxReportAge, a report without observedTime is not trusted",
		reports:    []v1alpha1.GPUNode{report(nodeA, gpus(), neverObserved())},
		maxAge:     5 * time.Minute,
		blocker:    "the GPUNode report has no observedTime",
		unreported: true,
	}, {
		name:    "GPU pod the agent has not attributed to a device",
		reports: []v1alpha1.GPUNode{report(nodeA, gpus())},
		pods:    []corev1.Pod{pod("x", fixture.Requests("cpu", "1", "nvidia.com/mig-1g.10gb", "1"))},
		blocker: "the agent has not yet reported which GPU team/x uses",
		// The GPUs are still reported, so the planner can show them.
		wantGPUs: 2,
	}, {
		name:    "unattributed pods are listed sorted, whatever GPU resource they use",
		reports: []v1alpha1.GPUNode{report(nodeA, gpus())},
		pods: []corev1.Pod{
			pod("z-shared", fixture.Requests("nvidia.com/gpu.shared", "1")),
			pod("batch/a-whole", fixture.Requests("nvidia.com/gpu", "1")),
			pod("m-init", fixture.WithInit("setup", "nvidia.com/mig-3g.40gb", "1")),
		},
		blocker:  "the agent has not yet reported which GPU batch/a-whole, team/m-init, team/z-shared uses",
		wantGPUs: 2,
	}, {
		name:    "pods holding an instance or a whole GPU are attributed",
		reports: []v1alpha1.GPUNode{report(nodeA, gpus())},
		pods: []corev1.Pod{
			pod("held", fixture.Requests("nvidia.com/mig-1g.10gb", "1")),
			pod("whole", fixture.Requests("nvidia.com/gpu", "1")),
		},
		wantGPUs: 2,
	}, {
		name:     "pods without GPU resources need no attribution",
		reports:  []v1alpha1.GPUNode{report(nodeA, gpus())},
		pods:     []corev1.Pod{pod("web", fixture.Requests("cpu", "2", "memory", "4Gi", "example.com/fpga", "1"))},
		wantGPUs: 2,
	}, {
		name:    "finished and unbound GPU pods need no attribution",
		reports: []v1alpha1.GPUNode{report(nodeA, gpus())},
		pods: []corev1.Pod{
			pod("done", phase(corev1.PodSucceeded), fixture.Requests("nvidia.com/gpu", "1")),
			pod("waiting", pendingUnbound(), fixture.Requests("nvidia.com/gpu", "1")),
		},
		wantGPUs: 2,
	}, {
		// Charts often template "nvidia.com/gpu: 0" for CPU-only replicas; such a pod holds no
		// device, so the agent can never attribute it and must not be waited for.
		name:     "a pod asking for zero GPUs needs no attribution",
		reports:  []v1alpha1.GPUNode{report(nodeA, gpus())},
		pods:     []corev1.Pod{pod("cpu-only", fixture.Requests("cpu", "1", "nvidia.com/gpu", "0"))},
		wantGPUs: 2,
	}, {
		name:       "an unreadable report is reported before unattributed pods",
		reports:    []v1alpha1.GPUNode{report(nodeA, gpus(), nvml(metav1.ConditionFalse, "no devices"))},
		pods:       []corev1.Pod{pod("x", fixture.Requests("nvidia.com/gpu", "1"))},
		blocker:    "the agent cannot read NVML: no devices",
		unreported: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := []corev1.Node{fixture.GPUHost(nodeA, h100Label, nil), fixture.GPUHost("node-b", h100Label, nil)}
			snap := inventory.Build(nodes, tc.reports, fixture.Pointers(tc.pods), nil,
				inventory.Options{Now: now, MaxReportAge: tc.maxAge, Heartbeats: tc.beats})
			n := nodeNamed(t, snap, nodeA)
			if n.Blocker != tc.blocker {
				t.Errorf("Blocker = %q\nwant      %q", n.Blocker, tc.blocker)
			}
			if n.Unreported != tc.unreported {
				t.Errorf("Unreported = %v, want %v", n.Unreported, tc.unreported)
			}
			if len(n.GPUs) != tc.wantGPUs {
				t.Errorf("%d GPUs, want %d", len(n.GPUs), tc.wantGPUs)
			}
			// A blocked node still carries everything else the planner reports on.
			if n.Object == nil || n.Object.Name != nodeA || len(n.Allocatable) == 0 {
				t.Errorf("node object or allocatable missing: %+v", n)
			}
		})
	}
}
