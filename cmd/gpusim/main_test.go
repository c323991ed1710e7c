package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/sim"
	"github.com/gpupool/gpupool/internal/testenv"
)

// syncBuffer is a bytes.Buffer safe for the logger's goroutines and the test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func noConfig(string) (*rest.Config, error) { return nil, errors.New("no cluster in this test") }

// Bad command lines exit with the usage code before any cluster is contacted, and --help
// documents the --nodes syntax, the models, the presets, the fault annotations and what the
// device plugin's sharing configs advertise (shared whole GPUs and, with time-slicing, shared
// MIG devices).
func TestCommandLine(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--nodes", "h200"},
		{"--nodes", "v100:1"},
		{"--nodes", "h200:1", "--configmap", "ns/name"}, // gone: the ClusterPolicy names the ConfigMaps
		{"--nodes", "h200:1", "--cluster-policy", "Not_A_Name"},
		{"--nodes", "h200:1", "--agent-refresh-period", "0s"},
		{"--nodes", "h200:1", "--agent-usage-min-window", "0s"},
		{"--nodes", "h200:1", "--agent-usage-min-samples", "0"},
		{"--nodes", "h200:1", "extra"},
		{"--no-such-flag"},
	} {
		var stderr syncBuffer
		if code := run(context.Background(), args, &stderr, noConfig); code != exitUsage {
			t.Errorf("gpusim %q exited %d, want %d; stderr: %s", args, code, exitUsage, stderr.String())
		}
	}
	var stderr syncBuffer
	if code := run(context.Background(), []string{"--help"}, &stderr, noConfig); code != exitOK {
		t.Errorf("gpusim --help exited %d", code)
	}
	for _, want := range []string{"[<count>x]<model>:<gpus>[:<preset>[:dra|:dynamicmig]]", "dynamicmig", "h200", "all-1g", "sim.gpupool.io/fault", "stuck-pending", "reboot", "plugin-silent", "agent-down", "fail-always", "sim.gpupool.io/apply-delay", "sim.gpupool.io/reboot-duration", "sim.gpupool.io/restart-mig-manager", "sim.gpupool.io/usage", "bursty:4Gi-60Gi", "-create-nodes",
		"-cluster-policy", "status.namespace", "spec.migManager.config.name", "nvidia.com/device-plugin.config", "mig.config.state=failed",
		"nvidia.com/gpu.shared", "nvidia.com/mig-<profile>.shared"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("--help does not mention %q:\n%s", want, stderr.String())
		}
	}
	if code := run(context.Background(), []string{"--nodes", "h200:1"}, &stderr, noConfig); code != exitFailed {
		t.Errorf("gpusim without a reachable cluster exited %d, want %d", code, exitFailed)
	}
}

// gpusim creates its nodes, serves them, seeds the mig-parted config and the device plugin's
// (its default key, only because none existed) in the namespace the only ClusterPolicy names,
// and exits 0 when its context ends (SIGINT/SIGTERM in main).
func TestRunCreatesNodesAndStopsOnCancel(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest: skipped with -short")
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
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpu-operator"}})).To(Succeed())
	g.Expect(apiextensionsv1.AddToScheme(env.Scheme)).To(Succeed())
	c, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Create(ctx, sim.ClusterPolicyCRD())).To(Succeed())
	g.Eventually(func() error {
		return sim.InstallClusterPolicy(ctx, c, sim.ClusterPolicySettings{
			Name: "cluster-policy", Namespace: "gpu-operator", MIGStrategy: "mixed",
			MIGConfigMap: "gpupool-mig-parted-config", DevicePluginConfigMap: "gpupool-device-plugin-config", DevicePluginDefault: "gpupool-none",
		})
	}).WithTimeout(30 * time.Second).Should(Succeed())

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(runCtx, []string{"--nodes", "h200:2:all-1g,a100-80gb:1", "--create-nodes", "--seed-config", "--seed-device-plugin-config", "--agents=false"},
			&stderr, func(string) (*rest.Config, error) { return env.Config, nil })
	}()
	g.Eventually(func(g Gomega) {
		n := &corev1.Node{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Name: "sim-h200-0"}, n)).To(Succeed())
		q := n.Status.Allocatable["nvidia.com/mig-1g.18gb"]
		g.Expect(q.String()).To(Equal("14"))
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Name: "sim-a100-80gb-0"}, n)).To(Succeed())
		cm := &corev1.ConfigMap{}
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: "gpu-operator", Name: "gpupool-mig-parted-config"}, cm)).To(Succeed())
		g.Expect(cm.Data["config.yaml"]).To(ContainSubstring("all-1g"))
		g.Expect(env.Client.Get(ctx, types.NamespacedName{Namespace: "gpu-operator", Name: "gpupool-device-plugin-config"}, cm)).To(Succeed())
		g.Expect(cm.Data).To(HaveKey("gpupool-none"))
	}).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())

	cancel()
	g.Eventually(done).WithTimeout(30*time.Second).Should(Receive(Equal(exitOK)), "stderr: %s", stderr.String())
	g.Expect(stderr.String()).To(ContainSubstring(`"msg":"created node","node":"sim-h200-0"`))
}
