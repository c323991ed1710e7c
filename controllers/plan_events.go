package controllers

import (
	"context"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// heldEvents are what one pass of the plan controller has to tell (Events, their log lines, the
// metrics of finished steps), held until the status that records the same change is written.
//
// A pass decides on the cached plan. Right after a status write the cache may still hold the
// plan as it was, and the next pass then decides the same transition again; its status write
// fails on the stale resourceVersion, but an Event sent before the write had already gone out,
// so every transition read twice in kubectl get events. Telling only after the write makes each
// transition an Event once: the pass whose write fails tells nothing, and the pass that
// records the change tells it.
type heldEvents struct {
	tell []func(logr.Logger)
}

type heldEventsKey struct{}

// holdEvents returns a context whose plan Events wait for flush.
func holdEvents(ctx context.Context) (context.Context, *heldEvents) {
	h := &heldEvents{}
	return context.WithValue(ctx, heldEventsKey{}, h), h
}

// flush tells what the pass held, in order. It runs once the pass's status is written (or
// needed no write).
func (h *heldEvents) flush(log logr.Logger) {
	for _, tell := range h.tell {
		tell(log)
	}
	h.tell = nil
}

// later runs f when the pass's status is written; at once outside a held pass.
func later(ctx context.Context, f func(logr.Logger)) {
	if h, ok := ctx.Value(heldEventsKey{}).(*heldEvents); ok {
		h.tell = append(h.tell, f)
		return
	}
	f(logf.FromContext(ctx))
}

// planEvent sends an Event about a plan (related: its node or policy, or nil) once the pass's
// status is written, and logs the same transition with structured keys: the manager's log
// then tells every plan transition and node step as its Events do.
func planEvent(ctx context.Context, recorder events.EventRecorder, plan *v1alpha1.RepartitionPlan, related runtime.Object,
	eventType, reason, action, note string) {
	later(ctx, func(log logr.Logger) {
		recorder.Eventf(plan, related, eventType, reason, action, "%s", note)
		kv := []any{"plan", plan.Name, "policy", plan.Spec.Policy, "reason", reason, "action", action, "message", note}
		if node, ok := related.(*corev1.Node); ok && node != nil {
			kv = append(kv, "node", node.Name)
		}
		if eventType == corev1.EventTypeWarning {
			log.Info("plan warning", kv...)
			return
		}
		log.Info("plan event", kv...)
	})
}

// nodeEvent sends the Event on the node that mirrors a plan's step Event, for kubectl describe
// node; it is not logged again.
func nodeEvent(ctx context.Context, recorder events.EventRecorder, node *corev1.Node, plan *v1alpha1.RepartitionPlan,
	eventType, reason, action, note string) {
	later(ctx, func(logr.Logger) {
		recorder.Eventf(node, plan, eventType, reason, action, "%s", note)
	})
}
