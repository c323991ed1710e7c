package snapshot

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/pool"
)

var planTime = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// h200Node is a Node item with one idle H200 GPU carved 1g.18gb:7, plus its GPUNode item.
func h200Node(name string, labels string) string {
	node := fmt.Sprintf(`- apiVersion: v1
  kind: Node
  metadata:
    name: %[1]s
    labels: {%[2]s, nvidia.com/gpu.product: NVIDIA-H200}
  status:
    allocatable: {cpu: "64", memory: 512Gi, pods: "110"}
- apiVersion: gpupool.io/v1alpha1
  kind: GPUNode
  metadata:
    name: %[1]s
  status:
    conditions:
    - {type: NVMLReady, status: "True", reason: NVMLInitialized, lastTransitionTime: "2026-11-01T00:00:00Z"}
    gpus:
    - index: 0
      product: NVIDIA H200
      migMode: {current: Enabled}
      instances:
`, name, labels)
	for s := range 7 {
		node += fmt.Sprintf("      - {profile: 1g.18gb, placement: {start: %d, size: 1}}\n", s)
	}
	return node
}

func policy(name, selector, extra string) string {
	return fmt.Sprintf(`- apiVersion: gpupool.io/v1alpha1
  kind: GPUPoolPolicy
  metadata:
    name: %s
  spec:
    nodeSelector: %s
    catalog:
    - product: NVIDIA-H200
      migProfiles: [1g.18gb, 2g.35gb, 3g.71gb]
    disruption:
      maxDisruptedNodes: 100%%
%s`, name, selector, extra)
}

// pendingPod asks for one 3g.71gb slice and has been unschedulable since since.
func pendingPod(name string, since time.Time) string {
	return fmt.Sprintf(`- apiVersion: v1
  kind: Pod
  metadata:
    name: %s
    namespace: team-a
  spec:
    containers:
    - name: main
      image: trainer
      resources:
        requests: {cpu: "8", memory: 64Gi, nvidia.com/mig-3g.71gb: "1"}
  status:
    phase: Pending
    conditions:
    - {type: PodScheduled, status: "False", reason: Unschedulable, lastTransitionTime: "%s"}
`, name, since.Format(time.RFC3339))
}

func mustParse(t *testing.T, input string) *Snapshot {
	t.Helper()
	snap, err := Parse([]byte(input))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return snap
}

func TestPlanFreezesNodesOfTwoPolicies(t *testing.T) {
	snap := mustParse(t, list(
		policy("pool-a", "{matchLabels: {pool: a}}", ""),
		policy("pool-b", "{matchExpressions: [{key: team, operator: In, values: [b]}]}", ""),
		h200Node("shared-node", "pool: a, team: b"),
		h200Node("a-node", "pool: a"),
		pendingPod("trainer-0", planTime.Add(-time.Hour)),
	))
	rep, err := snap.Plan(Options{Now: planTime})
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	if len(rep.Policies) != 2 || rep.Policies[0].Policy.Name != "pool-a" || rep.Policies[1].Policy.Name != "pool-b" {
		t.Fatalf("planned %d policies, want pool-a then pool-b", len(rep.Policies))
	}
	for _, pr := range rep.Policies {
		other := map[string]string{"pool-a": "pool-b", "pool-b": "pool-a"}[pr.Policy.Name]
		if got, want := pr.Frozen["shared-node"], "also selected by policy "+other; got != want {
			t.Errorf("%s: shared-node frozen as %q, want %q", pr.Policy.Name, got, want)
		}
		if _, ok := pr.Frozen["a-node"]; ok {
			t.Errorf("%s: a-node is frozen, but only pool-a selects it", pr.Policy.Name)
		}
		if pr.Plan == nil {
			continue
		}
		for _, s := range pr.Plan.Spec.Steps {
			if s.Node == "shared-node" {
				t.Errorf("%s changes shared-node, which two policies select", pr.Policy.Name)
			}
		}
	}
	if rep.Policies[0].Plan == nil {
		t.Fatal("pool-a has no plan; its own node a-node is idle and a 3g.71gb pod waits")
	}
	if rep.Policies[1].Plan != nil {
		t.Errorf("pool-b proposes %s, but its only node is shared", rep.Policies[1].Plan.Name)
	}
	// pool-a serves the pod: pool-b's explanation of why it cannot must not show up.
	if len(rep.Unserved) != 0 {
		t.Errorf("unserved %+v, want none", rep.Unserved)
	}
}

func TestPlanOnePolicy(t *testing.T) {
	snap := mustParse(t, list(
		policy("pool-a", "{matchLabels: {pool: a}}", ""),
		policy("pool-b", "{matchLabels: {team: b}}", ""),
		h200Node("shared-node", "pool: a, team: b"),
		pendingPod("trainer-0", planTime.Add(-time.Hour)),
	))
	rep, err := snap.Plan(Options{Now: planTime, Policy: "pool-b"})
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	if len(rep.Policies) != 1 || rep.Policies[0].Policy.Name != "pool-b" {
		t.Fatalf("planned %d policies, want pool-b only", len(rep.Policies))
	}
	// Planning one policy does not make the other disappear: the node stays contested.
	if rep.Policies[0].Frozen["shared-node"] == "" {
		t.Error("shared-node is not frozen when planning pool-b alone")
	}

	_, err = snap.Plan(Options{Now: planTime, Policy: "pool-c"})
	var serr *Error
	if !errors.As(err, &serr) {
		t.Fatalf("Plan with an unknown policy: %v, want a *snapshot.Error", err)
	}
	if want := `no GPUPoolPolicy named "pool-c" in the input (it has pool-a, pool-b)`; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

func TestPlanMinPendingAge(t *testing.T) {
	recent := pendingPod("recent", planTime.Add(-10*time.Second))
	for _, tc := range []struct {
		name, planning string
		wantWaiting    int
	}{
		{"default 30s", "", 1},
		{"policy's 5s", "    planning:\n      minPendingAge: 5s\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := mustParse(t, list(policy("pool-a", "{matchLabels: {pool: a}}", tc.planning), h200Node("node-1", "pool: a"), recent))
			rep, err := snap.Plan(Options{Now: planTime})
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			pr := rep.Policies[0]
			if len(pr.Waiting) != tc.wantWaiting {
				t.Errorf("waiting %+v, want %d pod(s)", pr.Waiting, tc.wantWaiting)
			}
			if served := len(pr.Result.Served); served != 1-tc.wantWaiting {
				t.Errorf("served %d pods, want %d", served, 1-tc.wantWaiting)
			}
		})
	}
}

func TestPlanRequiresTime(t *testing.T) {
	snap := mustParse(t, list(policyItem))
	if _, err := snap.Plan(Options{}); err == nil {
		t.Error("Plan without a time succeeded")
	}
}

func TestPlanningTime(t *testing.T) {
	clock := func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }
	override := time.Date(2027, 5, 1, 0, 0, 0, 0, time.UTC)
	withTimes := mustParse(t, list(policyItem, nodeItem))
	without := mustParse(t, list(policyItem))
	for _, tc := range []struct {
		name     string
		snap     *Snapshot
		override time.Time
		want     time.Time
	}{
		{"override wins", withTimes, override, override},
		{"newest timestamp", withTimes, time.Time{}, time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)},
		{"clock when the input has no time", without, time.Time{}, clock()},
	} {
		if got := tc.snap.PlanningTime(tc.override, clock); !got.Equal(tc.want) {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestMergeUnserved(t *testing.T) {
	pod := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }
	report := func(name string, res planner.Result) PolicyReport {
		pol := &v1alpha1.GPUPoolPolicy{}
		pol.Name = name
		return PolicyReport{Policy: pol, Result: &res}
	}
	a := report("a", planner.Result{
		Served: []types.NamespacedName{pod("served-by-a")},
		Unserved: []planner.Unserved{
			{Pod: pod("fits-in-b"), Reason: planner.ReasonNotInPool, Message: "a: not in pool"},
			{Pod: pod("capacity-in-b"), Reason: planner.ReasonNotInPool, Message: "a: not in pool"},
			{Pod: pod("nowhere"), Reason: planner.ReasonNotInPool, Message: "a: not in pool"},
		},
	})
	b := report("b", planner.Result{
		FitsNow: []types.NamespacedName{pod("fits-in-b")},
		Unserved: []planner.Unserved{
			{Pod: pod("served-by-a"), Reason: planner.ReasonNotInPool, Message: "b: not in pool"},
			{Pod: pod("capacity-in-b"), Reason: planner.ReasonCapacity, Message: "b: full"},
			{Pod: pod("nowhere"), Reason: planner.ReasonNotInPool, Message: "b: not in pool"},
		},
	})
	got := mergeUnserved([]PolicyReport{a, b})
	want := []UnservedPod{
		{Pod: pod("capacity-in-b"), Policy: "b", Reason: planner.ReasonCapacity, Message: "b: full"},
		{Pod: pod("nowhere"), Policy: "a", Reason: planner.ReasonNotInPool, Message: "a: not in pool"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("merged\n got %+v\nwant %+v", got, want)
	}
}

func TestErrorIsOneLine(t *testing.T) {
	e := &Error{Where: "item 1", Object: "Pod a/b", Field: "metadata.labels[x]", Message: "bad\nvalue\r\nhere"}
	if got := e.Error(); strings.ContainsAny(got, "\n\r") || got != "item 1 (Pod a/b): metadata.labels[x]: bad value here" {
		t.Errorf("Error() = %q", got)
	}
}

// TestPlanSaysWhatTheControllerWouldDo guards what-if against promising a plan the controller
// would not propose: with the snapshot's plans, the same pool.Decide the controller calls says
// whether the planner's plan is created, kept back by a refusal, or already under review.
func TestPlanSaysWhatTheControllerWouldDo(t *testing.T) {
	input := list(policy("pool-a", "{matchLabels: {pool: a}}", ""), h200Node("n1", "pool: a"),
		pendingPod("trainer-0", planTime.Add(-time.Hour)))
	snap := mustParse(t, input)
	rep, err := snap.Plan(Options{Now: planTime})
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	pr := rep.Policies[0]
	if pr.Plan == nil || pr.Proposal.Create != pr.Plan {
		t.Fatalf("with no plan yet the controller creates the planner's: %+v", pr.Proposal)
	}
	earlier := func(annotations map[string]string) v1alpha1.RepartitionPlan {
		p := *pr.Plan.DeepCopy()
		p.Name, p.Annotations = "pool-a-earlier", annotations
		// As the controller creates it: its own entry names, hashed (pool.HashAs).
		p.Spec.Hash = pool.HashAs(pr.Plan, p.Name)
		p.CreationTimestamp = metav1.NewTime(planTime.Add(-10 * time.Minute))
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "GPUPoolPolicy",
			Name: "pool-a", Controller: ptr.To(true)}}
		return p
	}
	for _, tc := range []struct {
		name    string
		plan    v1alpha1.RepartitionPlan
		refused bool
		kept    string
	}{
		{"the same change was rejected", earlier(map[string]string{v1alpha1.AnnotationReject: "not now"}), true, ""},
		{"the same change waits for approval", earlier(nil), false, "pool-a-earlier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := mustParse(t, input)
			snap.Plans = append(snap.Plans, tc.plan)
			rep, err := snap.Plan(Options{Now: planTime})
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			d := rep.Policies[0].Proposal
			if d.Create != nil {
				t.Errorf("what-if would promise a new plan the controller does not create")
			}
			if (d.Refused != nil) != tc.refused {
				t.Errorf("refused = %+v, want %v", d.Refused, tc.refused)
			}
			if got := ""; d.Current != nil {
				if got = d.Current.Name; got != tc.kept {
					t.Errorf("kept %q, want %q", got, tc.kept)
				}
			} else if tc.kept != "" {
				t.Errorf("kept nothing, want %q", tc.kept)
			}
		})
	}
}
