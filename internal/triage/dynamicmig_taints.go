// DeviceTaintRules on DynamicMIG partitions: which rules are a policy's reserve, and the verdict
// for a claim that only the reserve holds back.

package triage

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/snapshot"
)

// The reserve rules' marks, as the policy controller sets them (controllers/policy_reserve.go,
// reserveRule): a name prefix, a label whose value is the policy, and the policy as owner. The
// taint's value is the profile the rule holds a placement for.
const (
	reserveLabel  = "gpupool.io/reserve"
	reservePrefix = "gpupool-reserve-"
)

// reservePolicy is the GPUPoolPolicy whose reserve rule this is, "" when it is none: gpupool's
// rules carry the label and the prefix and are owned by the policy. Triage only reads, so this
// does not check the name's hash as the controller does before deleting a rule.
func reservePolicy(rule *resourcev1.DeviceTaintRule) string {
	if _, labelled := rule.Labels[reserveLabel]; !labelled || !strings.HasPrefix(rule.Name, reservePrefix) {
		return ""
	}
	for _, o := range rule.OwnerReferences {
		if o.Kind == "GPUPoolPolicy" {
			return o.Name
		}
	}
	return ""
}

// withoutReserve is the rules less the policies' reserve rules: the pool as it would be if no
// standby headroom were held.
func withoutReserve(rules []resourcev1.DeviceTaintRule) []resourcev1.DeviceTaintRule {
	var out []resourcev1.DeviceTaintRule
	for i := range rules {
		if reservePolicy(&rules[i]) == "" {
			out = append(out, rules[i])
		}
	}
	return out
}

// heldByReserve is, for a claim of profile that fits no GPU of node as the rules taint it, the
// first GPU where it would fit but for the policies' reserve rules, with the fit there; ok is
// false when the reserve is not what holds it back.
func heldByReserve(s *snapshot.Snapshot, node *corev1.Node, profile string) (g *inventory.DynamicMIGGPU, f inventory.PlacementFit, ok bool) {
	if len(s.TaintRules) == 0 || len(withoutReserve(s.TaintRules)) == len(s.TaintRules) {
		return nil, f, false
	}
	supply := inventory.DynamicMIGSupply(node, reportOf(s, node.Name), s.Claims, s.Slices)
	supply.ApplyDeviceTaints(withoutReserve(s.TaintRules))
	for k, fit := range supply.Fit(profile) {
		if fit.Kind == inventory.FitFree {
			return supply.GPUs[k], fit, true
		}
	}
	return nil, f, false
}

// explainReserve sets the verdict for a claim that waits only because a policy's standby
// headroom holds the free placement it would take on node's GPU g (fit f, as if no reserve
// rule were there). gpupool moves no claim for it (controllers/policy_placement.go,
// heldBackByReserve): the wait is the price of the headroom the policy asked for.
func explainReserve(s *snapshot.Snapshot, node string, g *inventory.DynamicMIGGPU, f inventory.PlacementFit, maps []SliceMap, v *Verdict) {
	var rule *resourcev1.DeviceTaintRule
	for i := range s.TaintRules {
		r := &s.TaintRules[i]
		if sel := r.Spec.DeviceSelector; reservePolicy(r) != "" && sel != nil && sel.Device != nil && *sel.Device == f.Device &&
			(sel.Pool == nil || *sel.Pool == node) {
			rule = r
			break
		}
	}
	name, held, ruleName := "", "", "a gpupool-reserve DeviceTaintRule"
	if rule != nil {
		name, held, ruleName = reservePolicy(rule), rule.Spec.Taint.Value, "DeviceTaintRule "+rule.Name
	}
	policy := "a GPUPoolPolicy"
	if name != "" {
		policy = "policy " + name
	}
	shape, resource := reserveShape(s, name, held)
	at := ""
	if pl, ok := heldPlacement(g, held, f.At); ok {
		at = " at " + slicesText(pl)
	}
	what := "a larger claim"
	if held != "" {
		what = "a " + held + " claim"
	}
	less := "lower the minFree of its standby shapes"
	if resource != "" && name != "" {
		less = fmt.Sprintf("lower minFree of standby shape %s in GPUPoolPolicy %s", resource, name)
	}
	v.Layer, v.Blocking, v.SliceMaps = LayerPlacement, "reserve headroom", maps
	v.Reason = fmt.Sprintf("on DynamicMIG node %s GPU %d, %s would fit at %s, but %s's standby headroom (%s) holds the free placement%s for %s: %s taints that partition NoSchedule",
		node, g.Index, f.Profile, slicesText(f.At), policy, shape, at, what, ruleName)
	v.Next = "gpupool moves no claim for it: the held placement is the headroom the policy asked for, and evicting a claim to make room would turn prevention into disruption; " +
		"the scheduler allocates it once a claim elsewhere ends, " + what + " takes the held placement, or the policy holds less (" + less + ")"
}

// reserveShape names the policy's standby shape for the held profile, e.g. "shape
// nvidia.com/mig-3g.71gb, minFree 1", and its resource; resource is "" when no shape of the
// snapshot's policy asks for the profile.
func reserveShape(s *snapshot.Snapshot, policy, held string) (shape, resource string) {
	for i := range s.Policies {
		if s.Policies[i].Name != policy {
			continue
		}
		for _, sh := range s.Policies[i].Spec.Shapes {
			if kind, p, ok := demand.Classify(corev1.ResourceName(sh.Resource)); ok && kind == demand.KindMIG && p == held {
				return fmt.Sprintf("shape %s, minFree %d", sh.Resource, sh.MinFree), sh.Resource
			}
		}
	}
	if held != "" {
		return "its standby shape for " + held, ""
	}
	return "its standby shapes", ""
}

// heldPlacement is the held profile's partition on g that overlaps at, the placement held.
func heldPlacement(g *inventory.DynamicMIGGPU, held string, at mig.Placement) (mig.Placement, bool) {
	if held == "" {
		return mig.Placement{}, false
	}
	same := func(name string) bool {
		if name == held {
			return true
		}
		if g.Product != nil {
			a, okA := g.Product.Profile(name)
			b, okB := g.Product.Profile(held)
			return okA && okB && a.Name == b.Name
		}
		return false
	}
	for _, p := range g.Partitions() {
		if same(p.Profile) && p.Placement.Start < at.Start+at.Size && at.Start < p.Placement.Start+p.Placement.Size {
			return p.Placement, true
		}
	}
	return mig.Placement{}, false
}

// slicesText says which memory slices a placement covers, as inventory's fit reasons do.
func slicesText(pl mig.Placement) string {
	if pl.Size == 1 {
		return fmt.Sprintf("memory slice %d", pl.Start)
	}
	return fmt.Sprintf("memory slices %d-%d", pl.Start, pl.Start+pl.Size-1)
}
