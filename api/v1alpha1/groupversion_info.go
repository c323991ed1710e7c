// Package v1alpha1 holds the gpupool.io/v1alpha1 API: GPUPoolPolicy (the user's intent),
// RepartitionPlan (one proposed change to MIG layouts or sharing configs) and GPUNode (a node's
// real GPU inventory as its agent reads it through NVML).
//
// The package imports apimachinery only, so that clients, the CLI and the planner can depend on
// it without pulling in controller machinery.
//
// +kubebuilder:object:generate=true
// +groupName=gpupool.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "gpupool.io", Version: "v1alpha1"}

	// SchemeBuilder registers this package's kinds with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds this package's kinds to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&GPUPoolPolicy{}, &GPUPoolPolicyList{},
		&RepartitionPlan{}, &RepartitionPlanList{},
		&GPUNode{}, &GPUNodeList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
