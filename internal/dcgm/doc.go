// Package dcgm reads how busy each pod keeps its GPU from DCGM exporter's metrics in
// Prometheus, for the right-sizing recommender (internal/rightsize): the p95 over a window of
// DCGM_FI_PROF_GR_ENGINE_ACTIVE, the fraction of time the device's graphics engine was busy.
// That profiling field, unlike the DCGM_FI_DEV_*_UTIL fields, is reported per MIG instance
// (dcgm-exporter#430), so a pod on a MIG device is measured on its own instance.
//
// It is not pure: Source talks HTTP to Prometheus's query API (through
// github.com/prometheus/client_golang/api). Which series belongs to which pod is decided by
// podOf, from the labels dcgm-exporter puts on each series and the names Prometheus may give
// them instead; see labels.go.
package dcgm
