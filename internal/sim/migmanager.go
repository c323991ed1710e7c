package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Labels of mig-manager's protocol (NVIDIA/mig-parted cmd/nvidia-mig-manager/main.go
// MigConfigLabel, pkg/mig/reconfigure/reconfigure.go).
const (
	// LabelMIGConfig names the mig-parted entry mig-manager applies. The simulator spells
	// NVIDIA's names itself, never through gpupool's internal/nvidia; its tests use these.
	LabelMIGConfig = "nvidia.com/mig.config"
	// LabelMIGConfigState is where mig-manager reports its progress.
	LabelMIGConfigState = "nvidia.com/mig.config.state"
	// labelDeployPrefix starts the GPU Operator's per-operand deploy labels.
	labelDeployPrefix = "nvidia.com/gpu.deploy."
)

// States mig-manager writes into nvidia.com/mig.config.state.
const (
	statePending = "pending"
	stateSuccess = "success"
	stateFailed  = "failed"
)

// Event reasons the simulated mig-manager records on the Node.
const (
	reasonConfigInvalid = "MIGConfigInvalid"
	reasonInUse         = "MIGConfigInUse"
	reasonApplyFailed   = "MIGConfigApplyFailed"
	reasonInjected      = "MIGConfigInjectedFault"
	reasonApplied       = "MIGConfigApplied"
)

// migManager is mig-manager's part of a node's reconcile: it works on the latest recorded
// label change, if it has not finished it yet, in the order of NVIDIA/mig-parted
// pkg/mig/reconfigure/reconfigure.go Run: check that the config file is valid and holds the
// selected name (else state failed, nothing paused), report success at once when every GPU
// already is as the entry says, else set pending, pause the operands and apply.
//
// mig-manager reads the file mounted from the ClusterPolicy's spec.migManager.config.name in
// the operator's namespace. While that ConfigMap or its config.yaml is missing, the real
// mig-manager cannot start (its volume does not mount, or it exits on the missing
// CONFIG_FILE), so no state is written: the change waits, and is applied once the file is
// there.
func (r *reconciler) migManager(ctx context.Context, n *Node, node *corev1.Node, op operatorSettings, annotated Faults) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	mm := &n.migManager
	value, seq, begun, since, ok := mm.next()
	if !ok {
		return ctrl.Result{}, nil
	}
	if n.reboot != nil {
		return r.afterReboot(ctx, n, node, op, value, seq, annotated)
	}
	faults := n.peekFaults().merge(annotated)
	if !begun {
		log.Info("mig.config changed; applying", "config", value)
		specs, err := r.readEntry(ctx, op, value)
		var notRunning *migManagerNotRunning
		switch {
		case errors.As(err, &notRunning):
			log.Info("mig-manager cannot start; the change waits", "reason", notRunning.Error())
			return ctrl.Result{RequeueAfter: r.retryPeriod}, nil
		case err != nil:
			if err := r.fail(ctx, n, node, value, reasonConfigInvalid, "applying %s on node %s: %v", value, n.name, err); err != nil {
				return ctrl.Result{}, err
			}
			mm.finish(seq)
			return ctrl.Result{}, nil
		}
		gpus, err := n.GPUs()
		if err != nil {
			return ctrl.Result{}, err
		}
		if n.alreadyApplied(specs, gpus) {
			log.Info("selected MIG config is already applied", "config", value)
			if err := r.succeed(ctx, node, value, "already applied"); err != nil {
				return ctrl.Result{}, err
			}
			mm.finish(seq)
			return ctrl.Result{}, nil
		}
		set := map[string]*string{LabelMIGConfigState: ptrTo(statePending)}
		if faults.StuckPending {
			// The known wedge: operands paused, pausing never completes, state stays pending.
			maps.Copy(set, r.pauseLabels(n, node.Labels, faults))
		}
		if err := r.patchLabels(ctx, node, set); err != nil {
			return ctrl.Result{}, fmt.Errorf("setting state pending for %s on node %s: %w", value, n.name, err)
		}
		since = r.clock.Now()
		mm.begin(seq, since)
		if faults.StuckPending {
			log.Info("fault stuck-pending: leaving the node pending", "config", value)
			mm.finish(seq)
			return ctrl.Result{}, nil
		}
	}
	if wait := since.Add(faults.ApplyDelay).Sub(r.clock.Now()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	rebooting, err := r.apply(ctx, n, node, op, value, annotated)
	if err != nil {
		return ctrl.Result{}, err
	}
	if rebooting {
		return ctrl.Result{RequeueAfter: n.reboot.until.Sub(r.clock.Now())}, nil
	}
	mm.finish(seq)
	return ctrl.Result{}, nil
}

// fail restores the paused operands and reports state failed with a Warning saying why.
func (r *reconciler) fail(ctx context.Context, n *Node, node *corev1.Node, value, reason, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	logf.FromContext(ctx).Info("MIG reconfiguration failed", "config", value, "reason", reason, "message", msg)
	r.recorder.Eventf(node, nil, corev1.EventTypeWarning, reason, "Reconfigure", "%s", msg)
	set := restoreLabels(node.Labels)
	set[LabelMIGConfigState] = ptrTo(stateFailed)
	if err := r.patchLabels(ctx, node, set); err != nil {
		return fmt.Errorf("setting state failed for %s on node %s: %w", value, n.name, err)
	}
	return nil
}

// apply applies the entry named value and ends in state success or failed, or, under the
// reboot fault, in state rebooting with the host going down (rebooting true: the change is not
// finished, afterReboot finishes it). It returns an error only when the API server could not be
// told the outcome; the reconcile then retries, which is safe because applying an entry that
// is already in place changes nothing.
func (r *reconciler) apply(ctx context.Context, n *Node, node *corev1.Node, op operatorSettings, value string,
	annotated Faults) (rebooting bool, err error) {
	log := logf.FromContext(ctx).WithValues("config", value)
	fail := func(reason, format string, args ...any) error {
		return r.fail(ctx, n, node, value, reason, format, args...)
	}

	// mig-parted apply reads the file again.
	specs, err := r.readEntry(ctx, op, value)
	if err != nil {
		return false, fail(reasonConfigInvalid, "applying %s on node %s: %v", value, n.name, err)
	}
	targets, err := n.resolveEntry(specs)
	if err != nil {
		return false, fail(reasonApplyFailed, "applying %s on node %s: %v", value, n.name, err)
	}
	faults := n.takeFaults().merge(annotated)
	if faults.FailNext || faults.FailAlways {
		word := FaultFailAlways
		if faults.FailNext {
			word = FaultFailNext
			if err := r.consumeFault(ctx, node, annotated.FailNext, FaultFailNext); err != nil {
				return false, err
			}
		}
		return false, fail(reasonInjected, "applying %s on node %s: injected fault %s", value, n.name, word)
	}

	gpus, err := n.GPUs()
	if err != nil {
		return false, fail(reasonApplyFailed, "applying %s: %v", value, err)
	}
	changed := map[int]gpuTarget{}
	for i, t := range targets {
		if !t.equal(gpus[i]) {
			changed[i] = t
		}
	}
	if len(changed) == 0 {
		log.Info("MIG configuration already in place")
		return false, r.succeed(ctx, node, value, "already in place")
	}
	if faults.WrongLayout {
		dropOneInstance(log, changed)
	}

	// mig-parted stops the GPU clients before it touches a GPU.
	if err := r.patchLabels(ctx, node, r.pauseLabels(n, node.Labels, faults)); err != nil {
		return false, fmt.Errorf("pausing GPU operands on node %s: %w", n.name, err)
	}

	n.mu.Lock()
	// Assign devices to every pod bound so far, so that a pod the cache has already seen
	// cannot slip onto a GPU between this check and the destroy.
	if _, err := r.syncLocked(ctx, n); err != nil {
		n.mu.Unlock()
		return false, fmt.Errorf("assigning devices on node %s: %w", n.name, err)
	}
	if busy := n.podsOnGPUsLocked(keysOf(changed)); len(busy) > 0 {
		n.mu.Unlock()
		return false, fail(reasonInUse, "applying %s on node %s: GPUs %v are in use by pods %s: a GPU whose layout changes must be idle",
			value, n.name, slices.Sorted(maps.Keys(changed)), podList(busy))
	}
	if faults.Reboot {
		n.mu.Unlock()
		return true, r.rebootHost(ctx, n, node, value, faults, annotated.Reboot)
	}
	applyErr := n.applyLocked(log, gpus, changed)
	n.mu.Unlock()
	if applyErr != nil {
		return false, fail(reasonApplyFailed, "applying %s on node %s: %v", value, n.name, applyErr)
	}
	return false, r.succeed(ctx, node, value, fmt.Sprintf("GPUs %v reconfigured", slices.Sorted(maps.Keys(changed))))
}

// applyLocked rebuilds the changed GPUs and makes NVML's process list follow. n.mu must be held.
func (n *Node) applyLocked(log logr.Logger, gpus []GPUState, changed map[int]gpuTarget) error {
	var applyErr error
	for _, i := range slices.Sorted(maps.Keys(changed)) {
		log.Info("reconfiguring GPU", "gpu", i, "from", describe(gpus[i]), "to", changed[i].String())
		if applyErr = n.applyGPU(i, changed[i]); applyErr != nil {
			break
		}
	}
	if after, err := n.GPUs(); err == nil {
		n.setProcessesLocked(after)
	}
	return applyErr
}

// consumeFault removes word from the node's fault annotation when the annotation set it.
func (r *reconciler) consumeFault(ctx context.Context, node *corev1.Node, annotated bool, word string) error {
	if !annotated {
		return nil
	}
	rest := withoutFault(node.Annotations[AnnotationFault], word)
	var v *string
	if rest != "" {
		v = &rest
	}
	if err := r.patch(ctx, node, map[string]any{"metadata": map[string]any{"annotations": map[string]*string{AnnotationFault: v}}}); err != nil {
		return fmt.Errorf("consuming fault %s on node %s: %w", word, node.Name, err)
	}
	return nil
}

// succeed restores the paused operands and reports success.
func (r *reconciler) succeed(ctx context.Context, node *corev1.Node, value, what string) error {
	set := restoreLabels(node.Labels)
	set[LabelMIGConfigState] = ptrTo(stateSuccess)
	if err := r.patchLabels(ctx, node, set); err != nil {
		return fmt.Errorf("setting state success for %s on node %s: %w", value, node.Name, err)
	}
	logf.FromContext(ctx).Info("MIG reconfiguration succeeded", "config", value, "detail", what)
	r.recorder.Eventf(node, nil, corev1.EventTypeNormal, reasonApplied, "Reconfigure", "applied %s: %s", value, what)
	return nil
}

// dropOneInstance is the wrong-layout fault: one instance fewer than asked on the first
// changed GPU that gets any.
func dropOneInstance(log logr.Logger, changed map[int]gpuTarget) {
	for _, i := range slices.Sorted(maps.Keys(changed)) {
		t := changed[i]
		if !t.MIGEnabled || t.Layout.Total() == 0 {
			continue
		}
		names := t.Layout.Names()
		victim := names[len(names)-1] // the smallest profile
		l := t.Layout.Clone()
		if l[victim]--; l[victim] == 0 {
			delete(l, victim)
		}
		changed[i] = gpuTarget{MIGEnabled: true, Layout: l}
		log.Info("fault wrong-layout: creating one instance fewer than asked", "gpu", i, "dropped", victim)
		return
	}
}

func keysOf(m map[int]gpuTarget) map[int]bool {
	out := make(map[int]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

func podList(pods []types.NamespacedName) string {
	s := make([]string, len(pods))
	for i, p := range pods {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

func describe(g GPUState) string {
	return gpuTarget{MIGEnabled: g.MIGEnabled, Layout: g.Layout()}.String()
}
