// Whether a pod may be evicted: its safety rules and the PodDisruptionBudgets covering it.

package inventory

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/podrecord"
)

func newPod(p *podrecord.Record, budgets *budgets, opts Options) *Pod {
	pod := &Pod{
		Key:              types.NamespacedName{Namespace: p.Namespace, Name: p.Name},
		UID:              p.UID,
		Requests:         p.Requests,
		Priority:         p.Priority,
		NodeLocal:        p.Mirror || p.Controller == "DaemonSet",
		NodeSelector:     p.NodeSelector,
		RequiredAffinity: p.RequiredAffinity,
		Tolerations:      p.Tolerations,
	}
	pod.PDBs = budgets.covering(p)
	pod.Blocker = evictionBlocker(p, pod.PDBs, budgets, opts)
	pod.Evictable = pod.Blocker == ""
	return pod
}

// evictionBlocker says why gpupool must not evict the pod, following kubectl drain's defaults
// and gpupool's do-not-disrupt annotation.
func evictionBlocker(p *podrecord.Record, pdbs []string, budgets *budgets, opts Options) string {
	// In kubectl drain's order: do-not-disrupt and mirror pods are named as such even while
	// they terminate.
	if p.DeletionTimestamp != nil && !p.Mirror && !p.DoNotDisrupt {
		return "already terminating"
	}
	if why := SafetyBlocker(p, EvictionRules{EvictEmptyDir: opts.EvictEmptyDir, EvictUnmanaged: opts.EvictUnmanaged,
		DrainTimeout: opts.DrainTimeout}); why != "" {
		return why
	}
	// The Eviction API refuses a pod that more than one budget covers, whatever they allow.
	if len(pdbs) > 1 {
		return "covered by more than one PodDisruptionBudget (" + strings.Join(pdbs, ", ") + "), which the Eviction API refuses"
	}
	for _, key := range pdbs {
		if budgets.allowed[key] <= 0 {
			return "PodDisruptionBudget " + key + " allows no disruption now"
		}
	}
	return ""
}

// budgets indexes PodDisruptionBudgets by namespace.
type budgets struct {
	allowed     map[string]int32
	byNamespace map[string][]pdbSelector
}

type pdbSelector struct {
	key      string
	selector labels.Selector
}

func newBudgets(pdbs []policyv1.PodDisruptionBudget) *budgets {
	b := &budgets{allowed: map[string]int32{}, byNamespace: map[string][]pdbSelector{}}
	for i := range pdbs {
		pdb := &pdbs[i]
		key := pdb.Namespace + "/" + pdb.Name
		// A nil selector selects no pod in policy/v1; an unreadable one protects nothing in the
		// API server either.
		if pdb.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			continue
		}
		// A PDB whose status the disruption controller has not computed yet allows nothing.
		allowed := pdb.Status.DisruptionsAllowed
		if pdb.Status.ObservedGeneration < pdb.Generation {
			allowed = 0
		}
		b.allowed[key] = allowed
		b.byNamespace[pdb.Namespace] = append(b.byNamespace[pdb.Namespace], pdbSelector{key: key, selector: sel})
	}
	return b
}

func (b *budgets) covering(p *podrecord.Record) []string {
	var keys []string
	set := labels.Set(p.Labels)
	for _, s := range b.byNamespace[p.Namespace] {
		if s.selector.Matches(set) {
			keys = append(keys, s.key)
		}
	}
	slices.Sort(keys)
	return keys
}

// EvictionRules are a policy's choices about which pods may be evicted at all.
type EvictionRules struct {
	// EvictEmptyDir allows evicting pods with emptyDir or generic ephemeral volumes (their data
	// is lost).
	EvictEmptyDir bool
	// EvictUnmanaged allows evicting pods that no controller recreates (they are lost).
	EvictUnmanaged bool
	// DrainTimeout is the policy's drainTimeout, defaults applied; zero checks nothing (an
	// offline what-if). A pod whose grace period is not shorter is never evicted: the step
	// would time out with the pod still terminating, its GPUs neither free nor given back.
	DrainTimeout time.Duration
}

// recreatingControllers are the controllers known to replace a pod of theirs that is evicted,
// by API group and kind. A controller ownerReference says who owns a pod, not that the owner
// makes another: any object may be a pod's controller (a ConfigMap, a Node, a custom
// resource), and some custom controllers never replace a pod (Spark's executors are
// controlled by their driver pod; a workflow's step pods are retried only by its own policy).
// kubectl drain counts any controller ownerReference as managed (k8s.io/kubectl
// pkg/drain/filters.go, unreplicatedFilter), and the Eviction API looks at no owner at all,
// only at PodDisruptionBudgets. gpupool is stricter, because a pod lost to an eviction is lost
// for good: only these built-in kinds count as managed, and a pod of any other controller is
// evicted only under evictUnmanaged, whose user vouches for it. Each replaces a pod deleted
// before it is done (kubernetes pkg/controller/replicaset, statefulset and job); a Job's
// replacement counts against its backoffLimit, or ends the Job where its podFailurePolicy says
// so for a disruption, which is the Job's author's choice. DaemonSet pods are never evicted.
var recreatingControllers = map[schema.GroupKind]bool{
	{Group: "apps", Kind: "ReplicaSet"}:        true,
	{Group: "apps", Kind: "StatefulSet"}:       true,
	{Group: "batch", Kind: "Job"}:              true,
	{Group: "", Kind: "ReplicationController"}: true,
}

// RecreatesPods reports whether a pod's controller, by API group and kind, is known to replace
// a pod of its that is evicted (recreatingControllers).
func RecreatesPods(group, kind string) bool {
	return recreatingControllers[schema.GroupKind{Group: group, Kind: kind}]
}

// SafetyBlocker says why evicting the pod is never safe under the rules, whatever its
// PodDisruptionBudgets allow; "" when it may be evicted. The planner uses it to choose pods and
// the plan controller uses it again just before evicting, so a pod that became unsafe since
// planning (or that a forged plan names) is never evicted. The rules follow kubectl drain's
// defaults (mirror and DaemonSet pods, unmanaged pods, emptyDir data), stricter where a pod
// would be lost (only controllers known to recreate pods manage them; generic ephemeral
// volumes lose their data as emptyDir does), and gpupool's do-not-disrupt annotation. PodSafetyBlocker is the same for a whole Pod.
func SafetyBlocker(p *podrecord.Record, rules EvictionRules) string {
	switch {
	case p.DoNotDisrupt:
		return "annotated " + v1alpha1.AnnotationDoNotDisrupt
	case p.Mirror:
		return "a static (mirror) pod"
	case p.Controller == "DaemonSet":
		return "a DaemonSet pod"
	case p.Controller == "" && !rules.EvictUnmanaged:
		return "not managed by a controller, so nothing would recreate it (policy evictUnmanaged is false)"
	case !RecreatesPods(p.ControllerGroup, p.Controller) && !rules.EvictUnmanaged:
		return fmt.Sprintf("controlled by %s, which gpupool does not know to recreate its pods, so eviction may lose it "+
			"(policy evictUnmanaged is false; set it if that controller recreates them)", schema.GroupKind{Group: p.ControllerGroup, Kind: p.Controller})
	case p.EmptyDirVolume != "" && !rules.EvictEmptyDir:
		return fmt.Sprintf("uses emptyDir volume %q whose data eviction would lose (policy evictEmptyDir is false)", p.EmptyDirVolume)
	case p.EphemeralVolume != "" && !rules.EvictEmptyDir:
		// kubectl drain checks emptyDir only (k8s.io/kubectl pkg/drain/filters.go
		// hasLocalStorage), but a generic ephemeral volume's claim is deleted with its pod
		// (podrecord.Record.EphemeralVolume): the data is as lost as an emptyDir's.
		return fmt.Sprintf("uses generic ephemeral volume %q, whose PersistentVolumeClaim is deleted with the pod, so eviction "+
			"would lose its data (policy evictEmptyDir is false)", p.EphemeralVolume)
	case rules.DrainTimeout > 0 && p.GracePeriod >= rules.DrainTimeout:
		// Refused rather than evicted with a shorter grace period: the pod asked for that
		// long to shut down (a checkpoint, a drained connection), and cutting it short could
		// lose what eviction promises to keep. The kubelet may use the whole grace period, so
		// the step, whose drain must end within drainTimeout, would time out after evicting.
		return fmt.Sprintf("its terminationGracePeriodSeconds (%s) is not shorter than the policy's drainTimeout (%s), so the "+
			"step would time out with the pod still terminating (raise spec.disruption.drainTimeout above it)", p.GracePeriod, rules.DrainTimeout)
	}
	return ""
}

// PodSafetyBlocker is SafetyBlocker for a pod read whole, as the drain reads it before evicting.
func PodSafetyBlocker(p *corev1.Pod, rules EvictionRules) string {
	return SafetyBlocker(podrecord.New(p, nil), rules)
}
