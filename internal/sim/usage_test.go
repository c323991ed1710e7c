package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestParseUsagePattern(t *testing.T) {
	const gi = uint64(1) << 30
	total := 71 * gi
	for _, tc := range []struct {
		value   string
		elapsed time.Duration
		want    uint64
		err     string
	}{
		{value: "steady:9Gi", want: 9 * gi},
		{value: "steady:9Gi", elapsed: time.Hour, want: 9 * gi},
		{value: "steady:100Gi", want: total}, // never above the device
		{value: "bursty:4Gi-60Gi", elapsed: 5 * time.Second, want: 60 * gi},
		{value: "bursty:4Gi-60Gi", elapsed: 30 * time.Second, want: 4 * gi},
		{value: "bursty:4Gi-60Gi", elapsed: 61 * time.Second, want: 60 * gi},
		{value: "bursty:4Gi-60Gi/10s", elapsed: 3 * time.Second, want: 4 * gi},
		{value: "bursty:4Gi-60Gi/10s", elapsed: 11 * time.Second, want: 60 * gi},
		{value: "preallocate:0.9", want: uint64(0.9 * float64(total))},
		{value: "steady", err: "want steady:<quantity>"},
		{value: "steady:lots", err: `"lots" is not a memory quantity`},
		{value: "bursty:4Gi", err: "bursty needs <low>-<high>"},
		{value: "bursty:60Gi-4Gi", err: "below the low"},
		{value: "bursty:4Gi-60Gi/never", err: "not a positive Go duration"},
		{value: "preallocate:1.5", err: "must be in (0, 1]"},
		{value: "idle:1Gi", err: `unknown pattern "idle"`},
	} {
		p, err := parseUsagePattern(tc.value)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one containing %q", tc.value, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.value, err)
			continue
		}
		if got := p.bytesAt(tc.elapsed, total); got != tc.want {
			t.Errorf("%q after %s: %d bytes, want %d", tc.value, tc.elapsed, got, tc.want)
		}
	}
}

// The pattern a pod declares is what the agent's NVML reader sees on the device the pod holds
// alone, a MIG device or a whole GPU; pods without one report nothing, and a bad one is named.
func TestReadUsageReportsDeclaredPatterns(t *testing.T) {
	n := newTestNode(t, "h200", 3, PresetAll3g) // two 3g.71gb per GPU
	if err := n.applyGPU(2, gpuTarget{}); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	now := start
	n.now = func() time.Time { return now }
	gpus := mustGPUs(t, n)
	annotate := func(p *corev1.Pod, v string) *corev1.Pod {
		p.Annotations = map[string]string{AnnotationUsage: v}
		return p
	}
	steady := annotate(gpuPod("steady", "node-a", "nvidia.com/mig-3g.71gb", 1), "steady:9Gi")
	bursty := annotate(gpuPod("bursty", "node-a", "nvidia.com/mig-3g.71gb", 1), "bursty:4Gi-60Gi/10s")
	whole := annotate(gpuPod("whole", "node-a", "nvidia.com/gpu", 1), "preallocate:0.5")
	bad := annotate(gpuPod("bad", "node-a", "nvidia.com/mig-3g.71gb", 1), "steady:lots")
	quiet := gpuPod("quiet", "node-a", "nvidia.com/mig-3g.71gb", 1)
	n.mu.Lock()
	n.syncAssignmentsLocked([]*corev1.Pod{steady, bursty, whole, bad, quiet}, gpus)
	n.mu.Unlock()
	podKey := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }

	now = start.Add(5 * time.Second) // bursty is past its burst (the first 2s of 10s)
	got, err := n.ReadUsage(context.Background())
	if err == nil || !strings.Contains(err.Error(), "pod ns/bad") {
		t.Errorf("error %v, want one naming pod ns/bad", err)
	}
	byPod := map[string]int64{}
	for key, ids := range n.Assignments() {
		if m, ok := got[ids[0]]; ok {
			byPod[key.Name] = m.UsedMiB
		}
	}
	wholeMiB := got[gpus[2].UUID].TotalMiB
	want := map[string]int64{"steady": 9 * 1024, "bursty": 4 * 1024, "whole": wholeMiB / 2}
	if len(byPod) != len(want) {
		t.Errorf("usage read for %v, want exactly %v", byPod, want)
	}
	for pod, mib := range want {
		if byPod[pod] != mib {
			t.Errorf("pod %s uses %d MiB, want %d", pod, byPod[pod], mib)
		}
	}

	now = start.Add(11 * time.Second) // the second burst
	got, _ = n.ReadUsage(context.Background())
	if m := got[n.Assignments()[podKey("bursty")][0]]; m.UsedMiB != 60*1024 {
		t.Errorf("bursty uses %d MiB in its burst, want %d", m.UsedMiB, 60*1024)
	}

	// The pod leaves: its device reports nothing in use.
	n.mu.Lock()
	n.syncAssignmentsLocked([]*corev1.Pod{bursty, whole, bad, quiet}, gpus)
	n.mu.Unlock()
	if _, ok := n.usage[podKey("steady")]; ok {
		t.Error("the departed pod's pattern is still remembered")
	}
}
