// Package controllers holds gpupool's reconcilers. They only observe and act: every decision
// is made by the pure packages under internal/.
//
// The RBAC markers below are the manager's permissions; controller-gen turns them into
// config/rbac/role.yaml.
//
// +kubebuilder:rbac:groups=gpupool.io,resources=gpupoolpolicies;repartitionplans;gpunodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=gpupool.io,resources=gpupoolpolicies/status;repartitionplans/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
package controllers
