package monitoring_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/storage"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/dcgm"
	"github.com/gpupool/gpupool/internal/rightsize"
)

// queryAPI answers Prometheus's instant query endpoint, /api/v1/query (GET or POST form:
// query, time in Unix seconds), from Prometheus's own query engine over test storage, in the
// envelope Prometheus's web/api/v1 writes: {"status":"success","data":{"resultType",
// "result"}}, or {"status":"error","errorType","error"} with 400 for a query the engine
// rejects. The result is encoded by promql's own JSON marshalling of its values.
func queryAPI(t *testing.T, q storage.Queryable) *httptest.Server {
	engine := promqltest.NewTestEngineWithOpts(t, promql.EngineOpts{
		MaxSamples: 1_000_000, Timeout: time.Minute,
		// A stock Prometheus's parser: no experimental functions or syntax.
		Parser: parser.NewParser(parser.Options{}),
	})
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/query", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fail := func(kind string, err error) {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"status": "error", "errorType": kind, "error": err.Error()})
		}
		if err := r.ParseForm(); err != nil {
			fail("bad_data", err)
			return
		}
		secs, err := strconv.ParseFloat(r.Form.Get("time"), 64)
		if err != nil {
			fail("bad_data", err)
			return
		}
		ts := time.UnixMilli(int64(secs * 1000)).UTC()
		qry, err := engine.NewInstantQuery(r.Context(), q, nil, r.Form.Get("query"), ts)
		if err != nil {
			fail("bad_data", err)
			return
		}
		defer qry.Close()
		res := qry.Exec(r.Context())
		if res.Err != nil {
			fail("execution", res.Err)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "success",
			"data": map[string]any{"resultType": res.Value.Type(), "result": res.Value}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// TestDCGMComputeActivity reads DCGM exporter's series, as Prometheus stores them under each
// label spelling, through dcgm.Source and a real query engine. Samples are one a minute from
// time 0; the query runs at 120m over a one-hour window.
func TestDCGMComputeActivity(t *testing.T) {
	load := "load 1m\n" + strings.Join([]string{
		// dcgm-exporter's own labels (honor_labels: true), whole GPUs.
		`DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a",namespace="team-a",pod="steady-0"} 0.1x120`,
		// Busy 10% of the time: the p95 is the burst.
		`DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="1",UUID="GPU-a1",namespace="team-a",pod="bursty-0"} 0.2x60 0.2x53 0.9x6`,
		// Busy only before the window: the window is what counts.
		`DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="2",UUID="GPU-a2",namespace="team-a",pod="was-busy-0"} 1x60 0.3x60`,
		// Scraped through Kubernetes discovery with honor_labels false: Prometheus keeps the
		// target's pod (the exporter's) and renames the exporter's labels exported_*. Two MIG
		// instances of one GPU, one series each, each naming the pod on it.
		`DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-b",GPU_I_ID="1",GPU_I_PROFILE="3g.71gb",namespace="gpu-operator",pod="nvidia-dcgm-exporter-x7k2p",exported_namespace="team-b",exported_pod="infer-0"} 0.4x120`,
		`DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-b",GPU_I_ID="2",GPU_I_PROFILE="1g.18gb",namespace="gpu-operator",pod="nvidia-dcgm-exporter-x7k2p",exported_namespace="team-b",exported_pod="infer-1"} 0.7x120`,
		// A pod holding two devices: its busiest counts.
		`DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-c",GPU_I_ID="1",GPU_I_PROFILE="1g.18gb",namespace="team-c",pod="two-0"} 0.25x120`,
		`DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-c",GPU_I_ID="2",GPU_I_PROFILE="1g.18gb",namespace="team-c",pod="two-0"} 0.5x120`,
		// An instance no pod holds, and another of the exporter's fields.
		`DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-c",GPU_I_ID="3",GPU_I_PROFILE="1g.18gb"} 0.8x120`,
		`DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",namespace="team-a",pod="steady-0"} 9216x120`,
	}, "\n")
	srv := queryAPI(t, promqltest.LoadedStorage(t, load))
	src, err := dcgm.New(srv.URL, dcgm.Options{Window: time.Hour, Now: func() time.Time { return time.Unix(0, 0).Add(120 * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	got, err := src.ComputeActivity(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pod := func(ns, name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }
	want := rightsize.ComputeActivity{
		pod("team-a", "steady-0"):   0.1,
		pod("team-a", "bursty-0"):   0.9,
		pod("team-a", "was-busy-0"): 0.3,
		pod("team-b", "infer-0"):    0.4,
		pod("team-b", "infer-1"):    0.7,
		pod("team-c", "two-0"):      0.5,
		// The exporter's own pod, from the unattributed instance's target labels: harmless,
		// as it holds no GPU and is never asked about (dcgm's podOf).
	}
	got = dropPod(got, pod("gpu-operator", "nvidia-dcgm-exporter-x7k2p"))
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Fatalf("compute activity, -want +got:\n%s", d)
	}
}

func dropPod(a rightsize.ComputeActivity, p types.NamespacedName) rightsize.ComputeActivity {
	delete(a, p)
	return a
}

// TestDCGMComputeActivityErrors: what a Prometheus without usable series answers, and what the
// error tells the user to check.
func TestDCGMComputeActivityErrors(t *testing.T) {
	for _, tc := range []struct {
		name, load string
		want       []string
	}{
		{"profiling metrics not scraped", `load 1m
			DCGM_FI_DEV_GPU_UTIL{gpu="0",namespace="team-a",pod="steady-0"} 50x120`,
			[]string{"no series of it over the last 1h", "is dcgm-exporter scraped", "are profiling metrics enabled"}},
		{"series only before the window", `load 1m
			DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",namespace="team-a",pod="steady-0"} 0.5x30`,
			[]string{"no series of it over the last 1h"}},
		{"no pod mapping", `load 1m
			DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a"} 0.5x120
			DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="1",UUID="GPU-b"} 0.5x120`,
			[]string{"has series of it, but none names a pod", "DCGM_EXPORTER_KUBERNETES"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := queryAPI(t, promqltest.LoadedStorage(t, tc.load))
			src, err := dcgm.New(srv.URL, dcgm.Options{Window: time.Hour, Now: func() time.Time { return time.Unix(0, 0).Add(120 * time.Minute) }})
			if err != nil {
				t.Fatal(err)
			}
			got, err := src.ComputeActivity(context.Background())
			if err == nil {
				t.Fatalf("ComputeActivity = %v, want an error", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
