// Package events is what TestScan reads: the shapes of code the reference generator must find.
package events

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
)

// Reasons of the sample's conditions.
const (
	// ReasonGood: all is well.
	ReasonGood = "Good"
	ReasonBad  = "Bad"
)

// ConditionHappy is the sample's condition.
const ConditionHappy = "Happy"

const otherName = "NotListed"

// send is a wrapper: its callers choose the type, reason and action.
func send(rec events.EventRecorder, node *corev1.Node, eventType, reason, action string) {
	rec.Eventf(node, nil, eventType, reason, action, "%s", otherName)
}

// stop wraps send, fixing the type and the action.
func stop(rec events.EventRecorder, node *corev1.Node, reason string) {
	send(rec, node, corev1.EventTypeWarning, reason, "Stop")
}

// Use sends Events through the wrappers and directly, and sets a condition with literals.
func Use(rec events.EventRecorder, node *corev1.Node, late bool) metav1.Condition {
	reason := ReasonGood
	if late {
		reason = "Late"
	}
	stop(rec, node, reason)
	rec.Eventf(&corev1.Pod{}, nil, corev1.EventTypeNormal, ReasonBad, "Tell", "%s", "note")
	return metav1.Condition{Type: "Inline", Reason: "Spelled", Message: "not a reason: it has spaces"}
}
