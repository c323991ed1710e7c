package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Policies are read as unstructured objects and decoded one at a time. A typed informer decodes
// the whole list at once: a single stored policy that the Go types cannot decode (one written
// before today's validation rules, such as planTTL: 9999999999h, which the API server's old
// pattern accepted but Go's duration parser cannot represent) would keep the informer from ever
// syncing, and the manager would crash-loop with nodes left cordoned. Decoding per object turns
// such a policy into a condition on that policy alone.

// policyGVK is the GPUPoolPolicy kind, for unstructured reads.
var policyGVK = v1alpha1.GroupVersion.WithKind("GPUPoolPolicy")

// newPolicyObject is an empty unstructured GPUPoolPolicy, for watches and reads.
func newPolicyObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(policyGVK)
	return u
}

// decodePolicy decodes one stored policy; the error names what could not be decoded.
func decodePolicy(u *unstructured.Unstructured) (*v1alpha1.GPUPoolPolicy, error) {
	p := &v1alpha1.GPUPoolPolicy{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
		return nil, fmt.Errorf("policy %s cannot be decoded: %w", u.GetName(), err)
	}
	return p, nil
}

// undecodable is a stored policy the manager cannot decode, with why.
type undecodable struct {
	object *unstructured.Unstructured
	err    error
}

// listPolicies reads every policy that decodes. One that cannot be decoded is left out: it is
// reported on its own object (getPolicy, reportUndecodable) and stops nothing else.
func listPolicies(ctx context.Context, c client.Reader) ([]v1alpha1.GPUPoolPolicy, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(policyGVK.GroupVersion().WithKind(policyGVK.Kind + "List"))
	if err := c.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing GPUPoolPolicies: %w", err)
	}
	var ok []v1alpha1.GPUPoolPolicy
	for i := range list.Items {
		if p, err := decodePolicy(&list.Items[i]); err == nil {
			ok = append(ok, *p)
		}
	}
	return ok, nil
}

// getPolicy reads one policy. It returns (nil, nil, nil) when the policy does not exist, and
// the raw object with the decoding error when it exists but cannot be decoded.
func getPolicy(ctx context.Context, c client.Reader, name string) (*v1alpha1.GPUPoolPolicy, *undecodable, error) {
	u := newPolicyObject()
	if err := c.Get(ctx, types.NamespacedName{Name: name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("reading policy %s: %w", name, err)
	}
	p, err := decodePolicy(u)
	if err != nil {
		return nil, &undecodable{object: u, err: err}, nil
	}
	return p, nil, nil
}
