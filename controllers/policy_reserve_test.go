package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/testenv"
)

// reserveRules lists the DeviceTaintRules labelled as reserve rules, by the device they taint,
// each with whether it is owned by the policy.
func reserveRules(g Gomega, env *testenv.Env) map[string]resourcev1.DeviceTaintRule {
	var list resourcev1.DeviceTaintRuleList
	g.Expect(env.Client.List(context.Background(), &list, client.HasLabels{"gpupool.io/reserve"})).To(Succeed())
	out := map[string]resourcev1.DeviceTaintRule{}
	for _, r := range list.Items {
		out[*r.Spec.DeviceSelector.Device] = r
	}
	return out
}

// TestReserveTaintsSmallPartitionsOverAHeldPlacement: a policy whose standby shape asks one
// nvidia.com/mig-3g.71gb free, over a DynamicMIG H200 with a 1g claim at slice 0, holds 3g's
// placement at 4-7 and taints the 1g partitions over it NoSchedule, owned by the policy. A 3g
// claim allocated there leaves nothing to hold, so the rules go; the claim gone, they come
// back; paused, the pool keeps them as they are; the shape removed, they go for good. A user's rule that looks like one of gpupool's
// (its label, its prefix, even the policy as owner) is never deleted.
func TestReserveTaintsSmallPartitionsOverAHeldPlacement(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPolicyController(t)
	ctx := context.Background()
	dynamicMIGNode(t, env, "dm-1", []int{0})
	claimPodOn(t, env, "small-0", "dm-1", dmPartition("1g.18gb", 0), nil)
	policy := poolPolicy("pool-a", map[string]string{"pool": "a"})
	policy.Spec.Shapes = []v1.StandbyShape{{Resource: "nvidia.com/mig-3g.71gb", MinFree: 1}}
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	user := &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "gpupool-reserve-mine",
		Labels:          map[string]string{"gpupool.io/reserve": "pool-a"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: v1.GroupVersion.String(), Kind: "GPUPoolPolicy", Name: policy.Name, UID: policy.UID}}},
		Spec: resourcev1.DeviceTaintRuleSpec{
			DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr.To(nvidia.DRADriver), Pool: ptr.To("dm-1"), Device: ptr.To(dmPartition("1g.18gb", 2))},
			Taint:          resourcev1.DeviceTaint{Key: "gpupool.io/reserve", Value: "3g.71gb", Effect: resourcev1.DeviceTaintEffectNoSchedule}}}
	g.Expect(env.Client.Create(ctx, user)).To(Succeed())

	held := []string{dmPartition("1g.18gb", 4), dmPartition("1g.18gb", 5), dmPartition("1g.18gb", 6), dmPartition("1g.18gb", 2)}
	g.Eventually(func(g Gomega) {
		rules := reserveRules(g, env)
		g.Expect(rules).To(HaveLen(4), "the 1g partitions over 4-7, and the user's rule")
		for _, device := range held[:3] {
			r := rules[device]
			g.Expect(r.Name).To(HavePrefix("gpupool-reserve-"))
			g.Expect(r.Labels).To(HaveKeyWithValue("gpupool.io/reserve", "pool-a"))
			g.Expect(r.Spec.Taint.Effect).To(Equal(resourcev1.DeviceTaintEffectNoSchedule))
			g.Expect(r.Spec.Taint.Key).To(Equal("gpupool.io/reserve"))
			g.Expect(*r.Spec.DeviceSelector.Pool).To(Equal("dm-1"))
			g.Expect(*r.Spec.DeviceSelector.Driver).To(Equal(nvidia.DRADriver))
			g.Expect(r.OwnerReferences).To(ConsistOf(HaveField("UID", policy.UID)), "deleting the policy deletes its rules")
		}
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// A 3g claim takes 4-7: the other 3g placement overlaps the 1g at 0, so nothing is held.
	big := claimPodOn(t, env, "big-4", "dm-1", dmPartition("3g.71gb", 4), nil)
	onlyUsers := func(g Gomega) {
		rules := reserveRules(g, env)
		g.Expect(rules).To(HaveLen(1))
		g.Expect(rules).To(HaveKey(dmPartition("1g.18gb", 2)))
		g.Expect(rules[dmPartition("1g.18gb", 2)].UID).To(Equal(user.UID), "the user's rule is left alone")
	}
	g.Eventually(onlyUsers).WithTimeout(30 * time.Second).Should(Succeed())

	// The 3g claim ends: 4-7 is held again.
	g.Expect(env.Client.Delete(ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "big-4-gpu"}})).To(Succeed())
	g.Expect(env.Client.Delete(ctx, big)).To(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(reserveRules(g, env)).To(HaveLen(4)) }).WithTimeout(30 * time.Second).Should(Succeed())

	edit := func(change func(*v1.GPUPoolPolicy)) {
		g.Eventually(func(g Gomega) {
			got := &v1.GPUPoolPolicy{}
			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(policy), got)).To(Succeed())
			change(got)
			g.Expect(env.Client.Update(ctx, got)).To(Succeed())
		}).WithTimeout(10 * time.Second).Should(Succeed())
	}
	// Paused, the pool changes nothing: a 3g claim at 4-7 leaves the rules as they are.
	edit(func(p *v1.GPUPoolPolicy) { p.Spec.Planning.Paused = true })
	claimPodOn(t, env, "big-4b", "dm-1", dmPartition("3g.71gb", 4), nil)
	g.Consistently(func(g Gomega) { g.Expect(reserveRules(g, env)).To(HaveLen(4)) }).WithTimeout(3 * time.Second).Should(Succeed())

	// No standby shape, no reserve.
	edit(func(p *v1.GPUPoolPolicy) { p.Spec.Planning.Paused, p.Spec.Shapes = false, nil })
	g.Eventually(onlyUsers).WithTimeout(30 * time.Second).Should(Succeed())
	g.Consistently(onlyUsers).WithTimeout(2 * time.Second).Should(Succeed())
}
