package localcluster_test

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpupool/gpupool/test/localcluster"
)

// TestKwokRunsNodesAndPods proves the whole stack the GPU simulations stand on: kwok makes an
// annotated node Ready, the scheduler places MIG pods on it and kwok reports them Running, the
// disruption controller fills in the PodDisruptionBudget, an eviction through the Eviction API
// is admitted, kwok removes the evicted pod and the ReplicaSet's replacement runs. Stop must
// leave no process behind, kwok included.
func TestKwokRunsNodesAndPods(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	var progress strings.Builder
	started := time.Now()
	cluster, err := localcluster.Start(ctx, localcluster.Options{
		BinDir: binDir(t), Components: localcluster.WithKwok, Progress: &progress,
	})
	g.Expect(err).NotTo(HaveOccurred())
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cluster.Stop()
		}
	})
	t.Logf("cluster with kwok healthy after %s", time.Since(started).Round(time.Millisecond))
	g.Expect(progress.String()).To(ContainSubstring("starting kwok"))
	g.Expect(cluster.LogPath("kwok")).To(BeAnExistingFile())

	cs, err := kubernetes.NewForConfig(cluster.Config)
	g.Expect(err).NotTo(HaveOccurred())
	const ns = "default"
	mig := corev1.ResourceName("nvidia.com/mig-1g.18gb")
	resources := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse("110"), mig: resource.MustParse("7"),
	}
	// No conditions: Ready must come from kwok, or the test proves nothing about it.
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "gpu-kwok",
			Annotations: map[string]string{localcluster.KwokNodeAnnotation: localcluster.KwokNodeAnnotationValue},
			Labels:      map[string]string{corev1.LabelHostname: "gpu-kwok"},
		},
		Status: corev1.NodeStatus{Capacity: resources, Allocatable: resources},
	}
	_, err = cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.Status.Conditions).To(ContainElement(And(
			HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))))
		g.Expect(n.Status.Allocatable).To(HaveKeyWithValue(mig, resource.MustParse("7")), "kwok keeps the status given at create")
	}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	t.Logf("node Ready after %s", time.Since(started).Round(time.Millisecond))

	labels := map[string]string{"app": "infer"}
	deployment := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "infer", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					// Never pulled: kwok only pretends to run it.
					Name: "main", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{mig: resource.MustParse("1")}},
				}}},
			},
		},
	}
	_, err = cs.AppsV1().Deployments(ns).Create(ctx, deployment, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "infer", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: labels},
		},
	}
	_, err = cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	// runningPods waits for exactly two Running pods of the Deployment on the kwok node.
	runningPods := func() []corev1.Pod {
		var running []corev1.Pod
		g.Eventually(func(g Gomega) {
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=infer"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods.Items).To(HaveLen(2))
			for _, p := range pods.Items {
				g.Expect(p.Spec.NodeName).To(Equal(node.Name), "pod %s", p.Name)
				g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "pod %s", p.Name)
			}
			running = pods.Items
		}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		return running
	}
	pods := runningPods()
	t.Logf("2 pods Running after %s", time.Since(started).Round(time.Millisecond))
	g.Eventually(func(g Gomega) {
		got, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, pdb.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.Status.CurrentHealthy).To(BeEquivalentTo(2))
		g.Expect(got.Status.DisruptionsAllowed).To(BeEquivalentTo(1))
	}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

	victim := pods[0]
	owner := metav1.GetControllerOf(&victim)
	g.Expect(owner).NotTo(BeNil())
	g.Expect(owner.Kind).To(Equal("ReplicaSet"))
	err = cs.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: victim.Name, Namespace: ns},
	})
	g.Expect(err).NotTo(HaveOccurred(), "the PDB allows one disruption")
	// kwok's fast pod-delete stage removes the terminating pod without waiting for its grace
	// period, so the pod is gone, not merely terminating.
	g.Eventually(func() error {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, victim.Name, metav1.GetOptions{})
		return err
	}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Satisfy(apierrors.IsNotFound))
	replacements := runningPods()
	g.Expect(replacements).NotTo(ContainElement(HaveField("Name", victim.Name)))
	for _, p := range replacements {
		g.Expect(metav1.GetControllerOf(&p)).To(HaveField("UID", owner.UID), "pod %s belongs to the same ReplicaSet", p.Name)
	}
	t.Logf("replacement Running after %s", time.Since(started).Round(time.Millisecond))

	pids := cluster.PIDs()
	g.Expect(pids).To(HaveLen(5), "etcd, apiserver, controller-manager, scheduler, kwok")
	stopStarted := time.Now()
	g.Expect(cluster.Stop()).To(Succeed())
	stopped = true
	t.Logf("stopped in %s", time.Since(stopStarted).Round(time.Millisecond))
	for _, pid := range pids {
		g.Expect(syscall.Kill(pid, 0)).To(MatchError(syscall.ESRCH), "process %d still running", pid)
	}
	_, err = os.Stat(cluster.Dir)
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "temporary work folder removed")
}
