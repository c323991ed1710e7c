package controllers

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// The policy controller plans from a whole snapshot on every pass, so the events it lets through
// decide how often it pays for one. The agents' heartbeats are the most frequent events in a
// GPU fleet and change no plan, except when they end a silence: a node left out of planning
// for a stale report comes back.

// silenceEnded reports whether a heartbeat at now, after one at before, ends a silence long
// enough for the node to have been left out of planning.
func silenceEnded(before, now time.Time, maxAge time.Duration) bool {
	return now.Sub(before) > maxAge
}

// agentReturned passes Lease events that can change a plan: an agent's first Lease, its
// deletion, and a renewal that ends a silence. Routine renewals pass nothing: a node's
// freshness is read at each pass, and the policy's periodic recheck notices an agent that
// stops renewing.
func agentReturned(maxAge time.Duration) predicate.Predicate {
	renewed := func(o client.Object) time.Time {
		if l, ok := o.(*coordinationv1.Lease); ok && l.Spec.RenewTime != nil {
			return l.Spec.RenewTime.Time
		}
		return time.Time{}
	}
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return silenceEnded(renewed(e.ObjectOld), renewed(e.ObjectNew), maxAge)
		},
		CreateFunc:  func(event.CreateEvent) bool { return true },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// reportChanged passes GPUNode events that can change a plan: every create and delete, and
// an update that changes anything but status.observedTime, or that moves observedTime on
// after a silence. An agent without a heartbeat Lease rewrites its report every refresh period
// only to advance observedTime; those updates pass nothing.
func reportChanged(maxAge time.Duration) predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, okOld := e.ObjectOld.(*v1alpha1.GPUNode)
			cur, okNew := e.ObjectNew.(*v1alpha1.GPUNode)
			if !okOld || !okNew {
				return true
			}
			if old.Generation != cur.Generation || !equality.Semantic.DeepEqual(old.Labels, cur.Labels) ||
				!equality.Semantic.DeepEqual(old.Spec, cur.Spec) {
				return true
			}
			a, b := old.Status, cur.Status
			a.ObservedTime, b.ObservedTime = nil, nil
			if !equality.Semantic.DeepEqual(a, b) {
				return true
			}
			return silenceEnded(observed(old), observed(cur), maxAge)
		},
		CreateFunc:  func(event.CreateEvent) bool { return true },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

func observed(g *v1alpha1.GPUNode) time.Time {
	if g.Status.ObservedTime == nil {
		return time.Time{}
	}
	return g.Status.ObservedTime.Time
}
