package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestPlanShowsWhoDecided guards issue 35's audit in the plugin: a plan's view names who
// approved or rejected it, as the API server recorded it.
func TestPlanShowsWhoDecided(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 12, 5, 9, 30, 0, 0, time.UTC))
	for _, tc := range []struct {
		name   string
		status v1alpha1.RepartitionPlanStatus
		want   string
	}{
		{"approved", v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanExecuting, Approved: true, ApprovedTime: &at, ApprovedBy: "alice"},
			"Approved by alice at 2026-12-05T09:30:00Z"},
		{"approved by its policy", v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanExecuting, Approved: true, ApprovedTime: &at,
			ApprovedBy: "policy pool-a (approval Auto)"}, "Approved by policy pool-a (approval Auto) at"},
		{"rejected", v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanRejected, RejectedBy: "bob"}, "Rejected by bob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := &v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "p-1"},
				Spec: v1alpha1.RepartitionPlanSpec{Policy: "pool-a", Hash: "abc"}, Status: tc.status}
			var out bytes.Buffer
			writeLivePlan(&errWriter{w: &out}, plan, "kubectl gpupool")
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("plan view does not say %q:\n%s", tc.want, out.String())
			}
		})
	}
}
