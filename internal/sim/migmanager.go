package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// Operand deploy labels mig-manager pauses while it changes MIG settings (mig-parted's
// reconfigure script: device plugin, GPU Feature Discovery, DCGM exporter, DCGM, NVSM). An
// operand is paused only when its label is set; restoring writes "true".
var pausableOperands = []string{
	nvidia.LabelDeployPrefix + "device-plugin",
	nvidia.LabelDeployPrefix + "gpu-feature-discovery",
	nvidia.LabelDeployPrefix + "dcgm-exporter",
	nvidia.LabelDeployPrefix + "dcgm",
	nvidia.LabelDeployPrefix + "nvsm",
}

// pausedValue is the deploy label value of a paused operand.
const pausedValue = nvidia.PausedForMIGChange

// labelDevicePluginDeploy is the device plugin's deploy label; the simulated device plugin
// does not update the node while it is paused.
const labelDevicePluginDeploy = nvidia.LabelDeployPrefix + "device-plugin"

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
// label change, if it has not finished it yet.
func (r *reconciler) migManager(ctx context.Context, n *Node, node *corev1.Node) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	mm := &n.migManager
	value, seq, begun, since, ok := mm.next()
	if !ok {
		return ctrl.Result{}, nil
	}
	annotated, err := ParseFaultAnnotations(node.Annotations)
	if err != nil {
		log.Error(err, "ignoring the node's fault annotations")
		annotated = Faults{}
	}
	faults := n.peekFaults().merge(annotated)
	if !begun {
		log.Info("mig.config changed; applying", "config", value)
		set := map[string]*string{v1alpha1.LabelMIGConfigState: ptrTo(string(nvidia.StatePending))}
		if faults.StuckPending {
			// The known wedge: operands paused, pausing never completes, state stays pending.
			maps.Copy(set, pauseLabels(node.Labels))
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
	if err := r.apply(ctx, n, node, value, annotated); err != nil {
		return ctrl.Result{}, err
	}
	mm.finish(seq)
	return ctrl.Result{}, nil
}

// apply applies the entry named value and ends in state success or failed. It returns an
// error only when the API server could not be told the outcome; the reconcile then retries,
// which is safe because applying an entry that is already in place changes nothing.
func (r *reconciler) apply(ctx context.Context, n *Node, node *corev1.Node, value string, annotated Faults) error {
	log := logf.FromContext(ctx).WithValues("config", value)
	fail := func(reason, format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		log.Info("MIG reconfiguration failed", "reason", reason, "message", msg)
		r.recorder.Eventf(node, nil, corev1.EventTypeWarning, reason, "Reconfigure", "%s", msg)
		set := restoreLabels(node.Labels)
		set[v1alpha1.LabelMIGConfigState] = ptrTo(string(nvidia.StateFailed))
		if err := r.patchLabels(ctx, node, set); err != nil {
			return fmt.Errorf("setting state failed for %s on node %s: %w", value, n.name, err)
		}
		return nil
	}

	targets, err := r.readEntry(ctx, n, value)
	if err != nil {
		return fail(reasonConfigInvalid, "applying %s on node %s: %v", value, n.name, err)
	}
	faults := n.takeFaults().merge(annotated)
	if faults.FailNext {
		if annotated.FailNext {
			rest := withoutFault(node.Annotations[AnnotationFault], FaultFailNext)
			var v *string
			if rest != "" {
				v = &rest
			}
			if err := r.patch(ctx, node, map[string]any{"metadata": map[string]any{"annotations": map[string]*string{AnnotationFault: v}}}); err != nil {
				return fmt.Errorf("consuming fault %s on node %s: %w", FaultFailNext, n.name, err)
			}
		}
		return fail(reasonInjected, "applying %s on node %s: injected fault %s", value, n.name, FaultFailNext)
	}

	gpus, err := n.GPUs()
	if err != nil {
		return fail(reasonApplyFailed, "applying %s: %v", value, err)
	}
	changed := map[int]gpuTarget{}
	for i, t := range targets {
		if !t.equal(gpus[i]) {
			changed[i] = t
		}
	}
	if len(changed) == 0 {
		log.Info("MIG configuration already in place")
		return r.succeed(ctx, node, value, "already in place")
	}
	if faults.WrongLayout {
		dropOneInstance(log, changed)
	}

	// mig-parted stops the GPU clients before it touches a GPU.
	if err := r.patchLabels(ctx, node, pauseLabels(node.Labels)); err != nil {
		return fmt.Errorf("pausing GPU operands on node %s: %w", n.name, err)
	}

	n.mu.Lock()
	// Assign devices to every pod bound so far, so that a pod the cache has already seen
	// cannot slip onto a GPU between this check and the destroy.
	if _, _, err := r.syncLocked(ctx, n); err != nil {
		n.mu.Unlock()
		return fmt.Errorf("assigning devices on node %s: %w", n.name, err)
	}
	if busy := n.podsOnGPUsLocked(keysOf(changed)); len(busy) > 0 {
		n.mu.Unlock()
		return fail(reasonInUse, "applying %s on node %s: GPUs %v are in use by pods %s: a GPU whose layout changes must be idle",
			value, n.name, slices.Sorted(maps.Keys(changed)), podList(busy))
	}
	var applyErr error
	for _, i := range slices.Sorted(maps.Keys(changed)) {
		log.Info("reconfiguring GPU", "gpu", i, "from", describe(gpus[i]), "to", changed[i].String())
		if applyErr = n.applyGPU(i, changed[i]); applyErr != nil {
			break
		}
	}
	after, readErr := n.GPUs()
	if readErr == nil {
		n.setProcessesLocked(after)
	}
	n.mu.Unlock()
	if applyErr != nil {
		return fail(reasonApplyFailed, "applying %s on node %s: %v", value, n.name, applyErr)
	}
	return r.succeed(ctx, node, value, fmt.Sprintf("GPUs %v reconfigured", slices.Sorted(maps.Keys(changed))))
}

// succeed restores the paused operands and reports success.
func (r *reconciler) succeed(ctx context.Context, node *corev1.Node, value, what string) error {
	set := restoreLabels(node.Labels)
	set[v1alpha1.LabelMIGConfigState] = ptrTo(string(nvidia.StateSuccess))
	if err := r.patchLabels(ctx, node, set); err != nil {
		return fmt.Errorf("setting state success for %s on node %s: %w", value, node.Name, err)
	}
	logf.FromContext(ctx).Info("MIG reconfiguration succeeded", "config", value, "detail", what)
	r.recorder.Eventf(node, nil, corev1.EventTypeNormal, reasonApplied, "Reconfigure", "applied %s: %s", value, what)
	return nil
}

// readEntry reads the entry named value from the mig-parted ConfigMap, fresh from the API
// server (the real mig-manager reads a mounted file), and resolves it to a target per GPU
// index. GPUs the entry does not select are absent: mig-parted leaves them alone. The whole
// entry is checked (profiles exist and fit) before anything changes.
func (r *reconciler) readEntry(ctx context.Context, n *Node, value string) (map[int]gpuTarget, error) {
	var cm corev1.ConfigMap
	if err := r.apiReader.Get(ctx, r.configMap, &cm); err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s: %w", r.configMap, err)
	}
	data, ok := cm.Data[nvidia.ConfigMapKey]
	if !ok {
		return nil, fmt.Errorf("ConfigMap %s has no key %s", r.configMap, nvidia.ConfigMapKey)
	}
	cfg, err := nvidia.ParseMIGPartedConfig([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s: %w", r.configMap, err)
	}
	specs, ok := cfg.MIGConfigs[value]
	if !ok {
		return nil, fmt.Errorf("ConfigMap %s has no mig-parted entry named %q", r.configMap, value)
	}
	return n.resolveEntry(specs)
}

// resolveEntry turns an entry's device specs into a target per selected GPU; a later spec
// overrides an earlier one for the same GPU, as mig-parted applies them in order.
func (n *Node) resolveEntry(specs []nvidia.DeviceSpec) (map[int]gpuTarget, error) {
	targets := map[int]gpuTarget{}
	for _, s := range specs {
		if !n.matchesFilter(s.DeviceFilter) {
			continue
		}
		indexes := s.Devices.Indexes
		if s.Devices.All {
			indexes = make([]int, n.gpus)
			for i := range indexes {
				indexes[i] = i
			}
		}
		for _, i := range indexes {
			if i < 0 || i >= n.gpus {
				return nil, fmt.Errorf("device index %d: the node has GPUs 0..%d", i, n.gpus-1)
			}
			t := gpuTarget{MIGEnabled: s.MIGEnabled, Layout: mig.Layout{}}
			if s.MIGEnabled {
				maps.Copy(t.Layout, s.MIGDevices)
				if _, err := ChooseSlots(n.slotProfiles(i), t.Layout); err != nil {
					return nil, fmt.Errorf("GPU %d (%s): %w", i, n.model.Name, err)
				}
			}
			targets[i] = t
		}
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

// pauseLabels are the label changes that pause every deployed operand.
func pauseLabels(labels map[string]string) map[string]*string {
	out := map[string]*string{}
	for _, k := range pausableOperands {
		if v := labels[k]; v != "" && v != nvidia.PausedForMIGChange {
			out[k] = ptrTo(nvidia.PausedForMIGChange)
		}
	}
	return out
}

// restoreLabels are the label changes that bring back every paused operand.
func restoreLabels(labels map[string]string) map[string]*string {
	out := map[string]*string{}
	for _, k := range pausableOperands {
		if labels[k] == nvidia.PausedForMIGChange {
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
