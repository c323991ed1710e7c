package sim

import (
	"context"
	"errors"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The GPU Operator's ClusterPolicy, as far as the simulated operands read it. The real
// operator renders its mig-manager and device-plugin DaemonSets from it
// (NVIDIA/gpu-operator controllers/object_controls.go) in its own namespace, which it reports
// in status.namespace (api/nvidia/v1/clusterpolicy_types.go ClusterPolicyStatus.Namespace):
//
//   - spec.mig.strategy is passed to every device plugin as env MIG_STRATEGY
//     (applyMIGConfiguration), which overrides the config file's flags.migStrategy; when it
//     is empty the operator sets no MIG_STRATEGY and the file (or the plugin's default, none)
//     decides;
//   - spec.migManager.config.name is the ConfigMap mounted into mig-manager at
//     /mig-parted-config, read as /mig-parted-config/config.yaml (TransformMIGManager);
//   - spec.devicePlugin.config.name is the ConfigMap mounted at /available-configs, one file
//     per key, from which the config-manager sidecar picks the key named by label
//     nvidia.com/device-plugin.config, or spec.devicePlugin.config.default when the label is
//     unset, with FALLBACK_STRATEGIES=empty (handleDevicePluginConfig,
//     transformConfigManagerInitContainer).
//
// A volume of a ConfigMap is resolved in the pod's namespace, so both ConfigMaps are read in
// status.namespace only.

// ClusterPolicyGVK is the GPU Operator's ClusterPolicy kind (nvidia.com/v1, cluster-scoped).
var ClusterPolicyGVK = schema.GroupVersionKind{Group: "nvidia.com", Version: "v1", Kind: "ClusterPolicy"}

// operatorSettings is what the simulated operands take from the ClusterPolicy.
type operatorSettings struct {
	// Policy is the ClusterPolicy's name.
	Policy string
	// Namespace is status.namespace, where the operator runs and its operands' ConfigMaps are.
	Namespace string
	// MIGStrategy is spec.mig.strategy ("" when unset).
	MIGStrategy string
	// MIGConfigMap is spec.migManager.config.name; "" means the operator's own generated
	// config, which the simulator does not have.
	MIGConfigMap string
	// DevicePluginConfigMap is spec.devicePlugin.config.name ("" when unset: the plugin runs
	// without a config file) and DevicePluginDefault spec.devicePlugin.config.default.
	DevicePluginConfigMap string
	DevicePluginDefault   string
}

func (s operatorSettings) migConfigMap() types.NamespacedName {
	return types.NamespacedName{Namespace: s.Namespace, Name: s.MIGConfigMap}
}

func (s operatorSettings) devicePluginConfigMap() types.NamespacedName {
	return types.NamespacedName{Namespace: s.Namespace, Name: s.DevicePluginConfigMap}
}

// errNoOperator is returned while no ClusterPolicy the simulator can use exists: the GPU
// Operator has not deployed its operands yet, so nothing on the node changes.
var errNoOperator = errors.New("the GPU Operator has not deployed its operands")

// readClusterPolicy returns the settings of the ClusterPolicy called name, or of the only one
// when name is empty.
func readClusterPolicy(ctx context.Context, c client.Reader, name string) (operatorSettings, error) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(ClusterPolicyGVK)
	if name != "" {
		if err := c.Get(ctx, types.NamespacedName{Name: name}, obj); err != nil {
			return operatorSettings{}, fmt.Errorf("%w: reading ClusterPolicy %s: %w", errNoOperator, name, err)
		}
	} else {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(ClusterPolicyGVK.GroupVersion().WithKind(ClusterPolicyGVK.Kind + "List"))
		if err := c.List(ctx, list); err != nil {
			return operatorSettings{}, fmt.Errorf("%w: listing ClusterPolicies: %w", errNoOperator, err)
		}
		if len(list.Items) != 1 {
			return operatorSettings{}, fmt.Errorf("%w: %d ClusterPolicies exist, want exactly one (or name one)", errNoOperator, len(list.Items))
		}
		obj = &list.Items[0]
	}
	str := func(path ...string) string {
		v, _, _ := unstructured.NestedString(obj.Object, path...)
		return v
	}
	s := operatorSettings{
		Policy:                obj.GetName(),
		Namespace:             str("status", "namespace"),
		MIGStrategy:           str("spec", "mig", "strategy"),
		MIGConfigMap:          str("spec", "migManager", "config", "name"),
		DevicePluginConfigMap: str("spec", "devicePlugin", "config", "name"),
		DevicePluginDefault:   str("spec", "devicePlugin", "config", "default"),
	}
	if s.Namespace == "" {
		return operatorSettings{}, fmt.Errorf("%w: ClusterPolicy %s has no status.namespace", errNoOperator, s.Policy)
	}
	return s, nil
}

// ClusterPolicySettings are the fields of a ClusterPolicy that gpupool and the simulator read.
type ClusterPolicySettings struct {
	// Name of the ClusterPolicy; the GPU Operator's Helm chart calls it cluster-policy.
	Name string
	// Namespace is the operator's namespace, written to status.namespace.
	Namespace string
	// MIGStrategy is spec.mig.strategy: none, single or mixed.
	MIGStrategy string
	// MIGConfigMap is spec.migManager.config.name.
	MIGConfigMap string
	// DevicePluginConfigMap and DevicePluginDefault are spec.devicePlugin.config.name and
	// .default.
	DevicePluginConfigMap string
	DevicePluginDefault   string
}

// ClusterPolicyObject is a ClusterPolicy with the given settings (status included; create it,
// then write the status through the status subresource).
func ClusterPolicyObject(s ClusterPolicySettings) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"mig":        map[string]any{"strategy": s.MIGStrategy},
			"migManager": map[string]any{"enabled": true, "config": map[string]any{"name": s.MIGConfigMap}},
			"devicePlugin": map[string]any{"enabled": true, "config": map[string]any{
				"name": s.DevicePluginConfigMap, "default": s.DevicePluginDefault}},
		},
		"status": map[string]any{"namespace": s.Namespace, "state": "ready"},
	}}
	obj.SetGroupVersionKind(ClusterPolicyGVK)
	obj.SetName(s.Name)
	return obj
}

// ClusterPolicyCRD is a minimal CustomResourceDefinition of clusterpolicies.nvidia.com:
// cluster-scoped, nvidia.com/v1, with the status subresource and an open schema, enough for a
// cluster without the GPU Operator to hold the ClusterPolicy gpupool and the simulator read.
func ClusterPolicyCRD() *apiextensionsv1.CustomResourceDefinition {
	open := &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "clusterpolicies.nvidia.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: ClusterPolicyGVK.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "clusterpolicies", Singular: "clusterpolicy", Kind: ClusterPolicyGVK.Kind, ListKind: ClusterPolicyGVK.Kind + "List",
			},
			Scope: apiextensionsv1.ClusterScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: ClusterPolicyGVK.Version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": *open, "status": *open,
					},
				}},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
			}},
		},
	}
}

// InstallClusterPolicy creates the ClusterPolicy of s, and its status, unless one of that name
// exists (then it is left alone). The CRD must be established.
func InstallClusterPolicy(ctx context.Context, c client.Client, s ClusterPolicySettings) error {
	obj := ClusterPolicyObject(s)
	status := obj.Object["status"]
	if err := c.Create(ctx, obj); err != nil {
		if client.IgnoreAlreadyExists(err) == nil {
			return nil
		}
		return fmt.Errorf("creating ClusterPolicy %s: %w", s.Name, err)
	}
	obj.Object["status"] = status
	if err := c.Status().Update(ctx, obj); err != nil {
		return fmt.Errorf("writing the status of ClusterPolicy %s: %w", s.Name, err)
	}
	return nil
}
