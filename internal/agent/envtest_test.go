package agent_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
	"github.com/gpupool/gpupool/internal/agent/nvmlmock"
	"github.com/gpupool/gpupool/internal/testenv"
)

// The API server is started on first use and shared by the package's envtest
// tests (each uses its own node names), so the unit tests stay fast when run alone.
var (
	envOnce   sync.Once
	sharedEnv *testenv.Env
	envErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedEnv != nil {
		if err := sharedEnv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}
	os.Exit(code)
}

// startEnv returns the package's API server, starting it on first use.
func startEnv(t *testing.T) *testenv.Env {
	t.Helper()
	envOnce.Do(func() { sharedEnv, envErr = testenv.Start() })
	if envErr != nil {
		t.Fatalf("starting envtest: %v", envErr)
	}
	return sharedEnv
}

// h200Node is a two-GPU H200 node as the corrected mock reports it.
func h200Node(t *testing.T) (*server.Server, *nvmlmock.MIGDevices) {
	t.Helper()
	return newServer(t, nvmlmock.Corrected(gpus.H200_SXM5_141GB), nvmlmock.Corrected(gpus.H200_SXM5_141GB))
}

// switchableReader reads through whichever NVML library is current, so a test
// can make NVML disappear and come back between reconciles.
type switchableReader struct {
	mu  sync.Mutex
	lib agent.NVML
}

func (r *switchableReader) set(lib agent.NVML) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lib = lib
}

func (r *switchableReader) read(context.Context) ([]v1alpha1.GPUStatus, error) {
	r.mu.Lock()
	lib := r.lib
	r.mu.Unlock()
	return agent.Read(lib)
}

// noDriver is an NVML whose library cannot be loaded, as on a node without a driver.
var noDriver = &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}

// deleteNodeAtCleanup removes the test's GPUNode, so that a rerun in the same
// process (go test -count) starts from nothing.
func deleteNodeAtCleanup(t *testing.T, c client.Client, name string) {
	t.Cleanup(func() {
		n := &v1alpha1.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.Delete(context.Background(), n); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting GPUNode %s: %v", name, err)
		}
	})
}

func getNode(t *testing.T, c client.Client, name string) *v1alpha1.GPUNode {
	t.Helper()
	n := &v1alpha1.GPUNode{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: name}, n); err != nil {
		t.Fatalf("get GPUNode %s: %v", name, err)
	}
	return n
}

func condition(n *v1alpha1.GPUNode, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(n.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// setExpectedLayout writes spec.expectedLayout as the controller would: a
// patch of the main resource under another field manager, without a
// resourceVersion precondition because the agent writes status meanwhile.
func setExpectedLayout(t *testing.T, c client.Client, name string, layout []v1alpha1.GPULayout) {
	t.Helper()
	n := getNode(t, c, name)
	base := n.DeepCopy()
	n.Spec.ExpectedLayout = layout
	if err := c.Patch(context.Background(), n, client.MergeFrom(base), client.FieldOwner("gpupool-manager")); err != nil {
		t.Fatalf("set spec.expectedLayout of %s: %v", name, err)
	}
}
