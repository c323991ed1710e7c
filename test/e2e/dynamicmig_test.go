package e2e_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	It("places claims first-fit, so a 3g claim waits on a GPU with five free slices", func() {
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
		pod := func(name, template string) *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name, Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{
					NodeSelector:                  onNode(node),
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					ResourceClaims:                []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}},
					Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
				}}
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
		holder := map[int]string{}
		for k := range 6 {
			name := fmt.Sprintf("small-%d", k)
			Expect(k8s.Create(suiteCtx, pod(name, "mig-1g-18gb"))).To(Succeed())
			running := s.waitRunning(name, 1, time.Minute)
			holder[placement(running[0])] = name
		}
		Expect(holder).To(HaveLen(6))
		for start := range 6 {
			Expect(holder).To(HaveKey(start), "first fit fills slices 0-5 in order: %v", holder)
		}

		By("letting the claims at slices 2, 3 and 4 go")
		for _, start := range []int{2, 3, 4} {
			Expect(k8s.Delete(suiteCtx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: holder[start]}},
				client.GracePeriodSeconds(0))).To(Succeed())
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
			g.Expect(v.SliceMaps[0].Legend[2]).To(ContainSubstring("pod "+s.ns+"/"+holder[5]), "the claim at slice 5 is the one in the way of 4-7")
			g.Expect(v.Next).To(ContainSubstring("no gpupool plan proposes this yet"))
			g.Expect(v.Next).To(ContainSubstring("moving pod " + s.ns + "/" + holder[5] + " frees memory slices 4-7"))
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), "why names the placement and shows the slice map")
	})
})
