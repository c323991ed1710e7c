package localcluster_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpupool/gpupool/test/localcluster"
)

func binDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join("..", "..", "hack", "control-plane.sh"), "--print-dir").Output()
	if err != nil {
		t.Fatalf("asking for the control-plane cache: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestClusterSchedulesAndReconciles starts the whole control plane and checks that each part
// does its job: the controller-manager turns a Deployment into a ReplicaSet and pods, the
// scheduler binds a pod asking for a MIG resource to the one node that advertises it, and
// Stop leaves no process behind.
func TestClusterSchedulesAndReconciles(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	var progress strings.Builder
	cluster, err := localcluster.Start(ctx, localcluster.Options{BinDir: binDir(t), Progress: &progress})
	g.Expect(err).NotTo(HaveOccurred())
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cluster.Stop()
		}
	})
	g.Expect(progress.String()).To(ContainSubstring("starting kube-scheduler"))

	cs, err := kubernetes.NewForConfig(cluster.Config)
	g.Expect(err).NotTo(HaveOccurred())
	version, err := cs.Discovery().ServerVersion()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(version.GitVersion).To(Equal("v1.37.2"), "built with version ldflags")

	mig := corev1.ResourceName("nvidia.com/mig-3g.71gb")
	for _, n := range []struct {
		name  string
		count string
	}{{"gpu-a", "0"}, {"gpu-b", "2"}} {
		resources := corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"),
			corev1.ResourcePods: resource.MustParse("110"), mig: resource.MustParse(n.count),
		}
		// The API server keeps a Node's status on create, before any controller races us.
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.name},
			Status: corev1.NodeStatus{Capacity: resources, Allocatable: resources,
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
					LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}},
		}
		_, err = cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}

	labels := map[string]string{"app": "trainer"}
	deployment := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					// The node-lifecycle controller taints nodes without a kubelet; tolerate it.
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "main", Image: "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{mig: resource.MustParse("1")}},
					}},
				},
			},
		},
	}
	_, err = cs.AppsV1().Deployments("default").Create(ctx, deployment, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	g.Eventually(func(g Gomega) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=trainer"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pods.Items).To(HaveLen(1))
		g.Expect(pods.Items[0].Spec.NodeName).To(Equal("gpu-b"))
	}).WithTimeout(60 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())

	pids := cluster.PIDs()
	g.Expect(pids).To(HaveLen(4))
	g.Expect(cluster.Stop()).To(Succeed())
	stopped = true
	for _, pid := range pids {
		g.Expect(syscall.Kill(pid, 0)).To(MatchError(syscall.ESRCH), "process %d still running", pid)
	}
	_, err = os.Stat(cluster.Dir)
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "temporary work folder removed")
}
