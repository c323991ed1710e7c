package rollout_test

import (
	"strings"
	"testing"
	"time"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/rollout"
)

// A ResourceClaim of NVIDIA's DRA driver allocated on a GPU a step changes, after the plan
// was made, is seen before the step disrupts anything: the agent's report attributes only the
// device plugin's devices, so without the claims the step would carve the GPU under it.
func TestClaimOnStep(t *testing.T) {
	gpus := []v1alpha1.GPUStatus{
		{Index: 0, UUID: "GPU-0", Instances: []v1alpha1.MIGInstance{{Profile: "1g.18gb", UUID: "MIG-0"}, {Profile: "1g.18gb", UUID: "MIG-1"}}},
		{Index: 1, UUID: "GPU-1", Instances: []v1alpha1.MIGInstance{{Profile: "1g.18gb", UUID: "MIG-2"}}},
		{Index: 2, UUID: "GPU-2"},
	}
	step := v1alpha1.NodeStep{Node: "gpu-1",
		GPUs: []v1alpha1.GPUChange{
			{Index: 0, From: v1alpha1.ProfileCounts{"1g.18gb": 2}, To: v1alpha1.ProfileCounts{"3g.71gb": 1}},
			{Index: 2, To: v1alpha1.ProfileCounts{"7g.141gb": 1}}},
		Evictions: []v1alpha1.Eviction{{PodReference: v1alpha1.PodReference{Namespace: "team", Name: "leaving"}}}}
	for _, tc := range []struct {
		name    string
		claimed map[string]rollout.ClaimFact
		want    string // a part of the reason; "" when the step still holds
	}{
		{"no claims", nil, ""},
		{"a claim on a GPU the step leaves alone", map[string]rollout.ClaimFact{
			"MIG-2": {Claim: "team/c", Pods: []string{"team/p"}, GPU: "GPU-1"}}, ""},
		{"a claim on an instance of a changed GPU", map[string]rollout.ClaimFact{
			"MIG-1": {Claim: "team/c", Pods: []string{"team/p"}, GPU: "GPU-0"}},
			"ResourceClaim team/c was allocated device MIG-1 on GPU 0 of node gpu-1, which the plan changes without evicting team/p"},
		{"a claim whose pod has not started", map[string]rollout.ClaimFact{
			"MIG-0": {Claim: "team/c", GPU: "GPU-0"}}, "its pod is about to start"},
		{"a whole GPU allocated", map[string]rollout.ClaimFact{
			"GPU-2": {Claim: "team/whole", Pods: []string{"team/p"}, GPU: "GPU-2"}}, "device GPU-2 on GPU 2"},
		{"a device the agent does not report, on a changed GPU", map[string]rollout.ClaimFact{
			"MIG-gone": {Claim: "team/c", Pods: []string{"team/p"}, GPU: "GPU-0"}}, "device MIG-gone on GPU 0"},
		{"a shared claim whose pods the step evicts only in part", map[string]rollout.ClaimFact{
			"MIG-0": {Claim: "team/shared", Pods: []string{"team/leaving", "team/staying"}, GPU: "GPU-0"}}, "without evicting team/staying"},
		{"a claim whose every pod the step evicts", map[string]rollout.ClaimFact{
			"MIG-0": {Claim: "team/c", Pods: []string{"team/leaving"}, GPU: "GPU-0"}}, ""},
		{"a device of no known GPU matched by its UUID", map[string]rollout.ClaimFact{
			"MIG-1": {Claim: "team/c", Pods: []string{"team/p"}}}, "device MIG-1 on GPU 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rollout.ClaimOnStep(step, gpus, tc.claimed)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("ClaimOnStep = %q, want %q", got, tc.want)
			}
			// Revalidate, before the step starts, says the same.
			plan := &v1alpha1.RepartitionPlan{Spec: v1alpha1.RepartitionPlanSpec{Steps: []v1alpha1.NodeStep{step}}}
			facts := rollout.Facts{GPUs: map[string][]v1alpha1.GPUStatus{"gpu-1": gpus}, Claimed: tc.claimed}
			if got := rollout.Revalidate(plan, facts); tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("Revalidate = %q, want %q", got, tc.want)
			}
		})
	}
}

// A claim allocated on a changed GPU cancels the step and gives the node back, as long as
// mig-manager was never asked to touch the GPUs: up to the relabel. After it, the GPUs are
// mig-manager's and the step goes on.
func TestClaimCancelsTheStepUpToTheRelabel(t *testing.T) {
	const claimed = "ResourceClaim team/c was allocated device MIG-1 on GPU 0 of node gpu-1, which the plan changes without evicting team/p"
	configuring := cordoned()
	configuring.ConfigWritten, configuring.LayoutExpected = true, true
	relabelled := configuring
	relabelled.MIGConfig = nodeStep.MIGConfigName
	for _, tc := range []struct {
		name    string
		cur     v1alpha1.NodeStepStatus
		obs     rollout.Observation
		state   v1alpha1.NodeStepState
		actions []rollout.Action
		message string
	}{
		{"pending", v1alpha1.NodeStepStatus{}, rollout.Observation{NodeExists: true}, v1alpha1.NodeFailed, nil, "cancelled: " + claimed},
		{"cordoned", at(v1alpha1.NodeCordoned, false), cordoned(), v1alpha1.NodeFailed, []rollout.Action{rollout.ActionUncordon}, "cancelled: " + claimed},
		{"draining", at(v1alpha1.NodeDraining, false), withPods(cordoned(), 1, ""), v1alpha1.NodeFailed,
			[]rollout.Action{rollout.ActionUncordon}, "cancelled: " + claimed},
		{"draining a node someone else cordoned", at(v1alpha1.NodeDraining, true), withPods(cordoned(), 1, ""), v1alpha1.NodeFailed,
			[]rollout.Action{rollout.ActionReleaseCordon}, "cancelled: " + claimed},
		{"configuring, before the relabel", at(v1alpha1.NodeConfiguring, false), configuring, v1alpha1.NodeFailed,
			[]rollout.Action{rollout.ActionUncordon}, "cancelled before the relabel: " + claimed},
		{"configuring, relabelled: mig-manager's now", at(v1alpha1.NodeConfiguring, false), relabelled, v1alpha1.NodeConfiguring, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := tc.obs
			obs.Claimed = claimed
			res := rollout.Step(planName, nodeStep, tc.cur, obs, timeouts, t0.Add(time.Second))
			if res.Status.State != tc.state {
				t.Fatalf("state %s (%s), want %s", res.Status.State, res.Status.Message, tc.state)
			}
			if len(res.Actions) != len(tc.actions) || len(tc.actions) > 0 && res.Actions[0] != tc.actions[0] {
				t.Errorf("actions %v, want %v", res.Actions, tc.actions)
			}
			if tc.message != "" && res.Status.Message != tc.message {
				t.Errorf("message %q, want %q", res.Status.Message, tc.message)
			}
		})
	}
}
