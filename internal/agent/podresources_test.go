package agent_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
)

// fakeKubelet serves the kubelet's PodResources v1 service from a fixed list.
type fakeKubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	pods []*podresourcesv1.PodResources
}

func (k *fakeKubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return &podresourcesv1.ListPodResourcesResponse{PodResources: k.pods}, nil
}

// startKubelet serves pods on a fresh unix socket and returns its path. The
// directory comes from os.MkdirTemp because t.TempDir paths can exceed the
// 108-byte limit of a unix socket path.
func startKubelet(t *testing.T, pods ...*podresourcesv1.PodResources) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "podres")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	socket := filepath.Join(dir, "kubelet.sock")
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatalf("listen on %s: %v", socket, err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, &fakeKubelet{pods: pods})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return socket
}

func pod(ns, name string, ctrs ...*podresourcesv1.ContainerResources) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{Namespace: ns, Name: name, Containers: ctrs}
}

func ctr(name string, devs ...*podresourcesv1.ContainerDevices) *podresourcesv1.ContainerResources {
	return &podresourcesv1.ContainerResources{Name: name, Devices: devs}
}

func devs(resource string, ids ...string) *podresourcesv1.ContainerDevices {
	return &podresourcesv1.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}

func ref(ns, name string) v1alpha1.PodReference {
	return v1alpha1.PodReference{Namespace: ns, Name: name}
}

func owners(t *testing.T, socket string) map[string][]v1alpha1.PodReference {
	t.Helper()
	c, err := agent.NewPodResourcesClient(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := agent.DeviceOwners(ctx, c)
	if err != nil {
		t.Fatalf("DeviceOwners: %v", err)
	}
	return got
}

func TestDeviceOwnersFromKubelet(t *testing.T) {
	socket := startKubelet(t,
		pod("team-a", "trainer", ctr("main", devs("nvidia.com/mig-3g.40gb", "MIG-aaa")), ctr("sidecar")),
		pod("team-b", "infer", ctr("main", devs("nvidia.com/gpu", "GPU-111", "GPU-222"), devs("example.com/fpga", "fpga-0"))),
		// Time-sliced replicas of one GPU held by two pods; the replica suffix goes.
		pod("team-c", "web-2", ctr("main", devs("nvidia.com/gpu.shared", "GPU-333::3"))),
		pod("team-c", "web-1", ctr("main", devs("nvidia.com/gpu.shared", "GPU-333::0")), ctr("aux", devs("nvidia.com/gpu.shared", "GPU-333::1"))),
		pod("kube-system", "coredns", ctr("coredns")),
	)
	want := map[string][]v1alpha1.PodReference{
		"MIG-aaa": {ref("team-a", "trainer")},
		"GPU-111": {ref("team-b", "infer")},
		"GPU-222": {ref("team-b", "infer")},
		"GPU-333": {ref("team-c", "web-1"), ref("team-c", "web-2")},
	}
	// Both spellings of the socket reach the kubelet.
	for _, s := range []string{socket, "unix://" + socket} {
		if got := owners(t, s); !reflect.DeepEqual(got, want) {
			t.Errorf("DeviceOwners(%s)\n got %v\nwant %v", s, got, want)
		}
	}
}

func TestDeviceOwnersKubeletMissing(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "no-kubelet.sock")
	c, err := agent.NewPodResourcesClient(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := agent.DeviceOwners(ctx, c); err == nil || !strings.Contains(err.Error(), socket) {
		t.Fatalf("DeviceOwners on a missing socket: %v, want an error naming %s", err, socket)
	}
}

// Attribution end to end: NVML inventory from the mock, owners from a real
// gRPC kubelet.
func TestAttributeNVMLInventoryToPods(t *testing.T) {
	s, _ := newServer(t, gpus.A100_SXM4_40GB, gpus.A100_SXM4_40GB)
	d0 := mockDevice(t, s, 0)
	enableMIG(t, d0)
	u3g := createInstance(t, d0, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 0, true)
	u2g := createInstance(t, d0, nvml.GPU_INSTANCE_PROFILE_2_SLICE, 4, true)
	u1g := createInstance(t, d0, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 6, true)
	gpu1 := mockDevice(t, s, 1).UUID

	socket := startKubelet(t,
		pod("team-a", "trainer", ctr("main", devs("nvidia.com/mig-3g.20gb", u3g))),
		pod("team-b", "notebook", ctr("main", devs("nvidia.com/mig-1g.5gb", u1g))),
		pod("team-c", "whole", ctr("main", devs("nvidia.com/gpu", gpu1))),
		pod("team-d", "gone", ctr("main", devs("nvidia.com/gpu", "GPU-not-here"))),
	)
	got := mustRead(t, s)
	unmatched := agent.Attribute(got, owners(t, socket))

	trainer, notebook := ref("team-a", "trainer"), ref("team-b", "notebook")
	want := []v1alpha1.MIGInstance{
		{Profile: "3g.20gb", Placement: pl(0, 4), UUID: u3g, Busy: true, Pod: &trainer},
		{Profile: "2g.10gb", Placement: pl(4, 2), UUID: u2g},
		{Profile: "1g.5gb", Placement: pl(6, 1), UUID: u1g, Busy: true, Pod: &notebook},
	}
	if !reflect.DeepEqual(got[0].Instances, want) {
		t.Errorf("GPU 0 instances\n got %+v\nwant %+v", got[0].Instances, want)
	}
	if len(got[0].Pods) != 0 {
		t.Errorf("GPU 0 whole-GPU pods %v, want none", got[0].Pods)
	}
	if wantPods := []v1alpha1.PodReference{ref("team-c", "whole")}; !reflect.DeepEqual(got[1].Pods, wantPods) {
		t.Errorf("GPU 1 pods %v, want %v", got[1].Pods, wantPods)
	}
	if !reflect.DeepEqual(unmatched, []string{"GPU-not-here"}) {
		t.Errorf("unmatched %v", unmatched)
	}

	// A later cycle without the notebook drops its pod; Busy is NVML's too,
	// so Attribute never clears it.
	again := agent.Attribute(got, map[string][]v1alpha1.PodReference{u3g: {trainer}})
	if got[0].Instances[2].Pod != nil || got[1].Pods != nil || len(again) != 0 {
		t.Errorf("re-attribution kept stale pods: %+v %v", got[0].Instances[2], got[1].Pods)
	}
}
