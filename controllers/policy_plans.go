package controllers

// The policy controller's acts on plans: it carries out pool.Decide (create, supersede), tells
// pending pods where they stand, and garbage-collects finished plans.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/rollout"
)

// tellPods writes an Event on each pending pod of the pool whose story changed: which plan
// serves it and where that plan stands, or why gpupool cannot help (pool.PodNotes). The pod's
// owner, often confined to a namespace, reads it with kubectl describe pod.
func (r *PolicyReconciler) tellPods(pass *pool.Pass, res *planner.Result, pp *placementPlan, proposal pool.Proposal) {
	policy, now, current := pass.Policy, pass.Now, proposal.Current
	phase := v1alpha1.PlanPhase("")
	var wanted *v1alpha1.RepartitionPlan
	if current != nil {
		phase = rollout.Gate(current, policy, now).Phase
	}
	if proposal.Refused != nil {
		wanted = withPlacements(res, pp, policy, now)
	}
	notes := pool.PodNotes(pass.Pending, res, current, phase, proposal.Refused, wanted)
	told := make(map[types.UID]string, len(notes))
	for _, note := range notes {
		told[note.UID] = note.Key
	}
	before := r.state.retell(policy.Name, told)
	for pod, note := range notes {
		if before[note.UID] == note.Key {
			continue
		}
		eventType := corev1.EventTypeNormal
		if note.Reason == pool.PodReasonCannotHelp || note.Reason == pool.PodReasonRefused {
			eventType = corev1.EventTypeWarning
		}
		var related runtime.Object = policy
		if current != nil && note.Reason != pool.PodReasonCannotHelp {
			related = current
		}
		regarding := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: note.UID}}
		r.Recorder.Eventf(regarding, related, eventType, note.Reason, "Plan", "%s", note.Message)
	}
}

// propose carries out pool.Decide: it keeps, replaces or retires the policy's unapproved
// plan so that at most one plan of a policy is live, and returns the decision (Current is the
// policy's plan afterwards).
func (r *PolicyReconciler) propose(ctx context.Context, policy *v1alpha1.GPUPoolPolicy,
	plans []v1alpha1.RepartitionPlan, res *planner.Result, pp *placementPlan, pending []demand.Request, now time.Time) (pool.Proposal, error) {
	plans, err := r.withJustCreated(ctx, policy, plans)
	if err != nil {
		return pool.Proposal{}, err
	}
	d := pool.Decide(policy, plans, func() *v1alpha1.RepartitionPlan { return withPlacements(res, pp, policy, now) }, pending, now)
	for _, s := range d.Supersede {
		if err := r.supersede(ctx, s.Plan, s.Why); err != nil {
			return pool.Proposal{}, err
		}
	}
	if d.Create == nil {
		return d, nil
	}
	want := d.Create
	if err := r.create(ctx, want, now); err != nil {
		return pool.Proposal{}, err
	}
	cut := ""
	if res.StepBound > 0 {
		cut = fmt.Sprintf(" (cut to %d node(s) so that the plan fits in the API server; the demand it leaves is planned once it has run)", res.StepBound)
	}
	r.Recorder.Eventf(want, policy, corev1.EventTypeNormal, pool.ReasonPlanProposed, "Propose",
		"plan %s changes %d node(s)%s, evicts %d pod(s), serves %d pending pod(s); approve with: kubectl annotate repartitionplan %s %s=%s",
		want.Name, len(want.Spec.Steps), cut, evictions(want), len(want.Spec.Expected.Pods), want.Name, v1alpha1.AnnotationApprove, want.Spec.Hash)
	return d, nil
}

// withJustCreated adds the plan this manager last created for the policy when the cache does
// not show it yet, read from the API server: otherwise the pass after a create would see no
// plan, report none in the status and might propose a second one.
func (r *PolicyReconciler) withJustCreated(ctx context.Context, policy *v1alpha1.GPUPoolPolicy,
	plans []v1alpha1.RepartitionPlan) ([]v1alpha1.RepartitionPlan, error) {
	last := r.state.lastProposed(policy.Name)
	if last == "" || slices.ContainsFunc(plans, func(p v1alpha1.RepartitionPlan) bool { return p.Name == last }) {
		return plans, nil
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	live := &v1alpha1.RepartitionPlan{}
	err := reader.Get(ctx, types.NamespacedName{Name: last}, live)
	switch {
	case apierrors.IsNotFound(err):
		return plans, nil
	case err != nil:
		return nil, fmt.Errorf("reading plan %s: %w", last, err)
	case !metav1.IsControlledBy(live, policy):
		return plans, nil
	}
	return append([]v1alpha1.RepartitionPlan{*live}, plans...), nil
}

// create creates the plan under a fresh name that nobody can guess: a policy's next plan name
// must not be something another user can create first and so block planning. A name already
// taken (by chance, or by a squatter) is never adopted; another one is tried.
func (r *PolicyReconciler) create(ctx context.Context, plan *v1alpha1.RepartitionPlan, now time.Time) error {
	policy := plan.Spec.Policy
	layoutNames := make([]string, len(plan.Spec.Steps))
	for i, s := range plan.Spec.Steps {
		layoutNames[i] = s.MIGConfigName
	}
	for attempt := 0; ; attempt++ {
		plan.Name = planName(policy, now)
		// Each plan gets its own mig-parted entry names: mig-manager applies an entry only when
		// the node's nvidia.com/mig.config changes (NVIDIA/mig-parted cmd/nvidia-mig-manager
		// main.go), so a plan that retries a layout an earlier plan failed to apply must name a
		// new entry, or the node would never be relabelled and the stale "failed" state would be
		// read as this plan's result.
		for i := range plan.Spec.Steps {
			if plan.Spec.Steps[i].Placement == nil { // a placement step writes no MIG config
				plan.Spec.Steps[i].MIGConfigName = nvidia.PlanEntryName(layoutNames[i], plan.Name)
			}
		}
		plan.Spec.Hash = v1alpha1.HashSteps(plan.Spec.Steps)
		err := r.Client.Create(ctx, plan)
		switch {
		case err == nil:
			return nil
		case apierrors.IsAlreadyExists(err) && attempt < 3:
			continue
		default:
			return fmt.Errorf("creating plan %s: %w", plan.Name, err)
		}
	}
}

// planName is <policy>-<yyyymmdd>-<8 random hex digits>, cut to fit an object name.
func planName(policy string, now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	suffix := fmt.Sprintf("-%s-%s", now.UTC().Format("20060102"), hex.EncodeToString(b[:]))
	prefix := policy
	if max := validation.DNS1123SubdomainMaxLength - len(suffix); len(prefix) > max {
		prefix = strings.TrimRight(prefix[:max], "-.")
	}
	return prefix + suffix
}

// keepFinishedPlans is how many finished plans of a policy are kept for their history; older
// ones are deleted, so plans do not pile up in etcd.
const keepFinishedPlans = 10

// collectPlans deletes a policy's finished plans beyond the newest keepFinishedPlans, except
// those the hourly eviction bound and the failure backoff still read (pool.InHistory). Plans
// are listed newest first.
func (r *PolicyReconciler) collectPlans(ctx context.Context, policy *v1alpha1.GPUPoolPolicy, plans []v1alpha1.RepartitionPlan, now time.Time) error {
	kept := 0
	for i := range plans {
		p := &plans[i]
		if !p.Status.Phase.Finished() || !metav1.IsControlledBy(p, policy) {
			continue
		}
		if kept++; kept <= keepFinishedPlans || pool.InHistory(p, now) {
			continue
		}
		err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting finished plan %s: %w", p.Name, err)
		}
	}
	return nil
}

// supersede asks the plan controller, the only writer of a plan's status, to supersede a plan
// that still awaits approval (rollout.Gate carries it out; a plan approved meanwhile ignores it).
func (r *PolicyReconciler) supersede(ctx context.Context, cached *v1alpha1.RepartitionPlan, why string) error {
	// The pass holds the cache's own objects (read): the patch is built on a copy.
	plan := cached.DeepCopy()
	patch := client.MergeFrom(cached)
	metav1.SetMetaDataAnnotation(&plan.ObjectMeta, v1alpha1.AnnotationSupersede, why)
	if err := r.Client.Patch(ctx, plan, patch); err != nil {
		return fmt.Errorf("asking to supersede plan %s: %w", plan.Name, err)
	}
	return nil
}

func evictions(p *v1alpha1.RepartitionPlan) int {
	n := 0
	for _, s := range p.Spec.Steps {
		n += len(s.Evictions)
	}
	return n
}
