package main

import (
	"context"
	"slices"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestReadVisibleTaintRules: the live reader brings the cluster's DeviceTaintRules to triage; a
// user who may not list them is told which right shows them, and the answer still stands (only a
// tainted partition reads as free), while what-if --live warns of it.
func TestReadVisibleTaintRules(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	rule := &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "maintenance"},
		Spec: resourcev1.DeviceTaintRuleSpec{DeviceSelector: &resourcev1.DeviceTaintSelector{Pool: ptr.To("dm-node")},
			Taint: resourcev1.DeviceTaint{Key: "example.com/maintenance", Effect: resourcev1.DeviceTaintEffectNoSchedule}}}

	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(rule).Build()
	v, err := readVisible(context.Background(), c, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(v.snap.TaintRules) != 1 || v.snap.TaintRules[0].Name != "maintenance" || len(v.gaps) != 0 {
		t.Fatalf("taint rules %v, gaps %v; want the one rule and no gap", v.snap.TaintRules, v.gaps)
	}

	forbidden := fake.NewClientBuilder().WithScheme(scheme).WithObjects(rule).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*resourcev1.DeviceTaintRuleList); ok {
				return apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "devicetaintrules"}, "", nil)
			}
			return c.List(ctx, list, opts...)
		},
	}).Build()
	v, err = readVisible(context.Background(), forbidden, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []gap{{What: "devicetaintrules", Error: "forbidden", Right: rightTaints}}; !slices.Equal(v.gaps, want) || !v.complete() {
		t.Errorf("gaps %v complete %t, want %v and complete", v.gaps, v.complete(), want)
	}
	snap, err := readCluster(context.Background(), forbidden)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(snap.Warnings, func(w string) bool { return strings.Contains(w, "devicetaintrules") }) {
		t.Errorf("warnings %q, want one for devicetaintrules", snap.Warnings)
	}
}
