// JSON merge patches of Nodes, shared by the simulated NVIDIA components.

package sim

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// patchLabels sets (or, for nil, removes) labels with a JSON merge patch, which states the
// values outright instead of diffing against a cached copy that may be stale, and refreshes
// node from the answer.
func (r *reconciler) patchLabels(ctx context.Context, node *corev1.Node, labels map[string]*string) error {
	if len(labels) == 0 {
		return nil
	}
	return r.patch(ctx, node, map[string]any{"metadata": map[string]any{"labels": labels}})
}

func (r *reconciler) patch(ctx context.Context, node *corev1.Node, body map[string]any) error {
	data, err := jsonPatchBody(body)
	if err != nil {
		return err
	}
	return r.client.Patch(ctx, node, client.RawPatch(types.MergePatchType, data), client.FieldOwner(FieldManager))
}

func jsonPatchBody(body map[string]any) ([]byte, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encoding patch: %w", err)
	}
	return data, nil
}

func ptrTo[T any](v T) *T { return &v }
