package controllers

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// conflictRetry is how soon a reconcile whose write met a newer object runs again.
const conflictRetry = time.Second

// quietConflicts runs a reconciler and treats a write conflict as what it is at scale, an
// expected race with the object's watch event (the cache had not yet seen a newer write of
// ours or someone else's): the reconcile runs again shortly, with a debug log line instead of
// an error with a stack trace. Every write that can conflict is computed from a fresh read
// in the next reconcile, so nothing is lost.
type quietConflicts struct {
	reconcile.Reconciler
}

func (q quietConflicts) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	res, err := q.Reconciler.Reconcile(ctx, req)
	if err != nil && apierrors.IsConflict(err) {
		logf.FromContext(ctx).V(1).Info("a write met a newer object; reconciling again", "reason", err.Error())
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}
