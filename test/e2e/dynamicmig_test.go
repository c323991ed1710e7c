package e2e_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/triage"
)

// dynamicMIGScenario gets the one node NVIDIA's DRA driver serves in its DynamicMIG mode
// (gpusim's ":dynamicmig", one H200 GPU), which gpusim names after all the others.
const dynamicMIGScenario = "dynamicmig"

var _ = Describe("DynamicMIG", func() {
	// The dra-driver-nvidia-gpu#933 pattern through the real scheduler's DRA allocator: it takes
	// the first partition whose counters are free, so 1g claims fill slices 0, 1, 2, ... in
	// order; once the claims at 2, 3 and 4 go, the GPU keeps 1g instances at 0, 1 and 5, and a
	// 3g claim (slices 0-3 or 4-7) waits although five memory slices are free. The simulated
	// driver carves each instance when its claim is allocated, so the agent reports exactly the
	// instances the claims hold.
	//
	// Then gpupool repairs it (issue 38's first "Done when"): a policy over the node proposes a
	// plan that moves the one claim pod in the way of slices 4-7; once approved, the step taints
	// the partitions that would refill them, waits while a PodDisruptionBudget holds the
	// eviction, evicts that pod alone (its ReplicaSet brings it back on a free slice), and is done
	// when the 3g claim is allocated the opened placement. Nothing is cordoned, the pods on the
	// other instances keep running on the same instances, and no device taint is left.
	It("places claims first-fit, so a 3g claim waits on a GPU with five free slices, until an approved plan moves the claim in its way", func() {
		s := newScenario(dynamicMIGScenario)
		Expect(s.nodes).To(HaveLen(1))
		node := s.nodes[0]
		if err := k8s.Create(suiteCtx, migDeviceClass()); err != nil && !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred())
		}
		Eventually(func(g Gomega) {
			var list resourcev1.ResourceSliceList
			g.Expect(k8s.List(suiteCtx, &list, client.MatchingFields{"spec.nodeName": node})).To(Succeed())
			g.Expect(list.Items).To(HaveLen(2), "the counter set's slice and the GPU's devices")
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), "the DynamicMIG stand-in publishes the node")

		for _, profile := range []string{"1g.18gb", "3g.71gb"} {
			Expect(k8s.Create(suiteCtx, &resourcev1.ResourceClaimTemplate{
				ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "mig-" + strings.ReplaceAll(profile, ".", "-")},
				Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
					Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{
						DeviceClassName: "mig.nvidia.com",
						Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
							Expression: fmt.Sprintf("device.attributes['gpu.nvidia.com'].profile == '%s'", profile)}}}}}}}}}})).To(Succeed())
		}
		spec := func(template string) corev1.PodSpec {
			return corev1.PodSpec{
				NodeSelector:                  onNode(node),
				TerminationGracePeriodSeconds: ptr.To[int64](0),
				ResourceClaims:                []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}},
				Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
			}
		}
		pod := func(name, template string) *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name, Labels: map[string]string{"app": name}},
				Spec: spec(template)}
		}
		// The small claims' pods are each a ReplicaSet's, so that a pod gpupool moves comes back.
		replicaSet := func(name, template string) *appsv1.ReplicaSet {
			labels := map[string]string{"app": name}
			return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
				Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec(template)}}}
		}
		// placement is the memory slice the pod's claim starts at: the last part of the device
		// name, gpu-<minor>-mig-<profile>-<GI profile ID>-<start> (the driver's mig.go).
		placement := func(p corev1.Pod) int {
			Expect(p.Status.ResourceClaimStatuses).To(HaveLen(1))
			claim := &resourcev1.ResourceClaim{}
			Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: s.ns, Name: *p.Status.ResourceClaimStatuses[0].ResourceClaimName}, claim)).To(Succeed())
			Expect(claim.Status.Allocation).NotTo(BeNil())
			results := claim.Status.Allocation.Devices.Results
			Expect(results).To(ConsistOf(SatisfyAll(HaveField("Driver", "gpu.nvidia.com"), HaveField("Pool", node))))
			start, err := strconv.Atoi(results[0].Device[strings.LastIndex(results[0].Device, "-")+1:])
			Expect(err).NotTo(HaveOccurred(), results[0].Device)
			return start
		}

		By("running six 1g claim pods one after the other")
		holder, holderPod := map[int]string{}, map[int]corev1.Pod{}
		for k := range 6 {
			name := fmt.Sprintf("small-%d", k)
			Expect(k8s.Create(suiteCtx, replicaSet(name, "mig-1g-18gb"))).To(Succeed())
			running := s.waitRunning(name, 1, time.Minute)
			holder[placement(running[0])], holderPod[placement(running[0])] = name, running[0]
		}
		Expect(holder).To(HaveLen(6))
		for start := range 6 {
			Expect(holder).To(HaveKey(start), "first fit fills slices 0-5 in order: %v", holder)
		}

		By("letting the claims at slices 2, 3 and 4 go")
		for _, start := range []int{2, 3, 4} {
			Expect(k8s.Delete(suiteCtx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: holder[start]}},
				client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
		}
		Eventually(func(g Gomega) {
			report := gpuNodeOf(g, node)
			g.Expect(report.Status.GPUs).To(HaveLen(1))
			var starts []int
			for _, in := range report.Status.GPUs[0].Instances {
				g.Expect(in.Profile).To(Equal("1g.18gb"))
				starts = append(starts, int(in.Placement.Start))
			}
			slices.Sort(starts)
			g.Expect(starts).To(Equal([]int{0, 1, 5}))
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), "the agent reports the instances the claims hold")

		By("asking for a 3g device")
		Expect(k8s.Create(suiteCtx, pod("big", "mig-3g-71gb"))).To(Succeed())
		Eventually(func(g Gomega) {
			big := &corev1.Pod{}
			g.Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: s.ns, Name: "big"}, big)).To(Succeed())
			g.Expect(big.Status.Conditions).To(ContainElement(SatisfyAll(
				HaveField("Type", corev1.PodScheduled), HaveField("Status", corev1.ConditionFalse),
				HaveField("Reason", corev1.PodReasonUnschedulable))))
		}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), "the scheduler finds no 3g placement")
		Consistently(func(g Gomega) {
			big := &corev1.Pod{}
			g.Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: s.ns, Name: "big"}, big)).To(Succeed())
			g.Expect(big.Spec.NodeName).To(BeEmpty())
		}).WithTimeout(5*time.Second).WithPolling(poll).Should(Succeed(), "five free slices, no legal 3g placement")

		By("asking kubectl gpupool why the 3g pod waits")
		Eventually(func(g Gomega) {
			v := s.why(g, "big")
			g.Expect(v.Layer).To(Equal(triage.LayerPlacement), "%s\n%s", v.Reason, v.Next)
			g.Expect(v.Blocking).To(Equal("memory-slice placement"))
			g.Expect(v.SliceMaps).To(ConsistOf(SatisfyAll(HaveField("Node", node), HaveField("GPU", 0),
				HaveField("Map", "[A B . . . C . .]"), HaveField("Fit", inventory.FitStranded))))
			g.Expect(v.SliceMaps[0].Legend[2]).To(ContainSubstring("pod "+s.ns+"/"+holderPod[5].Name), "the claim at slice 5 is the one in the way of 4-7")
			g.Expect(v.Next).To(MatchRegexp(`no (gpupool )?plan`), "no plan yet: no policy holds the node")
			g.Expect(v.Next).To(ContainSubstring("moving pod " + s.ns + "/" + holderPod[5].Name + " frees memory slices 4-7"))
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), "why names the placement and shows the slice map")

		s.repairByMovingOneClaim(node, holder, holderPod)
	})
})

// repairByMovingOneClaim is the second half of the DynamicMIG scenario: node's GPU 0 holds 1g
// claims at slices 0, 1 and 5 (holder: the ReplicaSet at each start, holderPod: its pod), and
// pod big waits for a 3g claim.
func (s *scenario) repairByMovingOneClaim(node string, holder map[int]string, holderPod map[int]corev1.Pod) {
	instanceUUIDs := func(g Gomega) map[int]string {
		out := map[int]string{}
		for _, in := range gpuNodeOf(g, node).Status.GPUs[0].Instances {
			out[int(in.Placement.Start)] = in.UUID
		}
		return out
	}
	before := instanceUUIDs(Default)
	Expect(before).To(HaveKey(0))
	Expect(before).To(HaveKey(1))
	podOf := func(g Gomega, app string) corev1.Pod {
		var list corev1.PodList
		g.Expect(k8s.List(suiteCtx, &list, client.InNamespace(s.ns), client.MatchingLabels{"app": app})).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1), "pods of %s", app)
		return list.Items[0]
	}
	noCordon := func(g Gomega) {
		n := &corev1.Node{}
		g.Expect(k8s.Get(suiteCtx, client.ObjectKey{Name: node}, n)).To(Succeed())
		g.Expect(n.Spec.Unschedulable).To(BeFalse(), "a placement step never cordons")
		g.Expect(n.Annotations).NotTo(HaveKey(v1alpha1.AnnotationCordonedBy))
	}
	ourRules := func(g Gomega) []resourcev1.DeviceTaintRule {
		var list resourcev1.DeviceTaintRuleList
		g.Expect(k8s.List(suiteCtx, &list, client.HasLabels{"gpupool.io/keep-free"})).To(Succeed())
		return list.Items
	}

	By("guarding the pods at slices 0 and 1 with budgets that allow no disruption, the one at 5 with one that allows one")
	s.setPDBMinAvailable(holder[0], 1, 0)
	s.setPDBMinAvailable(holder[1], 1, 0)
	s.setPDBMinAvailable(holder[5], 0, 1)

	By("letting a policy over the node plan, with a maintenance window hours away")
	// The window holds the approved plan's step, so that a budget can be tightened before the
	// step starts: the policy would withdraw a plan still under review that no budget allows.
	later := time.Now().Add(6 * time.Hour)
	s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) {
		spec.Disruption.Windows = []v1alpha1.MaintenanceWindow{{Schedule: fmt.Sprintf("%d %d * * *", later.Minute(), later.Hour()),
			Duration: metav1.Duration{Duration: 5 * time.Minute}}}
	})
	s.unpauseWhenPending(1)
	plan := s.waitPlan(2*time.Minute, v1alpha1.PlanAwaitingApproval)
	Expect(plan.Spec.Steps).To(HaveLen(1))
	step := plan.Spec.Steps[0]
	Expect(step.Node).To(Equal(node))
	Expect(step.MIGConfigName).To(BeEmpty(), "nothing to relabel")
	Expect(step.Placement).NotTo(BeNil())
	Expect(step.Placement.Profile).To(BeEquivalentTo("3g.71gb"))
	Expect([]int32{step.Placement.Start, step.Placement.Size}).To(Equal([]int32{4, 4}))
	Expect(step.Placement.KeepFree).NotTo(BeEmpty())
	Expect(step.Evictions).To(ConsistOf(SatisfyAll(HaveField("Name", holderPod[5].Name), HaveField("UID", string(holderPod[5].UID)))),
		"at most one claim pod moves: the one at slice 5")

	By("approving it; the step waits for the window")
	approve(plan)
	Eventually(func(g Gomega) {
		got := &v1alpha1.RepartitionPlan{}
		g.Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		g.Expect(got.Status.Phase.Running()).To(BeTrue(), "phase %s", got.Status.Phase)
		g.Expect(meta.IsStatusConditionFalse(got.Status.Conditions, "WithinMaintenanceWindow")).To(BeTrue())
		g.Expect(got.Status.Nodes).To(BeEmpty())
	}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), s.diagnostics)
	Expect(ourRules(Default)).To(BeEmpty(), "nothing tainted before the step starts")

	By("opening the window while a budget now holds the pod the step moves")
	s.setPDBMinAvailable(holder[5], 1, 0)
	s.editPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) { spec.Disruption.Windows = nil })
	Eventually(func(g Gomega) {
		got := &v1alpha1.RepartitionPlan{}
		g.Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(plan), got)).To(Succeed())
		st := stepStatus(got, node)
		g.Expect(st.State).To(Equal(v1alpha1.NodeDraining))
		g.Expect(st.Message).To(ContainSubstring("blocked by PodDisruptionBudgets"))
		g.Expect(ourRules(g)).To(HaveLen(len(step.Placement.KeepFree)), "every device kept free is tainted before any eviction")
		noCordon(g)
	}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), s.diagnostics)
	Consistently(func(g Gomega) {
		p := podOf(g, holder[5])
		g.Expect(p.UID).To(Equal(holderPod[5].UID))
		g.Expect(p.DeletionTimestamp).To(BeNil())
	}).WithTimeout(3*time.Second).WithPolling(poll).Should(Succeed(), "the budget holds the eviction")

	By("letting the budget allow the move")
	s.setPDBMinAvailable(holder[5], 0, 1)
	done := s.waitPhase(plan.Name, v1alpha1.PlanSucceeded, 3*time.Minute)
	Expect(stepStatus(done, node).Message).To(ContainSubstring("the planned placement"))

	By("checking the 3g pod runs on the opened placement, one pod moved and nothing else did")
	big := s.waitRunning("big", 1, 2*time.Minute)[0]
	Expect(big.Status.ResourceClaimStatuses).To(HaveLen(1))
	claim := &resourcev1.ResourceClaim{}
	Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: s.ns, Name: *big.Status.ResourceClaimStatuses[0].ResourceClaimName}, claim)).To(Succeed())
	Expect(claim.Status.Allocation.Devices.Results).To(ConsistOf(SatisfyAll(HaveField("Pool", node), HaveField("Device", step.Placement.Device))))
	for _, start := range []int{0, 1} {
		p := podOf(Default, holder[start])
		Expect(p.UID).To(Equal(holderPod[start].UID), "the pod at slice %d was not restarted", start)
	}
	moved := s.waitRunning(holder[5], 1, 2*time.Minute)[0]
	Expect(moved.UID).NotTo(Equal(holderPod[5].UID), "its ReplicaSet brought the moved pod back")
	Eventually(func(g Gomega) {
		after := instanceUUIDs(g)
		g.Expect(after[0]).To(Equal(before[0]), "the instance at slice 0 is the same")
		g.Expect(after[1]).To(Equal(before[1]), "the instance at slice 1 is the same")
		g.Expect(ourRules(g)).To(BeEmpty(), "no device taint is left")
		noCordon(g)
	}).WithTimeout(time.Minute).WithPolling(poll).Should(Succeed(), s.diagnostics)
}
