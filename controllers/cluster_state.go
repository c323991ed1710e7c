package controllers

// What the policy controller knows between passes, in one place. karpenter's state.Cluster is
// the model: one component owns the slim cache the passes read, one stamp that every watched
// change moves, and what each pool's last pass decided, so that a reconcile can tell whether a
// pass would only repeat the last one.

import (
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/planner"
)

// clusterState is the policy controller's memory. The pod store is shared with the informers;
// everything else is per policy and forgotten whole when the policy goes.
type clusterState struct {
	// pods reads the informer's pod records without copying them.
	pods *PodStore
	// stamp counts the watched changes that can alter a pass (those past their predicates): a
	// pass remembers the stamp it started from, and a later reconcile that finds the same stamp
	// and the same TimeFacts skips the pass it would repeat.
	stamp atomic.Int64

	mu       sync.Mutex
	policies map[string]*policyMemory
}

// policyMemory is what one policy's passes left behind.
type policyMemory struct {
	// inputs is what its last complete pass started from; nil before the first.
	inputs *passInputs
	// planned is the planner's last result and the plan it proposed, so that while that plan
	// waits for approval inside the stabilisation window the planner does not run again on
	// every pod event only to be told to keep it; nil when no plan is current.
	planned *plannedResult
	// told is, per pending pod, the PodNote.Key of the last Event written on the pod.
	told map[types.UID]string
}

// changed notes a watched change.
func (s *clusterState) changed() { s.stamp.Add(1) }

// now is the current stamp: read it before the cluster, so that a change after the read makes
// the next reconcile pass again.
func (s *clusterState) now() int64 { return s.stamp.Load() }

// memoryOf is the policy's memory, created when missing. The caller holds s.mu.
func (s *clusterState) memoryOf(policy string) *policyMemory {
	if s.policies == nil {
		s.policies = map[string]*policyMemory{}
	}
	m := s.policies[policy]
	if m == nil {
		m = &policyMemory{}
		s.policies[policy] = m
	}
	return m
}

// forget drops everything remembered of a deleted policy: a policy created again under the
// same name starts with a full pass, a fresh planner run and every pod told again.
func (s *clusterState) forget(policy string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.policies, policy)
}

// unchanged reports whether the policy's last complete pass started from the same inputs.
func (s *clusterState) unchanged(policy string, in passInputs) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.memoryOf(policy).inputs
	return last != nil && last.generation == in.generation && last.events == in.events && last.facts.Equal(in.facts) &&
		last.young == in.young && in.at.Sub(last.at) < fullPassInterval
}

// passed remembers what the policy's complete pass started from.
func (s *clusterState) passed(policy string, in passInputs) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.memoryOf(policy).inputs = &in
}

// remembered returns the planner result that proposed plan, when neither the policy nor the
// frozen nodes have changed since and the same pods are pending; nil means the planner must
// run. New demand always runs it, so that it can extend the plan under review (propose), and
// so does demand that went away, so that a plan nobody needs any more is withdrawn.
func (s *clusterState) remembered(policy *v1alpha1.GPUPoolPolicy, plan *v1alpha1.RepartitionPlan, frozen string,
	pending []demand.Request) *planner.Result {
	if plan == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	last := s.memoryOf(policy.Name).planned
	if last == nil || last.generation != policy.Generation || last.plan != plan.Name || last.frozen != frozen {
		return nil
	}
	// New demand, or demand gone: a pod that started pending since, or one that no longer is
	// (scheduled, deleted), changes what the plan under review is for.
	if len(pending) != len(last.pending) {
		return nil
	}
	for _, p := range pending {
		if !last.pending[p.Pod] {
			return nil
		}
	}
	return last.res
}

// remember keeps the planner result behind the policy's current plan; none when no plan is
// current.
func (s *clusterState) remember(policy *v1alpha1.GPUPoolPolicy, current *v1alpha1.RepartitionPlan, res *planner.Result, frozen string,
	pending []demand.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.memoryOf(policy.Name)
	if current == nil {
		m.planned = nil
		return
	}
	known := make(map[types.NamespacedName]bool, len(pending))
	for _, p := range pending {
		known[p.Pod] = true
	}
	m.planned = &plannedResult{generation: policy.Generation, frozen: frozen, plan: current.Name, res: res, pending: known}
}

// lastProposed is the name of the plan the policy's last pass left current, "" when none.
func (s *clusterState) lastProposed(policy string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.policies[policy]; m != nil && m.planned != nil {
		return m.planned.plan
	}
	return ""
}

// retell records what each of the policy's pending pods is told now and returns what they were
// told before, so that a pod hears a story once.
func (s *clusterState) retell(policy string, told map[types.UID]string) (before map[types.UID]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.memoryOf(policy)
	before, m.told = m.told, told
	return before
}
