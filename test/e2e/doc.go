// Package e2e is gpupool's end-to-end suite: one simulated GPU cluster (test/simcluster: a real
// local control plane, kwok kubelets, the simulated GPU Operator with gpupool's node agent, and
// the manager as a separate process) shared by scenarios that each own their nodes, their
// namespace and their GPUPoolPolicy, so that they cannot interfere.
//
// It runs with plain `go test ./test/e2e/` (and `make test`), after `make test-assets` has
// built the control plane; it builds cmd/manager and cmd/gpusim itself. `go test -short`
// skips it. Run it with -v to see the measurements it reports (Pending to Running times).
package e2e
