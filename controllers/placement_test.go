package controllers_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/testenv"
)

// The DynamicMIG world of these tests: nodes whose H200 GPU 0 NVIDIA's DRA driver serves in
// its DynamicMIG mode, published as the driver does on Kubernetes 1.35+ (driver.go
// generateSplitResourceSlices: one slice of counter sets, one of devices per GPU; every
// profile at every placement consuming memory-slice-<i> counters, plus the GPU itself).

const dmDriver = "gpu.nvidia.com"

// dmName names a partition as the driver does (cmd/gpu-kubelet-plugin/mig.go ToCanonicalName);
// gpupool reads devices by their attributes and counters, never by these names.
func dmName(pr mig.Profile, start int) string {
	return fmt.Sprintf("gpu-0-mig-%s-%d-%d", strings.NewReplacer(".", "", "+", "-").Replace(pr.Name), pr.ID, start)
}

func h200(t *testing.T) *mig.Product {
	p, ok := mig.LookupProduct("H200")
	if !ok {
		t.Fatal("no H200 in the built-in table")
	}
	return p
}

// dmNode creates node name in pool a with GPU 0 (UUID GPU-<name>) reported by the agent with
// the instances given, and the driver's slices for it.
func dmNode(t *testing.T, env *testenv.Env, name string, instances ...mig.Instance) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourcePods: resource.MustParse("110")}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "a", "nvidia.com/gpu.product": "NVIDIA-H200"}},
		Status: corev1.NodeStatus{Capacity: alloc, Allocatable: alloc}}
	g.Expect(env.Client.Create(ctx, node)).To(Succeed())
	node.Spec.Taints = nil
	g.Expect(env.Client.Update(ctx, node)).To(Succeed())
	uuid := "GPU-" + name
	report := &v1.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	g.Expect(env.Client.Create(ctx, report)).To(Succeed())
	gs := v1.GPUStatus{Index: 0, UUID: uuid, Product: "NVIDIA H200", MIGMode: &v1.MIGModeStatus{Current: "Enabled"}}
	for _, in := range instances {
		gs.Instances = append(gs.Instances, v1.MIGInstance{Profile: in.Profile,
			Placement: v1.SlicePlacement{Start: int32(in.Placement.Start), Size: int32(in.Placement.Size)}})
	}
	report.Status.GPUs = []v1.GPUStatus{gs}
	report.Status.ObservedTime = ptr.To(metav1.Now())
	g.Expect(env.Client.Status().Update(ctx, report)).To(Succeed())

	q := func(v int64) resourcev1.Counter {
		return resourcev1.Counter{Value: *resource.NewQuantity(v, resource.BinarySI)}
	}
	pool := resourcev1.ResourcePool{Name: name, ResourceSliceCount: 2}
	devices := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-gpu-0"},
		Spec: resourcev1.ResourceSliceSpec{Driver: dmDriver, Pool: pool, NodeName: ptr.To(name)}}
	whole := map[string]resourcev1.Counter{"multiprocessors": q(132)}
	for s := range 8 {
		whole[fmt.Sprintf("memory-slice-%d", s)] = q(1)
	}
	for _, pr := range h200(t).Profiles {
		for _, pl := range pr.Placements {
			c := map[string]resourcev1.Counter{"multiprocessors": q(int64(16 * pr.ComputeSlices))}
			for s := pl.Start; s < pl.Start+pl.Size; s++ {
				c[fmt.Sprintf("memory-slice-%d", s)] = q(1)
			}
			devices.Spec.Devices = append(devices.Spec.Devices, resourcev1.Device{Name: dmName(pr, pl.Start),
				Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
					"type": {StringValue: ptr.To("mig")}, "parentUUID": {StringValue: ptr.To(uuid)}, "profile": {StringValue: ptr.To(pr.Name)}},
				ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: "gpu-0-counter-set", Counters: c}}})
		}
	}
	devices.Spec.Devices = append(devices.Spec.Devices, resourcev1.Device{Name: "gpu-0",
		Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type": {StringValue: ptr.To("gpu")}, "uuid": {StringValue: ptr.To(uuid)}},
		ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: "gpu-0-counter-set", Counters: whole}}})
	slices.SortFunc(devices.Spec.Devices, func(a, b resourcev1.Device) int { return cmp.Compare(a.Name, b.Name) })
	counters := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-counters"},
		Spec: resourcev1.ResourceSliceSpec{Driver: dmDriver, Pool: pool, NodeName: ptr.To(name),
			SharedCounters: []resourcev1.CounterSet{{Name: "gpu-0-counter-set", Counters: whole}}}}
	g.Expect(env.Client.Create(ctx, counters)).To(Succeed())
	g.Expect(env.Client.Create(ctx, devices)).To(Succeed())
}

// claimPod creates a running pod on node controlled by a ReplicaSet, and its claim, allocated
// the partition device and reserved for the pod, as the scheduler leaves them.
func claimPod(t *testing.T, env *testenv.Env, name, node, device string) *corev1.Pod {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name,
				UID: types.UID("replicaset-" + name), Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(name + "-gpu")}}},
	}
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	g.Expect(env.Client.Status().Update(ctx, pod)).To(Succeed())
	claim := pendingClaim(t, env, name+"-gpu")
	claim.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
		Results: []resourcev1.DeviceRequestAllocationResult{{Request: "gpu", Driver: dmDriver, Pool: node, Device: device}}}}
	claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: pod.UID}}
	g.Expect(env.Client.Status().Update(ctx, claim)).To(Succeed())
	return pod
}

// pendingClaim creates a claim for one MIG partition, not allocated yet.
func pendingClaim(t *testing.T, env *testenv.Env, name string) *resourcev1.ResourceClaim {
	t.Helper()
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "mig.nvidia.com"}}}}}}
	NewWithT(t).Expect(env.Client.Create(context.Background(), claim)).To(Succeed())
	return claim
}

// allocate plays the scheduler's allocation of a pending claim.
func allocate(t *testing.T, env *testenv.Env, name, node, device string) {
	t.Helper()
	g := NewWithT(t)
	claim := &resourcev1.ResourceClaim{}
	g.Expect(env.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, claim)).To(Succeed())
	claim.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
		Results: []resourcev1.DeviceRequestAllocationResult{{Request: "gpu", Driver: dmDriver, Pool: node, Device: device}}}}
	g.Expect(env.Client.Status().Update(context.Background(), claim)).To(Succeed())
}

// fragmented is the dra-driver-nvidia-gpu#933 pattern on dm-1: 1g claims at slices 0, 1 and 5
// strand a 3g with five slices free. dm-2 is empty, the landing of the pod moved.
func fragmented(t *testing.T, env *testenv.Env) (small2 *corev1.Pod, oneG, threeG mig.Profile) {
	t.Helper()
	p := h200(t)
	pr1, _ := p.Profile("1g.18gb")
	pr3, _ := p.Profile("3g.71gb")
	dmNode(t, env, "dm-1", mig.Instance{Profile: pr1.Name, Placement: mig.Placement{Start: 0, Size: 1}},
		mig.Instance{Profile: pr1.Name, Placement: mig.Placement{Start: 1, Size: 1}},
		mig.Instance{Profile: pr1.Name, Placement: mig.Placement{Start: 5, Size: 1}})
	dmNode(t, env, "dm-2")
	claimPod(t, env, "small-0", "dm-1", dmName(*pr1, 0))
	claimPod(t, env, "small-1", "dm-1", dmName(*pr1, 1))
	small2 = claimPod(t, env, "small-2", "dm-1", dmName(*pr1, 5))
	pendingClaim(t, env, "big-gpu")
	return small2, *pr1, *pr3
}

// keepFree lists every partition of GPU 0 overlapping slices 4-7 but the 3g at 4: what the
// planner keeps free while the placement opens.
func keepFree(t *testing.T) []string {
	var out []string
	for _, pr := range h200(t).Profiles {
		for _, pl := range pr.Placements {
			if pl.Start+pl.Size > 4 && (pr.Name != "3g.71gb" || pl.Start != 4) {
				out = append(out, dmName(pr, pl.Start))
			}
		}
	}
	return append(out, "gpu-0")
}

// placementPlan opens 3g.71gb at slices 4-7 of dm-1's GPU 0 for default/big-gpu by moving
// small-2 to dm-2, signed as the manager signs plans (createPlan's promises).
func placementPlan(t *testing.T, env *testenv.Env, name string, threeG mig.Profile, small2 *corev1.Pod, free []string) *v1.RepartitionPlan {
	t.Helper()
	return placementPlanLanding(t, env, name, threeG, small2, free, "dm-2")
}

// placementPlanLanding is placementPlan with small-2 landing on landing.
func placementPlanLanding(t *testing.T, env *testenv.Env, name string, threeG mig.Profile, small2 *corev1.Pod, free []string,
	landing string) *v1.RepartitionPlan {
	t.Helper()
	plan := &v1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.RepartitionPlanSpec{Policy: "pool-a", Disruptive: true, Steps: []v1.NodeStep{{
			Node: "dm-1", Disruptive: true,
			GPUs: []v1.GPUChange{{Index: 0, From: v1.ProfileCounts{"1g.18gb": 3}, To: v1.ProfileCounts{"1g.18gb": 2, "3g.71gb": 1}}},
			Evictions: []v1.Eviction{{PodReference: v1.PodReference{Namespace: "default", Name: "small-2"}, UID: string(small2.UID),
				Reason: "holds 1g.18gb at slice 5 of GPU 0", LandingNode: landing}},
			Placement: &v1.PlacementOpening{Driver: dmDriver, GPU: 0, Profile: "3g.71gb", Start: 4, Size: 4,
				Device: dmName(threeG, 4), Claim: v1.PodReference{Namespace: "default", Name: "big-gpu"}, KeepFree: free},
		}}}}
	policy := &v1.GPUPoolPolicy{}
	g := NewWithT(t)
	g.Expect(env.Client.Get(context.Background(), client.ObjectKey{Name: "pool-a"}, policy)).To(Succeed())
	plan.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(policy, v1.GroupVersion.WithKind("GPUPoolPolicy"))}
	plan.Spec.Approval = cmp.Or(policy.Spec.Disruption.Approval, v1.ApprovalManual)
	plan.Spec.Hash = v1.HashSteps(plan.Spec.Steps)
	g.Expect(env.Client.Create(context.Background(), plan)).To(Succeed())
	return plan
}

// rulesOf lists gpupool's DeviceTaintRules by the device they taint.
func rulesOf(g Gomega, env *testenv.Env) map[string]resourcev1.DeviceTaintRule {
	var list resourcev1.DeviceTaintRuleList
	g.Expect(env.Client.List(context.Background(), &list)).To(Succeed())
	out := map[string]resourcev1.DeviceTaintRule{}
	for _, r := range list.Items {
		if r.Spec.DeviceSelector != nil && r.Spec.DeviceSelector.Device != nil {
			out[*r.Spec.DeviceSelector.Device] = r
		}
	}
	return out
}

func stepOf(g Gomega, env *testenv.Env, plan *v1.RepartitionPlan) v1.NodeStepStatus {
	got := &v1.RepartitionPlan{}
	g.Expect(env.Client.Get(context.Background(), client.ObjectKeyFromObject(plan), got)).To(Succeed())
	g.Expect(got.Status.Nodes).To(HaveLen(1))
	return got.Status.Nodes[0]
}

// A placement step taints every device it keeps free (NoSchedule, on dm-1's pool) before it
// evicts anything; the PodDisruptionBudget holds the eviction meanwhile; once the pod in the
// way is gone it waits for the claim, is done when the claim is allocated the planned device,
// and removes its taints. No node is cordoned, and the pods on the other instances stay.
func TestAPlacementStepTaintsEvictsAndEndsWhenTheClaimIsAllocated(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPlanController(t)
	ctx := context.Background()
	small2, _, threeG := fragmented(t, env)
	// A budget that allows nothing yet holds the eviction (envtest runs no disruption controller).
	_, setAllowed := pdbGuardedPod(t, env, "guard", "dm-2", nil)
	pdbOf(t, env, "guard", "small-2")
	autoPolicy(t, env)
	free := keepFree(t)
	// The pod comes back on its own GPU, at slice 2 or 3: the devices kept free (the whole
	// GPU's among them) rule out only the slices being opened.
	plan := placementPlanLanding(t, env, "pool-a-20261205-placement", threeG, small2, free, "dm-1")

	g.Eventually(func(g Gomega) {
		st := stepOf(g, env, plan)
		g.Expect(st.State).To(Equal(v1.NodeDraining))
		g.Expect(st.Message).To(ContainSubstring("default/small-2"))
		rules := rulesOf(g, env)
		g.Expect(rules).To(HaveLen(len(free)))
		for _, d := range free {
			g.Expect(rules).To(HaveKey(d))
			r := rules[d]
			g.Expect(r.Spec.Taint.Effect).To(Equal(resourcev1.DeviceTaintEffectNoSchedule))
			g.Expect(*r.Spec.DeviceSelector.Pool).To(Equal("dm-1"))
			g.Expect(*r.Spec.DeviceSelector.Driver).To(Equal(dmDriver))
			g.Expect(r.OwnerReferences).To(ContainElement(HaveField("UID", plan.UID)))
		}
		g.Expect(rules).NotTo(HaveKey(dmName(threeG, 4)), "never the device the claim needs")
	}).WithTimeout(30*time.Second).Should(Succeed(), "tainted, with the eviction held by the budget")
	got := &corev1.Pod{}
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(small2), got)).To(Succeed())
	g.Expect(got.DeletionTimestamp).To(BeNil(), "nothing evicted behind the budget's back")

	setAllowed(1)
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(small2), got)).To(Succeed())
		g.Expect(got.DeletionTimestamp).NotTo(BeNil())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(env.Client.Delete(ctx, got, client.GracePeriodSeconds(0))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(stepOf(g, env, plan).State).To(Equal(v1.NodeVerifying))
		g.Expect(rulesOf(g, env)).To(HaveLen(len(free)), "the taints hold until the claim is allocated")
	}).WithTimeout(30 * time.Second).Should(Succeed())

	allocate(t, env, "big-gpu", "dm-1", dmName(threeG, 4))
	g.Eventually(func(g Gomega) {
		st := stepOf(g, env, plan)
		g.Expect(st.State).To(Equal(v1.NodeDone))
		g.Expect(st.Message).To(Equal("ResourceClaim default/big-gpu was allocated device " + dmName(threeG, 4) + " of pool dm-1, the planned placement"))
		g.Expect(rulesOf(g, env)).To(BeEmpty())
		p := &v1.RepartitionPlan{}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(plan), p)).To(Succeed())
		g.Expect(p.Status.Phase).To(Equal(v1.PlanSucceeded))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	for _, name := range []string{"dm-1", "dm-2"} {
		node := &corev1.Node{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
		g.Expect(node.Spec.Unschedulable).To(BeFalse(), "never cordoned")
		g.Expect(node.Annotations).NotTo(HaveKey(v1.AnnotationCordonedBy))
	}
	for _, name := range []string{"small-0", "small-1"} {
		p := &corev1.Pod{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, p)).To(Succeed())
		g.Expect(p.DeletionTimestamp).To(BeNil(), "pods on instances the step does not open keep running")
	}
	g.Eventually(func(g Gomega) []string {
		var evs corev1.EventList
		g.Expect(env.Client.List(ctx, &evs, client.InNamespace("default"))).To(Succeed())
		var reasons []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == plan.Name && strings.HasPrefix(e.Reason, "Node") {
				reasons = append(reasons, e.Reason)
			}
		}
		return reasons
	}).WithTimeout(30*time.Second).Should(ConsistOf("NodeDraining", "NodeVerifying", "NodeDone"), "one Event per state change")
}

// pdbOf points the fixture's budget (pdbGuardedPod) at a pod of the test too.
func pdbOf(t *testing.T, env *testenv.Env, pdb, pod string) {
	t.Helper()
	g := NewWithT(t)
	p := &corev1.Pod{}
	g.Expect(env.Client.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: pod}, p)).To(Succeed())
	patch := client.MergeFrom(p.DeepCopy())
	p.Labels["app"] = pdb
	g.Expect(env.Client.Patch(context.Background(), p, patch)).To(Succeed())
}

// A claim that is never allocated fails the step on the policy's configureTimeout with the
// reason, and the taints go; deleting a plan mid-step takes its taints along (the janitor).
func TestAPlacementStepThatTimesOutOrIsDeletedLeavesNoTaint(t *testing.T) {
	g := NewWithT(t)
	env, clock := startPlanController(t)
	ctx := context.Background()
	small2, _, threeG := fragmented(t, env)
	autoPolicy(t, env)
	free := keepFree(t)[:3]
	plan := placementPlan(t, env, "pool-a-20261205-timeout", threeG, small2, free)
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(small2), small2)).To(Succeed())
		g.Expect(small2.DeletionTimestamp).NotTo(BeNil())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(env.Client.Delete(ctx, small2, client.GracePeriodSeconds(0))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(stepOf(g, env, plan).State).To(Equal(v1.NodeVerifying))
		g.Expect(rulesOf(g, env)).To(HaveLen(3))
	}).WithTimeout(30 * time.Second).Should(Succeed())

	clock.Step(time.Hour)
	poke(t, env, "dm-1")
	g.Eventually(func(g Gomega) {
		st := stepOf(g, env, plan)
		g.Expect(st.State).To(Equal(v1.NodeFailed))
		g.Expect(st.Message).To(ContainSubstring("ResourceClaim default/big-gpu was not allocated within configureTimeout"))
		g.Expect(rulesOf(g, env)).To(BeEmpty())
	}).WithTimeout(30 * time.Second).Should(Succeed())

	// A second plan, deleted while it waits: its taints are orphans, and the janitor removes them.
	small1 := &corev1.Pod{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "small-1"}, small1)).To(Succeed())
	pdbGuardedPod(t, env, "guard", "dm-2", nil)
	pdbOf(t, env, "guard", "small-1")
	p3, _ := h200(t).Profile("3g.71gb")
	second := &v1.RepartitionPlan{}
	*second = *placementPlanAt(t, env, "pool-a-20261205-deleted", *p3, small1)
	g.Eventually(func(g Gomega) {
		g.Expect(stepOf(g, env, second).State).To(Equal(v1.NodeDraining))
		g.Expect(rulesOf(g, env)).NotTo(BeEmpty())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(env.Client.Delete(ctx, second)).To(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(rulesOf(g, env)).To(BeEmpty()) }).WithTimeout(30*time.Second).Should(Succeed(),
		"envtest runs no garbage collector: the janitor removes the deleted plan's taints")
}

// placementPlanAt opens 3g.71gb at slices 0-3 by moving small-1 (slice 1); small-0 stays in
// the way, which is the planner's business, not the executor's.
func placementPlanAt(t *testing.T, env *testenv.Env, name string, threeG mig.Profile, small1 *corev1.Pod) *v1.RepartitionPlan {
	t.Helper()
	p1, _ := h200(t).Profile("1g.18gb")
	plan := &v1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.RepartitionPlanSpec{Policy: "pool-a", Disruptive: true, Steps: []v1.NodeStep{{
			Node: "dm-1", Disruptive: true, GPUs: []v1.GPUChange{{Index: 0}},
			Evictions: []v1.Eviction{{PodReference: v1.PodReference{Namespace: "default", Name: "small-1"}, UID: string(small1.UID), LandingNode: "dm-2"}},
			Placement: &v1.PlacementOpening{Driver: dmDriver, GPU: 0, Profile: "3g.71gb", Start: 0, Size: 4,
				Device: dmName(threeG, 0), Claim: v1.PodReference{Namespace: "default", Name: "big-gpu"},
				KeepFree: []string{dmName(*p1, 2), dmName(*p1, 3)}},
		}}}}
	policy := &v1.GPUPoolPolicy{}
	g := NewWithT(t)
	g.Expect(env.Client.Get(context.Background(), client.ObjectKey{Name: "pool-a"}, policy)).To(Succeed())
	plan.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(policy, v1.GroupVersion.WithKind("GPUPoolPolicy"))}
	plan.Spec.Approval = cmp.Or(policy.Spec.Disruption.Approval, v1.ApprovalManual)
	plan.Spec.Hash = v1.HashSteps(plan.Spec.Steps)
	g.Expect(env.Client.Create(context.Background(), plan)).To(Succeed())
	return plan
}

// A forged step, one that would taint another node's device or the device its claim needs,
// is refused before anything is tainted or evicted.
func TestAForgedPlacementStepIsRefused(t *testing.T) {
	env, _ := startPlanController(t)
	ctx := context.Background()
	small2, oneG, threeG := fragmented(t, env)
	autoPolicy(t, env)
	for i, tc := range []struct {
		free []string
		want string
	}{
		// dm-2's devices carry the same names as dm-1's: only the pool tells them apart, and the
		// step's rules select dm-1's pool. A name dm-1's pool does not list is refused.
		{[]string{dmName(oneG, 4), "gpu-1-mig-1g18gb-19-4"}, "device gpu-1-mig-1g18gb-19-4, which the step would taint, is not in driver gpu.nvidia.com's pool dm-1"},
		{[]string{dmName(oneG, 0)}, "it does not overlap memory slices 4-7 of GPU 0"},
	} {
		plan := placementPlan(t, env, fmt.Sprintf("pool-a-20261205-forged%d", i), threeG, small2, tc.free)
		g := NewWithT(t)
		g.Eventually(func(g Gomega) {
			st := stepOf(g, env, plan)
			g.Expect(st.State).To(Equal(v1.NodeFailed))
			g.Expect(st.Message).To(HavePrefix("refused before any eviction: "))
			g.Expect(st.Message).To(ContainSubstring(tc.want))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		g.Expect(rulesOf(g, env)).To(BeEmpty(), "nothing tainted")
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(small2), small2)).To(Succeed())
		g.Expect(small2.DeletionTimestamp).To(BeNil(), "nothing evicted")
		g.Expect(env.Client.Delete(ctx, plan)).To(Succeed())
	}
	// Tainting the device the claim needs is refused by the API server itself.
	forged := &v1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "pool-a-20261205-forged-device"},
		Spec: v1.RepartitionPlanSpec{Policy: "pool-a", Hash: "aaaabbbbccccdddd", Disruptive: true, Steps: []v1.NodeStep{{
			Node: "dm-1", Disruptive: true, GPUs: []v1.GPUChange{{Index: 0}},
			Evictions: []v1.Eviction{{PodReference: v1.PodReference{Namespace: "default", Name: "small-2"}, UID: string(small2.UID)}},
			Placement: &v1.PlacementOpening{Driver: dmDriver, GPU: 0, Profile: "3g.71gb", Start: 4, Size: 4,
				Device: dmName(threeG, 4), Claim: v1.PodReference{Namespace: "default", Name: "big-gpu"},
				KeepFree: []string{dmName(threeG, 4)}},
		}}}}
	NewWithT(t).Expect(env.Client.Create(ctx, forged)).To(MatchError(ContainSubstring("the device the pending claim needs is never tainted")))
}

// The janitor removes a rule of gpupool's that no live plan explains, and leaves alone a
// user's rule that copies gpupool's label and an owner reference to a plan.
func TestTheTaintJanitorRemovesOrphansOnly(t *testing.T) {
	g := NewWithT(t)
	env, _ := startPlanController(t)
	ctx := context.Background()
	small2, oneG, threeG := fragmented(t, env)
	autoPolicy(t, env)
	// A finished plan: nothing it tainted is explained any more.
	plan := placementPlan(t, env, "pool-a-20261205-finished", threeG, small2, []string{"not-a-device"})
	g.Eventually(func(g Gomega) { g.Expect(stepOf(g, env, plan).State).To(Equal(v1.NodeFailed)) }).WithTimeout(30 * time.Second).Should(Succeed())

	owner := []metav1.OwnerReference{{APIVersion: v1.GroupVersion.String(), Kind: "RepartitionPlan", Name: plan.Name, UID: plan.UID}}
	selector := func(device string) *resourcev1.DeviceTaintSelector {
		return &resourcev1.DeviceTaintSelector{Driver: ptr.To(dmDriver), Pool: ptr.To("dm-1"), Device: ptr.To(device)}
	}
	taint := resourcev1.DeviceTaint{Key: "gpupool.io/keep-free", Value: plan.Name, Effect: resourcev1.DeviceTaintEffectNoSchedule}
	// What a crash would leave: a rule as gpupool names and makes it.
	orphan := &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{
		Name:   controllers.DeviceTaintNameForTest(plan.UID, dmDriver, "dm-1", dmName(oneG, 4)),
		Labels: map[string]string{"gpupool.io/keep-free": "dm-1"}, OwnerReferences: owner},
		Spec: resourcev1.DeviceTaintRuleSpec{DeviceSelector: selector(dmName(oneG, 4)), Taint: taint}}
	// A user's rule (maintenance on a GPU) with gpupool's label and owner copied onto it.
	users := &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "gpu-maintenance",
		Labels: map[string]string{"gpupool.io/keep-free": "dm-1"}, OwnerReferences: owner},
		Spec: resourcev1.DeviceTaintRuleSpec{DeviceSelector: selector("gpu-0"), Taint: taint}}
	// Even under gpupool's prefix, a name that is not the one gpupool derives is not gpupool's.
	prefixed := users.DeepCopy()
	prefixed.Name = "gpupool-keepfree-0123456789abcdef0123"
	for _, r := range []*resourcev1.DeviceTaintRule{users, prefixed, orphan} {
		g.Expect(env.Client.Create(ctx, r)).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(orphan), &resourcev1.DeviceTaintRule{})
		g.Expect(err).To(HaveOccurred())
	}).WithTimeout(30*time.Second).Should(Succeed(), "the orphan is removed")
	g.Consistently(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(users), &resourcev1.DeviceTaintRule{})).To(Succeed())
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(prefixed), &resourcev1.DeviceTaintRule{})).To(Succeed())
	}).WithTimeout(2*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "the user's rules stay")
}
