package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpupool/gpupool/internal/mig"
)

// Labels of mig-manager's protocol (NVIDIA/mig-parted cmd/nvidia-mig-manager/main.go
// MigConfigLabel, pkg/mig/reconfigure/reconfigure.go).
const (
	labelMIGConfig      = "nvidia.com/mig.config"
	labelMIGConfigState = "nvidia.com/mig.config.state"
	// labelDeployPrefix starts the GPU Operator's per-operand deploy labels.
	labelDeployPrefix = "nvidia.com/gpu.deploy."
)

// States mig-manager writes into nvidia.com/mig.config.state.
const (
	statePending = "pending"
	stateSuccess = "success"
	stateFailed  = "failed"
)

// Operand deploy labels mig-manager pauses while it changes MIG settings
// (reconfigure.go shutdownKubernetesGPUClients: device plugin, GPU Feature Discovery, DCGM
// exporter, DCGM, NVSM, and since mig-parted v0.15.0, commit 4224297a, "client": any
// third-party DaemonSet that selects nvidia.com/gpu.deploy.client=true, such as NVIDIA's DRA
// kubelet plugin where it is deployed so). An operand is paused only when its label is set and
// not "false" (maybeSetPaused); restoring writes "true".
var pausableOperands = []string{
	labelDeployPrefix + "device-plugin",
	labelDeployPrefix + "gpu-feature-discovery",
	labelDeployPrefix + "dcgm-exporter",
	labelDeployPrefix + "dcgm",
	labelDeployPrefix + "nvsm",
	labelDeployClient,
}

// labelDeployClient is the GPU Operator's label for third-party GPU clients (mig-parted
// pkg/mig/reconfigure/reconfigure.go gpuClientDeployLabel).
const labelDeployClient = labelDeployPrefix + "client"

// pausedValue is the deploy label value of a paused operand (reconfigure.go maybeSetPaused).
const pausedValue = "paused-for-mig-change"

// labelDevicePluginDeploy is the device plugin's deploy label; the simulated device plugin
// does not update the node while it is paused.
const labelDevicePluginDeploy = labelDeployPrefix + "device-plugin"

// Event reasons the simulated mig-manager records on the Node.
const (
	reasonConfigInvalid = "MIGConfigInvalid"
	reasonInUse         = "MIGConfigInUse"
	reasonApplyFailed   = "MIGConfigApplyFailed"
	reasonInjected      = "MIGConfigInjectedFault"
	reasonApplied       = "MIGConfigApplied"
)

// migManagerMemory is what mig-manager remembers about a node. The real one learns of label
// changes from an informer whose update handler compares the old and new value of
// nvidia.com/mig.config and queues the new one when it differs and is not empty; every such
// change is applied, even a value applied before (that is how unset+set retries). The
// simulator does the same: labelChanged records each change as it is delivered, so two quick
// changes are not lost when the reconciles they trigger coalesce.
type migManagerMemory struct {
	mu sync.Mutex
	// current is the label value last seen by the event handler.
	current string
	// requested is the latest non-empty value a change asked for, and seq counts such changes.
	requested string
	seq       uint64
	// handled is the seq whose apply has finished (success, failed or stuck).
	handled uint64
	// applying is the seq being applied while the state is pending (0 when idle), and since is
	// when it started; an apply delay counts from it.
	applying uint64
	since    time.Time
	// restart is the last AnnotationRestartMIGManager value seen.
	restart string
}

// labelChanged records the node's nvidia.com/mig.config value as an informer event delivers it,
// and reports whether it is a change mig-manager acts on.
func (m *migManagerMemory) labelChanged(value string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if value == m.current {
		return false
	}
	m.current = value
	if value == "" {
		return false
	}
	m.requested = value
	m.seq++
	return true
}

// restarted records the node's AnnotationRestartMIGManager value as an event delivers it, and
// reports whether it restarts mig-manager: a new non-empty value does, and the restarted
// mig-manager applies the label's current value again, as a new pod does at start.
func (m *migManagerMemory) restarted(value string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if value == m.restart {
		return false
	}
	m.restart = value
	if value == "" || m.current == "" {
		return false
	}
	m.requested = m.current
	m.seq++
	return true
}

// next returns the change to work on: its value and seq, and whether it was already begun.
func (m *migManagerMemory) next() (value string, seq uint64, begun bool, since time.Time, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seq == m.handled {
		return "", 0, false, time.Time{}, false
	}
	return m.requested, m.seq, m.applying == m.seq, m.since, true
}

func (m *migManagerMemory) begin(seq uint64, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applying, m.since = seq, now
}

func (m *migManagerMemory) finish(seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.handled, m.applying = seq, 0
}

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
		set := map[string]*string{labelMIGConfigState: ptrTo(statePending)}
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
	set[labelMIGConfigState] = ptrTo(stateFailed)
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
	set[labelMIGConfigState] = ptrTo(stateSuccess)
	if err := r.patchLabels(ctx, node, set); err != nil {
		return fmt.Errorf("setting state success for %s on node %s: %w", value, node.Name, err)
	}
	logf.FromContext(ctx).Info("MIG reconfiguration succeeded", "config", value, "detail", what)
	r.recorder.Eventf(node, nil, corev1.EventTypeNormal, reasonApplied, "Reconfigure", "applied %s: %s", value, what)
	return nil
}

// migManagerNotRunning is a mig-parted ConfigMap the real mig-manager cannot start with: none
// named in the ClusterPolicy, the ConfigMap missing, or no config.yaml in it.
type migManagerNotRunning struct{ err error }

func (e *migManagerNotRunning) Error() string { return e.err.Error() }

// readEntry reads the mig-parted config file, fresh from the API server (the real mig-manager
// reads the mounted file each time it runs mig-parted), decodes it as mig-parted does and
// selects the entry named value. A *migManagerNotRunning error means there is no file to read;
// any other error is a file mig-parted refuses, or a name it does not hold.
func (r *reconciler) readEntry(ctx context.Context, op operatorSettings, value string) ([]migConfigSpec, error) {
	if op.MIGConfigMap == "" {
		return nil, &migManagerNotRunning{fmt.Errorf("ClusterPolicy %s sets no spec.migManager.config.name, and the simulator has no generated config", op.Policy)}
	}
	key := op.migConfigMap()
	var cm corev1.ConfigMap
	if err := r.apiReader.Get(ctx, key, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &migManagerNotRunning{fmt.Errorf("ConfigMap %s does not exist: mig-manager's pod cannot mount it", key)}
		}
		return nil, fmt.Errorf("reading ConfigMap %s: %w", key, err)
	}
	data, ok := cm.Data[migPartedConfigKey]
	if !ok {
		return nil, &migManagerNotRunning{fmt.Errorf("ConfigMap %s has no key %s: mig-manager finds no config file", key, migPartedConfigKey)}
	}
	f, err := decodeMIGParted([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("error parsing config file %s of ConfigMap %s: %w", migPartedConfigKey, key, err)
	}
	specs, err := f.selectMIGConfig(value)
	if err != nil {
		return nil, fmt.Errorf("error selecting MIG config from ConfigMap %s: %w", key, err)
	}
	return specs, nil
}

// matchingSpecs returns, per GPU index, the specs that select it, in file order, as
// mig-parted's WalkSelectedMigConfigForEachGPU visits them.
func (n *Node) matchingSpecs(specs []migConfigSpec) map[int][]migConfigSpec {
	out := map[int][]migConfigSpec{}
	hw := n.migDeviceID()
	for _, s := range specs {
		if !s.matchesDeviceFilter(hw) {
			continue
		}
		for i := range n.gpus {
			if s.matchesDevice(i) {
				out[i] = append(out[i], s)
			}
		}
	}
	return out
}

// alreadyApplied is mig-parted's assert of the selected entry against the GPUs: every GPU must
// be selected, and the last spec that selects it must hold: the same MIG mode and, with MIG
// on, the same profile counts.
func (n *Node) alreadyApplied(specs []migConfigSpec, gpus []GPUState) bool {
	matched := n.matchingSpecs(specs)
	for i := range n.gpus {
		if len(matched[i]) == 0 {
			return false
		}
		s := matched[i][len(matched[i])-1]
		if s.MIGEnabled != gpus[i].MIGEnabled {
			return false
		}
		if s.MIGEnabled && !maps.Equal(map[string]int(gpus[i].Layout()), s.MIGDevices) {
			return false
		}
	}
	return true
}

// resolveEntry turns an entry's specs into a target per selected GPU; a later spec overrides
// an earlier one for the same GPU, as mig-parted applies them in order. GPUs no spec selects
// are absent: mig-parted leaves them alone (an index the node does not have selects nothing).
// The whole entry is checked (profiles exist and fit) before anything changes. Counts of 0
// create nothing.
func (n *Node) resolveEntry(specs []migConfigSpec) (map[int]gpuTarget, error) {
	targets := map[int]gpuTarget{}
	for i, list := range n.matchingSpecs(specs) {
		s := list[len(list)-1]
		t := gpuTarget{MIGEnabled: s.MIGEnabled, Layout: mig.Layout{}}
		for p, c := range s.MIGDevices {
			if c > 0 {
				t.Layout[p] = c
			}
		}
		if s.MIGEnabled {
			if _, err := ChooseSlots(n.slotProfiles(i), t.Layout); err != nil {
				return nil, fmt.Errorf("GPU %d (%s): %w", i, n.model.Name, err)
			}
		}
		targets[i] = t
	}
	return targets, nil
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

// pauseLabels are the label changes that pause every deployed operand. Pausing the device
// plugin under the plugin-silent fault arms it: the plugin comes back silent.
func (r *reconciler) pauseLabels(n *Node, labels map[string]string, faults Faults) map[string]*string {
	if faults.PluginSilent && labels[labelDevicePluginDeploy] != "" {
		n.pluginSilent = true
	}
	out := map[string]*string{}
	for _, k := range pausableOperands {
		if v := labels[k]; v != "" && v != "false" && v != pausedValue {
			out[k] = ptrTo(pausedValue)
		}
	}
	return out
}

// restoreLabels are the label changes that bring back every paused operand.
func restoreLabels(labels map[string]string) map[string]*string {
	out := map[string]*string{}
	for _, k := range pausableOperands {
		if labels[k] == pausedValue {
			out[k] = ptrTo("true")
		}
	}
	return out
}

// patchLabels sets (or, for nil, removes) labels with a JSON merge patch, which states the
// values outright instead of diffing against a cached copy that may be stale, and refreshes
// node from the answer.
func (r *reconciler) patchLabels(ctx context.Context, node *corev1.Node, labels map[string]*string) error {
	if len(labels) == 0 {
		return nil
	}
	return r.patch(ctx, node, map[string]any{"metadata": map[string]any{"labels": labels}})
}

func (r *reconciler) patch(ctx context.Context, node *corev1.Node, body map[string]any) error {
	data, err := jsonPatchBody(body)
	if err != nil {
		return err
	}
	return r.client.Patch(ctx, node, client.RawPatch(types.MergePatchType, data), client.FieldOwner(FieldManager))
}

func jsonPatchBody(body map[string]any) ([]byte, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encoding patch: %w", err)
	}
	return data, nil
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

func ptrTo[T any](v T) *T { return &v }
