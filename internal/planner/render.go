package planner

// One renderer for every step a plan holds, whichever phase chose the node's change: the
// greedy's and the searches' exclusive changes, and the share phase's.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
)

// nodeChange is the change chosen for one node: per GPU (in the node's order) its target,
// the sharing setting the node takes (nil leaves the device plugin's config alone), where the
// pods it evicts land, the nodes it waits for, and the pending pods it serves per class.
type nodeChange struct {
	ni       *nodeInfo
	targets  []gpuTarget
	sharing  *v1alpha1.SharingConfig
	landings []landing
	waitsFor []string
	served   []int
}

// gpuTarget is one GPU's target; changed says whether the step changes the GPU (and so
// evicts its pods).
type gpuTarget struct {
	layout  mig.Layout
	enabled bool
	changed bool
}

// render turns the plan's chosen changes into steps, in node order, and lists the pending
// pods they serve; it adds what each step gains and loses to res.SlicesGained.
func (p *planState) render(steps map[*nodeInfo]*proposal, shares map[*nodeInfo]*shareProposal, res *Result) ([]Step, []types.NamespacedName) {
	total := make([]int, len(p.classes))
	var out []Step
	for _, ni := range p.nodes {
		var ch *nodeChange
		if pr := steps[ni]; pr != nil && pr.changed > 0 {
			ch = p.exclusiveChange(ni, pr, steps)
		} else if sp := shares[ni]; sp != nil {
			ch = sharedChange(ni, sp)
		}
		if ch == nil {
			continue
		}
		out = append(out, ch.step(res))
		for _, c := range p.classes {
			total[c.id] += ch.served[c.id]
		}
	}
	for name, n := range res.SlicesGained {
		if n == 0 {
			delete(res.SlicesGained, name)
		}
	}
	slices.SortFunc(out, func(a, b Step) int { return strings.Compare(a.Node, b.Node) })
	return out, p.takePods(total)
}

// exclusiveChange is a proposal's change: the GPUs it re-carves, their pods evicted.
func (p *planState) exclusiveChange(ni *nodeInfo, pr *proposal, chosen map[*nodeInfo]*proposal) *nodeChange {
	ch := &nodeChange{ni: ni, landings: pr.landings, waitsFor: waitsFor(ni, chosen), served: pr.served}
	if sharesNow(ni) {
		// A node re-carved for exclusive demand stops sharing, or its new devices would be
		// advertised as shared replicas that the pods it is changed for cannot use.
		ch.sharing = &v1alpha1.SharingConfig{Mode: v1alpha1.SharingNone}
	}
	for i, gi := range ni.gpus {
		t := gpuTarget{layout: gi.gpu.Layout(), enabled: gi.gpu.MIGEnabled}
		if pr.choice[i] != keep {
			o := &ni.prod.options[pr.choice[i]]
			t = gpuTarget{layout: o.layout.Clone(), enabled: !o.disabled, changed: true}
		}
		ch.targets = append(ch.targets, t)
	}
	return ch
}

// sharedChange is a share proposal's change: every GPU of an idle node to one layout, shared.
func sharedChange(ni *nodeInfo, sp *shareProposal) *nodeChange {
	setting := sp.setting
	ch := &nodeChange{ni: ni, sharing: &setting, served: sp.served}
	enabled := sp.layout != nil
	for _, gi := range ni.gpus {
		to := sp.layout.Clone()
		if to == nil {
			to = mig.Layout{}
		}
		ch.targets = append(ch.targets, gpuTarget{layout: to, enabled: enabled,
			changed: gi.gpu.MIGEnabled != enabled || !gi.gpu.Layout().Equal(to)})
	}
	return ch
}

// step renders the change: each changed GPU with its layouts before and after and its pods
// evicted (landing where the plan moves them, else back on the node), the whole node's target.
func (ch *nodeChange) step(res *Result) Step {
	ni := ch.ni
	step := Step{Node: ni.node.Name, Product: ni.prod.product.Name, Sharing: ch.sharing, WaitsFor: ch.waitsFor}
	for i, gi := range ni.gpus {
		t := ch.targets[i]
		if t.changed {
			if t.enabled != gi.gpu.MIGEnabled {
				step.RebootRisk = ni.rebootRisk
			}
			from := gi.gpu.Layout()
			step.GPUs = append(step.GPUs, GPUChange{Index: gi.gpu.Index, From: from, To: t.layout})
			for name, n := range t.layout {
				res.SlicesGained[name] += n
			}
			for name, n := range from {
				res.SlicesGained[name] -= n
			}
			for _, pod := range gi.pods {
				landing, reason := ni.node.Name, fmt.Sprintf("holds %s on GPU %d", holding(gi, pod.Key), gi.gpu.Index)
				for _, l := range ch.landings {
					if l.pod == pod.Key {
						landing = l.to.node.Name
						reason += "; moves to " + landing
					}
				}
				step.Evictions = append(step.Evictions, Eviction{Pod: pod.Key, UID: pod.UID, Reason: reason, Landing: landing})
			}
		}
		step.Target = append(step.Target, mig.GPUTarget{Index: gi.gpu.Index, MIGEnabled: t.enabled, Layout: t.layout})
	}
	slices.SortFunc(step.Evictions, func(a, b Eviction) int {
		return cmp.Or(cmp.Compare(a.Pod.Namespace, b.Pod.Namespace), cmp.Compare(a.Pod.Name, b.Pod.Name))
	})
	step.Evictions = slices.CompactFunc(step.Evictions, func(a, b Eviction) bool { return a.Pod == b.Pod })
	return step
}
