// Reading a node's GPUs from its agent's report: instances, the pods and claims holding them, and a step's target layout.

package inventory

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// NodeTarget is a node's complete target layout for a plan's step: the step's new layouts for
// the GPUs it changes, and for the others their layout as the agent reports it, read as the
// planner reads it (profile names as the product table spells them). The executor writes it as
// the node's mig-parted entry, and checks it against the name the step carries.
func NodeTarget(node *corev1.Node, report *v1alpha1.GPUNode, changes []v1alpha1.GPUChange) []mig.GPUTarget {
	var out []mig.GPUTarget
	for _, g := range readGPUs(node, report, productCache{}, nil, nil) {
		t := mig.GPUTarget{Index: g.Index, MIGEnabled: g.MIGEnabled, Layout: g.Layout()}
		if i := slices.IndexFunc(changes, func(c v1alpha1.GPUChange) bool { return int(c.Index) == g.Index }); i >= 0 {
			t.Layout = mig.LayoutOf(changes[i].To)
			t.MIGEnabled = len(changes[i].To) > 0
		}
		out = append(out, t)
	}
	return out
}

// readGPUs turns the agent's report of a node into GPUs, in index order. heldOn lists, by GPU
// UUID, the devices claims hold on it (holders' keys).
func readGPUs(node *corev1.Node, report *v1alpha1.GPUNode, products productCache, holders map[string]DeviceHolder,
	heldOn map[string][]string) []*GPU {
	gpus := make([]*GPU, 0, len(report.Status.GPUs))
	for _, s := range report.Status.GPUs {
		g := &GPU{Index: int(s.Index), ProductName: s.Product, Error: s.Error}
		if len(s.Instances) > 0 {
			g.Instances = make([]Instance, 0, len(s.Instances))
		}
		if g.ProductName == "" {
			g.ProductName = node.Labels[nvidia.LabelGPUProduct]
		}
		t := products.get(g.ProductName, s.Profiles)
		g.Product, g.TableDiff, g.NoBuiltinTable = t.product, t.diff, t.noBuiltin
		g.MIGEnabled = s.MIGMode != nil && s.MIGMode.Current == "Enabled"
		for _, in := range s.Instances {
			inst := Instance{
				Instance: mig.Instance{Profile: in.Profile, Placement: mig.Placement{
					Start: int(in.Placement.Start), Size: int(in.Placement.Size)}},
				Busy: in.Busy || in.Pod != nil,
			}
			if g.Product != nil {
				if pr, ok := g.Product.Profile(in.Profile); ok {
					inst.Profile = pr.Name
				}
			}
			if in.Pod != nil {
				key := types.NamespacedName{Namespace: in.Pod.Namespace, Name: in.Pod.Name}
				inst.Pod = &key
				g.Pods = append(g.Pods, key)
			} else if h, ok := holders[in.UUID]; ok {
				inst.Busy = true
				if len(h.Pods) > 0 {
					// A shared claim's first pod stands for the instance; every one of its
					// pods holds the GPU, so changing it would have to evict them all.
					inst.Pod = &h.Pods[0]
					g.Pods = append(g.Pods, h.Pods...)
				}
			}
			g.Instances = append(g.Instances, inst)
		}
		for _, p := range s.Pods {
			g.Pods = append(g.Pods, types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
		}
		if h, ok := holders[s.UUID]; ok {
			g.Pods = append(g.Pods, h.Pods...) // a whole GPU the DRA driver allocated
		}
		g.DRAHeld = draHeld(s, holders, heldOn[s.UUID])
		slices.SortFunc(g.Instances, func(a, b Instance) int {
			return cmp.Or(cmp.Compare(a.Placement.Start, b.Placement.Start), cmp.Compare(a.Profile, b.Profile))
		})
		slices.SortFunc(g.Pods, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
		g.Pods = slices.Compact(g.Pods)
		gpus = append(gpus, g)
	}
	slices.SortFunc(gpus, func(a, b *GPU) int { return cmp.Compare(a.Index, b.Index) })
	return gpus
}

// draHeld says why claims hold GPU s in ways its instances and pods do not show ("" when
// none does): the whole GPU allocated with no pod yet, or a device on it that the agent does
// not report.
func draHeld(s v1alpha1.GPUStatus, holders map[string]DeviceHolder, held []string) string {
	if s.UUID == "" || len(held) == 0 {
		return ""
	}
	reported := map[string]bool{}
	for _, in := range s.Instances {
		if in.UUID != "" {
			reported[in.UUID] = true
		}
	}
	var why []string
	for _, uuid := range held {
		h := holders[uuid]
		switch {
		case uuid == s.UUID && len(h.Pods) > 0:
			// The holder is among the GPU's pods.
		case uuid == s.UUID:
			why = append(why, fmt.Sprintf("ResourceClaim %s holds the whole GPU and its pod has not started", h.Claim))
		case !reported[uuid]:
			why = append(why, fmt.Sprintf("ResourceClaim %s holds device %s, which the agent does not report on it "+
				"(a ResourceSlice of an older generation, or an instance since replaced)", h.Claim, uuid))
		}
	}
	slices.Sort(why)
	return strings.Join(slices.Compact(why), "; ")
}

// unattributedGPUPods blocks a node whose pods hold GPU resources the agent has not tied to a
// device: the planner cannot know which GPU they would lose, so it changes none.
func unattributedGPUPods(n *Node) string {
	attributed := map[types.NamespacedName]bool{}
	for _, g := range n.GPUs {
		for _, p := range g.Pods {
			attributed[p] = true
		}
	}
	var missing []string
	for _, p := range n.Pods {
		if attributed[p.Key] {
			continue
		}
		for name, q := range p.Requests {
			// A pod asking for zero devices holds none, so the agent never attributes it.
			if _, _, ok := demand.Classify(name); ok && q.Sign() > 0 {
				missing = append(missing, p.Key.String())
				break
			}
		}
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("the agent has not yet reported which GPU %s uses", strings.Join(missing, ", "))
}
