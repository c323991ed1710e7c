package controllers

import (
	"context"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestQuietConflictsRequeuesOnlyConflicts(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "gpupool.io", Resource: "gpupoolpolicies"}, "pool-a",
		errors.New("the object has been modified"))
	other := errors.New("connection refused")
	for _, tc := range []struct {
		name    string
		res     reconcile.Result
		err     error
		wantRes reconcile.Result
		wantErr error
	}{
		{name: "success passes through", res: reconcile.Result{RequeueAfter: 5}, wantRes: reconcile.Result{RequeueAfter: 5}},
		{name: "a conflict, wrapped, is requeued without an error", err: fmt.Errorf("writing status of policy pool-a: %w", conflict),
			wantRes: reconcile.Result{RequeueAfter: conflictRetry}},
		{name: "any other error stays an error", err: other, wantErr: other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := quietConflicts{reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return tc.res, tc.err })}
			res, err := q.Reconcile(context.Background(), reconcile.Request{})
			if res != tc.wantRes || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("got (%+v, %v), want (%+v, %v)", res, err, tc.wantRes, tc.wantErr)
			}
		})
	}
}
