package fragmentation

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpusim "github.com/gpupool/gpupool/internal/sim"
	"github.com/gpupool/gpupool/test/localcluster"
)

// TestFirstFitModelMatchesTheScheduler holds the benchmark's DynamicMIG first-fit model to the
// real thing: the real kube-scheduler (its DRA allocator) with gpusim's DynamicMIG driver on a
// 2-GPU H100 node, on a local control plane with kwok. ffSequence's claims arrive one at a
// time (each allocated before the next is created) and go (pod and claim deleted), and each
// lands on exactly the device the model names. About a minute, most of it the control plane
// starting.
func TestFirstFitModelMatchesTheScheduler(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local control plane with kwok; skipped with -short")
	}
	want := firstFitDevices(t, 2, ffSequence)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	out, err := exec.Command(filepath.Join("..", "..", "..", "hack", "control-plane.sh"), "--print-dir").Output()
	if err != nil {
		t.Fatalf("asking hack/control-plane.sh for the control-plane binaries: %v", err)
	}
	var progress strings.Builder
	lc, err := localcluster.Start(ctx, localcluster.Options{BinDir: strings.TrimSpace(string(out)),
		Components: localcluster.WithKwok, Progress: &progress})
	if err != nil {
		t.Fatalf("starting the local cluster (run `make test-assets` if binaries are missing): %v\n%s", err, progress.String())
	}
	t.Cleanup(func() {
		if err := lc.Stop(); err != nil {
			t.Errorf("stopping the local cluster: %v", err)
		}
	})
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(lc.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	// gpusim's operands read the GPU Operator's ClusterPolicy; the DynamicMIG driver needs
	// nothing else of it.
	policy := gpusim.ClusterPolicySettings{Name: "cluster-policy", Namespace: "gpu-operator", MIGStrategy: "mixed",
		MIGConfigMap: "mig-parted-config", DevicePluginConfigMap: "device-plugin-config", DevicePluginDefault: "none"}
	if err := c.Create(ctx, gpusim.ClusterPolicyCRD()); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{policy.Namespace, namespace} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	poll(ctx, t, "the ClusterPolicy CRD to be established", func() (bool, error) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(gpusim.ClusterPolicyCRD()), crd); err != nil {
			return false, err
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err := gpusim.InstallClusterPolicy(ctx, c, policy); err != nil {
		t.Fatal(err)
	}
	const node = "dm-h100"
	s, err := gpusim.New(lc.Config, gpusim.Options{Nodes: []gpusim.NodeSpec{{Name: node, Model: "h100", GPUs: 2, DynamicMIG: true}},
		ClusterPolicy: policy.Name, CreateNodes: true, DisableAgents: true, RetryPeriod: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	simCtx, stopSim := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(simCtx) }()
	t.Cleanup(func() {
		stopSim()
		if err := <-done; err != nil {
			t.Errorf("gpusim: %v", err)
		}
	})

	// The DeviceClasses NVIDIA's driver chart installs, by the type attribute its devices carry.
	for name, typ := range map[string]string{"mig.nvidia.com": "mig", "gpu.nvidia.com": "gpu"} {
		if err := c.Create(ctx, &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == '%s'", typ)}}}}}); err != nil {
			t.Fatal(err)
		}
	}
	poll(ctx, t, "the DynamicMIG driver to publish its counter set and one slice per GPU, and the node to be Ready", func() (bool, error) {
		var list resourcev1.ResourceSliceList
		if err := c.List(ctx, &list); err != nil {
			return false, err
		}
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		ready := false
		for _, cond := range n.Status.Conditions {
			ready = ready || cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue
		}
		return ready && len(list.Items) == 3, nil
	})

	for _, st := range ffSequence {
		if st.free {
			release(ctx, t, c, st.name)
			continue
		}
		got := allocate(ctx, t, c, node, st)
		// The driver's name carries the GI profile ID between profile and start
		// (gpu-<minor>-mig-<profile>-<id>-<start>); the model leaves it out.
		if parts := strings.Split(got, "-"); len(parts) == 6 {
			got = strings.Join(append(parts[:4:4], parts[5]), "-")
		}
		t.Logf("claim %s (%s): %s", st.name, st.shape, got)
		if got != want[st.name] {
			t.Errorf("claim %s (%s): the scheduler allocated %s, the model says %s", st.name, st.shape, got, want[st.name])
		}
	}
}

// poll waits for cond, failing the test when ctx ends first.
func poll(ctx context.Context, t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) { return cond() }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// allocate creates the step's claim and a pod using it on the node, waits for the scheduler to
// allocate it and returns the device allocated.
func allocate(ctx context.Context, t *testing.T, c client.Client, node string, st claimStep) string {
	t.Helper()
	req := resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}
	if st.shape.Whole == 0 {
		req.DeviceClassName = "mig.nvidia.com"
		req.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: fmt.Sprintf("device.attributes['gpu.nvidia.com'].profile == '%s'", h100(t).Profiles[profileIndex(t, st.shape.Slices)].Name)}}}
	}
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: st.name},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &req}}}}}
	if err := c.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: st.name},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(st.name)}},
			Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
			Tolerations: []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}},
		}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	var device string
	poll(ctx, t, "claim "+st.name+" to be allocated and its pod bound", func() (bool, error) {
		got := &resourcev1.ResourceClaim{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(claim), got); err != nil {
			return false, err
		}
		p := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), p); err != nil {
			return false, err
		}
		if got.Status.Allocation == nil || p.Spec.NodeName == "" {
			return false, nil
		}
		if r := got.Status.Allocation.Devices.Results; len(r) == 1 {
			device = r[0].Device
		}
		return true, nil
	})
	return device
}

// release deletes the step's pod and claim and waits until both are gone, so the scheduler's
// next allocation sees the devices free.
func release(ctx context.Context, t *testing.T, c client.Client, name string) {
	t.Helper()
	objs := []client.Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}},
		&resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}},
	}
	for _, o := range objs {
		if err := c.Delete(ctx, o, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	poll(ctx, t, "pod and claim "+name+" to be gone", func() (bool, error) {
		for _, o := range objs {
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				return false, client.IgnoreNotFound(err)
			}
		}
		return true, nil
	})
}

// profileIndex is the index in the H100's profile list of the canonical profile of a compute
// size, the one the trace's pods ask for (as newSim picks it).
func profileIndex(t *testing.T, compute int) int {
	t.Helper()
	s, err := newSim(cfg(t, DMFirstFit), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, pr := range h100(t).Profiles {
		if pr.Name == s.profile[compute] {
			return i
		}
	}
	t.Fatalf("no canonical profile of %d compute slices", compute)
	return -1
}
