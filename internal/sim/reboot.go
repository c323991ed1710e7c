package sim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpupool/gpupool/api/v1alpha1"
)

// stateRebooting is the state mig-manager writes before it reboots the host for a MIG mode
// change (NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go Run).
const stateRebooting = "rebooting"

// reasonRebooting is the Event reason when the simulated mig-manager reboots the host.
const reasonRebooting = "MIGConfigRebooting"

// Waits of the reboot fault.
const (
	// agentStopTimeout bounds the wait for the agent to stop before the host goes down.
	agentStopTimeout = 30 * time.Second
	// maxAgentWaitAfterBoot bounds how long mig-manager, after the boot, waits for the agent's
	// first report before it reports success anyway.
	maxAgentWaitAfterBoot = 30 * time.Second
	// bootLook is how often it looks for that report.
	bootLook = 250 * time.Millisecond
)

// rebootState is a host reboot under way, for the change seq of mig-manager's memory.
type rebootState struct {
	// until is when the host is up again; booted is when it came up (zero until then).
	until, booted time.Time
}

// rebootHost is the reboot fault firing in apply, once the GPUs to change are known to be
// idle and before any is touched: the MIG mode change "does not take effect" without a reboot,
// so mig-manager sets state rebooting and reboots the host (reconfigure.go Run, WithReboot),
// leaving the operands paused (it returns before setState restores them). The host goes down
// as the state is written: the agent is stopped first, so no report is stamped after it.
func (r *reconciler) rebootHost(ctx context.Context, n *Node, node *corev1.Node, value string, faults Faults, annotated bool) error {
	log := logf.FromContext(ctx).WithValues("config", value)
	down := faults.rebootDuration()
	n.agentState.set(agentDownReboot, true)
	if r.agents && !n.agentState.waitStopped(ctx, agentStopTimeout) {
		log.Info("the node's agent did not stop before the reboot", "timeout", agentStopTimeout)
	}
	if err := r.patchLabels(ctx, node, map[string]*string{LabelMIGConfigState: ptrTo(stateRebooting)}); err != nil {
		n.agentState.set(agentDownReboot, false)
		return fmt.Errorf("setting state rebooting for %s on node %s: %w", value, n.name, err)
	}
	n.reboot = &rebootState{until: r.clock.Now().Add(down)}
	n.takeReboot()
	log.Info("fault reboot: the MIG mode change needs a reboot; rebooting the host", "down", down)
	r.recorder.Eventf(node, nil, corev1.EventTypeNormal, reasonRebooting, "Reconfigure",
		"applying %s on node %s needs a MIG mode change that takes effect only after a reboot: rebooting the host (down for %s)",
		value, n.name, down)
	return r.consumeFault(ctx, node, annotated, FaultReboot)
}

// afterReboot is mig-manager's part of a node's reconcile while a reboot is under way. Until
// the host is up it only waits. At boot mig-manager starts again, finds state rebooting and
// runs its reconfiguration from the start (reconfigure.go Run: the MIG mode now holds, so
// checkMigModeChangeRequired passes): state pending, the GPUs get the selected entry's layout,
// and the agent starts again. Success is reported once the agent has published a report since
// the boot (at most maxAgentWaitAfterBoot, and not waited for while the agent-down fault holds
// the agent), so the report gpupool judges the new layout by is the first thing after the
// reboot; the operands paused before the reboot are restored with it.
func (r *reconciler) afterReboot(ctx context.Context, n *Node, node *corev1.Node, op operatorSettings, value string, seq uint64,
	annotated Faults) (ctrl.Result, error) {
	log := logf.FromContext(ctx).WithValues("config", value)
	rb := n.reboot
	now := r.clock.Now()
	faults := n.peekFaults().merge(annotated)
	if rb.booted.IsZero() {
		if wait := rb.until.Sub(now); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		log.Info("the host is up again after the reboot; mig-manager applies the selected config")
		rb.booted = now
		n.agentState.set(agentDownReboot, false)
		if err := r.patchLabels(ctx, node, map[string]*string{LabelMIGConfigState: ptrTo(statePending)}); err != nil {
			return ctrl.Result{}, fmt.Errorf("setting state pending for %s on node %s after the reboot: %w", value, n.name, err)
		}
		failed, err := r.bootApply(ctx, n, node, op, value, faults)
		if err != nil {
			return ctrl.Result{}, err
		}
		if failed {
			n.reboot = nil
			n.migManager.finish(seq)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{RequeueAfter: bootLook}, nil
	}
	if r.agents && !faults.AgentDown && now.Before(rb.booted.Add(maxAgentWaitAfterBoot)) {
		reported, err := r.reportedSince(ctx, n.name, rb.booted)
		if err != nil {
			log.Info("cannot read the node's GPUNode; waiting for the agent", "error", err.Error())
		}
		if !reported {
			return ctrl.Result{RequeueAfter: bootLook}, nil
		}
	}
	if err := r.succeed(ctx, node, value, "GPUs reconfigured after a reboot"); err != nil {
		return ctrl.Result{}, err
	}
	n.reboot = nil
	n.migManager.finish(seq)
	return ctrl.Result{}, nil
}

// bootApply gives the GPUs the layout of the entry named value after the reboot. A failure is
// reported as state failed (failed true); the error is only for the API server not being told.
func (r *reconciler) bootApply(ctx context.Context, n *Node, node *corev1.Node, op operatorSettings, value string,
	faults Faults) (failed bool, err error) {
	log := logf.FromContext(ctx).WithValues("config", value)
	fail := func(reason, format string, args ...any) (bool, error) {
		return true, r.fail(ctx, n, node, value, reason, format, args...)
	}
	specs, err := r.readEntry(ctx, op, value)
	if err != nil {
		return fail(reasonConfigInvalid, "applying %s on node %s after the reboot: %v", value, n.name, err)
	}
	targets, err := n.resolveEntry(specs)
	if err != nil {
		return fail(reasonApplyFailed, "applying %s on node %s after the reboot: %v", value, n.name, err)
	}
	n.mu.Lock()
	gpus, err := n.GPUs()
	if err != nil {
		n.mu.Unlock()
		return fail(reasonApplyFailed, "applying %s after the reboot: %v", value, err)
	}
	changed := map[int]gpuTarget{}
	for i, t := range targets {
		if !t.equal(gpus[i]) {
			changed[i] = t
		}
	}
	if faults.WrongLayout {
		dropOneInstance(log, changed)
	}
	applyErr := n.applyLocked(log, gpus, changed)
	n.mu.Unlock()
	if applyErr != nil {
		return fail(reasonApplyFailed, "applying %s on node %s after the reboot: %v", value, n.name, applyErr)
	}
	log.Info("GPUs reconfigured after the reboot", "gpus", slices.Sorted(maps.Keys(changed)))
	return false, nil
}

// reportedSince says whether the node's GPUNode carries a report the agent read at or after
// since (status.observedTime has whole seconds; a reboot lasts longer than one).
func (r *reconciler) reportedSince(ctx context.Context, name string, since time.Time) (bool, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("GPUNode"))
	if err := r.apiReader.Get(ctx, types.NamespacedName{Name: name}, u); err != nil {
		return false, err
	}
	v, found, err := unstructured.NestedString(u.Object, "status", "observedTime")
	if err != nil || !found {
		return false, err
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return false, fmt.Errorf("GPUNode %s status.observedTime %q: %w", name, v, err)
	}
	return !t.Before(since.Truncate(time.Second)), nil
}
