// Package monitoring builds and checks gpupool's Grafana dashboard and Prometheus alert rules
// (config/grafana, config/prometheus and their copies in charts/gpupool): every PromQL name
// against the metrics the manager exports (internal/metrics Exported), and the alerts with
// promtool's rule unit test format, evaluated by Prometheus' own rule manager. It is a module
// of its own so that Prometheus' and Grafana's SDKs never reach the product's go.mod.
package monitoring
