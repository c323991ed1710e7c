package controllers

// The policy's status, conditions and metrics, written from what a pass saw and decided; and
// the status of a policy no pass can use.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/metrics"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/planner"
	"github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/rollout"
)

// report writes the policy's status and metrics from what the pass saw and decided.
func (r *PolicyReconciler) report(ctx context.Context, pass *pool.Pass, cluster *pool.Cluster, current *v1alpha1.RepartitionPlan,
	res *planner.Result, problems []pool.Problem) error {
	policy := pass.Policy
	status := poolStatus(policy, pass.Selector, pass.Snapshot, pass.Pending, res)
	status.CurrentPlan = ""
	if current != nil {
		status.CurrentPlan = current.Name
	}
	// A copy: SetStatusCondition edits in place, and the old status is compared below.
	status.Conditions = slices.Clone(policy.Status.Conditions)
	nodes := poolNodes(pass.Snapshot, pass.Selector)
	r.setConditions(ctx, policy, &status, cluster, pass.Conflicts, current, res, pass.Pending,
		pool.Unreported(nodes), pool.MIGTablesMatch(nodes), pool.DRASlicesCurrent(nodes))
	setSpecCondition(policy, &status, problems)
	// Last: Ready sums up the conditions above.
	ready := pool.Ready(status.Pool.Nodes, policy.Spec.Planning.Paused, status.Conditions)
	setCondition(policy, &status, v1alpha1.ConditionReady, ready)
	if err := r.writeStatus(ctx, policy, status); err != nil {
		return err
	}
	if err := r.reportDRASlices(ctx, nodes, cluster.GPUNodes); err != nil {
		return err
	}
	r.Metrics.ObservePolicy(policy.Name, observation(policy, status, pass.Pending, res))
	return nil
}

// setCondition sets one condition decided in internal/pool.
func setCondition(policy *v1alpha1.GPUPoolPolicy, status *v1alpha1.GPUPoolPolicyStatus, kind string, c pool.Condition) {
	s := metav1.ConditionFalse
	if c.True {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: kind, Status: s, Reason: c.Reason,
		Message: c.Message, ObservedGeneration: policy.Generation})
}

func setSpecCondition(policy *v1alpha1.GPUPoolPolicy, status *v1alpha1.GPUPoolPolicyStatus, problems []pool.Problem) {
	cond := metav1.Condition{Type: v1alpha1.ConditionSpecValid, Status: metav1.ConditionTrue, Reason: "Valid",
		Message: "every part of the spec is usable", ObservedGeneration: policy.Generation}
	if len(problems) > 0 {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, reasonIneffectiveSpec, pool.Message(problems, 5)
	}
	meta.SetStatusCondition(&status.Conditions, cond)
}

// reportUnusable writes the status of a policy the controller cannot plan for: Ready=False
// (and SpecValid=False for a spec problem) with what to fix. The rest of the status is kept
// as last observed.
func (r *PolicyReconciler) reportUnusable(ctx context.Context, policy *v1alpha1.GPUPoolPolicy, reason, msg string) error {
	status := *policy.Status.DeepCopy()
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: reason, Message: msg, ObservedGeneration: policy.Generation})
	if reason == reasonInvalidSpec {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionSpecValid, Status: metav1.ConditionFalse,
			Reason: reason, Message: msg, ObservedGeneration: policy.Generation})
	}
	if !meta.IsStatusConditionFalse(policy.Status.Conditions, v1alpha1.ConditionReady) ||
		meta.FindStatusCondition(policy.Status.Conditions, v1alpha1.ConditionReady).Message != msg {
		r.Recorder.Eventf(policy, nil, corev1.EventTypeWarning, reason, "Plan", "%s", msg)
	}
	if err := r.writeStatus(ctx, policy, status); err != nil {
		return err
	}
	// A policy no pass can use is the one an alert must see not Ready.
	r.Metrics.ObserveConditions(policy.Name, status.Conditions)
	return nil
}

// reportUndecodable writes Ready=False on a stored policy that the manager cannot decode,
// through a merge patch of the raw object's status, so that the other policies and the plan
// and cordon controllers carry on.
func (r *PolicyReconciler) reportUndecodable(ctx context.Context, bad *undecodable) error {
	u := bad.object
	var conditions []metav1.Condition
	if raw, ok, _ := unstructured.NestedSlice(u.Object, "status", "conditions"); ok {
		for _, c := range raw {
			var cond metav1.Condition
			if m, ok := c.(map[string]any); ok && runtime.DefaultUnstructuredConverter.FromUnstructured(m, &cond) == nil {
				conditions = append(conditions, cond)
			}
		}
	}
	msg := bad.err.Error() + ": fix the field with kubectl edit gpupoolpolicy " + u.GetName() +
		" (the API server's rules now refuse such a value)"
	before := meta.FindStatusCondition(conditions, v1alpha1.ConditionReady)
	if before != nil && before.Reason == reasonUndecodable && before.Message == msg && before.ObservedGeneration == u.GetGeneration() {
		r.Metrics.ObserveConditions(u.GetName(), conditions)
		return nil
	}
	cond := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reasonUndecodable,
		Message: msg, ObservedGeneration: u.GetGeneration()}
	meta.SetStatusCondition(&conditions, cond)
	logf.FromContext(ctx).Info("policy cannot be decoded; it is left alone", "policy", u.GetName(), "error", bad.err.Error())
	r.Recorder.Eventf(u, nil, corev1.EventTypeWarning, reasonUndecodable, "Decode", "%s", msg)
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": conditions}})
	if err != nil {
		return fmt.Errorf("encoding the status of policy %s: %w", u.GetName(), err)
	}
	if err := r.Client.Status().Patch(ctx, u, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("writing the status of undecodable policy %s: %w", u.GetName(), err)
	}
	r.Metrics.ObserveConditions(u.GetName(), conditions)
	return nil
}

func (r *PolicyReconciler) writeStatus(ctx context.Context, policy *v1alpha1.GPUPoolPolicy, status v1alpha1.GPUPoolPolicyStatus) error {
	status.ObservedGeneration = policy.Generation
	if equality.Semantic.DeepEqual(policy.Status, status) {
		return nil
	}
	// An update, not a merge patch: a merge patch computed from the cached copy omits fields
	// whose value is zero on both sides, so a count of 0 would never reach the server.
	policy.Status = status
	if err := r.Client.Status().Update(ctx, policy); err != nil {
		if apierrors.IsNotFound(err) {
			// Deleted while the pass ran: an expected race, not an error.
			logf.FromContext(ctx).V(1).Info("policy deleted before its status was written", "policy", policy.Name)
			return nil
		}
		return fmt.Errorf("writing status of policy %s: %w", policy.Name, err)
	}
	return nil
}

// setConditions sets every condition of the policy from what this pass saw; each is decided
// by its own function in internal/pool.
func (r *PolicyReconciler) setConditions(ctx context.Context, policy *v1alpha1.GPUPoolPolicy, status *v1alpha1.GPUPoolPolicyStatus,
	cluster *pool.Cluster, conflicts map[string]string, current *v1alpha1.RepartitionPlan, res *planner.Result, pending []demand.Request,
	unreported string, tables, draSlices pool.Condition) {
	set := func(t string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason,
			Message: msg, ObservedGeneration: policy.Generation})
	}
	phase := v1alpha1.PlanPhase("")
	if current != nil {
		phase = rollout.Gate(current, policy, r.Clock.Now()).Phase
	}
	for _, c := range []struct {
		kind string
		pool.Condition
	}{
		{v1alpha1.ConditionPaused, pool.Paused(policy.Spec.Planning.Paused)},
		{v1alpha1.ConditionConflict, pool.Conflict(conflicts)},
		{v1alpha1.ConditionDemandSatisfied, pool.DemandSatisfied(pending, res, current)},
		{v1alpha1.ConditionAwaitingApproval, pool.AwaitingApproval(current, phase)},
		{v1alpha1.ConditionReconfiguring, pool.Reconfiguring(current, phase)},
		{v1alpha1.ConditionDegraded, pool.Degraded(unreported, pool.LastFailedPlan(policy, cluster.Plans))},
		{v1alpha1.ConditionMIGTablesMatch, tables},
		{v1alpha1.ConditionDRASlicesCurrent, draSlices},
	} {
		set(c.kind, c.True, c.Reason, c.Message)
	}
	r.setOperatorCondition(ctx, set)
}

// setOperatorCondition checks that NVIDIA's ClusterPolicy points mig-manager and the device
// plugin at gpupool's ConfigMaps, and says exactly what to set when it does not.
func (r *PolicyReconciler) setOperatorCondition(ctx context.Context, set func(string, bool, string, string)) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(nvidia.ClusterPolicyGVK.GroupVersion().WithKind(nvidia.ClusterPolicyGVK.Kind + "List"))
	err := r.Client.List(ctx, list)
	switch {
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		set(v1alpha1.ConditionGPUOperatorConfigured, false, "GPUOperatorNotFound",
			"the ClusterPolicy CRD of NVIDIA's GPU Operator is not installed; plans are proposed but mig-manager will not apply them")
		return
	case err != nil:
		set(v1alpha1.ConditionGPUOperatorConfigured, false, "ClusterPolicyUnreadable", err.Error())
		return
	case len(list.Items) == 0:
		set(v1alpha1.ConditionGPUOperatorConfigured, false, "NoClusterPolicy", "no ClusterPolicy object exists")
		return
	}
	// Read, not written: OperatorConfigReconciler writes them, and one it cannot create is
	// missing here.
	switch missing, err := operatorConfigMapsMissing(ctx, r.Client, r.ConfigNamespace); {
	case err != nil:
		set(v1alpha1.ConditionGPUOperatorConfigured, false, "ConfigMapsNotWritten", fmt.Sprintf(
			"gpupool cannot read the ConfigMaps the GPU Operator mounts into mig-manager and the device plugin: %v; "+
				"check the manager's ConfigMap Role in %s", err, r.ConfigNamespace))
		return
	case len(missing) > 0:
		set(v1alpha1.ConditionGPUOperatorConfigured, false, "ConfigMapsNotWritten", fmt.Sprintf(
			"gpupool has not created the ConfigMaps the GPU Operator mounts into mig-manager and the device plugin (%s in %s); "+
				"until they exist those pods cannot start where the ClusterPolicy names them: the manager's log says why "+
				"(look for ConfigMap %s), most often its ConfigMap Role in %s",
			strings.Join(missing, ", "), r.ConfigNamespace, missing[0], r.ConfigNamespace))
		return
	}
	active := nvidia.ActiveClusterPolicy(list.Items)
	problems := nvidia.CheckClusterPolicy(active, r.ConfigNamespace, MIGPartedConfigMap, DevicePluginConfigMap)
	if len(problems) > 0 {
		set(v1alpha1.ConditionGPUOperatorConfigured, false, "ClusterPolicyMisconfigured", nvidia.ProblemsMessage(problems))
		return
	}
	set(v1alpha1.ConditionGPUOperatorConfigured, true, "Configured", "ClusterPolicy "+active.GetName()+
		" uses gpupool's config maps, which gpupool writes into the operator's namespace "+r.ConfigNamespace)
}

// observation is what the metrics record of one pass over a pool.
func observation(policy *v1alpha1.GPUPoolPolicy, status v1alpha1.GPUPoolPolicyStatus, pending []demand.Request,
	res *planner.Result) metrics.PolicyObservation {
	obs := metrics.PolicyObservation{Status: status, Unserved: map[metrics.ShapeReason]int{},
		DrainTimeout:     pool.DurationOr(policy.Spec.Disruption.DrainTimeout, rollout.DefaultDrainTimeout),
		ConfigureTimeout: pool.DurationOr(policy.Spec.Disruption.ConfigureTimeout, rollout.DefaultConfigureTimeout)}
	for k, n := range pool.UnservedByShape(pending, res) {
		obs.Unserved[metrics.ShapeReason{Shape: k.Shape, Reason: string(k.Reason)}] = n
	}
	return obs
}
