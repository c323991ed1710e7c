package snapshot

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/pool"
)

// Options choose what to plan.
type Options struct {
	// Now is the planning time; it must be set (see PlanningTime).
	Now time.Time
	// Policy plans only the policy of that name; empty plans every policy of the snapshot.
	Policy string
	// MaxReportAge is how old a node's GPU report, or its agent's last heartbeat, may be before
	// the node is not planned, as the manager's --max-report-age; zero keeps every report (a
	// saved file is judged as of its own time).
	MaxReportAge time.Duration
}

// Report is the outcome of planning a snapshot.
type Report struct {
	// Now is the planning time used.
	Now time.Time
	// Policies are the planned policies, sorted by name.
	Policies []PolicyReport
	// Unserved are the pending pods no planned policy serves, each explained once.
	Unserved []UnservedPod
	// StrandedBefore and StrandedAfter sum, per MIG profile, the stranded free instances of
	// every planned pool.
	StrandedBefore, StrandedAfter map[string]int
}

// PolicyReport is one policy's planning pass.
type PolicyReport struct {
	// Policy is the policy as read.
	Policy *v1alpha1.GPUPoolPolicy
	// Result is the planner's answer.
	Result *planner.Result
	// Plan is the RepartitionPlan the planner wants; nil when nothing changes.
	Plan *v1alpha1.RepartitionPlan
	// Proposal is what the controller would do about the policy's plans, given the plans of
	// the snapshot (pool.Decide, as the controller calls it): keep a plan under review or past
	// approval, withdraw or supersede one, create Plan, or hold it back as refused.
	Proposal pool.Proposal
	// Pending counts the pending pods this pool could be asked to host: all pending GPU pods
	// except those whose placement rules exclude every node of the pool.
	Pending int
	// Waiting are unbound GPU pods that are not demand yet (too recent, gated...), with why.
	Waiting []demand.Skipped
	// Frozen are the pool's nodes the planner had to leave alone because another policy
	// selects them too, with why.
	Frozen map[string]string
	// Unusable says why the controller plans nothing for the policy (pool.Problems that block
	// it, as its SpecValid condition says); "" when it plans. Result is then empty.
	Unusable string
}

// UnservedPod is a pending pod that stays pending after the plans, with the explanation of
// the policy that came closest to serving it.
type UnservedPod struct {
	// Pod names the pod.
	Pod types.NamespacedName
	// Policy is the policy whose explanation is given.
	Policy string
	// Reason is the planner's reason code.
	Reason planner.Reason
	// Message explains the reason for a user.
	Message string
}

// PlanningTime is the time to plan a snapshot at: the override when set, else the newest
// timestamp of the snapshot, so a saved file replays to the same plan, else the clock.
func (s *Snapshot) PlanningTime(override time.Time, clock func() time.Time) time.Time {
	switch {
	case !override.IsZero():
		return override
	case !s.Newest.IsZero():
		return s.Newest
	}
	return clock()
}

// Plan runs the planner for each selected policy, on the nodes its nodeSelector picks. A node
// that two policies select is frozen for both, as the controller reports Conflict and touches
// it in neither.
func (s *Snapshot) Plan(opts Options) (*Report, error) {
	if opts.Now.IsZero() {
		return nil, fmt.Errorf("planning needs a time")
	}
	policies := make([]*v1alpha1.GPUPoolPolicy, 0, len(s.Policies))
	for i := range s.Policies {
		policies = append(policies, &s.Policies[i])
	}
	slices.SortFunc(policies, func(a, b *v1alpha1.GPUPoolPolicy) int { return cmp.Compare(a.Name, b.Name) })
	if opts.Policy != "" {
		i := slices.IndexFunc(policies, func(p *v1alpha1.GPUPoolPolicy) bool { return p.Name == opts.Policy })
		if i < 0 {
			names := make([]string, len(policies))
			for j, p := range policies {
				names[j] = p.Name
			}
			return nil, &Error{Message: fmt.Sprintf("no GPUPoolPolicy named %q in the input (it has %s)", opts.Policy, strings.Join(names, ", "))}
		}
	}

	rep := &Report{Now: opts.Now, StrandedBefore: map[string]int{}, StrandedAfter: map[string]int{}}
	cluster := s.Cluster()
	for _, p := range policies {
		if opts.Policy != "" && p.Name != opts.Policy {
			continue
		}
		pr, err := s.planPolicy(p, cluster, opts)
		if err != nil {
			return nil, err
		}
		rep.Policies = append(rep.Policies, *pr)
		for k, v := range pr.Result.StrandedBefore {
			rep.StrandedBefore[k] += v
		}
		for k, v := range pr.Result.StrandedAfter {
			rep.StrandedAfter[k] += v
		}
	}
	rep.Unserved = mergeUnserved(rep.Policies)
	return rep, nil
}

// planPolicy plans one policy as the controller does: the same pass (pool.NewPass over the
// same pool.Cluster), the same planner call and the same decision on the policy's plans
// (pool.Decide), so that what-if never promises a plan the controller would keep back (a
// refusal, the stabilization window) or show one it replaces. Pending pods no node of the pool
// may host, which the controller leaves to their own pool, are then explained too: the report
// says why every pending pod waits, not only the pool's own.
func (s *Snapshot) planPolicy(p *v1alpha1.GPUPoolPolicy, cluster *pool.Cluster, opts Options) (*PolicyReport, error) {
	now := opts.Now
	if problems := pool.Problems(&p.Spec); len(problems) > 0 && problems[0].Blocking {
		// As the controller: a policy it cannot use gets no plan, only a condition saying why.
		return &PolicyReport{Policy: p, Result: &planner.Result{}, Unusable: pool.Message(problems, 5)}, nil
	}
	passOpts := pool.Options{MaxReportAge: opts.MaxReportAge}
	pass, err := pool.NewPass(p, cluster, now, passOpts)
	if err != nil {
		return nil, &Error{Object: "GPUPoolPolicy " + p.Name, Field: "spec.nodeSelector", Message: err.Error()}
	}
	// As the controller plans: within the size the API server stores.
	res, err := planner.PlanWithin(pass.Input())
	if err != nil {
		return nil, &Error{Object: "GPUPoolPolicy " + p.Name, Message: err.Error()}
	}
	pr := &PolicyReport{Policy: p, Plan: res.RepartitionPlan(p, now), Frozen: pass.Frozen}
	pr.Proposal = pool.Decide(p, pass.Own, func() *v1alpha1.RepartitionPlan { return pr.Plan }, pass.Pending, now)
	passOpts.KeepUnplaceable = true
	all, err := pool.NewPass(p, cluster, now, passOpts)
	if err != nil {
		return nil, &Error{Object: "GPUPoolPolicy " + p.Name, Field: "spec.nodeSelector", Message: err.Error()}
	}
	if len(all.Pending) > len(pass.Pending) {
		explained, err := planner.PlanWithin(all.Input())
		if err != nil {
			return nil, &Error{Object: "GPUPoolPolicy " + p.Name, Message: err.Error()}
		}
		res = withNotInPool(res, explained, pass.Pending)
	}
	pr.Result = res
	notInPool := 0
	for _, u := range res.Unserved {
		if u.Reason == planner.ReasonNotInPool {
			notInPool++
		}
	}
	pr.Pending = len(all.Pending) - notInPool
	unbound, requests := cluster.Unbound()
	_, skipped := demand.PendingWithClaims(unbound, cluster.ClaimLookup(), requests, now, pass.MinPendingAge)
	bound := map[types.NamespacedName]bool{}
	for i := range s.Pods {
		if s.Pods[i].Spec.NodeName != "" {
			bound[types.NamespacedName{Namespace: s.Pods[i].Namespace, Name: s.Pods[i].Name}] = true
		}
	}
	for _, sk := range skipped {
		if !bound[sk.Pod] {
			pr.Waiting = append(pr.Waiting, sk)
		}
	}
	return pr, nil
}

// withNotInPool is the controller's result res with the explanations, from explained (the
// planner's answer with every pending pod), of the pods the controller's pass left out because
// no node of the pool may host them (they are not among pending).
func withNotInPool(res, explained *planner.Result, pending []demand.Request) *planner.Result {
	planned := make(map[types.NamespacedName]bool, len(pending))
	for _, r := range pending {
		planned[r.Pod] = true
	}
	out := *res
	out.Unserved = slices.Clone(res.Unserved)
	for _, u := range explained.Unserved {
		if u.Reason == planner.ReasonNotInPool && !planned[u.Pod] {
			out.Unserved = append(out.Unserved, u)
		}
	}
	return &out
}

// mergeUnserved keeps the pods that no policy serves or already fits, each with one
// explanation: the first policy, by name, that gives a reason other than NotInPool, since
// "not in this pool" says nothing when another pool is the pod's home.
func mergeUnserved(reports []PolicyReport) []UnservedPod {
	handled := map[types.NamespacedName]bool{}
	for _, pr := range reports {
		for _, k := range pr.Result.Served {
			handled[k] = true
		}
		for _, k := range pr.Result.FitsNow {
			handled[k] = true
		}
	}
	chosen := map[types.NamespacedName]UnservedPod{}
	for _, pr := range reports {
		for _, u := range pr.Result.Unserved {
			if handled[u.Pod] {
				continue
			}
			prev, seen := chosen[u.Pod]
			if !seen || (prev.Reason == planner.ReasonNotInPool && u.Reason != planner.ReasonNotInPool) {
				chosen[u.Pod] = UnservedPod{Pod: u.Pod, Policy: pr.Policy.Name, Reason: u.Reason, Message: u.Message}
			}
		}
	}
	out := make([]UnservedPod, 0, len(chosen))
	for _, u := range chosen {
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b UnservedPod) int {
		return cmp.Or(cmp.Compare(a.Pod.Namespace, b.Pod.Namespace), cmp.Compare(a.Pod.Name, b.Pod.Name))
	})
	return out
}
