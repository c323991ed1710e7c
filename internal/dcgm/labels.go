package dcgm

import (
	"math"
	"strings"

	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/rightsize"
)

// The pod labels a series may carry, most trusted first. dcgm-exporter names the pod holding a
// device "pod" and "namespace", or "pod_name" and "pod_namespace" with --use-old-namespace
// (NVIDIA/dcgm-exporter internal/pkg/transformation/const.go, podAttribute and
// oldPodAttribute, set in kubernetes.go). When Prometheus scrapes the exporter through
// Kubernetes service discovery, the target's own "pod" and "namespace" (the exporter's pod)
// collide with them; unless honor_labels is true Prometheus keeps the target's and renames the
// scraped ones "exported_pod" and "exported_namespace". So the exported_ pair, when a series
// has it, is the workload's.
var podLabels = []struct{ namespace, pod model.LabelName }{
	{"exported_namespace", "exported_pod"},
	{"namespace", "pod"},
	{"pod_namespace", "pod_name"},
}

// groupBy lists every pod label, for the query's aggregation: labels a series lacks group as
// empty, so one expression serves every spelling.
func groupBy() string {
	var names []string
	for _, l := range podLabels {
		names = append(names, string(l.namespace), string(l.pod))
	}
	return strings.Join(names, ", ")
}

// podOf is the pod a series measures: the first pair of podLabels the series carries in full.
// A series with none is a device no pod holds.
//
// A series scraped with honor_labels false from a device no pod holds carries only the
// exporter's own pod in "pod": it is attributed to the exporter's pod, which holds no GPU and
// so is never asked about.
func podOf(m model.Metric) (types.NamespacedName, bool) {
	for _, l := range podLabels {
		if ns, pod := m[l.namespace], m[l.pod]; ns != "" && pod != "" {
			return types.NamespacedName{Namespace: string(ns), Name: string(pod)}, true
		}
	}
	return types.NamespacedName{}, false
}

// activityOf turns the query's samples into each pod's activity, clamped to 0..1. A pod with
// several series (several devices, or one per label spelling) keeps the busiest: its profile
// must hold that one. Samples that name no pod are left out.
func activityOf(v model.Vector) rightsize.ComputeActivity {
	activity := rightsize.ComputeActivity{}
	for _, s := range v {
		pod, ok := podOf(s.Metric)
		if !ok {
			continue
		}
		f := float64(s.Value)
		if math.IsNaN(f) {
			continue
		}
		f = min(max(f, 0), 1)
		if old, seen := activity[pod]; !seen || f > old {
			activity[pod] = f
		}
	}
	return activity
}
