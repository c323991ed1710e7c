package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// ensureOperatorConfigMaps creates gpupool's two ConfigMaps in the GPU Operator's namespace
// when they do not exist. The operator mounts the ConfigMaps its ClusterPolicy names into
// mig-manager, the device plugin and GFD as volumes that are not optional, and creates none it
// does not own (gpu-operator controllers/object_controls.go, handleDevicePluginConfig and
// createConfigMapVolume): a ClusterPolicy pointed at a ConfigMap nobody wrote yet keeps those
// pods from starting on every GPU node. So they exist from the manager's start, and again
// after each pass over a pool, not only from a plan's first step: mig-parted's with
// all-disabled and every entry a node's label names that NVIDIA's default config has, the
// device plugin's with gpupool-none (the default key the ClusterPolicy must name). An existing
// ConfigMap is left as it is: a step's write is what changes it.
func ensureOperatorConfigMaps(ctx context.Context, c client.Client, namespace string) error {
	create := func(name string, data func() (map[string]string, error)) error {
		err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &corev1.ConfigMap{})
		if err == nil || !apierrors.IsNotFound(err) {
			return err
		}
		d, err := data()
		if err != nil {
			return err
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Labels: map[string]string{"app.kubernetes.io/name": "gpupool"}}, Data: d}
		switch err := c.Create(ctx, cm); {
		case apierrors.IsAlreadyExists(err):
			return nil // a step wrote it meanwhile
		case err != nil:
			return fmt.Errorf("creating ConfigMap %s/%s: %w", namespace, name, err)
		}
		logf.FromContext(ctx).Info("created a ConfigMap the GPU Operator mounts", "namespace", namespace, "configMap", name)
		return nil
	}
	err := create(MIGPartedConfigMap, func() (map[string]string, error) {
		inUse, err := namesInUse(ctx, c, v1alpha1.LabelMIGConfig, func(s v1alpha1.NodeStep) string { return s.MIGConfigName })
		if err != nil {
			return nil, err
		}
		defaults, err := nvidiaDefaultMIGConfig(ctx, c, namespace)
		if err != nil {
			return nil, err
		}
		cfg, err := nvidia.UpdateConfig(nil, nil, inUse, defaults)
		if err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s: %w", namespace, MIGPartedConfigMap, err)
		}
		return map[string]string{nvidia.ConfigMapKey: string(cfg)}, nil
	})
	if err != nil {
		return err
	}
	return create(DevicePluginConfigMap, func() (map[string]string, error) {
		return nvidia.UpdateDevicePluginConfigMap(nil, nil, nil)
	})
}
