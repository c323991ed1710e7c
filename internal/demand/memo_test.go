package demand

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestRequestCacheRemembersPerObjectAndForgetsUnreadPods(t *testing.T) {
	pod := func(cpu string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}}}
	}
	c := NewRequestCache()
	a, b := pod("1"), pod("2")
	first := c.Requests(a)
	if !equality.Semantic.DeepEqual(first, PodRequests(a)) {
		t.Fatalf("remembered %v, PodRequests says %v", first, PodRequests(a))
	}
	// The same object is answered from memory: the very same list.
	first[corev1.ResourceName("marker")] = resource.MustParse("1")
	if _, ok := c.Requests(a)[corev1.ResourceName("marker")]; !ok {
		t.Fatal("a second read of the same pod computed its requests again")
	}
	// An updated pod is a new object: its own requests, never the old object's.
	updated := a.DeepCopy()
	updated.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("3")
	if got := c.Requests(updated)[corev1.ResourceCPU]; got.Cmp(resource.MustParse("3")) != 0 {
		t.Fatalf("updated pod's cpu = %s, want 3", got.String())
	}
	c.Requests(b)
	if c.Len() != 3 {
		t.Fatalf("remembers %d pods, want 3", c.Len())
	}
	// A pass that reads only b: a and its update survive one more generation, then go.
	c.Rotate()
	c.Requests(b)
	c.Rotate()
	if c.Len() != 1 {
		t.Fatalf("after two passes that read only one pod, remembers %d pods, want 1", c.Len())
	}
	var none *RequestCache
	if got := none.Requests(b)[corev1.ResourceCPU]; got.Cmp(resource.MustParse("2")) != 0 {
		t.Fatalf("a nil cache computed cpu %s, want 2", got.String())
	}
	none.Rotate()
}
