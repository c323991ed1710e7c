// Package drain evicts the pods a RepartitionPlan lists, one non-blocking pass per reconcile.
//
// A pass never waits and never deletes a pod: it asks the Eviction API (policy/v1) once per pod
// that is still running, so PodDisruptionBudgets are honoured by the API server itself, and it
// returns what it saw. The plan controller persists the outcome in the plan's status and calls
// Pass again on its next reconcile until Done reports that every listed pod is gone. Keeping the
// state on the object, not in a goroutine, lets any manager replica resume a drain.
package drain

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// Outcome is what one pass did with, or learnt about, one listed pod.
type Outcome string

// Outcomes of a pass, per pod. Only Gone counts towards Done: a pod that is Evicted or
// Terminating still runs its containers, and mig-manager refuses to rebuild a GPU in use.
const (
	// Evicted means the API server accepted the eviction (201) in this pass; the pod now terminates.
	Evicted Outcome = "Evicted"
	// Terminating means the pod already had a deletionTimestamp, so it is left alone to finish.
	Terminating Outcome = "Terminating"
	// Gone means the pod no longer exists, or the name now belongs to a replacement pod.
	Gone Outcome = "Gone"
	// Blocked means a PodDisruptionBudget refused the eviction (429, or 500 when several budgets
	// select the pod); a later pass retries.
	Blocked Outcome = "Blocked"
	// Refused means gpupool never evicts this pod (DaemonSet pod, mirror pod, or annotated
	// gpupool.io/do-not-disrupt: "true"); the plan must not proceed while it is listed.
	Refused Outcome = "Refused"
	// Failed means reading or evicting the pod failed for another reason; a later pass retries.
	Failed Outcome = "Failed"
)

// outcomeOrder is the order in which Message reports outcomes: what needs a human first.
var outcomeOrder = []Outcome{Refused, Blocked, Failed, Terminating, Evicted, Gone}

// maxListedPods bounds how many pods Message names per outcome, so a large drain still fits in
// a condition message and an Event.
const maxListedPods = 10

// Options tune a pass.
type Options struct {
	// UIDs are the pod UIDs recorded when the plan was made, where known. A pod found under a
	// listed name with another UID is a replacement (a StatefulSet pod recreated after its
	// eviction), so it counts as Gone and is not evicted again.
	UIDs map[types.NamespacedName]types.UID
	// Rules are the policy's eviction rules (evictUnmanaged, evictEmptyDir), checked again on
	// every pod just before its eviction. The plan controller cancels a step whose pods break
	// them before it asks for a pass; this is defence in depth for the moment in between.
	Rules inventory.EvictionRules
	// Reader reads each pod just before its eviction: the API server itself (a manager's
	// APIReader), so that an eviction is never decided on a cache that lags, and because the
	// manager's cache keeps pods only as records. nil reads through the pass's client.
	Reader client.Reader
}

// PodResult is the outcome of one pass for one listed pod.
type PodResult struct {
	// Pod is the listed pod.
	Pod types.NamespacedName
	// Outcome is what the pass did or found.
	Outcome Outcome
	// Message explains Blocked, Refused and Failed outcomes, e.g. the API server's refusal.
	Message string
}

// Result is what one pass did, in the order the pods were visited (sorted by namespace/name).
type Result struct {
	// Pods holds one entry per distinct listed pod.
	Pods []PodResult
}

// Count returns how many pods had the outcome.
func (r Result) Count(o Outcome) int {
	n := 0
	for _, p := range r.Pods {
		if p.Outcome == o {
			n++
		}
	}
	return n
}

// Remaining returns the listed pods that still exist on the node, sorted.
func (r Result) Remaining() []types.NamespacedName {
	var out []types.NamespacedName
	for _, p := range r.Pods {
		if p.Outcome != Gone {
			out = append(out, p.Pod)
		}
	}
	return out
}

// Done reports whether every listed pod is gone, so the GPUs can be reconfigured.
func (r Result) Done() bool {
	return len(r.Remaining()) == 0
}

// Stuck reports whether some pod cannot leave without outside help: a refused pod never will,
// and a blocked pod waits for its PodDisruptionBudget to allow a disruption.
func (r Result) Stuck() bool {
	return r.Count(Refused) > 0 || r.Count(Blocked) > 0
}

// Message summarises the pass for a condition or an Event, naming the pods that block the
// drain first. It is deterministic for the same cluster state, so conditions do not flap.
func (r Result) Message() string {
	if len(r.Pods) == 0 {
		return "no pods to evict"
	}
	if r.Done() {
		return fmt.Sprintf("all %s gone", pods(len(r.Pods)))
	}
	var parts []string
	for _, o := range outcomeOrder {
		var names []string
		for _, p := range r.Pods {
			if p.Outcome != o {
				continue
			}
			name := p.Pod.String()
			if p.Message != "" {
				name += " (" + p.Message + ")"
			}
			names = append(names, name)
		}
		if len(names) == 0 {
			continue
		}
		if len(names) > maxListedPods {
			names = append(names[:maxListedPods], fmt.Sprintf("and %d more", len(names)-maxListedPods))
		}
		parts = append(parts, fmt.Sprintf("%s %s: %s", pods(len(names)), outcomeText[o], strings.Join(names, ", ")))
	}
	return strings.Join(parts, "; ")
}

var outcomeText = map[Outcome]string{
	Refused:     "refused (gpupool never evicts these; reject the plan)",
	Blocked:     "blocked by PodDisruptionBudgets",
	Failed:      "failed eviction",
	Terminating: "terminating",
	Evicted:     "evicted",
	Gone:        "gone",
}

func pods(n int) string {
	if n == 1 {
		return "1 pod"
	}
	return fmt.Sprintf("%d pods", n)
}

// Pass makes one non-blocking eviction pass over the listed pods on node: it evicts each pod
// that still runs there, waits for none of them, and reports every pod's outcome. It never
// deletes a pod, and never evicts a pod twice: a pod evicted earlier carries a deletionTimestamp
// and is reported Terminating. The error is for a pass that could not run at all; per-pod
// failures are outcomes, retried by the next pass.
func Pass(ctx context.Context, c client.Client, node string, pods []types.NamespacedName, opts Options) (Result, error) {
	if node == "" {
		return Result{}, errors.New("drain pass: node name is empty")
	}
	// Sorted and deduplicated, so evictions happen in the same order every pass and the
	// message does not change while the cluster does not.
	sorted := slices.Clone(pods)
	slices.SortFunc(sorted, func(a, b types.NamespacedName) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	sorted = slices.Compact(sorted)

	res := Result{Pods: make([]PodResult, 0, len(sorted))}
	for _, key := range sorted {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("drain pass on node %s stopped before pod %s: %w", node, key, err)
		}
		res.Pods = append(res.Pods, passPod(ctx, c, node, key, opts))
	}
	return res, nil
}

// passPod decides and, if needed, evicts one pod.
func passPod(ctx context.Context, c client.Client, node string, key types.NamespacedName, opts Options) PodResult {
	res := PodResult{Pod: key}
	var reader client.Reader = c
	if opts.Reader != nil {
		reader = opts.Reader
	}
	pod := &corev1.Pod{}
	if err := reader.Get(ctx, key, pod); err != nil {
		if apierrors.IsNotFound(err) {
			res.Outcome = Gone
			return res
		}
		res.Outcome, res.Message = Failed, fmt.Sprintf("reading pod: %v", err)
		return res
	}
	if uid, ok := opts.UIDs[key]; ok && uid != "" && uid != pod.UID {
		// Same name, different pod: the one the plan meant is gone.
		res.Outcome = Gone
		return res
	}
	if pod.Spec.NodeName != node {
		// A replacement that is pending or runs elsewhere; the node is cordoned, so the pod
		// the plan meant cannot be this one.
		res.Outcome = Gone
		return res
	}
	if pod.DeletionTimestamp != nil {
		res.Outcome = Terminating
		return res
	}
	if why := refusal(pod); why != "" {
		res.Outcome, res.Message = Refused, why
		return res
	}
	if why := inventory.PodSafetyBlocker(pod, opts.Rules); why != "" {
		res.Outcome, res.Message = Refused, why
		return res
	}

	eviction := &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		DeleteOptions: &metav1.DeleteOptions{
			// Evict exactly the pod inspected above, never a replacement created since.
			Preconditions: &metav1.Preconditions{UID: &pod.UID},
		},
	}
	err := c.SubResource("eviction").Create(ctx, pod, eviction)
	switch {
	case err == nil:
		res.Outcome = Evicted
	case apierrors.IsNotFound(err):
		res.Outcome = Gone
	case apierrors.IsTooManyRequests(err), isMultiplePDBs(err):
		res.Outcome, res.Message = Blocked, refusalMessage(err)
	case apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		res.Outcome, res.Message = Failed, "namespace is terminating: waiting for the namespace controller to delete the pod"
	default:
		res.Outcome, res.Message = Failed, fmt.Sprintf("evicting: %v", err)
	}
	return res
}

// refusal says why gpupool must not evict the pod, or "" when it may. The planner never lists
// such pods; this check is defence in depth against a stale or hand-edited plan.
func refusal(pod *corev1.Pod) string {
	if _, ok := pod.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return "static (mirror) pod: the kubelet owns it"
	}
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "DaemonSet" {
		return "DaemonSet pod " + ref.Name + ": it would be recreated on the node at once"
	}
	if pod.Annotations[v1alpha1.AnnotationDoNotDisrupt] == "true" {
		return "annotated " + v1alpha1.AnnotationDoNotDisrupt + "=true"
	}
	return ""
}

// isMultiplePDBs recognises the API server's 500 for a pod selected by several
// PodDisruptionBudgets: it is a configuration problem for the pod's owner, not a server fault.
func isMultiplePDBs(err error) bool {
	return apierrors.IsInternalError(err) && strings.Contains(err.Error(), "more than one PodDisruptionBudget")
}

// refusalMessage returns the API server's refusal. Its causes name the budget and its numbers
// ("The disruption budget web needs 2 healthy pods and has 2 currently"), which says more than
// the generic message, so they replace it when present.
func refusalMessage(err error) string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return err.Error()
	}
	s := status.Status()
	var causes []string
	if s.Details != nil {
		for _, cause := range s.Details.Causes {
			if cause.Message != "" {
				causes = append(causes, cause.Message)
			}
		}
	}
	switch {
	case len(causes) > 0:
		return strings.Join(causes, "; ")
	case s.Message != "":
		return s.Message
	}
	return http.StatusText(int(s.Code))
}
