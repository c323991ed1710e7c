package e2e_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// migDeviceClass is NVIDIA's DRA driver's class for MIG devices, as its Helm chart installs
// it (deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-mig.yaml).
func migDeviceClass() *resourcev1.DeviceClass {
	return &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "mig.nvidia.com"},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"}}}}}
}

var _ = Describe("Dynamic Resource Allocation", func() {
	// Guards issue 20 end to end, through the real scheduler's DRA plugin: a pod whose claim
	// asks NVIDIA's DRA driver for a 3g device waits on an all-1g node the driver serves, beside
	// a pod asking the device plugin for the same on an all-1g node the plugin serves; one plan
	// carves each node for its own pod; on the driver's node the step waits until the driver
	// republishes its slice (mig-manager bounces its kubelet plugin); the scheduler allocates
	// the claim from it, and both pods run.
	It("serves a claim pod and a device-plugin pod with one plan, each on its own kind of node", func() {
		s := newScenario(draScenario)
		Expect(s.nodes).To(HaveLen(2))
		pluginNode, driverNode := s.nodes[0], s.nodes[1]
		if err := k8s.Create(suiteCtx, migDeviceClass()); err != nil && !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred())
		}
		Eventually(func(g Gomega) {
			var slices resourcev1.ResourceSliceList
			g.Expect(k8s.List(suiteCtx, &slices, client.MatchingFields{"spec.nodeName": driverNode})).To(Succeed())
			g.Expect(slices.Items).To(HaveLen(1))
			g.Expect(slices.Items[0].Spec.Devices).To(HaveLen(14), "two GPUs of seven 1g devices")
		}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), "the driver's stand-in publishes the node")

		template := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "mig-3g"},
			Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
				Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{
					DeviceClassName: "mig.nvidia.com",
					Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
						Expression: "device.attributes['gpu.nvidia.com'].profile == '3g.71gb'"}}}}}}}}}}
		Expect(k8s.Create(suiteCtx, template)).To(Succeed())
		labels := map[string]string{"app": "train-dra"}
		Expect(k8s.Create(suiteCtx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "train-dra"},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
					NodeSelector:                  s.inPool(),
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					ResourceClaims:                []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("mig-3g")}},
					Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
				}}}})).To(Succeed())
		s.deploy("train-dp", 1, s.inPool(), mig3g, 1, nil)
		s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) {
			spec.Disruption.MaxReconfiguringNodes = ptr.To(intstr.FromString("100%")) // both nodes in one plan
		})
		s.unpauseWhenPending(2)

		plan := s.waitPlan(time.Minute, v1alpha1.PlanAwaitingApproval)
		Expect(plan.Spec.Expected.Pods).To(HaveLen(2), s.diagnostics)
		Expect(plan.Spec.Steps).To(HaveLen(2), "one step per kind of node: "+describePlan(plan))
		Expect(evicted(plan)).To(BeEmpty())
		Expect(s.pods("train-dra")).To(HaveEach(HaveField("Spec.NodeName", BeEmpty())), "no 3g device exists before the plan")

		approve(plan)
		s.waitPhase(plan.Name, v1alpha1.PlanSucceeded, 3*time.Minute)
		dra := s.waitRunning("train-dra", 1, time.Minute)
		dp := s.waitRunning("train-dp", 1, time.Minute)
		Expect(dra[0].Spec.NodeName).To(Equal(driverNode), "the claim is allocated from the driver's slice")
		Expect(dp[0].Spec.NodeName).To(Equal(pluginNode), "the device plugin advertises the new 3g there")

		// The scheduler allocated a 3g device the driver published after the carve.
		Expect(dra[0].Status.ResourceClaimStatuses).To(HaveLen(1))
		claim := &resourcev1.ResourceClaim{}
		Expect(k8s.Get(suiteCtx, client.ObjectKey{Namespace: s.ns, Name: *dra[0].Status.ResourceClaimStatuses[0].ResourceClaimName}, claim)).To(Succeed())
		Expect(claim.Status.Allocation).NotTo(BeNil())
		Expect(claim.Status.Allocation.Devices.Results).To(ConsistOf(SatisfyAll(
			HaveField("Driver", "gpu.nvidia.com"), HaveField("Pool", driverNode), HaveField("Device", ContainSubstring("-mig-3g71gb-")))))
	})
})
