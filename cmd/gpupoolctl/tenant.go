package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/snapshot"
	"github.com/gpupool/gpupool/internal/triage"
)

// whyOutput is what why prints: the triage's verdict, and what the answer rests on.
type whyOutput struct {
	*triage.Verdict
	// Pod shadows the verdict's, whose type has no JSON tags, so that -o json is lowerCamel
	// throughout.
	Pod podRef `json:"pod"`
	// Complete is true when the planner saw the whole cluster; false when the answer rests on
	// what the user may read (the pod, its namespace, what gpupool recorded).
	Complete bool `json:"complete"`
	// Scheduler is the scheduler's last word on a pending pod (its PodScheduled condition).
	Scheduler string `json:"scheduler,omitempty"`
	// Events are the Events gpupool's controllers wrote on the pod, oldest first.
	Events []podEvent `json:"events,omitempty"`
	// Demand is what the pools' controllers count for the pod's GPU resource (their status),
	// shown when the planner could not run here.
	Demand []poolDemand `json:"demand,omitempty"`
	// Unreadable lists what the user may not read, with the right that would show it.
	Unreadable []gap `json:"unreadable,omitempty"`
}

type podRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

type podEvent struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
	From    string `json:"from"`
	Count   int32  `json:"count,omitempty"`
}

type poolDemand struct {
	Policy string `json:"policy"`
	v1alpha1.ShapeDemand
}

// eventLimit is how many of gpupool's Events on the pod the answer carries, the newest.
const eventLimit = 5

// layerUnknown is the layer when what the user may read does not say it.
const layerUnknown triage.Layer = "Unknown"

// limitedVerdict answers for a user who may not read what the planner needs (nodes, pods of
// other namespaces, gpupool's objects): from the pod itself, the scheduler's condition on it,
// gpupool's Events on it, the plans and policy statuses they may read. gpupool's controllers see
// the whole cluster: their Events and status counts are the tenant's window on the planner.
func limitedVerdict(pod *corev1.Pod, v *visible, events []corev1.Event) (*whyOutput, error) {
	key := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	resources := gpuResources(pod)
	verdict := &triage.Verdict{Pod: key, Phase: pod.Status.Phase, Asks: asksText(pod, resources)}
	if verdict.Asks == "" {
		return nil, fmt.Errorf("pod %s asks for no NVIDIA GPU resource (nvidia.com/gpu, nvidia.com/mig-*), so gpupool has nothing to say about it", key)
	}
	out := &whyOutput{Verdict: verdict, Pod: podRef{Namespace: key.Namespace, Name: key.Name}, Scheduler: schedulerMessage(pod),
		Events: gpupoolEvents(events), Unreadable: v.gaps}
	if v.policiesVisible {
		out.Demand = demandFor(v.snap.Policies, resources)
		if len(out.Demand) > 0 && !slices.ContainsFunc(out.Demand, func(d poolDemand) bool { return d.Policy != out.Demand[0].Policy }) {
			verdict.Policy = out.Demand[0].Policy
		}
	}
	askFor := "ask for the rights listed under Not seen, or ask someone who has them to run: kubectl gpupool why " +
		key.Name + " -n " + key.Namespace
	switch {
	case pod.Spec.NodeName != "":
		// The running checks need only the pod and its node's GPUNode report.
		rv, err := triage.Explain(&snapshot.Snapshot{Pods: []corev1.Pod{*pod}, GPUNodes: v.snap.GPUNodes}, &snapshot.Report{}, nil, key)
		if err != nil {
			return nil, err
		}
		out.Verdict = rv
		return out, nil
	case servedBy(v.plans, key) != nil:
		verdict.Plan = servedBy(v.plans, key)
		verdict.Layer, verdict.Blocking = triage.LayerPartitionShape, strings.Join(resources, ", ")
		verdict.Reason = "plan " + verdict.Plan.Name + " re-carves MIG layouts to serve this pod"
		verdict.Next = planNext(verdict.Plan)
	case len(out.Events) > 0 && eventLayer(out.Events[len(out.Events)-1]) != "":
		last := out.Events[len(out.Events)-1]
		verdict.Layer, verdict.Reason = eventLayer(last), last.Message
		// The Event names the layer; the blocking dimension is the GPU shape for the layers
		// about GPUs, else in the Event's words.
		verdict.Blocking = "see Why"
		if verdict.Layer == triage.LayerPartitionShape || verdict.Layer == triage.LayerCapacity {
			verdict.Blocking = strings.Join(resources, ", ")
		}
		verdict.Next = "gpupool's controller, which sees the whole cluster, says so in its last Event on the pod; for the node matrix, " + askFor
	default:
		verdict.Layer, verdict.Blocking = layerUnknown, "what you may read"
		// The scheduler's message follows on its own line (Scheduler).
		verdict.Reason = "the planner needs what you may not read (see Not seen), and gpupool has written no Event on the pod that names the layer"
		verdict.Next = askFor
	}
	return out, nil
}

// gpuResources are the NVIDIA GPU resources the pod's containers ask for, sorted.
func gpuResources(pod *corev1.Pod) []string {
	var out []string
	for name := range demand.PodRequests(pod) {
		if _, _, ok := demand.Classify(name); ok {
			out = append(out, string(name))
		}
	}
	slices.Sort(out)
	return out
}

// asksText writes the pod's GPU requests as the triage does, e.g. "1 x nvidia.com/mig-3g.71gb".
func asksText(pod *corev1.Pod, resources []string) string {
	req := demand.PodRequests(pod)
	var out []string
	for _, r := range resources {
		out = append(out, fmt.Sprintf("%d x %s", demand.Quantity(req, corev1.ResourceName(r)), r))
	}
	if len(out) == 0 && len(pod.Spec.ResourceClaims) > 0 {
		return "devices through ResourceClaims (not resolved: the ResourceClaims and ResourceSlices are read only with the full view)"
	}
	return strings.Join(out, ", ")
}

func schedulerMessage(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return strings.TrimSpace(cmp.Or(c.Message, c.Reason))
		}
	}
	return ""
}

// gpupoolEvents keeps the Events gpupool's controllers wrote (their reporting controller or
// source is gpupool-*), oldest first, the newest eventLimit of them.
func gpupoolEvents(events []corev1.Event) []podEvent {
	var mine []corev1.Event
	for _, e := range events {
		from := cmp.Or(e.ReportingController, e.Source.Component)
		if strings.HasPrefix(from, "gpupool") {
			mine = append(mine, e)
		}
	}
	slices.SortStableFunc(mine, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	if len(mine) > eventLimit {
		mine = mine[len(mine)-eventLimit:]
	}
	out := make([]podEvent, 0, len(mine))
	for _, e := range mine {
		out = append(out, podEvent{Reason: e.Reason, Message: e.Message, From: cmp.Or(e.ReportingController, e.Source.Component), Count: max(e.Count, seriesCount(e))})
	}
	return out
}

// eventTime is when the Event last happened, whichever API wrote it: events.k8s.io/v1
// recorders fill eventTime (and a series), core/v1 ones lastTimestamp.
func eventTime(e corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// eventLayer is the layer gpupool's Event on a pod names (internal/pool/podnotes.go writes
// them: a plan serves the pod, or repartitioning cannot help with the planner's reason in
// parentheses), or "" when it names none.
func eventLayer(e podEvent) triage.Layer {
	switch e.Reason {
	case "GPUPoolPlanAwaitingApproval", "GPUPoolPlanRunning", "GPUPoolChangeRefused":
		return triage.LayerPartitionShape
	case "GPUPoolCannotHelp":
		_, rest, _ := strings.Cut(e.Message, "(")
		reason, _, _ := strings.Cut(rest, ")")
		return map[string]triage.Layer{string(planner.ReasonNodePlacement): triage.LayerPlacement,
			string(planner.ReasonPartitionShape): triage.LayerPartitionShape, string(planner.ReasonCapacity): triage.LayerCapacity,
			string(planner.ReasonDisruption): triage.LayerDisruptionBudget}[reason]
	}
	// An Event whose reason is a layer's name says it outright.
	if slices.Contains([]triage.Layer{triage.LayerNotInPool, triage.LayerPlacement, triage.LayerPartitionShape, triage.LayerCapacity,
		triage.LayerDisruptionBudget, triage.LayerScheduling, triage.LayerNotYetDemand}, triage.Layer(e.Reason)) {
		return triage.Layer(e.Reason)
	}
	return ""
}

// demandFor is each policy's status count of pending pods for the pod's resources.
func demandFor(policies []v1alpha1.GPUPoolPolicy, resources []string) []poolDemand {
	var out []poolDemand
	for _, p := range policies {
		for _, d := range p.Status.Demand {
			if slices.Contains(resources, d.Resource) {
				out = append(out, poolDemand{Policy: p.Name, ShapeDemand: d})
			}
		}
	}
	slices.SortFunc(out, func(a, b poolDemand) int {
		return cmp.Or(cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Resource, b.Resource))
	})
	return out
}

// servedBy is the live plan that names the pod among the pods it serves.
func servedBy(plans []v1alpha1.RepartitionPlan, key types.NamespacedName) *triage.PlanRef {
	for i := range plans {
		p := &plans[i]
		if p.Status.Phase.Finished() {
			continue
		}
		if slices.ContainsFunc(p.Spec.Expected.Pods, func(e v1alpha1.PodReference) bool { return e.Namespace == key.Namespace && e.Name == key.Name }) {
			return &triage.PlanRef{Name: p.Name, Phase: cmp.Or(p.Status.Phase, v1alpha1.PlanAwaitingApproval), Progress: p.Status.Progress, Hash: p.Spec.Hash}
		}
	}
	return nil
}

func planNext(p *triage.PlanRef) string {
	if p.Phase == v1alpha1.PlanAwaitingApproval {
		return fmt.Sprintf("plan %s serves it and waits for approval by someone allowed to approve plans (kubectl gpupool approve %s)", p.Name, p.Name)
	}
	return fmt.Sprintf("plan %s serves it and is %s (%s nodes done); the pod is scheduled once its node is uncordoned", p.Name, p.Phase, cmp.Or(p.Progress, "0"))
}

func seriesCount(e corev1.Event) int32 {
	if e.Series != nil {
		return e.Series.Count
	}
	return 0
}
