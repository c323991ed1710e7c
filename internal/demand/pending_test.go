package demand

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/fixture"
)

func TestPendingFilters(t *testing.T) {
	gpu1 := []GPURequest{{Resource: "nvidia.com/gpu", Kind: KindGPU, Count: 1}}
	tests := []struct {
		name string
		pod  corev1.Pod
		// Exactly one of gpus (the pod is demand), reason (it is skipped, and the reason says
		// this) or neither (no GPU: the pod appears nowhere).
		gpus   []GPURequest
		since  time.Time
		reason string
	}{{
		name:  "unschedulable GPU pod is demand",
		pod:   pendingPod("p"),
		gpus:  gpu1,
		since: now.Add(-time.Minute),
	}, {
		name:   "scheduled pod",
		pod:    pendingPod("p", withCondition(corev1.ConditionTrue, ""), func(p *corev1.Pod) { p.Spec.NodeName = "gpu-1" }),
		reason: "scheduled to node gpu-1",
	}, {
		// A stale Unschedulable condition does not outvote a binding.
		name:   "pod with nodeName and a stale Unschedulable condition",
		pod:    pendingPod("p", func(p *corev1.Pod) { p.Spec.NodeName = "gpu-2" }),
		reason: "scheduled to node gpu-2",
	}, {
		name:   "placed but not bound yet",
		pod:    pendingPod("p", withCondition(corev1.ConditionTrue, "")),
		reason: "placed by the scheduler (PodScheduled=True), binding in progress",
	}, {
		name: "terminating",
		pod: pendingPod("p", func(p *corev1.Pod) {
			ts := metav1.NewTime(now.Add(-time.Second))
			p.DeletionTimestamp = &ts
		}),
		reason: "terminating: the pod has a deletionTimestamp",
	}, {
		name:   "succeeded",
		pod:    pendingPod("p", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		reason: "finished: phase Succeeded",
	}, {
		name:   "failed",
		pod:    pendingPod("p", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }),
		reason: "finished: phase Failed",
	}, {
		name:   "scheduling gated by condition only",
		pod:    pendingPod("p", withCondition(corev1.ConditionFalse, corev1.PodReasonSchedulingGated)),
		reason: "waiting for the scheduler to retry after its scheduling gates were removed (PodScheduled=False, reason SchedulingGated)",
	}, {
		name: "scheduling gated by spec",
		pod: pendingPod("p", withCondition(corev1.ConditionFalse, corev1.PodReasonSchedulingGated), func(p *corev1.Pod) {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/quota"}, {Name: "example.com/topology"}}
		}),
		reason: "held by scheduling gates example.com/quota, example.com/topology: the scheduler ignores it until they are removed",
	}, {
		name:   "not yet tried by the scheduler",
		pod:    pendingPod("p", func(p *corev1.Pod) { p.Status.Conditions = nil }),
		reason: "not yet tried by the scheduler: no PodScheduled condition",
	}, {
		name:   "PodScheduled=False for another reason",
		pod:    pendingPod("p", withCondition(corev1.ConditionFalse, "SchedulerError")),
		reason: `not marked unschedulable: PodScheduled=False with reason "SchedulerError", not "Unschedulable"`,
	}, {
		name:   "PodScheduled unknown",
		pod:    pendingPod("p", withCondition(corev1.ConditionUnknown, corev1.PodReasonUnschedulable)),
		reason: `not marked unschedulable: PodScheduled is "Unknown"`,
	}, {
		name:   "nominated after preemption",
		pod:    pendingPod("p", func(p *corev1.Pod) { p.Status.NominatedNodeName = "gpu-4" }),
		reason: "nominated to node gpu-4 after preempting pods there; the scheduler expects to place it",
	}, {
		name:   "too young",
		pod:    pendingPod("p", unschedulableFor(minAge-time.Nanosecond)),
		reason: "pending for 29s, less than minPendingAge 30s: the scheduler may still place it",
	}, {
		name:   "barely tried",
		pod:    pendingPod("p", unschedulableFor(1500*time.Microsecond)),
		reason: "pending for 1ms, less than minPendingAge 30s: the scheduler may still place it",
	}, {
		name:  "pending exactly minPendingAge counts",
		pod:   pendingPod("p", unschedulableFor(minAge)),
		gpus:  gpu1,
		since: now.Add(-minAge),
	}, {
		name: "no transition time: creation time counts",
		pod: pendingPod("p", func(p *corev1.Pod) {
			p.Status.Conditions[0].LastTransitionTime = metav1.Time{}
			p.CreationTimestamp = metav1.NewTime(now.Add(-45 * time.Second))
		}),
		gpus:  gpu1,
		since: now.Add(-45 * time.Second),
	}, {
		name: "no transition time and created recently",
		pod: pendingPod("p", func(p *corev1.Pod) {
			p.Status.Conditions[0].LastTransitionTime = metav1.Time{}
			p.CreationTimestamp = metav1.NewTime(now.Add(-10 * time.Second))
		}),
		reason: "pending for 10s, less than minPendingAge 30s: the scheduler may still place it",
	}, {
		name: "clock skew: a transition in the future is zero age",
		pod:  pendingPod("p", unschedulableFor(-time.Hour)),
		// Reported as 0s, not as a negative duration.
		reason: "pending for 0s, less than minPendingAge 30s: the scheduler may still place it",
	}, {
		name: "no GPU resources",
		pod:  pendingPod("p", withMain(fixture.Resources("cpu", "4", "memory", "1Gi"), nil)),
	}, {
		name: "GPU resource with a zero count",
		pod:  pendingPod("p", withMain(fixture.Resources("cpu", "4", "nvidia.com/gpu", "0"), nil)),
	}, {
		// Even a finished pod appears nowhere when it asks for no GPU: the lists are about GPUs.
		name: "no GPU resources and finished",
		pod: pendingPod("p", withMain(fixture.Resources("cpu", "4"), nil), func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodSucceeded
		}),
	}, {
		name:  "MIG with media extensions",
		pod:   pendingPod("p", withMain(fixture.Resources("nvidia.com/mig-1g.10gb.me", "1"), fixture.Resources("nvidia.com/mig-1g.10gb.me", "1"))),
		gpus:  []GPURequest{{Resource: "nvidia.com/mig-1g.10gb.me", Kind: KindMIG, Profile: "1g.10gb+me", Count: 1}},
		since: now.Add(-time.Minute),
	}, {
		name: "several GPU resources on one pod, sorted by resource",
		pod: pendingPod("p",
			withMain(fixture.Resources("nvidia.com/mig-3g.40gb", "1", "nvidia.com/gpu", "2"), nil),
			withContainer(container("helper", fixture.Resources("nvidia.com/gpu.shared", "1", "nvidia.com/mig-1g.10gb.shared", "2")))),
		gpus: []GPURequest{
			{Resource: "nvidia.com/gpu", Kind: KindGPU, Count: 2},
			{Resource: "nvidia.com/gpu.shared", Kind: KindShared, Count: 1},
			{Resource: "nvidia.com/mig-1g.10gb.shared", Kind: KindShared, Profile: "1g.10gb", Count: 2},
			{Resource: "nvidia.com/mig-3g.40gb", Kind: KindMIG, Profile: "3g.40gb", Count: 1},
		},
		since: now.Add(-time.Minute),
	}, {
		name:  "limits only",
		pod:   pendingPod("p", withMain(nil, fixture.Resources("nvidia.com/mig-2g.20gb", "3"))),
		gpus:  []GPURequest{{Resource: "nvidia.com/mig-2g.20gb", Kind: KindMIG, Profile: "2g.20gb", Count: 3}},
		since: now.Add(-time.Minute),
	}, {
		name:  "init container asks for more GPUs than the main one",
		pod:   pendingPod("p", withInit(container("warm", fixture.Resources("nvidia.com/gpu", "4")))),
		gpus:  []GPURequest{{Resource: "nvidia.com/gpu", Kind: KindGPU, Count: 4}},
		since: now.Add(-time.Minute),
	}, {
		name:  "GPU asked for only by an init container",
		pod:   pendingPod("p", withMain(fixture.Resources("cpu", "1"), nil), withInit(container("warm", fixture.Resources("nvidia.com/gpu", "1")))),
		gpus:  gpu1,
		since: now.Add(-time.Minute),
	}, {
		name:  "sidecar GPU adds to the main container's",
		pod:   pendingPod("p", withInit(sidecar("proxy", fixture.Resources("nvidia.com/gpu", "1")))),
		gpus:  []GPURequest{{Resource: "nvidia.com/gpu", Kind: KindGPU, Count: 2}},
		since: now.Add(-time.Minute),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs, skipped := Pending(pointers([]corev1.Pod{tt.pod}), now, minAge)
			switch {
			case tt.gpus != nil:
				if len(skipped) != 0 || len(reqs) != 1 {
					t.Fatalf("want the pod as demand, got demand %v, skipped %v", reqs, skipped)
				}
				r := reqs[0]
				if !slices.Equal(r.GPUs, tt.gpus) {
					t.Errorf("GPUs = %+v, want %+v", r.GPUs, tt.gpus)
				}
				if !r.PendingSince.Equal(tt.since) {
					t.Errorf("PendingSince = %v, want %v", r.PendingSince, tt.since)
				}
				if r.Pod != (types.NamespacedName{Namespace: "team-a", Name: "p"}) || r.UID != "uid-team-a-p" {
					t.Errorf("Pod = %v %v", r.Pod, r.UID)
				}
			case tt.reason != "":
				if len(reqs) != 0 || len(skipped) != 1 {
					t.Fatalf("want the pod skipped, got demand %v, skipped %v", reqs, skipped)
				}
				if skipped[0].Reason != tt.reason {
					t.Errorf("reason = %q\nwant     %q", skipped[0].Reason, tt.reason)
				}
				if skipped[0].Pod.Name != "p" {
					t.Errorf("skipped pod %v", skipped[0].Pod)
				}
			default:
				if len(reqs) != 0 || len(skipped) != 0 {
					t.Errorf("want the pod in neither list, got demand %v, skipped %v", reqs, skipped)
				}
			}
		})
	}
}

func TestPendingRequestFields(t *testing.T) {
	sel := map[string]string{"nvidia.com/gpu.product": "NVIDIA-H200"}
	aff := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}},
	}}}
	secs := int64(60)
	tol := []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs}}
	pods := []corev1.Pod{pendingPod("p", fixture.Priority(1000), func(p *corev1.Pod) {
		p.Spec.NodeSelector = sel
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: aff}}
		p.Spec.Tolerations = tol
		p.Spec.Overhead = fixture.Resources("memory", "64Mi")
	})}
	reqs, _ := Pending(pointers(pods), now, minAge)
	if len(reqs) != 1 {
		t.Fatalf("got %d requests", len(reqs))
	}
	r := reqs[0]
	if r.Priority != 1000 {
		t.Errorf("Priority = %d", r.Priority)
	}
	if !equality.Semantic.DeepEqual(r.Requests, fixture.Resources("cpu", "1", "memory", "64Mi", "nvidia.com/gpu", "1", "pods", "1")) {
		t.Errorf("Requests = %v", r.Requests)
	}
	if !equality.Semantic.DeepEqual(r.NodeSelector, sel) || !equality.Semantic.DeepEqual(r.RequiredAffinity, aff) || !equality.Semantic.DeepEqual(r.Tolerations, tol) {
		t.Errorf("placement rules not carried over: %v %v %v", r.NodeSelector, r.RequiredAffinity, r.Tolerations)
	}
	// The request must not alias the pod: informer caches are shared and read-only.
	r.NodeSelector["x"] = "y"
	r.RequiredAffinity.NodeSelectorTerms[0].MatchExpressions[0].Values[0] = "changed"
	*r.Tolerations[0].TolerationSeconds = 1
	if len(sel) != 1 || aff.NodeSelectorTerms[0].MatchExpressions[0].Values[0] != "a" || secs != 60 {
		t.Errorf("Request shares memory with the pod it came from")
	}
}

func TestPendingNegativeMinAge(t *testing.T) {
	reqs, skipped := Pending(pointers([]corev1.Pod{pendingPod("p", unschedulableFor(-time.Minute))}), now, -time.Hour)
	if len(reqs) != 1 || len(skipped) != 0 {
		t.Errorf("a negative minPendingAge must act as zero: demand %v, skipped %v", reqs, skipped)
	}
}

func TestPendingOrder(t *testing.T) {
	pods := []corev1.Pod{
		pendingPod("old-low", unschedulableFor(time.Hour)),
		pendingPod("new-high", fixture.Priority(100), unschedulableFor(time.Minute)),
		pendingPod("old-high", fixture.Priority(100), unschedulableFor(time.Hour)),
		pendingPod("b", unschedulableFor(time.Minute)),
		pendingPod("a", unschedulableFor(time.Minute), inNamespace("team-b")),
		pendingPod("a", unschedulableFor(time.Minute)),
		pendingPod("negative", fixture.Priority(-10), unschedulableFor(24*time.Hour)),
		pendingPod("young", unschedulableFor(time.Second)),
		pendingPod("gated", withCondition(corev1.ConditionFalse, corev1.PodReasonSchedulingGated)),
		pendingPod("cpu-only", withMain(fixture.Resources("cpu", "1"), nil)),
	}
	reqs, skipped := Pending(pointers(pods), now, minAge)
	var got []string
	for _, r := range reqs {
		got = append(got, r.Pod.String())
	}
	want := []string{"team-a/old-high", "team-a/new-high", "team-a/old-low", "team-a/a", "team-a/b", "team-b/a", "team-a/negative"}
	if !slices.Equal(got, want) {
		t.Errorf("order = %v\nwant    %v", got, want)
	}
	var gotSkipped []string
	for _, s := range skipped {
		gotSkipped = append(gotSkipped, s.Pod.Name)
	}
	if !slices.Equal(gotSkipped, []string{"gated", "young"}) {
		t.Errorf("skipped = %v", gotSkipped)
	}
}

// TestPendingDeterministic shuffles a varied input many times: the planner must see the same
// demand in the same order whatever order the informer listed pods in.
func TestPendingDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pods := randomPods(rng, 200)
	wantReqs, wantSkipped := Pending(pointers(pods), now, minAge)
	if len(wantReqs) == 0 || len(wantSkipped) == 0 {
		t.Fatalf("the generator should produce both demand and skipped pods: %d, %d", len(wantReqs), len(wantSkipped))
	}
	for seed := range uint64(50) {
		shuffled := slices.Clone(pods)
		r := rand.New(rand.NewPCG(seed, 99))
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		reqs, skipped := Pending(pointers(shuffled), now, minAge)
		if !sameDemand(reqs, wantReqs) || !slices.Equal(skipped, wantSkipped) {
			t.Fatalf("permutation %d changed the output", seed)
		}
	}
}

func TestSummarize(t *testing.T) {
	pods := []corev1.Pod{
		pendingPod("a"),
		pendingPod("b", withMain(fixture.Resources("nvidia.com/gpu", "2", "nvidia.com/mig-1g.10gb.me", "1"), nil)),
		pendingPod("c", withMain(nil, fixture.Resources("nvidia.com/mig-1g.10gb.me", "3"))),
		pendingPod("young", unschedulableFor(time.Second)),
	}
	reqs, _ := Pending(pointers(pods), now, minAge)
	got := Summarize(reqs)
	want := []ShapeCount{
		{Resource: "nvidia.com/gpu", Kind: KindGPU, Pods: 2, Units: 3},
		{Resource: "nvidia.com/mig-1g.10gb.me", Kind: KindMIG, Profile: "1g.10gb+me", Pods: 2, Units: 4},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Summarize = %+v\nwant        %+v", got, want)
	}
	if Summarize(nil) != nil {
		t.Errorf("Summarize(nil) should be nil")
	}
}

// genPod remembers what a generated pod should be, computed from how it was built rather
// than by the code under test.
type genPod struct {
	gpu      bool // asks for a positive amount of some GPU resource
	eligible bool // passes every filter except age
}

var genResources = []string{"cpu", "memory", "nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.10gb.me", "nvidia.com/mig-3g.40gb", "example.com/fpga"}

// randomPods builds n pods with unique names covering every filter, resource placement
// (requests, limits, init containers, sidecars) and ordering key.
func randomPods(rng *rand.Rand, n int) []corev1.Pod {
	pods, _ := randomPodsWithTruth(rng, n)
	return pods
}

func randomPodsWithTruth(rng *rand.Rand, n int) ([]corev1.Pod, []genPod) {
	pods := make([]corev1.Pod, n)
	truth := make([]genPod, n)
	for i := range pods {
		p := pendingPod(fmt.Sprintf("pod-%03d", i), inNamespace([]string{"team-a", "team-b", "team-c"}[rng.IntN(3)]))
		p.Spec.Containers = nil
		nc := 1 + rng.IntN(3)
		for c := range nc {
			ctr := corev1.Container{Name: fmt.Sprintf("c%d", c)}
			for range rng.IntN(4) {
				res := genResources[rng.IntN(len(genResources))]
				q := fixture.Resources(res, fmt.Sprint(rng.IntN(3)))
				switch rng.IntN(3) {
				case 0:
					ctr.Resources.Requests = merge(ctr.Resources.Requests, q)
				case 1:
					ctr.Resources.Limits = merge(ctr.Resources.Limits, q)
				default:
					ctr.Resources.Requests = merge(ctr.Resources.Requests, q)
					ctr.Resources.Limits = merge(ctr.Resources.Limits, q)
				}
			}
			switch {
			case c == 0:
				p.Spec.Containers = append(p.Spec.Containers, ctr)
			case rng.IntN(2) == 0:
				p.Spec.InitContainers = append(p.Spec.InitContainers, ctr)
			case rng.IntN(2) == 0:
				always := corev1.ContainerRestartPolicyAlways
				ctr.RestartPolicy = &always
				p.Spec.InitContainers = append(p.Spec.InitContainers, ctr)
			default:
				p.Spec.Containers = append(p.Spec.Containers, ctr)
			}
		}
		truth[i].gpu = podHasGPU(&p)
		eligible := true
		switch rng.IntN(12) {
		case 0:
			p.Spec.NodeName = "gpu-1"
			eligible = false
		case 1:
			ts := metav1.NewTime(now)
			p.DeletionTimestamp = &ts
			eligible = false
		case 2:
			p.Status.Phase = []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed}[rng.IntN(2)]
			eligible = false
		case 3:
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "gate"}}
			p.Status.Conditions[0].Reason = corev1.PodReasonSchedulingGated
			eligible = false
		case 4:
			p.Status.Conditions = nil
			eligible = false
		case 5:
			p.Status.NominatedNodeName = "gpu-2"
			eligible = false
		case 6:
			p.Status.Conditions[0].Status = corev1.ConditionTrue
			eligible = false
		}
		truth[i].eligible = eligible
		if len(p.Status.Conditions) > 0 {
			// Ages cluster around minAge so the boundary is exercised; some are in the future.
			p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(now.Add(-time.Duration(rng.IntN(90)-10) * time.Second))
			if rng.IntN(10) == 0 {
				p.Status.Conditions[0].LastTransitionTime = metav1.Time{}
			}
		}
		if rng.IntN(3) > 0 {
			prio := int32(rng.IntN(3)*100 - 100)
			p.Spec.Priority = &prio
		}
		if rng.IntN(4) == 0 {
			p.Spec.NodeSelector = map[string]string{"zone": []string{"a", "b"}[rng.IntN(2)]}
		}
		if rng.IntN(4) == 0 {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "infer", Effect: corev1.TaintEffectNoSchedule}}
		}
		pods[i] = p
	}
	return pods, truth
}

// sameDemand compares requests by value; quantities and times have more than one in-memory
// form for one value, so reflect.DeepEqual would be too strict.
func sameDemand(a, b []Request) bool {
	return slices.EqualFunc(a, b, func(x, y Request) bool {
		return x.Pod == y.Pod && x.UID == y.UID && x.Priority == y.Priority &&
			x.PendingSince.Equal(y.PendingSince) && slices.Equal(x.GPUs, y.GPUs) && equality.Semantic.DeepEqual(x.Requests, y.Requests) &&
			equality.Semantic.DeepEqual(x.NodeSelector, y.NodeSelector) &&
			equality.Semantic.DeepEqual(x.RequiredAffinity, y.RequiredAffinity) &&
			equality.Semantic.DeepEqual(x.Tolerations, y.Tolerations)
	})
}

func merge(into, from corev1.ResourceList) corev1.ResourceList {
	if into == nil {
		into = corev1.ResourceList{}
	}
	for k, v := range from {
		into[k] = v
	}
	return into
}

// podHasGPU decides from the spec alone, independently of PodRequests: some container's
// effective request (request, else limit) for a GPU resource is positive. With non-negative
// quantities, the max and sum rules keep such a resource positive for the pod.
func podHasGPU(p *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{p.Spec.Containers, p.Spec.InitContainers} {
		for i := range cs {
			if containerHasGPU(cs[i]) {
				return true
			}
		}
	}
	return false
}

func containerHasGPU(c corev1.Container) bool {
	for name, q := range c.Resources.Limits {
		if _, has := c.Resources.Requests[name]; has {
			continue
		}
		if _, _, ok := Classify(name); ok && q.Sign() > 0 {
			return true
		}
	}
	for name, q := range c.Resources.Requests {
		if _, _, ok := Classify(name); ok && q.Sign() > 0 {
			return true
		}
	}
	return false
}

// FuzzPending checks, on generated pods, that Pending never panics, never modifies its input,
// puts every GPU pod in exactly one list and no other pod in any, keeps its order whatever the
// input order, and that Summarize adds up.
func FuzzPending(f *testing.F) {
	f.Add(uint64(1), uint8(10), uint16(30))
	f.Add(uint64(2), uint8(0), uint16(0))
	f.Add(uint64(3), uint8(100), uint16(60))
	f.Add(uint64(4), uint8(255), uint16(1))
	f.Fuzz(func(t *testing.T, seed uint64, n uint8, minAgeSeconds uint16) {
		rng := rand.New(rand.NewPCG(seed, uint64(n)))
		pods, truth := randomPodsWithTruth(rng, int(n))
		minPendingAge := time.Duration(minAgeSeconds) * time.Second
		before := make([]corev1.Pod, len(pods))
		for i := range pods {
			pods[i].DeepCopyInto(&before[i])
		}
		reqs, skipped := Pending(pointers(pods), now, minPendingAge)
		if !equality.Semantic.DeepEqual(before, pods) {
			t.Fatal("Pending modified its input")
		}

		where := map[string]int{}
		for _, r := range reqs {
			where[r.Pod.Name]++
		}
		for _, s := range skipped {
			where[s.Pod.Name]++
			if s.Reason == "" {
				t.Errorf("%s skipped without a reason", s.Pod)
			}
		}
		for i := range pods {
			want := 0
			if truth[i].gpu {
				want = 1
			}
			if got := where[pods[i].Name]; got != want {
				t.Errorf("%s (gpu=%v) appears %d times, want %d", pods[i].Name, truth[i].gpu, got, want)
			}
		}

		byName := map[string]*corev1.Pod{}
		for i := range pods {
			byName[pods[i].Name] = &pods[i]
		}
		units := 0
		for _, r := range reqs {
			i := slices.IndexFunc(pods, func(p corev1.Pod) bool { return p.Name == r.Pod.Name })
			if !truth[i].eligible {
				t.Errorf("%s is demand but was built to be filtered out", r.Pod)
			}
			if age := max(now.Sub(r.PendingSince), 0); age < minPendingAge {
				t.Errorf("%s is demand after %s, less than %s", r.Pod, age, minPendingAge)
			}
			if p := byName[r.Pod.Name]; (p.Spec.Priority == nil && r.Priority != 0) || (p.Spec.Priority != nil && *p.Spec.Priority != r.Priority) {
				t.Errorf("%s priority %d", r.Pod, r.Priority)
			}
			if len(r.GPUs) == 0 || !slices.IsSortedFunc(r.GPUs, func(a, b GPURequest) int { return strings.Compare(string(a.Resource), string(b.Resource)) }) {
				t.Errorf("%s GPUs empty or unsorted: %v", r.Pod, r.GPUs)
			}
			for _, g := range r.GPUs {
				q := r.Requests[g.Resource]
				if g.Count <= 0 || q.Value() != g.Count {
					t.Errorf("%s: %s count %d, requests say %s", r.Pod, g.Resource, g.Count, q.String())
				}
				units += int(g.Count)
			}
			if q := r.Requests[corev1.ResourcePods]; q.Value() != 1 {
				t.Errorf("%s: pods = %s", r.Pod, q.String())
			}
			_, _ = r.Matches(&corev1.Node{})
		}
		if !slices.IsSortedFunc(reqs, compareRequests) {
			t.Error("demand is not sorted")
		}
		var pods2 int32
		var units2 int64
		for _, c := range Summarize(reqs) {
			pods2 += c.Pods
			units2 += c.Units
		}
		var wantPods int32
		for _, r := range reqs {
			wantPods += int32(len(r.GPUs))
		}
		if pods2 != wantPods || units2 != int64(units) {
			t.Errorf("Summarize counts %d pods and %d units, want %d and %d", pods2, units2, wantPods, units)
		}

		shuffled := slices.Clone(pods)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		reqs2, skipped2 := Pending(pointers(shuffled), now, minPendingAge)
		if !sameDemand(reqs, reqs2) || !slices.Equal(skipped, skipped2) {
			t.Error("shuffling the input changed the output")
		}
	})
}

// pointers points at each pod, as the controller's pass hands pods to Pending.
func pointers(pods []corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, len(pods))
	for i := range pods {
		out[i] = &pods[i]
	}
	return out
}
