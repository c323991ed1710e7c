// Waiting for the plan gpupool proposes and following its execution step by step.

package main

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// waitPlan waits for the policy's plan to await approval and returns it.
func (d *demo) waitPlan(ctx context.Context, pending int) (*v1alpha1.RepartitionPlan, error) {
	var plan *v1alpha1.RepartitionPlan
	superseded := map[string]bool{}
	err := d.waitFor(ctx, "a RepartitionPlan for every pending pod", 2*time.Minute, func() (bool, error) {
		var plans v1alpha1.RepartitionPlanList
		if err := d.cluster.Client.List(ctx, &plans); err != nil {
			return false, err
		}
		for i := range plans.Items {
			p := &plans.Items[i]
			if p.Status.Phase == v1alpha1.PlanSuperseded && !superseded[p.Name] {
				superseded[p.Name] = true
				fmt.Printf("   plan %s, made while pods were still arriving (%d of %d), was superseded\n",
					p.Name, len(p.Spec.Expected.Pods), pending)
			}
			// A plan made while the mix was still arriving covers part of it; the policy keeps it
			// for the stabilization window, then supersedes it with one for everything.
			if p.Status.Phase == v1alpha1.PlanAwaitingApproval && len(p.Spec.Expected.Pods) == pending {
				plan = p
				return true, nil
			}
		}
		return false, nil
	})
	return plan, err
}

// follow prints every change of the plan's node steps until the plan finishes.
func (d *demo) follow(ctx context.Context, name string) (*v1alpha1.RepartitionPlan, error) {
	seen := map[string]string{}
	var final *v1alpha1.RepartitionPlan
	start := time.Now()
	err := d.waitFor(ctx, "plan "+name+" to finish", 4*time.Minute, func() (bool, error) {
		plan := &v1alpha1.RepartitionPlan{}
		if err := d.cluster.Client.Get(ctx, client.ObjectKey{Name: name}, plan); err != nil {
			return false, err
		}
		for _, n := range plan.Status.Nodes {
			line := string(n.State) + ": " + n.Message
			if seen[n.Node] != line {
				seen[n.Node] = line
				fmt.Printf("   %6.1fs  %-16s %s\n", time.Since(start).Seconds(), n.Node, line)
			}
		}
		if key := "plan"; seen[key] != string(plan.Status.Phase) {
			seen[key] = string(plan.Status.Phase)
			fmt.Printf("   %6.1fs  plan %s is %s (%s)\n", time.Since(start).Seconds(), name, plan.Status.Phase, plan.Status.Progress)
		}
		switch plan.Status.Phase {
		case v1alpha1.PlanSucceeded, v1alpha1.PlanFailed, v1alpha1.PlanSuperseded, v1alpha1.PlanExpired, v1alpha1.PlanRejected:
			final = plan
			return true, nil
		}
		return false, nil
	})
	return final, err
}

func countEvictions(plan *v1alpha1.RepartitionPlan) int {
	n := 0
	for _, s := range plan.Spec.Steps {
		n += len(s.Evictions)
	}
	return n
}
