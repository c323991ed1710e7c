package rollout_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/rollout"
)

// placementStep opens 3g.71gb at memory slices 4-7 of GPU 0 on dm-1 for team/big-gpu, keeping
// the 1g partitions at 4 and 6 free and evicting team/small (its 1g at slice 5).
func placementStep() v1alpha1.NodeStep {
	return v1alpha1.NodeStep{Node: "dm-1", Disruptive: true,
		GPUs: []v1alpha1.GPUChange{{Index: 0}},
		Evictions: []v1alpha1.Eviction{{PodReference: v1alpha1.PodReference{Namespace: "team", Name: "small"}, UID: "u-small",
			LandingNode: "dm-2"}},
		Placement: &v1alpha1.PlacementOpening{Driver: "gpu.nvidia.com", GPU: 0, Profile: "3g.71gb", Start: 4, Size: 4,
			Device: "gpu-0-mig-3g71gb-2-4", Claim: v1alpha1.PodReference{Namespace: "team", Name: "big-gpu"},
			KeepFree: []string{"gpu-0-mig-1g18gb-19-4", "gpu-0-mig-1g18gb-19-6"}}}
}

func live() rollout.Observation {
	return rollout.Observation{NodeExists: true, PodsLeft: 1,
		Placement: rollout.PlacementObservation{TaintsHeld: true}}
}

// A placement step taints before it evicts, evicts only once every taint is seen, waits for
// the claim once the pods in the way are gone, and ends with the taints removed; nothing in it
// ever cordons or relabels.
func TestPlacementStepTaintsThenEvictsThenWaitsForTheClaim(t *testing.T) {
	g := NewWithT(t)
	step := placementStep()
	cur := v1alpha1.NodeStepStatus{}
	now := t0
	untainted := live()
	untainted.Placement.TaintsHeld = false
	gone := live()
	gone.PodsLeft = 0
	allocated := gone
	allocated.Placement.Allocated, allocated.Placement.AsPlanned = "device gpu-0-mig-3g71gb-2-4 of pool dm-1", true
	walk := []struct {
		obs     rollout.Observation
		state   v1alpha1.NodeStepState
		actions []rollout.Action
	}{
		{obs: untainted, state: v1alpha1.NodeDraining, actions: []rollout.Action{rollout.ActionTaint}},
		{obs: untainted, state: v1alpha1.NodeDraining, actions: []rollout.Action{rollout.ActionTaint}},
		{obs: live(), state: v1alpha1.NodeDraining, actions: []rollout.Action{rollout.ActionEvict}},
		{obs: gone, state: v1alpha1.NodeVerifying},
		{obs: gone, state: v1alpha1.NodeVerifying},
		{obs: allocated, state: v1alpha1.NodeDone, actions: []rollout.Action{rollout.ActionUntaint}},
	}
	for i, w := range walk {
		now = now.Add(time.Second)
		res := rollout.StepFor(step).Step(planName, step, cur, w.obs, timeouts, now)
		g.Expect(res.Status.State).To(Equal(w.state), "step %d: %s", i, res.Status.Message)
		g.Expect(res.Actions).To(Equal(w.actions), "step %d", i)
		cur = res.Status
	}
	g.Expect(cur.Message).To(Equal("ResourceClaim team/big-gpu was allocated device gpu-0-mig-3g71gb-2-4 of pool dm-1, the planned placement"))
}

// However a placement step fails, its taints go with it.
func TestPlacementStepFailuresRemoveTheTaints(t *testing.T) {
	step := placementStep()
	at := func(s v1alpha1.NodeStepState) v1alpha1.NodeStepStatus { return at(s, false) }
	refused := live()
	refused.Placement.Refused = "device gpu-0-mig-1g18gb-19-4, which the step would taint, is not in driver gpu.nvidia.com's pool dm-1"
	landing := live()
	landing.LandingGone = "node dm-2 no longer offers a free 1g.18gb partition"
	claimGone := live()
	claimGone.Placement.ClaimGone = true
	waiting := live()
	waiting.PodsLeft = 0
	foreign := live()
	foreign.Placement.TaintForeign = "DeviceTaintRule x is not gpupool's"
	for _, tc := range []struct {
		name  string
		cur   v1alpha1.NodeStepStatus
		obs   rollout.Observation
		after time.Duration
		msg   string
	}{
		{"refused before anything", v1alpha1.NodeStepStatus{}, refused, 0, "refused before any eviction: device gpu-0-mig-1g18gb-19-4"},
		{"refused mid-way (a forged status is judged too)", at(v1alpha1.NodeDraining), refused, 0, "stopped: device"},
		{"landing taken", at(v1alpha1.NodeDraining), landing, 0, "stopped evicting with 1 pod(s) left: node dm-2"},
		{"eviction timed out", at(v1alpha1.NodeDraining), live(), timeouts.Drain, "eviction timed out after drainTimeout 15m0s"},
		{"claim never allocated", at(v1alpha1.NodeVerifying), waiting, timeouts.Configure, "was not allocated within configureTimeout 10m0s"},
		{"claim deleted", at(v1alpha1.NodeVerifying), claimGone, 0, "ResourceClaim team/big-gpu is gone"},
		{"foreign rule under our name", at(v1alpha1.NodeDraining), foreign, 0, "stopped before evicting: DeviceTaintRule x"},
		{"node gone", at(v1alpha1.NodeDraining), rollout.Observation{}, 0, "node dm-1 no longer exists"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			res := rollout.StepFor(step).Step(planName, step, tc.cur, tc.obs, timeouts, t0.Add(tc.after))
			g.Expect(res.Status.State).To(Equal(v1alpha1.NodeFailed))
			g.Expect(res.Status.Message).To(ContainSubstring(tc.msg))
			g.Expect(res.Actions).To(Equal([]rollout.Action{rollout.ActionUntaint}))
		})
	}
}

// A claim allocated elsewhere while the pods in the way are still being evicted ends the step:
// the rest stay where they run.
func TestPlacementStepEndsWhenTheClaimIsAllocatedElsewhere(t *testing.T) {
	g := NewWithT(t)
	obs := live()
	obs.Placement.Allocated = "device gpu-1-mig-3g71gb-2-0 of pool dm-2"
	res := rollout.StepFor(placementStep()).Step(planName, placementStep(), at(v1alpha1.NodeDraining, false), obs, timeouts, t0)
	g.Expect(res.Status.State).To(Equal(v1alpha1.NodeDone))
	g.Expect(res.Actions).To(Equal([]rollout.Action{rollout.ActionUntaint}))
	g.Expect(res.Status.Message).To(ContainSubstring("not the planned gpu-0-mig-3g71gb-2-4"))
}

func TestCheckPlacement(t *testing.T) {
	devices := func() map[string]rollout.PartitionFact {
		return map[string]rollout.PartitionFact{
			"gpu-0-mig-3g71gb-2-4":  {GPU: 0, Profile: "3g.71gb", Start: 4, Size: 4},
			"gpu-0-mig-1g18gb-19-4": {GPU: 0, Profile: "1g.18gb", Start: 4, Size: 1},
			"gpu-0-mig-1g18gb-19-5": {GPU: 0, Profile: "1g.18gb", Start: 5, Size: 1},
			"gpu-0-mig-1g18gb-19-6": {GPU: 0, Profile: "1g.18gb", Start: 6, Size: 1},
			"gpu-0-mig-1g18gb-19-0": {GPU: 0, Profile: "1g.18gb", Start: 0, Size: 1},
			"gpu-1-mig-1g18gb-19-4": {GPU: 1, Profile: "1g.18gb", Start: 4, Size: 1},
		}
	}
	good := func() rollout.PlacementFacts {
		return rollout.PlacementFacts{DynamicMIG: true, Devices: devices(), ClaimRead: true, ClaimExists: true,
			Pods: map[string]rollout.PodHold{"team/small": {UID: "u-small", Devices: []string{"gpu-0-mig-1g18gb-19-5"}}}}
	}
	for _, tc := range []struct {
		name string
		edit func(*v1alpha1.NodeStep, *rollout.PlacementFacts)
		want string
	}{
		{"holds", func(*v1alpha1.NodeStep, *rollout.PlacementFacts) {}, ""},
		{"not DynamicMIG", func(_ *v1alpha1.NodeStep, f *rollout.PlacementFacts) { f.DynamicMIG = false }, "does not run DynamicMIG"},
		{"device of another node", func(s *v1alpha1.NodeStep, _ *rollout.PlacementFacts) {
			s.Placement.KeepFree = append(s.Placement.KeepFree, "gpu-7-mig-1g18gb-19-4")
		}, "device gpu-7-mig-1g18gb-19-4, which the step would taint, is not in driver gpu.nvidia.com's pool dm-1"},
		{"taints another GPU", func(s *v1alpha1.NodeStep, _ *rollout.PlacementFacts) {
			s.Placement.KeepFree = append(s.Placement.KeepFree, "gpu-1-mig-1g18gb-19-4")
		}, "it does not overlap memory slices 4-7 of GPU 0"},
		{"taints slices the step does not open", func(s *v1alpha1.NodeStep, _ *rollout.PlacementFacts) {
			s.Placement.KeepFree = append(s.Placement.KeepFree, "gpu-0-mig-1g18gb-19-0")
		}, "it does not overlap"},
		{"device is not the placement", func(s *v1alpha1.NodeStep, _ *rollout.PlacementFacts) { s.Placement.Start = 0 },
			"is 3g.71gb at memory slices 4-7 of GPU 0, not the 3g.71gb partition at memory slices 0-3"},
		{"evicts a pod holding nothing there", func(_ *v1alpha1.NodeStep, f *rollout.PlacementFacts) {
			f.Pods["team/small"] = rollout.PodHold{UID: "u-small", Devices: []string{"gpu-0-mig-1g18gb-19-0"}}
		}, "pod team/small, which the step evicts, holds no device in memory slices 4-7"},
		{"claim missing", func(_ *v1alpha1.NodeStep, f *rollout.PlacementFacts) { f.ClaimExists = false }, "does not exist"},
		{"claim allocated", func(_ *v1alpha1.NodeStep, f *rollout.PlacementFacts) { f.ClaimAllocated = true }, "is allocated already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			step, f := placementStep(), good()
			tc.edit(&step, &f)
			got := rollout.CheckPlacement(step, f)
			if tc.want == "" {
				NewWithT(t).Expect(got).To(BeEmpty())
				return
			}
			NewWithT(t).Expect(got).To(ContainSubstring(tc.want))
		})
	}
}

// A placement step writes no config, so it names none: the manager's own placement plan is
// authenticated, and revalidation leaves its GPU (whose other instances keep their pods) to
// CheckPlacement.
func TestAPlacementPlanIsTheManagersOwn(t *testing.T) {
	g := NewWithT(t)
	policy := &v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pool-a", UID: "policy-uid"}}
	plan := &v1alpha1.RepartitionPlan{
		ObjectMeta: metav1.ObjectMeta{Name: planName, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "GPUPoolPolicy", Name: policy.Name, UID: policy.UID, Controller: ptr.To(true)}}},
		Spec: v1alpha1.RepartitionPlanSpec{Policy: policy.Name, Disruptive: true, Steps: []v1alpha1.NodeStep{placementStep()}},
	}
	plan.Spec.Hash = v1alpha1.HashSteps(plan.Spec.Steps)
	inPool := func(n string) bool { return n == "dm-1" || n == "dm-2" }
	g.Expect(rollout.Authenticate(plan, policy, inPool)).To(Equal(rollout.Refusal{}))
	static := plan.DeepCopy()
	static.Spec.Steps[0].Placement = nil
	static.Spec.Hash = v1alpha1.HashSteps(static.Spec.Steps)
	g.Expect(rollout.Authenticate(static, policy, inPool).Reason).To(Equal(rollout.ReasonForeignConfigName), "a static step still needs gpupool's entry")

	facts := rollout.Facts{GPUs: map[string][]v1alpha1.GPUStatus{"dm-1": {{Index: 0, Instances: []v1alpha1.MIGInstance{
		{Profile: "1g.18gb", Pod: &v1alpha1.PodReference{Namespace: "team", Name: "stays"}}}}}}}
	g.Expect(rollout.Revalidate(plan, facts)).To(BeEmpty(), "a pod on an instance the step leaves alone does not cancel it")
}
