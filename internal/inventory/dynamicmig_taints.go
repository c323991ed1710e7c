// Device taints on a DynamicMIG node's partitions: a partition tainted NoSchedule or NoExecute
// is not free for a claim, whoever tainted it.

package inventory

import (
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/gpupool/gpupool/internal/nvidia"
)

// preventsAllocation says whether a taint keeps the allocator from giving its device to a claim
// that does not tolerate it: NoSchedule and NoExecute do, None does not
// (k8s.io/dynamic-resource-allocation v0.37.2 structured/internal/stable/allocator_stable.go,
// taintPreventsAllocation).
func preventsAllocation(t resourcev1.DeviceTaint) bool {
	return t.Effect == resourcev1.DeviceTaintEffectNoSchedule || t.Effect == resourcev1.DeviceTaintEffectNoExecute
}

// taintOf says who taints a device in the driver's slice itself, "" when no taint keeps a claim
// off it.
func taintOf(d *resourcev1.Device) string {
	for _, t := range d.Taints {
		if preventsAllocation(t) {
			return fmt.Sprintf("the driver's ResourceSlice (taint %s, %s)", t.Key, t.Effect)
		}
	}
	return ""
}

// ruleSelects says whether a DeviceTaintRule's selector takes the node's device of NVIDIA's
// driver: every field set must match, an empty selector takes every device, and a rule without
// one takes none (resource.k8s.io/v1 DeviceTaintSelector).
func ruleSelects(rule *resourcev1.DeviceTaintRule, pool, device string) bool {
	sel := rule.Spec.DeviceSelector
	if sel == nil {
		return false
	}
	return (sel.Driver == nil || *sel.Driver == nvidia.DRADriver) && (sel.Pool == nil || *sel.Pool == pool) &&
		(sel.Device == nil || *sel.Device == device)
}

// ApplyDeviceTaints marks the node's partitions that a DeviceTaintRule taints NoSchedule or
// NoExecute, on top of the taints the driver's slices carry: Fit does not count them free, and
// Partitions says who taints each. A claim that tolerates the taint could still be given the
// device; tolerations are not weighed (the planners treat every claim as not tolerating), which
// only ever makes gpupool see less room than the allocator would.
func (n *DynamicMIGNode) ApplyDeviceTaints(rules []resourcev1.DeviceTaintRule) {
	for i := range rules {
		r := &rules[i]
		if !preventsAllocation(r.Spec.Taint) || !r.DeletionTimestamp.IsZero() {
			continue
		}
		for _, g := range n.GPUs {
			for k := range g.partitions {
				p := &g.partitions[k]
				if p.taint == "" && ruleSelects(r, n.Node, p.name) {
					p.taint = fmt.Sprintf("DeviceTaintRule %s (taint %s, %s)", r.Name, r.Spec.Taint.Key, r.Spec.Taint.Effect)
				}
			}
		}
	}
}
