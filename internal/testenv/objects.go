package testenv

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// ReadObjects decodes every document of a YAML or JSON file, so tests apply the manifests we
// ship rather than copies of them.
func ReadObjects(file string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	decoder := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decoding %s: %w", file, err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

// KustomizationObjects reads every file a kustomization.yaml lists under resources (files
// only, no bases), in order.
func KustomizationObjects(dir string) ([]*unstructured.Unstructured, error) {
	k, err := ReadObjects(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	if len(k) != 1 {
		return nil, fmt.Errorf("%s/kustomization.yaml holds %d documents, want 1", dir, len(k))
	}
	files, _, err := unstructured.NestedStringSlice(k[0].Object, "resources")
	if err != nil {
		return nil, fmt.Errorf("%s/kustomization.yaml resources: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		objs, err := ReadObjects(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}
