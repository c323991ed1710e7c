package agent_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
)

const h200 = "NVIDIA H200"

// migGPU builds a GPU status with MIG enabled and one instance per profile name.
func migGPU(index int32, product string, profiles ...string) v1alpha1.GPUStatus {
	g := v1alpha1.GPUStatus{
		Index:   index,
		Product: product,
		MIGMode: &v1alpha1.MIGModeStatus{Current: agent.MIGEnabled, Pending: agent.MIGEnabled},
	}
	for i, p := range profiles {
		g.Instances = append(g.Instances, v1alpha1.MIGInstance{Profile: p, Placement: pl(int32(i), 1)})
	}
	return g
}

// wholeGPU builds a GPU status with MIG disabled.
func wholeGPU(index int32, product string) v1alpha1.GPUStatus {
	return v1alpha1.GPUStatus{
		Index:   index,
		Product: product,
		MIGMode: &v1alpha1.MIGModeStatus{Current: agent.MIGDisabled, Pending: agent.MIGDisabled},
	}
}

func repeat(name string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = name
	}
	return out
}

func TestVerifyLayout(t *testing.T) {
	sevenSmall := migGPU(0, h200, repeat("1g.18gb", 7)...)
	pendingEnable := wholeGPU(1, h200)
	pendingEnable.MIGMode.Pending = agent.MIGEnabled
	broken := migGPU(2, h200, "3g.71gb")
	broken.Error = "GetGpuInstances(3g.71gb): Unknown Error (nvml return 999)"

	for _, tc := range []struct {
		name     string
		expected []v1alpha1.GPULayout
		actual   []v1alpha1.GPUStatus
		status   metav1.ConditionStatus
		reason   string
		message  string
	}{{
		name:    "no expectation",
		actual:  []v1alpha1.GPUStatus{sevenSmall},
		status:  metav1.ConditionTrue,
		reason:  agent.ReasonNoExpectation,
		message: "spec.expectedLayout is empty: nothing to verify",
	}, {
		name:     "multiset matches whatever the placement",
		expected: []v1alpha1.GPULayout{{Index: 0, Profiles: v1alpha1.ProfileCounts{"3g.71gb": 1, "1g.18gb": 2, "2g.35gb": 0}}},
		actual:   []v1alpha1.GPUStatus{migGPU(0, h200, "1g.18gb", "3g.71gb", "1g.18gb"), wholeGPU(1, h200)},
		status:   metav1.ConditionTrue,
		reason:   agent.ReasonLayoutMatches,
		message:  "1 GPU(s) match spec.expectedLayout",
	}, {
		name:     "empty profiles mean MIG disabled",
		expected: []v1alpha1.GPULayout{{Index: 0}, {Index: 1, Profiles: v1alpha1.ProfileCounts{}}},
		actual:   []v1alpha1.GPUStatus{wholeGPU(0, h200), wholeGPU(1, "Tesla T4")},
		status:   metav1.ConditionTrue,
		reason:   agent.ReasonLayoutMatches,
		message:  "2 GPU(s) match spec.expectedLayout",
	}, {
		name:     "driver alias is canonicalised for a known product",
		expected: []v1alpha1.GPULayout{{Index: 0, Profiles: v1alpha1.ProfileCounts{"7g.80gb": 1}}},
		actual:   []v1alpha1.GPUStatus{migGPU(0, "NVIDIA H100 80GB HBM3", "7g.79gb")},
		status:   metav1.ConditionTrue,
		reason:   agent.ReasonLayoutMatches,
		message:  "1 GPU(s) match spec.expectedLayout",
	}, {
		name: "every difference is listed in GPU order",
		expected: []v1alpha1.GPULayout{
			{Index: 3, Profiles: v1alpha1.ProfileCounts{"1g.18gb": 1}},
			{Index: 0, Profiles: v1alpha1.ProfileCounts{"3g.71gb": 2}},
			{Index: 1, Profiles: v1alpha1.ProfileCounts{"7g.141gb": 1}},
			{Index: 4},
		},
		actual: []v1alpha1.GPUStatus{sevenSmall, pendingEnable, migGPU(4, h200)},
		status: metav1.ConditionFalse,
		reason: agent.ReasonLayoutMismatch,
		message: "GPU 0: want 3g.71gb:2, have 1g.18gb:7; " +
			"GPU 1: want 7g.141gb:1, have MIG disabled (MIG mode Enabled pending a GPU reset); " +
			"GPU 3: missing; " +
			"GPU 4: want MIG disabled, have MIG enabled with no instances",
	}, {
		name:     "unknown product compares names as written",
		expected: []v1alpha1.GPULayout{{Index: 0, Profiles: v1alpha1.ProfileCounts{"1g.12gb": 2}}},
		actual:   []v1alpha1.GPUStatus{migGPU(0, "NVIDIA Future GPU", "1g.12gb", "2g.24gb")},
		status:   metav1.ConditionFalse,
		reason:   agent.ReasonLayoutMismatch,
		message:  "GPU 0: want 1g.12gb:2, have 2g.24gb:1,1g.12gb:1",
	}, {
		name:     "a GPU without MIG support cannot hold instances",
		expected: []v1alpha1.GPULayout{{Index: 0, Profiles: v1alpha1.ProfileCounts{"1g.10gb": 1}}},
		actual: []v1alpha1.GPUStatus{{Index: 0, Product: "Tesla T4",
			MIGMode: &v1alpha1.MIGModeStatus{Current: agent.MIGUnsupported, Pending: agent.MIGUnsupported}}},
		status:  metav1.ConditionFalse,
		reason:  agent.ReasonLayoutMismatch,
		message: "GPU 0: want 1g.10gb:1, have no MIG support",
	}, {
		name:     "an unreadable GPU is Unknown, not a mismatch",
		expected: []v1alpha1.GPULayout{{Index: 2, Profiles: v1alpha1.ProfileCounts{"3g.71gb": 2}}},
		actual:   []v1alpha1.GPUStatus{broken},
		status:   metav1.ConditionUnknown,
		reason:   agent.ReasonGPUUnreadable,
		message:  "NVML failed for an expected GPU, its layout cannot be verified: GPU 2: " + broken.Error,
	}, {
		name: "a real difference wins over an unreadable GPU",
		expected: []v1alpha1.GPULayout{
			{Index: 0, Profiles: v1alpha1.ProfileCounts{"3g.71gb": 2}},
			{Index: 2, Profiles: v1alpha1.ProfileCounts{"3g.71gb": 2}},
		},
		actual:  []v1alpha1.GPUStatus{sevenSmall, broken},
		status:  metav1.ConditionFalse,
		reason:  agent.ReasonLayoutMismatch,
		message: "GPU 0: want 3g.71gb:2, have 1g.18gb:7; unverifiable: GPU 2: " + broken.Error,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := agent.VerifyLayout(tc.expected, tc.actual)
			want := metav1.Condition{Type: v1alpha1.ConditionLayoutVerified, Status: tc.status, Reason: tc.reason, Message: tc.message}
			if got != want {
				t.Errorf("VerifyLayout\n got %+v\nwant %+v", got, want)
			}
		})
	}
}
