package drain

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/testenv"
)

// TestPassAgainstAPIServer checks the outcomes that matter most against the real eviction
// subresource: 201 for a pod without a budget, 429 for a pod whose budget allows no disruption,
// and no second eviction of a pod that is still terminating.
func TestPassAgainstAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	env, err := testenv.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.Client

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "drain-test"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	free := runningPod(ctx, t, c, "free", map[string]string{"app": "free"})
	guarded := runningPod(ctx, t, c, "guarded", map[string]string{"app": "guarded"})

	// envtest has no disruption controller: write the budget's status as it would.
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}},
		},
	}
	if err := c.Create(ctx, pdb); err != nil {
		t.Fatalf("creating PDB: %v", err)
	}
	pdb.Status = policyv1.PodDisruptionBudgetStatus{
		ObservedGeneration: pdb.Generation,
		DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1,
	}
	if err := c.Status().Update(ctx, pdb); err != nil {
		t.Fatalf("setting PDB status: %v", err)
	}

	list := []types.NamespacedName{client.ObjectKeyFromObject(guarded), client.ObjectKeyFromObject(free)}
	first, err := Pass(ctx, c, node, list, Options{Rules: inventory.EvictionRules{EvictUnmanaged: true}})
	if err != nil {
		t.Fatalf("first pass: %v", err)
	}
	if got := outcomes(first); got["free"] != Evicted || got["guarded"] != Blocked {
		t.Fatalf("first pass: %s", first.Message())
	}
	t.Logf("first pass: %s", first.Message())

	// Nothing runs a kubelet here, so the evicted pod stays terminating: the next pass waits.
	second, err := Pass(ctx, c, node, list, Options{Rules: inventory.EvictionRules{EvictUnmanaged: true}})
	if err != nil {
		t.Fatalf("second pass: %v", err)
	}
	if got := outcomes(second); got["free"] != Terminating || got["guarded"] != Blocked {
		t.Fatalf("second pass: %s", second.Message())
	}
	if second.Done() {
		t.Errorf("Done() while pods remain")
	}
}

func runningPod(ctx context.Context, t *testing.T, c client.Client, name string, labels map[string]string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "drain-test", Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	// Pending pods are evicted without consulting budgets: make the pod a running, ready one.
	pod.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatalf("marking pod %s running: %v", name, err)
	}
	return pod
}

func outcomes(r Result) map[string]Outcome {
	out := map[string]Outcome{}
	for _, p := range r.Pods {
		out[p.Pod.Name] = p.Outcome
	}
	return out
}
