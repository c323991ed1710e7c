package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
	"github.com/gpupool/gpupool/internal/agent/nvmlmock"
	"github.com/gpupool/gpupool/internal/testenv"
)

// logBuffer collects the agent's log and shows it when the test fails.
type logBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func newLogBuffer(t *testing.T) *logBuffer {
	b := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			b.mu.Lock()
			defer b.mu.Unlock()
			t.Logf("agent log:\n%s", b.buf)
		}
	})
	return b
}

// TestRunPublishesGPUNodeAndServesProbes runs the agent's command against a
// real API server with a mock NVML and no kubelet: it must create and publish
// its GPUNode, report the missing kubelet socket, answer its probes, and exit 0
// when its context ends.
func TestRunPublishesGPUNodeAndServesProbes(t *testing.T) {
	g := NewWithT(t)
	env, err := testenv.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })

	s, err := server.New(server.WithGPUs(nvmlmock.Corrected(gpus.H200_SXM5_141GB), nvmlmock.Corrected(gpus.H200_SXM5_141GB)))
	g.Expect(err).NotTo(HaveOccurred())
	nvmlmock.Install(s)

	probeAddr := testenv.FreeAddr(t)
	socket := filepath.Join(t.TempDir(), "no-kubelet.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	logs := newLogBuffer(t)
	go func() {
		done <- run(ctx, []string{"--node-name", "gpu-node-1", "--health-probe-bind-address", probeAddr,
			"--pod-resources-socket", socket}, nil, logs, deps{
			newNVML:    func() agent.NVML { return s },
			restConfig: func() (*rest.Config, error) { return env.Config, nil },
			clock:      clocktesting.NewFakeClock(testenv.Epoch),
		})
	}()

	node := &v1alpha1.GPUNode{}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Name: "gpu-node-1"}, node)).To(Succeed())
		g.Expect(node.Status.GPUs).To(HaveLen(2))
		g.Expect(meta.IsStatusConditionTrue(node.Status.Conditions, v1alpha1.ConditionNVMLReady)).To(BeTrue())
		g.Expect(meta.FindStatusCondition(node.Status.Conditions, agent.ConditionPodResourcesReady)).To(HaveValue(And(
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", agent.ReasonPodResourcesUnavailable),
			HaveField("Message", ContainSubstring(socket)),
		)))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(node.Status.ObservedTime.Time).To(BeTemporally("==", testenv.Epoch))

	for _, probe := range []string{"healthz", "readyz"} {
		g.Eventually(func() (int, error) {
			resp, err := http.Get(fmt.Sprintf("http://%s/%s", probeAddr, probe))
			if err != nil {
				return 0, err
			}
			defer resp.Body.Close()
			return resp.StatusCode, nil
		}).WithTimeout(30*time.Second).Should(Equal(http.StatusOK), probe)
	}

	cancel()
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(Equal(exitOK)))
}
