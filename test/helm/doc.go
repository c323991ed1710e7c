// Package helmtest tests the Helm chart in charts/gpupool: `helm lint` and the values schema
// through Helm's SDK, that the chart and the kustomize install in config/ never drift apart,
// and an install and uninstall with action.Install and action.Uninstall on the local kwok
// cluster (test/localcluster). It is a module of its own so that Helm's and kustomize's
// dependencies never reach the product's go.mod.
package helmtest
