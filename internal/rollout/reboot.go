package rollout

import (
	"fmt"
	"slices"
	"strings"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// NodePod is a pod bound to a step's node, as the reboot check reads it.
type NodePod struct {
	Namespace, Name string
	// NodeLocal is true for DaemonSet and static (mirror) pods: they belong to the node and
	// come back with it.
	NodeLocal bool
	// Gone is true for a pod that is terminating or has finished.
	Gone bool
}

// RebootVictims says why a step that may make mig-manager reboot its node must not start: a
// pod other than the step's own evictions and DaemonSet or static pods runs on the node now,
// and a reboot would kill it ("" when none does, or the step carries no reboot risk). The
// planner planned the step only while no such pod ran there; one the scheduler placed since
// is found here, before the cordon.
func RebootVictims(step v1alpha1.NodeStep, pods []NodePod) string {
	if step.RebootRisk == "" {
		return ""
	}
	var victims []string
	for _, p := range pods {
		if p.NodeLocal || p.Gone || slices.ContainsFunc(step.Evictions, func(e v1alpha1.Eviction) bool {
			return e.Namespace == p.Namespace && e.Name == p.Name
		}) {
			continue
		}
		victims = append(victims, p.Namespace+"/"+p.Name)
	}
	if len(victims) == 0 {
		return ""
	}
	slices.Sort(victims)
	more := ""
	if len(victims) > 3 {
		more = fmt.Sprintf(" and %d more", len(victims)-3)
		victims = victims[:3]
	}
	return fmt.Sprintf("the step changes a GPU's MIG mode and %s, and pod(s) %s%s, which the step does not evict, run on %s now: "+
		"a reboot would kill them", step.RebootRisk, strings.Join(victims, ", "), more, step.Node)
}
