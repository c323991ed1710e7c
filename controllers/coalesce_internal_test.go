package controllers

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gpupool/gpupool/internal/fixture"
)

// TestABurstOfEventsMakesOnePass: the events of a burst gather into one reconcile, due when
// the first event's delay ends; later events never postpone it, and without a delay each event
// is due at once.
func TestABurstOfEventsMakesOnePass(t *testing.T) {
	policy := reconcile.Request{NamespacedName: types.NamespacedName{Name: "pool"}}
	toPolicy := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{policy}
	})
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name}}
	}
	clock := clocktesting.NewFakeClock(fixture.Now)
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](),
		workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Clock: clock})
	defer q.ShutDown()
	h := coalesced(toPolicy, time.Second)
	ctx := context.Background()

	h.Create(ctx, event.CreateEvent{Object: pod("a")}, q)
	if q.Len() != 0 {
		t.Fatal("the first event of a burst started a pass at once")
	}
	clock.Step(600 * time.Millisecond)
	h.Update(ctx, event.UpdateEvent{ObjectOld: pod("a"), ObjectNew: pod("a")}, q)
	h.Create(ctx, event.CreateEvent{Object: pod("b")}, q)
	clock.Step(300 * time.Millisecond)
	if q.Len() != 0 {
		t.Fatal("a pass started before the first event's delay ended")
	}
	// The first event's delay ends: one pass, for all three events.
	clock.Step(100 * time.Millisecond)
	// The queue's own goroutine moves the item to ready; Get blocks until it has.
	got := make(chan reconcile.Request, 1)
	go func() {
		item, _ := q.Get()
		got <- item
	}()
	var item reconcile.Request
	select {
	case item = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no pass came due one second after the burst's first event")
	}
	q.Done(item)
	if item != policy || q.Len() != 0 {
		t.Fatalf("got %v with %d more queued, want one pass of %v", item, q.Len(), policy)
	}
	// The later events were served by that pass: nothing else comes due.
	clock.Step(time.Minute)
	if q.Len() != 0 {
		t.Fatalf("%d more passes came due after the burst's pass", q.Len())
	}

	coalesced(toPolicy, 0).Delete(ctx, event.DeleteEvent{Object: pod("a")}, q)
	if q.Len() != 1 {
		t.Fatal("without a delay an event must make its pass due at once")
	}
}
