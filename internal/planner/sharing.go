package planner

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/mig"
)

// Sharing is planned per node, because NVIDIA's device plugin applies one sharing setting to
// every GPU of a node (label nvidia.com/device-plugin.config). This first version shares whole
// GPUs only: it turns idle nodes whose product the catalog allows to share into MIG-disabled
// GPUs advertised as nvidia.com/gpu.shared replicas, for pending pods that ask for them.
// Time-slicing of MIG devices (nvidia.com/mig-<profile>.shared) is explained as not planned.
// Only idle nodes are converted: a node whose GPUs run pods is never changed for sharing, so
// sharing never evicts, and no running shared pod is disturbed by a change of replicas.

// Keys of device-plugin configs gpupool writes: the key names the setting, so a key can never
// come to mean another setting.
const (
	sharingNoneName  = "gpupool-none"
	sharingTSPrefix  = "gpupool-ts-"
	sharingMPSPrefix = "gpupool-mps-"
)

// SharingConfigName is the immutable device-plugin config key of a sharing setting:
// gpupool-none, gpupool-ts-<replicas> or gpupool-mps-<replicas>.
func SharingConfigName(s v1alpha1.SharingConfig) string {
	switch s.Mode {
	case v1alpha1.SharingTimeSlicing:
		return sharingTSPrefix + strconv.Itoa(int(s.Replicas))
	case v1alpha1.SharingMPS:
		return sharingMPSPrefix + strconv.Itoa(int(s.Replicas))
	}
	return sharingNoneName
}

// ParseSharingConfigName reads a key SharingConfigName wrote; false for any other key.
func ParseSharingConfigName(name string) (v1alpha1.SharingConfig, bool) {
	if name == sharingNoneName {
		return v1alpha1.SharingConfig{Mode: v1alpha1.SharingNone}, true
	}
	for _, m := range []struct {
		prefix string
		mode   v1alpha1.SharingMode
	}{{sharingTSPrefix, v1alpha1.SharingTimeSlicing}, {sharingMPSPrefix, v1alpha1.SharingMPS}} {
		if rest, ok := strings.CutPrefix(name, m.prefix); ok {
			n, err := strconv.Atoi(rest)
			if err != nil || n < 2 || n > 256 || strconv.Itoa(n) != rest {
				return v1alpha1.SharingConfig{}, false
			}
			return v1alpha1.SharingConfig{Mode: m.mode, Replicas: int32(n)}, true
		}
	}
	return v1alpha1.SharingConfig{}, false
}

// shareProposal is a node the sharing pass converts.
type shareProposal struct {
	setting v1alpha1.SharingConfig
	served  []int // per class
}

// sharedGPUs says whether a class asks for replicas of whole GPUs, the only sharing planned.
func (c *class) sharedGPUs() bool { return c.shared && c.sharedProfile == "" }

// share converts idle nodes for pending shared-GPU pods, within what is left of the budget
// after the MIG pass, and returns the nodes it converts.
func (p *planState) share(budgetLeft int, taken map[*nodeInfo]*proposal) map[*nodeInfo]*shareProposal {
	out := map[*nodeInfo]*shareProposal{}
	var classes []*class
	for _, c := range p.classes {
		if c.sharedGPUs() && c.left > 0 {
			classes = append(classes, c)
		}
	}
	if len(classes) == 0 {
		return out
	}
	for _, ni := range p.nodes {
		if budgetLeft <= 0 {
			break
		}
		if pr := taken[ni]; pr != nil && pr.changed > 0 {
			continue
		}
		choices := shareChoices(ni)
		if len(choices) == 0 || !p.shareable(ni) {
			continue
		}
		// How many replicas this node could use: the eligible pods that fit its CPU and memory.
		free := slices.Clone(ni.free)
		want := 0
		for _, c := range classes {
			if !p.eligible(ni, c) {
				continue
			}
			want += fitCount(free, c.vec, c.left) * int(c.sharedReplicas)
		}
		if want == 0 {
			continue
		}
		setting := pickReplicas(choices, want, len(ni.gpus))
		capacity := int(setting.Replicas) * len(ni.gpus)
		sp := &shareProposal{setting: setting, served: make([]int, len(p.classes))}
		free = slices.Clone(ni.free)
		for _, c := range classes {
			if !p.eligible(ni, c) || capacity <= 0 {
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
		out[ni] = sp
		budgetLeft--
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
	if demand.Quantity(ni.node.Allocatable, demand.ResourceSharedGPU) > 0 {
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
// because its clients get their own share of memory and compute, then time-slicing.
func shareChoices(ni *nodeInfo) []v1alpha1.SharingConfig {
	if ni.prod == nil || ni.prod.entry == nil || ni.prod.entry.Sharing == nil {
		return nil
	}
	var out []v1alpha1.SharingConfig
	sc := ni.prod.entry.Sharing
	if sc.MPS != nil {
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

// shareSteps renders the nodes the sharing pass converts: every GPU MIG-disabled, with the
// node's new sharing setting.
func (p *planState) shareSteps(shares map[*nodeInfo]*shareProposal, res *Result) ([]Step, []types.NamespacedName) {
	total := make([]int, len(p.classes))
	var out []Step
	for _, ni := range p.nodes {
		sp := shares[ni]
		if sp == nil {
			continue
		}
		setting := sp.setting
		step := Step{Node: ni.node.Name, Product: ni.prod.product.Name, Sharing: &setting}
		for _, gi := range ni.gpus {
			if gi.gpu.MIGEnabled {
				from := gi.gpu.Layout()
				step.GPUs = append(step.GPUs, GPUChange{Index: gi.gpu.Index, From: from, To: mig.Layout{}})
				for name, n := range from {
					res.SlicesGained[name] -= n
					if res.SlicesGained[name] == 0 {
						delete(res.SlicesGained, name)
					}
				}
			}
			step.Target = append(step.Target, GPUTarget{Index: gi.gpu.Index, MIGEnabled: false, Layout: mig.Layout{}})
		}
		for _, c := range p.classes {
			total[c.id] += sp.served[c.id]
		}
		out = append(out, step)
	}
	return out, p.takePods(total)
}

// explainShared says why pending shared pods stay unserved.
func (p *planState) explainShared(c *class, what string) (Reason, string) {
	if !c.sharedGPUs() {
		return ReasonPartitionShape, what + ": time-slicing of MIG devices is not planned yet; gpupool shares whole GPUs (nvidia.com/gpu.shared)"
	}
	allowed, eligible := 0, 0
	for _, ni := range p.nodes {
		if !p.eligible(ni, c) {
			continue
		}
		eligible++
		if len(shareChoices(ni)) > 0 {
			allowed++
		}
	}
	switch {
	case eligible == 0:
		return ReasonNotInPool, what + ": no node of the pool matches the pod's node selector, affinity or tolerations"
	case allowed == 0:
		return ReasonPartitionShape, what + ": the policy's catalog allows neither time-slicing nor MPS on the GPUs this pod may use " +
			"(set spec.catalog[].sharing)"
	}
	return ReasonCapacity, fmt.Sprintf("%s: sharing converts only idle nodes, within the disruption budget, and none of the %d "+
		"node(s) that may share is idle and free to change", what, allowed)
}
