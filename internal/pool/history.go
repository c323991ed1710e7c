package pool

import (
	"fmt"
	"slices"
	"time"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// DefaultMaxDisruptiveStepsPerHour is the policy's default hourly bound on node steps that
// evict pods (the CRD's default marker says the same).
const DefaultMaxDisruptiveStepsPerHour = 20

// DisruptiveStepsSince counts the node steps of the plans that evict pods and started at or
// after since: how much of the hourly bound the policy has spent.
func DisruptiveStepsSince(plans []v1alpha1.RepartitionPlan, since time.Time) int {
	n := 0
	for _, p := range plans {
		disruptive := map[string]bool{}
		for _, s := range p.Spec.Steps {
			disruptive[s.Node] = len(s.Evictions) > 0
		}
		for _, st := range p.Status.Nodes {
			if disruptive[st.Node] && st.StartedTime != nil && !st.StartedTime.Time.Before(since) {
				n++
			}
		}
	}
	return n
}

// HourlyBound is the policy's maxDisruptiveStepsPerHour, or its default.
func HourlyBound(policy *v1alpha1.GPUPoolPolicy) int {
	if b := policy.Spec.Disruption.MaxDisruptiveStepsPerHour; b != nil {
		return int(*b)
	}
	return DefaultMaxDisruptiveStepsPerHour
}

// DisruptiveStepsLeft is how many more node steps that evict pods the policy's plans may start
// within the hour from now: maxDisruptiveStepsPerHour less the steps started in the last hour,
// less the evicting steps that approved or executing plans have yet to start (they are
// promised already). The planner gets it as the most evicting steps the next plan may hold,
// so that the bound is a cap on what runs, not a gate on whether a plan may evict at all.
func DisruptiveStepsLeft(policy *v1alpha1.GPUPoolPolicy, plans []v1alpha1.RepartitionPlan, now time.Time) int {
	left := HourlyBound(policy) - DisruptiveStepsSince(plans, now.Add(-time.Hour))
	for _, p := range plans {
		if p.Status.Phase != v1alpha1.PlanApproved && p.Status.Phase != v1alpha1.PlanExecuting {
			continue
		}
		for _, s := range p.Spec.Steps {
			started := slices.ContainsFunc(p.Status.Nodes, func(st v1alpha1.NodeStepStatus) bool { return st.Node == s.Node })
			if len(s.Evictions) > 0 && !started {
				left--
			}
		}
	}
	return max(0, left)
}

// HourlyCapFreed is when the next of the steps counted against maxDisruptiveStepsPerHour ages
// out of the hour, so that one more evicting step may start (zero time when none counts).
func HourlyCapFreed(plans []v1alpha1.RepartitionPlan, now time.Time) time.Time {
	var first time.Time
	since := now.Add(-time.Hour)
	for _, p := range plans {
		disruptive := map[string]bool{}
		for _, s := range p.Spec.Steps {
			disruptive[s.Node] = len(s.Evictions) > 0
		}
		for _, st := range p.Status.Nodes {
			if disruptive[st.Node] && st.StartedTime != nil && !st.StartedTime.Time.Before(since) &&
				(first.IsZero() || st.StartedTime.Time.Before(first)) {
				first = st.StartedTime.Time
			}
		}
	}
	if first.IsZero() {
		return first
	}
	return first.Add(time.Hour)
}

// EvictionsPaused says why the policy's plans may evict no pod now ("" when they may): its
// maxDisruptiveStepsPerHour is spent by the steps its plans started in the last hour, or
// promised to the evicting steps of approved plans that have not started yet.
func EvictionsPaused(policy *v1alpha1.GPUPoolPolicy, plans []v1alpha1.RepartitionPlan, now time.Time) string {
	if DisruptiveStepsLeft(policy, plans, now) > 0 {
		return ""
	}
	return fmt.Sprintf("the policy's maxDisruptiveStepsPerHour (%d) is spent: %d node step(s) evicted pods in the last hour, "+
		"and approved plans hold the rest", HourlyBound(policy), DisruptiveStepsSince(plans, now.Add(-time.Hour)))
}

// failureMemory is how far back a node's failed steps count towards its backoff.
const failureMemory = 24 * time.Hour

// maxFailureBackoff caps how long a node that keeps failing is left alone.
const maxFailureBackoff = 6 * time.Hour

// FailureBackoff says until when a node whose steps failed is not planned again, and how many
// failures of the last day that wait is for (zero time when the node may be planned). Each
// failure doubles the wait, from base (the policy's stabilization window, at least a minute)
// up to six hours, so a node that mig-manager cannot configure is not drained again and again.
func FailureBackoff(plans []v1alpha1.RepartitionPlan, node string, base time.Duration, now time.Time) (time.Time, int) {
	var last time.Time
	failures := 0
	for _, p := range plans {
		for _, st := range p.Status.Nodes {
			if st.Node != node || st.State != v1alpha1.NodeFailed || st.LastTransitionTime == nil {
				continue
			}
			at := st.LastTransitionTime.Time
			if now.Sub(at) > failureMemory {
				continue
			}
			failures++
			if at.After(last) {
				last = at
			}
		}
	}
	if failures == 0 {
		return time.Time{}, 0
	}
	wait := max(base, time.Minute)
	for i := 1; i < failures && wait < maxFailureBackoff; i++ {
		wait *= 2
	}
	until := last.Add(min(wait, maxFailureBackoff))
	if !until.After(now) {
		return time.Time{}, failures
	}
	return until, failures
}

// InHistory says whether a finished plan still counts towards a bound: a step of it that
// evicted pods started within the last hour (maxDisruptiveStepsPerHour), or a step of it
// failed within the last day (a node's failure backoff). Such a plan is history the manager
// reads, so it is kept however many plans came after it: deleting it would hand a pod author
// who makes plans follow one another a fresh hourly bound, and a failing node a fresh backoff.
// A refusal is kept for as long as it is remembered (RefusedChange), for the same reason.
func InHistory(p *v1alpha1.RepartitionPlan, now time.Time) bool {
	if refusedWithin(p, now) {
		return true
	}
	if DisruptiveStepsSince([]v1alpha1.RepartitionPlan{*p}, now.Add(-time.Hour)) > 0 {
		return true
	}
	for _, st := range p.Status.Nodes {
		if st.State == v1alpha1.NodeFailed && st.LastTransitionTime != nil && now.Sub(st.LastTransitionTime.Time) <= failureMemory {
			return true
		}
	}
	return false
}
