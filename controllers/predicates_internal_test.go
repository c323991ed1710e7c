package controllers

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func TestHeartbeatPredicates(t *testing.T) {
	const maxAge = 2 * time.Minute
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	report := func(observed time.Time, mutate ...func(*v1alpha1.GPUNode)) *v1alpha1.GPUNode {
		g := &v1alpha1.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Generation: 1}}
		g.Status.ObservedTime = &metav1.Time{Time: observed}
		g.Status.GPUs = []v1alpha1.GPUStatus{{Index: 0, Product: "NVIDIA H200"}}
		for _, m := range mutate {
			m(g)
		}
		return g
	}
	lease := func(renewed time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}}}
	}
	for _, tc := range []struct {
		name     string
		old, new interface{ GetName() string }
		pass     bool
	}{
		{name: "report: only observedTime moved on", old: report(t0), new: report(t0.Add(30 * time.Second)), pass: false},
		{name: "report: observedTime after a silence", old: report(t0), new: report(t0.Add(3 * time.Minute)), pass: true},
		{name: "report: a GPU's state changed", old: report(t0), new: report(t0.Add(30*time.Second), func(g *v1alpha1.GPUNode) {
			g.Status.GPUs[0].Pods = []v1alpha1.PodReference{{Namespace: "ml", Name: "p"}}
		}), pass: true},
		{name: "report: a condition changed", old: report(t0), new: report(t0, func(g *v1alpha1.GPUNode) {
			g.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionNVMLReady, Status: metav1.ConditionFalse}}
		}), pass: true},
		{name: "report: the spec changed", old: report(t0), new: report(t0, func(g *v1alpha1.GPUNode) {
			g.Generation = 2
			g.Spec.ExpectedLayout = []v1alpha1.GPULayout{{Index: 0}}
		}), pass: true},
		{name: "lease: a routine renewal", old: lease(t0), new: lease(t0.Add(30 * time.Second)), pass: false},
		{name: "lease: a renewal after a silence", old: lease(t0), new: lease(t0.Add(maxAge + time.Second)), pass: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got bool
			switch o := tc.old.(type) {
			case *v1alpha1.GPUNode:
				got = reportChanged(maxAge).Update(event.UpdateEvent{ObjectOld: o, ObjectNew: tc.new.(*v1alpha1.GPUNode)})
			case *coordinationv1.Lease:
				got = agentReturned(maxAge).Update(event.UpdateEvent{ObjectOld: o, ObjectNew: tc.new.(*coordinationv1.Lease)})
			}
			if got != tc.pass {
				t.Errorf("passes = %v, want %v", got, tc.pass)
			}
		})
	}
	if !reportChanged(maxAge).Create(event.CreateEvent{Object: report(t0)}) || !agentReturned(maxAge).Delete(event.DeleteEvent{Object: lease(t0)}) {
		t.Error("creates and deletes must always pass")
	}
}

func TestOperatorConfigMapPredicates(t *testing.T) {
	const ns = "gpu-operator"
	cm := func(namespace, name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	}
	for _, tc := range []struct {
		name                          string
		obj                           *corev1.ConfigMap
		written, exists               bool // on update: the plan controller's, the policy controller's
		createdWritten, createdExists bool
	}{
		{name: "mig-parted config", obj: cm(ns, MIGPartedConfigMap), written: true, createdWritten: true, createdExists: true},
		{name: "device-plugin config", obj: cm(ns, DevicePluginConfigMap), written: true, createdWritten: true, createdExists: true},
		{name: "same name elsewhere", obj: cm("default", MIGPartedConfigMap)},
		{name: "another ConfigMap of the namespace", obj: cm(ns, "default-mig-parted-config")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			update := event.UpdateEvent{ObjectOld: tc.obj, ObjectNew: tc.obj}
			create := event.CreateEvent{Object: tc.obj}
			if got := operatorConfigMapWritten(ns).Update(update); got != tc.written {
				t.Errorf("a waiting step is woken by an update: %v, want %v", got, tc.written)
			}
			if got := operatorConfigMapExists(ns).Update(update); got != tc.exists {
				t.Errorf("the policy controller sees an update: %v, want %v", got, tc.exists)
			}
			if got := operatorConfigMapWritten(ns).Create(create); got != tc.createdWritten {
				t.Errorf("a waiting step is woken by a creation: %v, want %v", got, tc.createdWritten)
			}
			if got := operatorConfigMapExists(ns).Create(create); got != tc.createdExists {
				t.Errorf("the policy controller sees a creation: %v, want %v", got, tc.createdExists)
			}
		})
	}
}
