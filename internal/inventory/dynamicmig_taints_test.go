package inventory_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
)

// A partition tainted NoSchedule or NoExecute, by anyone's DeviceTaintRule or in the driver's
// slice, is not free for a claim: Fit goes to the next free partition in the driver's order, or
// says none is left; NoEffect taints, rules for other pools, drivers or devices, and rules being
// deleted change nothing.
func TestDynamicMIGFitSkipsTaintedPartitions(t *testing.T) {
	p := h200Product(t)
	g1, _ := p.Profile("1g.18gb")
	g3, _ := p.Profile("3g.71gb")
	rule := func(name string, sel *resourcev1.DeviceTaintSelector, effect resourcev1.DeviceTaintEffect) resourcev1.DeviceTaintRule {
		return resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourcev1.DeviceTaintRuleSpec{DeviceSelector: sel, Taint: resourcev1.DeviceTaint{Key: "k", Effect: effect}}}
	}
	dev := func(pr *mig.Profile, start int) *resourcev1.DeviceTaintSelector {
		return &resourcev1.DeviceTaintSelector{Driver: ptr.To("gpu.nvidia.com"), Pool: ptr.To(dmNode), Device: ptr.To(dmDevice(0, *pr, start))}
	}
	deleting := rule("going", dev(g3, 4), resourcev1.DeviceTaintEffectNoSchedule)
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	deleting.Finalizers = []string{"x"}
	for _, tc := range []struct {
		name    string
		rules   []resourcev1.DeviceTaintRule
		inSlice string // a device tainted NoSchedule in the driver's slice itself
		profile string
		want    inventory.FitKind
		at      int
		reason  string
	}{
		{name: "untainted 3g goes at 4-7", profile: "3g.71gb", want: inventory.FitFree, at: 4},
		{name: "a rule on the 3g at 4 closes the only free placement", profile: "3g.71gb",
			rules: []resourcev1.DeviceTaintRule{rule("r", dev(g3, 4), resourcev1.DeviceTaintEffectNoSchedule)},
			want:  inventory.FitStranded, reason: "memory slices 4-7 is free but DeviceTaintRule r"},
		{name: "NoExecute closes it too", profile: "3g.71gb",
			rules: []resourcev1.DeviceTaintRule{rule("r", dev(g3, 4), resourcev1.DeviceTaintEffectNoExecute)},
			want:  inventory.FitStranded},
		{name: "effect None leaves it", profile: "3g.71gb",
			rules: []resourcev1.DeviceTaintRule{rule("r", dev(g3, 4), resourcev1.DeviceTaintEffectNone)}, want: inventory.FitFree, at: 4},
		{name: "a rule being deleted leaves it", profile: "3g.71gb", rules: []resourcev1.DeviceTaintRule{deleting}, want: inventory.FitFree, at: 4},
		{name: "a rule for another pool leaves it", profile: "3g.71gb",
			rules: []resourcev1.DeviceTaintRule{rule("r", &resourcev1.DeviceTaintSelector{Pool: ptr.To("elsewhere")}, resourcev1.DeviceTaintEffectNoSchedule)},
			want:  inventory.FitFree, at: 4},
		{name: "a rule for another driver leaves it", profile: "3g.71gb",
			rules: []resourcev1.DeviceTaintRule{rule("r", &resourcev1.DeviceTaintSelector{Driver: ptr.To("other.example.com")}, resourcev1.DeviceTaintEffectNoSchedule)},
			want:  inventory.FitFree, at: 4},
		{name: "a rule without a selector takes no device", profile: "3g.71gb",
			rules: []resourcev1.DeviceTaintRule{rule("r", nil, resourcev1.DeviceTaintEffectNoSchedule)}, want: inventory.FitFree, at: 4},
		{name: "an empty selector takes every device", profile: "3g.71gb",
			rules: []resourcev1.DeviceTaintRule{rule("r", &resourcev1.DeviceTaintSelector{}, resourcev1.DeviceTaintEffectNoSchedule)},
			want:  inventory.FitNoProfile, reason: "every 3g.71gb partition on GPU 0 is tainted"},
		{name: "a 1g skips a tainted first free partition", profile: "1g.18gb",
			rules: []resourcev1.DeviceTaintRule{rule("r", dev(g1, 2), resourcev1.DeviceTaintEffectNoSchedule)}, want: inventory.FitFree, at: 3},
		{name: "a taint in the slice counts as a rule's", profile: "1g.18gb", inSlice: dmDevice(0, *g1, 2), want: inventory.FitFree, at: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// 1g claims at 0 and 1: 3g fits only at 4-7, 1g first at 2.
			claims := []resourcev1.ResourceClaim{dmClaim("p0-gpu", dmDevice(0, *g1, 0), "p0"), dmClaim("p1-gpu", dmDevice(0, *g1, 1), "p1")}
			rs := dynamicMIGSlices(t, "GPU-0000")
			if tc.inSlice != "" {
				for i := range rs {
					for j := range rs[i].Spec.Devices {
						if d := &rs[i].Spec.Devices[j]; d.Name == tc.inSlice {
							d.Taints = []resourcev1.DeviceTaint{{Key: "driver", Effect: resourcev1.DeviceTaintEffectNoSchedule}}
						}
					}
				}
			}
			rep := fixture.Report(dmNode, fixture.MIGGPU(0, h200, fixture.Instance("1g.18gb", 0, 1), fixture.Instance("1g.18gb", 1, 1)))
			n := inventory.DynamicMIGSupply(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: dmNode}}, &rep, claims, rs)
			n.ApplyDeviceTaints(tc.rules)
			f := n.GPUs[0].Fit(tc.profile)
			if f.Kind != tc.want {
				t.Fatalf("Fit(%s) = %s (%s), want %s", tc.profile, f.Kind, f.Reason, tc.want)
			}
			if tc.want == inventory.FitFree && f.At.Start != tc.at {
				t.Errorf("Fit(%s) at %v, want start %d", tc.profile, f.At, tc.at)
			}
			if tc.reason != "" && !strings.Contains(f.Reason, tc.reason) {
				t.Errorf("reason %q does not say %q", f.Reason, tc.reason)
			}
			tainted := 0
			for _, part := range n.GPUs[0].Partitions() {
				if part.Taint != "" {
					tainted++
				}
			}
			if closed := tc.want != inventory.FitFree || tc.at != 4 && tc.profile == "3g.71gb" || tc.at == 3; closed && tainted == 0 {
				t.Errorf("Partitions() names no taint")
			}
		})
	}
}
