package dcgm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/gpupool/gpupool/internal/rightsize"
)

// Metric is DCGM exporter's field for how busy a device's graphics engine is, 0..1: the
// fraction of time any context was active on it. On MIG it is reported per GPU instance,
// relative to that instance (dcgm-exporter#430), which is what a profile's compute is.
const Metric = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"

// Defaults of Options.
const (
	// DefaultWindow is the window the p95 is taken over: the recommender's minimum evidence, so
	// that compute and memory are judged over the same day.
	DefaultWindow = rightsize.DefaultMinWindow
	// DefaultTimeout bounds one query, connection included.
	DefaultTimeout = 30 * time.Second
)

// quantile is the statistic taken over the window, as the recommender's default memory basis.
const quantile = 0.95

// Options tune a Source. The zero value uses the defaults.
type Options struct {
	// Window is how far back the p95 looks; 0 means DefaultWindow.
	Window time.Duration
	// Timeout bounds one query; 0 means DefaultTimeout.
	Timeout time.Duration
	// Now is the query's evaluation time; nil means time.Now.
	Now func() time.Time
	// RoundTripper carries the requests (authentication, TLS); nil means
	// client_golang's api.DefaultRoundTripper.
	RoundTripper http.RoundTripper
}

// Source reads each pod's compute activity from a Prometheus server that scrapes DCGM
// exporter. It implements rightsize.ComputeSource.
type Source struct {
	url  string
	api  promv1.API
	opts Options
}

var _ rightsize.ComputeSource = (*Source)(nil)

// New checks rawURL (Prometheus's base URL, as --prometheus-url gives it) and returns a Source
// for it; nothing is sent until ComputeActivity.
func New(rawURL string, o Options) (*Source, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--prometheus-url=%q: want Prometheus's base URL, http(s)://host:port, "+
			"e.g. http://prometheus-operated.monitoring.svc:9090", rawURL)
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c, err := api.NewClient(api.Config{Address: rawURL, RoundTripper: o.RoundTripper})
	if err != nil {
		return nil, fmt.Errorf("--prometheus-url=%q: %w", rawURL, err)
	}
	return &Source{url: rawURL, api: promv1.NewAPI(c), opts: o}, nil
}

// Query is the PromQL a Source evaluates: per pod, under every label spelling (labels.go), the
// highest p95 of Metric over the window among its devices. The aggregation runs in Prometheus,
// so one series per pod crosses the network, not one per device.
func Query(window time.Duration) string {
	return fmt.Sprintf("max by (%s) (quantile_over_time(%g, %s[%s]))", groupBy(), quantile, Metric, model.Duration(window))
}

// ComputeActivity evaluates Query now and returns each measured pod's activity. Errors say
// what to check: the URL, the exporter's scrape, its profiling metrics, its pod mapping.
func (s *Source) ComputeActivity(ctx context.Context) (rightsize.ComputeActivity, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	q := Query(s.opts.Window)
	v, _, err := s.api.Query(ctx, q, s.opts.Now())
	if err != nil {
		return nil, s.queryError(q, err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("reading %s from Prometheus at %s: the query %q returned a %s, not a vector: is this Prometheus's query API?",
			Metric, s.url, q, v.Type())
	}
	if len(vec) == 0 {
		return nil, fmt.Errorf("reading %s: Prometheus at %s has no series of it over the last %s: is dcgm-exporter scraped (a ServiceMonitor, "+
			"or a scrape config for its :9400/metrics)? are profiling metrics enabled (%s in the exporter's counters CSV, "+
			"as its etc/default-counters.csv has it; DCGM profiling needs a datacenter GPU)?",
			Metric, s.url, model.Duration(s.opts.Window), Metric)
	}
	activity := activityOf(vec)
	if len(activity) == 0 {
		return nil, fmt.Errorf("reading %s: Prometheus at %s has series of it, but none names a pod: is dcgm-exporter's Kubernetes "+
			"mapping on (--kubernetes, or DCGM_EXPORTER_KUBERNETES=true, with the kubelet's pod-resources socket mounted)?",
			Metric, s.url)
	}
	return activity, nil
}

// queryError says what went wrong in the user's terms.
func (s *Source) queryError(q string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("reading %s from Prometheus at %s: no answer within %s: check that --prometheus-url is reachable "+
			"from here (a Service's cluster DNS name only resolves inside the cluster): %w", Metric, s.url, s.opts.Timeout, err)
	}
	var apiErr *promv1.Error
	if !errors.As(err, &apiErr) {
		// The request never got an HTTP answer: DNS, a refused connection, TLS.
		return fmt.Errorf("reading %s from Prometheus at %s: %w: check --prometheus-url: Prometheus's base URL, reachable from "+
			"here (e.g. http://prometheus-operated.monitoring.svc:9090 in the cluster, or a kubectl port-forward from a laptop)",
			Metric, s.url, err)
	}
	switch apiErr.Type {
	case promv1.ErrClient, promv1.ErrBadResponse:
		return fmt.Errorf("reading %s: %s did not answer as Prometheus's query API does (%w): is --prometheus-url "+
			"Prometheus's base URL, without /api/v1, and not Grafana's or Alertmanager's?", Metric, s.url, err)
	case promv1.ErrTimeout, promv1.ErrCanceled, promv1.ErrExec, promv1.ErrServer:
		return fmt.Errorf("reading %s: Prometheus at %s could not evaluate %q: %w: it may need more query time or memory "+
			"(--query.timeout, --query.max-samples) for a %s window", Metric, s.url, q, err, model.Duration(s.opts.Window))
	default:
		return fmt.Errorf("reading %s: Prometheus at %s rejected %q: %w", Metric, s.url, q, err)
	}
}
