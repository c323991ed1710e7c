package dcgm

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/rightsize"
)

func TestPodOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels model.LabelSet
		want   string // namespace/name; "" for none
	}{
		{"dcgm-exporter's labels, honor_labels true", model.LabelSet{"namespace": "team-a", "pod": "server-0"}, "team-a/server-0"},
		{"renamed by Prometheus beside the exporter's own pod", model.LabelSet{
			"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x7k2p",
			"exported_namespace": "team-a", "exported_pod": "server-0"}, "team-a/server-0"},
		{"--use-old-namespace", model.LabelSet{"pod_namespace": "team-a", "pod_name": "server-0"}, "team-a/server-0"},
		{"a MIG instance no pod holds", model.LabelSet{"GPU_I_ID": "3", "GPU_I_PROFILE": "1g.18gb"}, ""},
		{"a pod without its namespace", model.LabelSet{"pod": "server-0"}, ""},
		{"half of the exported pair falls back to the scraped one", model.LabelSet{"exported_pod": "server-0",
			"namespace": "team-a", "pod": "server-1"}, "team-a/server-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := podOf(model.Metric(tc.labels))
			if s := got.String(); ok != (tc.want != "") || (ok && s != tc.want) {
				t.Fatalf("podOf(%v) = %q, %v; want %q", tc.labels, s, ok, tc.want)
			}
		})
	}
}

func TestActivityOf(t *testing.T) {
	sample := func(v float64, kv ...string) *model.Sample {
		m := model.Metric{}
		for i := 0; i < len(kv); i += 2 {
			m[model.LabelName(kv[i])] = model.LabelValue(kv[i+1])
		}
		return &model.Sample{Metric: m, Value: model.SampleValue(v)}
	}
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	b := types.NamespacedName{Namespace: "ns", Name: "b"}
	vec := model.Vector{
		sample(0.30, "namespace", "ns", "pod", "a"),
		sample(0.55, "exported_namespace", "ns", "exported_pod", "a", "namespace", "mon", "pod", "exporter"), // a's second device: the busiest counts
		sample(1.4, "namespace", "ns", "pod", "b"),                                                           // out of range: clamped
		sample(0.9), // no pod
	}
	got := activityOf(vec)
	want := rightsize.ComputeActivity{a: 0.55, b: 1}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("activityOf, -want +got:\n%s", d)
	}
}

func TestQuery(t *testing.T) {
	got := Query(24 * time.Hour)
	want := "max by (exported_namespace, exported_pod, namespace, pod, pod_namespace, pod_name) " +
		"(quantile_over_time(0.95, DCGM_FI_PROF_GR_ENGINE_ACTIVE[1d]))"
	if got != want {
		t.Fatalf("Query(24h) =\n  %s\nwant\n  %s", got, want)
	}
}

func TestNewRejectsURLs(t *testing.T) {
	for _, u := range []string{"", "prometheus:9090", "ftp://prometheus", "http://", "://x"} {
		if _, err := New(u, Options{}); err == nil || !strings.Contains(err.Error(), "want Prometheus's base URL") {
			t.Errorf("New(%q) = %v, want an error saying what URL to give", u, err)
		}
	}
	if _, err := New("http://prometheus-operated.monitoring.svc:9090", Options{}); err != nil {
		t.Fatalf("New: %v", err)
	}
}

// TestErrorsSayWhatToDo covers the failures that never reach a query engine; the answers of a
// real one are tested in test/monitoring (dcgm_test.go), where Prometheus's packages live.
func TestErrorsSayWhatToDo(t *testing.T) {
	// A port nothing listens on: a listener opened and closed.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	notPrometheus := httptest.NewServer(http.NotFoundHandler())
	defer notPrometheus.Close()
	block := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block }))
	defer hung.Close()
	defer close(block)

	for _, tc := range []struct {
		name, url string
		timeout   time.Duration
		want      []string
	}{
		{"unreachable", refused, 0, []string{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", refused, "connection refused", "check --prometheus-url"}},
		{"not Prometheus", notPrometheus.URL, 0, []string{"did not answer as Prometheus's query API does", "without /api/v1"}},
		{"no answer", hung.URL, 200 * time.Millisecond, []string{"no answer within 200ms", "reachable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.url, Options{Timeout: tc.timeout})
			if err != nil {
				t.Fatal(err)
			}
			act, err := s.ComputeActivity(context.Background())
			if err == nil {
				t.Fatalf("ComputeActivity = %v, want an error", act)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
