package rollout_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/rollout"
)

// TestReadinessChecks holds each check of a relabelled node to its verdicts: Ready when what it
// waits for holds (or does not apply), Wait with what it waits for, Fail with what to do once
// configureTimeout has passed.
func TestReadinessChecks(t *testing.T) {
	sharing := nodeStep
	sharing.SharingConfigName = "gpupool-ts-4"
	type obsFn func(*rollout.Observation)
	for _, tc := range []struct {
		name    string
		check   rollout.Check
		step    v1alpha1.NodeStep
		obs     obsFn
		waited  time.Duration
		verdict rollout.Verdict
		message string
		actions []rollout.Action
	}{
		{name: "layout verified", check: rollout.CheckLayoutVerified, obs: func(o *rollout.Observation) { o.Verified = metav1.ConditionTrue },
			verdict: rollout.Ready},
		{name: "layout not verified yet", check: rollout.CheckLayoutVerified, obs: func(o *rollout.Observation) { o.Verified = metav1.ConditionFalse },
			waited: 9 * time.Minute, verdict: rollout.Wait, message: "waiting for the agent to verify the layout"},
		{name: "layout never verified", check: rollout.CheckLayoutVerified,
			obs: func(o *rollout.Observation) {
				o.Verified, o.VerifyMessage = metav1.ConditionFalse, "GPU 0: want 3g.71gb:2"
			},
			waited: 10 * time.Minute, verdict: rollout.Fail, message: "the agent did not verify the layout within configureTimeout 10m0s: GPU 0: want 3g.71gb:2"},

		{name: "no sharing to advertise", check: rollout.CheckSharingAdvertised, step: nodeStep, verdict: rollout.Ready},
		{name: "sharing advertised", check: rollout.CheckSharingAdvertised, step: sharing,
			obs: func(o *rollout.Observation) { o.SharingAdvertised = true }, verdict: rollout.Ready},
		{name: "sharing: the device-plugin label is flipped", check: rollout.CheckSharingAdvertised, step: sharing,
			obs:     func(o *rollout.Observation) { o.SharedResource = "nvidia.com/gpu.shared=4" },
			verdict: rollout.Wait, message: "layout verified; relabelled nvidia.com/device-plugin.config=gpupool-ts-4",
			actions: []rollout.Action{rollout.ActionRelabelSharing}},
		{name: "sharing: label flipped, replicas awaited", check: rollout.CheckSharingAdvertised, step: sharing,
			obs: func(o *rollout.Observation) {
				o.SharingConfig, o.SharedResource = "gpupool-ts-4", "nvidia.com/gpu.shared=4"
			},
			verdict: rollout.Wait, message: "waiting for the device plugin to advertise nvidia.com/gpu.shared=4"},
		{name: "sharing never advertised", check: rollout.CheckSharingAdvertised, step: sharing, waited: 10 * time.Minute,
			obs:     func(o *rollout.Observation) { o.SharedResource = "nvidia.com/gpu.shared=4" },
			verdict: rollout.Fail, message: "the device plugin did not advertise nvidia.com/gpu.shared=4 for gpupool-ts-4 within configureTimeout 10m0s"},

		{name: "no DRA driver on the node", check: rollout.CheckDRASlicesPublished,
			obs: func(o *rollout.Observation) { o.DRAStale = "ignored without the driver" }, verdict: rollout.Ready},
		{name: "DRA slices current", check: rollout.CheckDRASlicesPublished, obs: func(o *rollout.Observation) { o.DRADriver = true },
			verdict: rollout.Ready},
		{name: "DRA slices stale", check: rollout.CheckDRASlicesPublished,
			obs:     func(o *rollout.Observation) { o.DRADriver, o.DRAStale = true, "its slices miss 2" },
			verdict: rollout.Wait, message: "layout verified; waiting for NVIDIA's DRA driver to publish the new MIG devices (its slices miss 2)"},
		{name: "DRA slices never published", check: rollout.CheckDRASlicesPublished, waited: 10 * time.Minute,
			obs:     func(o *rollout.Observation) { o.DRADriver, o.DRAStale = true, "its slices miss 2" },
			verdict: rollout.Fail, message: "restart it on gpu-1"},

		{name: "device plugin advertises the layout", check: rollout.CheckDevicePluginAdvertised,
			obs: func(o *rollout.Observation) { o.ExclusiveAdvertised = true }, verdict: rollout.Ready},
		{name: "the DRA driver serves the node: no device plugin to wait for", check: rollout.CheckDevicePluginAdvertised,
			obs: func(o *rollout.Observation) { o.DRADriver = true }, verdict: rollout.Ready},
		{name: "device plugin not advertising yet", check: rollout.CheckDevicePluginAdvertised,
			obs:     func(o *rollout.Observation) { o.ExclusiveResources = "nvidia.com/mig-3g.71gb=2" },
			verdict: rollout.Wait, message: "layout verified; waiting for the device plugin to advertise nvidia.com/mig-3g.71gb=2"},
		{name: "device plugin never advertising", check: rollout.CheckDevicePluginAdvertised, waited: 11 * time.Minute,
			obs:     func(o *rollout.Observation) { o.ExclusiveResources = "nvidia.com/mig-3g.71gb=2" },
			verdict: rollout.Fail, message: "check the nvidia-device-plugin pod on gpu-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			obs := cordoned()
			if tc.obs != nil {
				tc.obs(&obs)
			}
			step := tc.step
			if step.Node == "" {
				step = nodeStep
			}
			in := rollout.StepInput{Plan: planName, Step: step, Obs: obs, Limits: timeouts, Since: t0, Now: t0.Add(tc.waited)}
			r := tc.check.Judge(in)
			g.Expect(r.Verdict).To(Equal(tc.verdict))
			g.Expect(r.Message).To(ContainSubstring(tc.message))
			g.Expect(r.Actions).To(Equal(tc.actions))
		})
	}
}

// TestReadinessOrder: the layout is judged before anything the device plugin or the DRA driver
// advertises, and the first check that is not Ready decides.
func TestReadinessOrder(t *testing.T) {
	g := NewWithT(t)
	names := []string{}
	for _, c := range rollout.MIGReadiness {
		names = append(names, c.Name)
	}
	g.Expect(names).To(Equal([]string{"LayoutVerified", "SharingAdvertised", "DRASlicesPublished", "DevicePluginAdvertised"}))

	in := rollout.StepInput{Plan: planName, Step: nodeStep, Obs: cordoned(), Limits: timeouts, Since: t0, Now: t0}
	name, r := rollout.Judge(rollout.MIGReadiness, in)
	g.Expect(name).To(Equal("LayoutVerified"), "nothing advertised counts before the layout is verified")
	g.Expect(r.Verdict).To(Equal(rollout.Wait))

	in.Obs.Verified = metav1.ConditionTrue
	name, _ = rollout.Judge(rollout.MIGReadiness, in)
	g.Expect(name).To(Equal("DevicePluginAdvertised"))

	in.Obs.ExclusiveAdvertised = true
	name, r = rollout.Judge(rollout.MIGReadiness, in)
	g.Expect(name).To(BeEmpty())
	g.Expect(r.Verdict).To(Equal(rollout.Ready))
}
