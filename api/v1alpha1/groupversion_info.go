// Package v1alpha1 holds the gpupool.io/v1alpha1 API: GPUPoolPolicy (the user's intent),
// RepartitionPlan (one proposed change to MIG layouts or sharing configs) and GPUNode (a node's
// real GPU inventory as its agent reads it through NVML).
//
// The package imports apimachinery and core API types only, so that clients, the CLI and the
// planner can depend on it without pulling in controller machinery.
//
// +kubebuilder:object:generate=true
// +groupName=gpupool.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "gpupool.io", Version: "v1alpha1"}

	// SchemeBuilder registers this package's kinds with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's kinds to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
