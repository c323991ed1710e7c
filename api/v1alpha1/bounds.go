package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PolicyDuration is one of a GPUPoolPolicy's durations with the range the API server accepts
// for it. The CRD's CEL rules (markers in gpupoolpolicy_types.go) spell the same bounds; a test
// reads the generated CRD and checks that the two agree.
type PolicyDuration struct {
	// Field is the JSON path of the field, e.g. spec.disruption.planTTL.
	Field string
	// Value is the field's value in a policy; nil when unset.
	Value *metav1.Duration
	// Min and Max bound the value.
	Min, Max time.Duration
}

// Durations lists the policy's durations with their bounds, in the order the spec declares them.
func (s *GPUPoolPolicySpec) Durations() []PolicyDuration {
	return []PolicyDuration{
		{"spec.disruption.drainTimeout", s.Disruption.DrainTimeout, time.Second, 168 * time.Hour},
		{"spec.disruption.configureTimeout", s.Disruption.ConfigureTimeout, time.Second, 24 * time.Hour},
		{"spec.disruption.planTTL", s.Disruption.PlanTTL, time.Minute, 720 * time.Hour},
		{"spec.planning.minPendingAge", s.Planning.MinPendingAge, 0, 24 * time.Hour},
		{"spec.planning.stabilizationWindow", s.Planning.StabilizationWindow, 0, 24 * time.Hour},
	}
}
