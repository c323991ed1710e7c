package planner

import (
	"fmt"
	"slices"
	"strings"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// Sharing is planned per node, because NVIDIA's device plugin applies one sharing setting to
// every GPU of a node (label nvidia.com/device-plugin.config), together with the node's MIG
// layout. For pending pods asking for replicas of whole GPUs (nvidia.com/gpu.shared) an idle
// node becomes MIG-disabled GPUs shared by MPS or time-slicing; for replicas of a MIG device
// (nvidia.com/mig-<profile>.shared) it becomes GPUs carved into as many instances of that
// profile as fit, shared by time-slicing (the device plugin refuses MPS on MIG devices).
// Only idle nodes are converted: a node whose GPUs run pods is never changed for sharing, so
// sharing never evicts, and no running shared pod is disturbed by a change of replicas.

// shareProposal is a node the sharing pass converts.
type shareProposal struct {
	setting v1alpha1.SharingConfig
	// layout is every GPU's MIG layout when MIG devices are shared; nil for MIG-disabled GPUs.
	layout mig.Layout
	served []int // per class
}

// sharedGPUs says whether a class asks for replicas of whole GPUs.
func (c *class) sharedGPUs() bool { return c.shared && c.sharedProfile == "" }

// sharedMIG says whether a class asks for replicas of a MIG device.
func (c *class) sharedMIG() bool { return c.shared && c.sharedProfile != "" }

// share converts idle nodes for pending shared pods, within what is left of the budget after
// the MIG pass, and returns the nodes it converts. A node serves one kind of share: replicas
// of whole GPUs, or replicas of one MIG profile, the kind of the first pending class (in
// serving order) that may run there.
func (p *planState) share(budgetLeft int, taken map[*nodeInfo]*proposal) map[*nodeInfo]*shareProposal {
	out := map[*nodeInfo]*shareProposal{}
	for _, ni := range p.nodes {
		if budgetLeft <= 0 {
			break
		}
		if pr := taken[ni]; (pr != nil && pr.changed > 0) || len(ni.landed) > 0 {
			// A node that pods are moved to keeps the devices they land on.
			continue
		}
		if !p.shareable(ni) {
			continue
		}
		if sp := p.shareNode(ni); sp != nil {
			out[ni] = sp
			budgetLeft--
		}
	}
	return out
}

// shareNode decides how one idle node would share, and takes the pods it serves; nil when no
// pending shared pod may use it.
func (p *planState) shareNode(ni *nodeInfo) *shareProposal {
	var lead *class
	for _, c := range p.classes {
		if c.shared && c.left > 0 && p.eligible(ni, c) && p.shareLayout(ni, c) != nil {
			lead = c
			break
		}
	}
	if lead == nil {
		return nil
	}
	for _, gi := range ni.gpus {
		if len(ni.stayers) > 0 && gi.gpu.MIGEnabled != lead.sharedMIG() {
			return nil // the MIG mode toggle may reboot the node under its pods (toggleHurts)
		}
	}
	layout := p.shareLayout(ni, lead)
	devices := len(ni.gpus) // replicas per device times devices is the node's capacity
	choices := p.shareChoices(ni)
	if lead.sharedMIG() {
		perGPU := 0
		for _, n := range layout {
			perGPU += n
		}
		devices = len(ni.gpus) * perGPU
		choices = slices.DeleteFunc(choices, func(c v1alpha1.SharingConfig) bool { return c.Mode != v1alpha1.SharingTimeSlicing })
		choices = append(choices, timeSlicingChoices(ni)...)
		choices = slices.CompactFunc(choices, func(a, b v1alpha1.SharingConfig) bool { return a == b })
	} else {
		layout = nil
	}
	if len(choices) == 0 {
		return nil
	}
	same := func(c *class) bool {
		return c.shared && c.left > 0 && c.sharedProfile == lead.sharedProfile && p.eligible(ni, c)
	}
	// How many replicas this node could use: the eligible pods that fit its CPU and memory.
	free := slices.Clone(ni.free)
	want := 0
	for _, c := range p.classes {
		if same(c) {
			want += fitCount(free, c.vec, c.left) * int(c.sharedReplicas)
		}
	}
	if want == 0 {
		return nil
	}
	setting := pickReplicas(choices, want, devices)
	capacity := int(setting.Replicas) * devices
	sp := &shareProposal{setting: setting, layout: layout, served: make([]int, len(p.classes))}
	free = slices.Clone(ni.free)
	for _, c := range p.classes {
		if !same(c) || capacity <= 0 {
			continue
		}
		n := min(fitCount(free, c.vec, c.left), capacity/int(c.sharedReplicas))
		for d := range free {
			free[d] -= int64(n) * c.vec[d]
		}
		capacity -= n * int(c.sharedReplicas)
		sp.served[c.id] = n
		c.left -= n
	}
	return sp
}

// shareLayout is the MIG layout every GPU of a node takes to serve a shared class: empty (MIG
// disabled) for replicas of whole GPUs when the catalog allows sharing; for replicas of a MIG
// profile, the allowed layout with the most instances of it when the catalog allows
// time-slicing; nil when the node cannot serve the class.
func (p *planState) shareLayout(ni *nodeInfo, c *class) mig.Layout {
	if c.sharedGPUs() {
		if len(p.shareChoices(ni)) == 0 {
			return nil
		}
		return mig.Layout{}
	}
	if len(timeSlicingChoices(ni)) == 0 {
		return nil
	}
	pr, ok := ni.prod.product.Profile(c.sharedProfile)
	if !ok {
		return nil
	}
	var best mig.Layout
	for _, o := range ni.prod.options {
		if !o.disabled && o.layout[pr.Name] > best[pr.Name] {
			best = o.layout
		}
	}
	if best == nil {
		return nil
	}
	// Only the shared profile: other instances would be stranded, their resource renamed.
	return mig.Layout{pr.Name: best[pr.Name]}
}

// timeSlicingChoices are the catalog's time-slicing settings for a node's product.
func timeSlicingChoices(ni *nodeInfo) []v1alpha1.SharingConfig {
	if ni.prod == nil || ni.prod.entry == nil || ni.prod.entry.Sharing == nil || ni.prod.entry.Sharing.TimeSlicing == nil {
		return nil
	}
	var out []v1alpha1.SharingConfig
	for _, r := range sorted(ni.prod.entry.Sharing.TimeSlicing.Replicas) {
		out = append(out, v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: r})
	}
	return out
}

// sharesNow says whether the device plugin advertises shared replicas on the node now.
func sharesNow(ni *nodeInfo) bool {
	for name, q := range ni.node.Allocatable {
		if strings.HasSuffix(string(name), nvidia.SharedSuffix) && !q.IsZero() {
			return true
		}
	}
	return false
}

// exclusiveOnly drops, from the nodes' states, those whose GPUs are shared after the plan
// (steps and shares; nil for the current layouts): the ones it converts for sharing, and the
// ones that share now and that no step re-carves for exclusive demand. Their devices are
// advertised as replicas of the shared resource, never as exclusive MIG instances, so none of
// them is stranded; their states still show the layout they had before the sharing pass.
func exclusiveOnly(states map[*nodeInfo]*state, steps map[*nodeInfo]*proposal, shares map[*nodeInfo]*shareProposal) map[*nodeInfo]*state {
	out := make(map[*nodeInfo]*state, len(states))
	for ni, st := range states {
		if shares[ni] != nil {
			continue
		}
		if pr := steps[ni]; sharesNow(ni) && (pr == nil || pr.changed == 0) {
			continue
		}
		out[ni] = st
	}
	return out
}

// shareable says whether the sharing pass may convert a node: it may be changed, every GPU has
// a known product and nothing runs on any of its GPUs, and it does not already share (its
// replicas are then the scheduler's to hand out).
func (p *planState) shareable(ni *nodeInfo) bool {
	if ni.blocker != "" || !ni.schedulable || ni.prod == nil || len(ni.gpus) == 0 {
		return false
	}
	if sharesNow(ni) {
		return false
	}
	for _, gi := range ni.gpus {
		if !gi.idle || len(gi.gpu.Pods) > 0 || !gi.changeable {
			return false
		}
	}
	return true
}

// shareChoices are the sharing settings the catalog allows on a node's product: MPS first,
// because its clients get their own share of memory and compute, when the device plugin can
// run it (Input.AllowMPS), then time-slicing.
func (p *planState) shareChoices(ni *nodeInfo) []v1alpha1.SharingConfig {
	if ni.prod == nil || ni.prod.entry == nil || ni.prod.entry.Sharing == nil {
		return nil
	}
	var out []v1alpha1.SharingConfig
	sc := ni.prod.entry.Sharing
	if sc.MPS != nil && p.in.AllowMPS {
		for _, r := range sorted(sc.MPS.Replicas) {
			out = append(out, v1alpha1.SharingConfig{Mode: v1alpha1.SharingMPS, Replicas: r})
		}
	}
	if len(out) == 0 && sc.TimeSlicing != nil {
		for _, r := range sorted(sc.TimeSlicing.Replicas) {
			out = append(out, v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: r})
		}
	}
	return out
}

func sorted(v []int32) []int32 {
	out := slices.Clone(v)
	slices.Sort(out)
	return slices.Compact(out)
}

// pickReplicas takes the fewest replicas per GPU that serve want pods on gpus GPUs (each pod
// gets the largest share of a GPU that still serves everyone), else the most allowed.
func pickReplicas(choices []v1alpha1.SharingConfig, want, gpus int) v1alpha1.SharingConfig {
	for _, c := range choices {
		if int(c.Replicas)*gpus >= want {
			return c
		}
	}
	return choices[len(choices)-1]
}

// fitCount is how many pods of a class, up to limit, fit in free non-GPU resources.
func fitCount(free, vec []int64, limit int) int {
	n := limit
	for d, need := range vec {
		if need > 0 {
			n = min(n, int(max(0, free[d])/need))
		}
	}
	return n
}

// explainShared says why pending shared pods stay unserved.
func (p *planState) explainShared(c *class, what string) (Reason, string) {
	allowed, eligible := 0, 0
	for _, ni := range p.nodes {
		if !p.eligible(ni, c) {
			continue
		}
		eligible++
		if ni.prod != nil && p.shareLayout(ni, c) != nil {
			allowed++
		}
	}
	switch {
	case eligible == 0:
		return ReasonNotInPool, what + ": no node of the pool matches the pod's node selector, affinity or tolerations"
	case allowed == 0 && c.sharedMIG():
		return ReasonPartitionShape, what + ": no GPU this pod may use has " + c.sharedProfile + " in the policy's catalog " +
			"with time-slicing allowed (MPS does not share MIG devices; set spec.catalog[].sharing.timeSlicing)"
	case allowed == 0 && !p.in.AllowMPS && p.catalogOffersMPS():
		return ReasonPartitionShape, what + ": the policy's catalog allows only MPS on the GPUs this pod may use, and NVIDIA's " +
			"device plugin refuses MPS under the mixed MIG strategy gpupool needs (set spec.catalog[].sharing.timeSlicing)"
	case allowed == 0:
		return ReasonPartitionShape, what + ": the policy's catalog allows neither time-slicing nor MPS on the GPUs this pod may use " +
			"(set spec.catalog[].sharing)"
	}
	return ReasonCapacity, fmt.Sprintf("%s: sharing converts only idle nodes, within the disruption budget, and none of the %d "+
		"node(s) that may share is idle and free to change", what, allowed)
}

// catalogOffersMPS reports whether any catalog entry allows MPS.
func (p *planState) catalogOffersMPS() bool {
	for _, e := range p.in.Policy.Spec.Catalog {
		if e.Sharing != nil && e.Sharing.MPS != nil {
			return true
		}
	}
	return false
}
