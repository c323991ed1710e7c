package main

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gpupool/gpupool/internal/rightsize"
)

// Bad compute flags are usage mistakes, caught before any cluster or Prometheus is contacted.
func TestRightsizeComputeFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rightsize", "--prometheus-url", "prometheus:9090"}, "want Prometheus's base URL"},
		{[]string{"rightsize", "--prometheus-url", "http://prometheus:9090", "--compute-window", "0s"}, "--compute-window=0s"},
	} {
		code, _, stderr := invoke(t, "", append(tc.args, "--kubeconfig", "/nonexistent")...)
		if code != exitInvalid || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d saying %q", tc.args, code, stderr, exitInvalid, tc.want)
		}
	}
	code, stdout, _ := invoke(t, "", "rightsize", "--help")
	for _, want := range []string{"--prometheus-url string", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "--compute-window duration"} {
		if code != exitOK || !strings.Contains(stdout, want) {
			t.Errorf("rightsize --help: exit %d, does not mention %q", code, want)
		}
	}
}

// The compute Prometheus reports narrows the recommendation: the server Deployment, which
// memory alone shrinks from 3g.71gb to 1g.18gb, keeps its three compute slices when its pods
// keep them 90% busy, and the row says compute was measured. Without compute, the row says it
// was not. (dcgm's reading of Prometheus's answers is tested against Prometheus's engine in
// test/monitoring; this server answers one fixed vector, in client_golang's own encoding.)
func TestRightsizeWithComputeFromPrometheus(t *testing.T) {
	var queries []string
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query" || r.ParseForm() != nil {
			http.NotFound(w, r)
			return
		}
		queries = append(queries, r.Form.Get("query"))
		vec := model.Vector{{Metric: model.Metric{"namespace": "team-a", "pod": "server-a"}, Value: 0.9, Timestamp: model.Now()}}
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": vec}})
	}))
	defer prom.Close()

	f := &computeFlags{prometheusURL: prom.URL, window: time.Hour}
	src, err := f.source()
	if err != nil {
		t.Fatal(err)
	}
	act, err := activity(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	if want := (rightsize.ComputeActivity{types.NamespacedName{Namespace: "team-a", Name: "server-a"}: 0.9}); !maps.Equal(act, want) {
		t.Fatalf("activity = %v, want %v", act, want)
	}
	if len(queries) != 1 || !strings.Contains(queries[0], "DCGM_FI_PROF_GR_ENGINE_ACTIVE[1h]") {
		t.Fatalf("queries %q: want one over the --compute-window", queries)
	}

	kc := fake.NewClientBuilder().WithScheme(scheme).WithObjects(rightsizeCluster()...).Build()
	opts := rightsize.Options{MinWindow: 24 * time.Hour, MinSamples: 100}
	server := func(compute rightsize.ComputeActivity) workloadOutput {
		t.Helper()
		doc, err := readRightsize(context.Background(), kc, "team-a", opts, compute)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range doc.Workloads {
			if w.Kind == "Deployment" && w.Name == "server" {
				return w
			}
		}
		t.Fatalf("no Deployment server in %+v", doc.Workloads)
		return workloadOutput{}
	}
	measured := server(act)
	if measured.Verdict != rightsize.Keep || measured.Recommended != "3g.71gb" || !strings.Contains(measured.Compute, "compute busy 90% of 3 slices") {
		t.Errorf("with compute: %s %s, compute %q; want Keep 3g.71gb, compute busy 90%% of 3 slices", measured.Verdict, measured.Recommended, measured.Compute)
	}
	memoryOnly := server(nil)
	if memoryOnly.Verdict != rightsize.Shrink || memoryOnly.Recommended != "1g.18gb" || !strings.Contains(memoryOnly.Compute, "compute not measured") {
		t.Errorf("without compute: %s %s, compute %q; want Shrink 1g.18gb, compute not measured", memoryOnly.Verdict, memoryOnly.Recommended, memoryOnly.Compute)
	}
}

// A Prometheus that cannot be read fails the command: the user asked for compute.
func TestRightsizeComputeUnreachable(t *testing.T) {
	prom := httptest.NewServer(http.NotFoundHandler())
	defer prom.Close()
	src, err := (&computeFlags{prometheusURL: prom.URL, window: time.Hour}).source()
	if err != nil {
		t.Fatal(err)
	}
	_, err = activity(context.Background(), src)
	var exit *exitError
	if !errors.As(err, &exit) || exit.code != exitFailed || !strings.Contains(err.Error(), "--prometheus-url") {
		t.Fatalf("activity = %v; want a failure naming --prometheus-url", err)
	}
}
