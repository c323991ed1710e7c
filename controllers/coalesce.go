package controllers

import (
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// DefaultEventCoalescing is how long the policy controller lets the cluster's events gather
// before a pass. A pass reads the whole pool, so one event or a thousand cost the same pass;
// a burst (a job's pods created, a node's pods rescheduled, each pod written twice by the API
// server and the scheduler) arriving within it makes one pass that sees all of it, instead of
// a pass started by the burst's first write that sees almost none and makes the rest wait for
// it. It adds at most this much to an event's latency, small beside a pending pod's
// minPendingAge (30 s by default).
const DefaultEventCoalescing = time.Second

// coalesced wraps an event handler so that the reconciles it asks for are queued delay later.
// The work queue keeps the earliest time an item is due and holds one entry per item
// (client-go's util/workqueue delaying_queue.go, and controller-runtime's
// pkg/controller/priorityqueue AddWithOpts, the manager's default queue), so a stream of events
// never postpones a pass already due: the first event of a burst sets when the pass starts,
// and every event until then rides along with it. (The priority queue counts each delayed add
// in workqueue_retries_total.)
func coalesced(h handler.EventHandler, delay time.Duration) handler.EventHandler {
	if delay <= 0 {
		return h
	}
	return coalescingHandler{inner: h, delay: delay}
}

type coalescingHandler struct {
	inner handler.EventHandler
	delay time.Duration
}

type reconcileQueue = workqueue.TypedRateLimitingInterface[reconcile.Request]

func (c coalescingHandler) Create(ctx context.Context, e event.TypedCreateEvent[client.Object], q reconcileQueue) {
	c.inner.Create(ctx, e, delayedAdds{q, c.delay})
}

func (c coalescingHandler) Update(ctx context.Context, e event.TypedUpdateEvent[client.Object], q reconcileQueue) {
	c.inner.Update(ctx, e, delayedAdds{q, c.delay})
}

func (c coalescingHandler) Delete(ctx context.Context, e event.TypedDeleteEvent[client.Object], q reconcileQueue) {
	c.inner.Delete(ctx, e, delayedAdds{q, c.delay})
}

func (c coalescingHandler) Generic(ctx context.Context, e event.TypedGenericEvent[client.Object], q reconcileQueue) {
	c.inner.Generic(ctx, e, delayedAdds{q, c.delay})
}

// delayedAdds turns a handler's Add into AddAfter. It hides any priority queue behind it on
// purpose: controller-runtime's handlers then use Add, which is what it delays.
type delayedAdds struct {
	reconcileQueue
	delay time.Duration
}

func (d delayedAdds) Add(item reconcile.Request) { d.AddAfter(item, d.delay) }
