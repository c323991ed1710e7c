package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"k8s.io/client-go/rest"

	"github.com/gpupool/gpupool/internal/agent"
	"github.com/gpupool/gpupool/internal/agent/nvmlmock"
)

func runAgent(t *testing.T, lib agent.NVML, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb, deps{
		newNVML: func() agent.NVML { return lib },
		restConfig: func() (*rest.Config, error) {
			t.Error("the API server was contacted")
			return nil, errors.New("no API server in this test")
		},
	})
	return code, out.String(), errb.String()
}

func TestRunUsageErrors(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	lib := &mock.Interface{InitFunc: func() nvml.Return {
		t.Error("NVML initialised on a usage error")
		return nvml.SUCCESS
	}}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--node-name (or $NODE_NAME) is required"},
		{[]string{"--node-name", "gpu-1", "--refresh-period", "0s"}, "--refresh-period must be positive"},
		{[]string{"--probe", "extra"}, "unexpected arguments"},
		{[]string{"--no-such-flag"}, "flag provided but not defined"},
		{[]string{"--node-name", "gpu-1", "--heartbeat", "beat"}, "want readiness, lease or status"},
		{[]string{"--node-name", "gpu-1", "--heartbeat", "lease", "--lease-namespace", ""}, "--heartbeat=lease needs --lease-namespace"},
		{[]string{"--node-name", "gpu-1", "--heartbeat", "readiness", "--lease-namespace", "agents"}, "only for --heartbeat=lease"},
		{[]string{"--node-name", "gpu-1", "--heartbeat", "readiness", "--health-probe-bind-address", "0"}, "needs the readiness probe"},
	} {
		code, _, stderr := runAgent(t, lib, tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, exitUsage, tc.want)
		}
	}
}

func TestProbeWithoutDriver(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	code, stdout, stderr := runAgent(t, lib, "--probe")
	if code != exitNVML || stdout != "" ||
		!strings.Contains(stderr, "NVML not found: this machine has no NVIDIA driver (libnvidia-ml.so.1)") ||
		!strings.Contains(stderr, "reason=NVMLNotFound") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestProbePrintsInventoryAndComparison(t *testing.T) {
	s, err := server.New(server.WithGPUs(nvmlmock.Corrected(gpus.H200_SXM5_141GB), gpus.H100_SXM5_80GB))
	if err != nil {
		t.Fatal(err)
	}
	nvmlmock.Install(s)
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	code, stdout, stderr := runAgent(t, s, "--probe", "--node-name", "gpu-node-1", "--pod-resources-socket", socket)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var report agent.ProbeReport
	if err := json.Unmarshal([]byte(stdout), &report); err != nil {
		t.Fatalf("output is not a probe report: %v\n%s", err, stdout)
	}
	if report.Node != "gpu-node-1" || len(report.GPUs) != 2 || !strings.Contains(report.PodResources, "skipped") {
		t.Fatalf("report %+v", report)
	}
	// The corrected H200 agrees with internal/mig; go-nvml's own H100 table does not.
	if c := report.GPUs[0].Comparison; !c.Match || c.BuiltinProduct != "H200-141GB" {
		t.Errorf("H200 comparison %+v", c)
	}
	if c := report.GPUs[1].Comparison; c.Match || c.BuiltinProduct != "H100-80GB" {
		t.Errorf("uncorrected H100 comparison %+v", c)
	}
	// Status fields are inlined next to the comparison, as the GPUNode spells them.
	for _, key := range []string{`"uuid": "GPU-`, `"pciDeviceID": "0x233310DE"`, `"nvmlPlacements"`, `"builtinPlacements"`, `"match": false`} {
		if !strings.Contains(stdout, key) {
			t.Errorf("output lacks %s", key)
		}
	}
}
