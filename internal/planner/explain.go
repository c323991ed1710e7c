// Explaining unserved demand: why each pending shape was left unserved, and what a user can change.

package planner

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
)

// unserved explains every pending pod the plan leaves waiting.
func (p *planState) unserved(res *Result, steps map[*nodeInfo]*proposal, spec *v1alpha1.GPUPoolPolicySpec) []Unserved {
	var out []Unserved
	for _, c := range p.classes {
		if c.left == 0 {
			continue
		}
		reason, msg := p.explain(c, res, steps, spec)
		for _, pod := range c.pods[len(c.pods)-c.left:] {
			out = append(out, Unserved{Pod: pod, Reason: reason, Message: msg})
		}
	}
	slices.SortFunc(out, func(a, b Unserved) int {
		return cmp.Or(cmp.Compare(a.Pod.Namespace, b.Pod.Namespace), cmp.Compare(a.Pod.Name, b.Pod.Name))
	})
	return out
}

// driverMismatch says why a node cannot host a class for the way its pods ask for GPUs: claims
// of NVIDIA's DRA driver on a node the device plugin serves, or the reverse; "" when they agree.
func driverMismatch(c *class, ni *nodeInfo) string {
	switch {
	case c.sample.ViaClaims && !ni.node.DRA:
		return fmt.Sprintf("node %s: the pod asks through DRA claims and NVIDIA's DRA driver publishes no device there", ni.node.Name)
	case !c.sample.ViaClaims && ni.node.DRA:
		return fmt.Sprintf("node %s: NVIDIA's DRA driver serves its GPUs and the pod asks the device plugin", ni.node.Name)
	}
	return ""
}

// explain finds the first obstacle between a class and a node, in the order a user would fix
// them: where it may run, what the GPUs may be carved into, CPU and memory, disruption rules,
// and finally plain capacity.
func (p *planState) explain(c *class, res *Result, steps map[*nodeInfo]*proposal, spec *v1alpha1.GPUPoolPolicySpec) (Reason, string) {
	what := "needs " + c.describe()
	if c.shared {
		return p.explainShared(c, what)
	}
	var eligible []*nodeInfo
	firstMismatch := ""
	for _, ni := range p.nodes {
		if p.eligible(ni, c) {
			eligible = append(eligible, ni)
		} else if firstMismatch == "" {
			firstMismatch = driverMismatch(c, ni)
			if firstMismatch == "" {
				_, firstMismatch = c.sample.Matches(ni.node.Object)
			}
		}
	}
	if len(eligible) == 0 {
		if len(p.nodes) == 0 {
			return ReasonNotInPool, what + ": the policy's nodeSelector selects no node"
		}
		return ReasonNotInPool, fmt.Sprintf("%s: none of the pool's %d nodes matches the pod's node selector, affinity, tolerations or the way it asks for GPUs (%s)",
			what, len(p.nodes), firstMismatch)
	}
	shaped, shapeWhy := p.shapePassing(c, eligible)
	if len(shaped) == 0 {
		return ReasonPartitionShape, fmt.Sprintf("%s: %s", what, shapeWhy)
	}
	placed, placeWhy := passing(shaped, func(ni *nodeInfo) string { return p.resourceObstacle(c, ni) })
	if len(placed) == 0 {
		return ReasonNodePlacement, fmt.Sprintf("%s: the %d node(s) whose GPUs could host it lack resources (%s)", what, len(shaped), placeWhy)
	}
	if spec.Planning.Paused {
		return ReasonDisruption, what + ": planning is paused (spec.planning.paused)"
	}
	hostable, blockedWhy := 0, ""
	evictions := 0
	for _, ni := range placed {
		if steps[ni] != nil {
			continue
		}
		n, why := p.evictionsToHost(c, ni)
		if why != "" {
			if blockedWhy == "" {
				blockedWhy = why
			}
			continue
		}
		if hostable == 0 || n < evictions {
			evictions = n
		}
		hostable++
	}
	product := ""
	if placed[0].prod != nil {
		product = placed[0].prod.product.Name + " "
	}
	var disrupting, reconfiguring []*proposal
	for _, pr := range steps {
		if pr.evictions > 0 {
			disrupting = append(disrupting, pr)
		} else if pr.changed > 0 {
			reconfiguring = append(reconfiguring, pr)
		}
	}
	if hostable > 0 && evictions > 0 && len(disrupting) >= res.Budget {
		budget := "the disruption budget"
		if res.BudgetByHourlyCap {
			budget = "what is left of maxDisruptiveStepsPerHour"
		}
		return ReasonDisruption, fmt.Sprintf("%s: %d %snode(s) could host it after evicting %d pod(s), but %s allows %d node(s) %s",
			what, hostable, product, evictions, budget, res.Budget, p.spentOn(disrupting, p.in.InFlightDisrupting))
	}
	if hostable > 0 && evictions == 0 && len(reconfiguring) >= res.ReconfigureBudget {
		return ReasonDisruption, fmt.Sprintf("%s: %d %snode(s) could host it by re-carving idle GPUs, but maxReconfiguringNodes allows %d node(s) %s",
			what, hostable, product, res.ReconfigureBudget, p.spentOn(reconfiguring, p.in.InFlightReconfiguring))
	}
	if hostable == 0 && blockedWhy != "" {
		return ReasonDisruption, fmt.Sprintf("%s: %d %snode(s) could host it, but %s", what, len(placed), product, blockedWhy)
	}
	return ReasonCapacity, fmt.Sprintf("%s: the GPUs of all %d suitable node(s) are taken by running pods or by demand served first",
		what, len(placed))
}

// spentOn says what spent a budget: the plan's steps that count against it, with the pods
// each serves, or the changes of earlier plans still in flight, so that a pod's owner sees
// where the nodes went rather than only that none is left.
func (p *planState) spentOn(steps []*proposal, inFlight int) string {
	if len(steps) == 0 {
		if inFlight > 0 {
			return fmt.Sprintf("beyond the %d node(s) earlier plans are still changing", inFlight)
		}
		return "now"
	}
	slices.SortFunc(steps, func(a, b *proposal) int { return cmp.Compare(a.node.node.Name, b.node.node.Name) })
	parts := make([]string, len(steps))
	for i, pr := range steps {
		served := 0
		for _, n := range pr.served {
			served += n
		}
		parts[i] = fmt.Sprintf("%s (serving %d pod(s))", pr.node.node.Name, served)
	}
	return "and this plan spends them on " + strings.Join(parts, ", ")
}

// passing keeps the nodes without an obstacle and returns the first obstacle met, which the
// message shows as the example.
func passing(nodes []*nodeInfo, obstacle func(*nodeInfo) string) ([]*nodeInfo, string) {
	var out []*nodeInfo
	first := ""
	for _, ni := range nodes {
		if why := obstacle(ni); why != "" {
			if first == "" {
				first = why
			}
			continue
		}
		out = append(out, ni)
	}
	return out, first
}

// How actionable a shape obstacle is: what the policy forbids a user can change; the size of a
// node they cannot; a GPU model without the profile at all is the least to say about a pool
// whose other models have it. The most actionable obstacle among the pool's nodes is the one
// reported, so that a mixed pool does not blame its A100s for what its H200 entry forbids.
const (
	obstacleNoSuchProfile = iota
	obstacleNodeTooSmall
	obstacleCatalog
)

// shapePassing is passing for shape obstacles, reporting the most actionable one.
func (p *planState) shapePassing(c *class, nodes []*nodeInfo) ([]*nodeInfo, string) {
	var out []*nodeInfo
	best, rank := "", -1
	for _, ni := range nodes {
		why, r := p.shapeObstacle(c, ni)
		if why == "" {
			out = append(out, ni)
			continue
		}
		if r > rank {
			best, rank = why, r
		}
	}
	return out, best
}

// shapeObstacle says why no layout of this node's GPUs the catalog allows could hold one pod
// of the class, and how actionable that is; "" when one could.
func (p *planState) shapeObstacle(c *class, ni *nodeInfo) (string, int) {
	if ni.prod == nil {
		return fmt.Sprintf("node %s: %s", ni.node.Name, ni.blocker), obstacleNoSuchProfile
	}
	pi := ni.prod
	model := productLabel(ni)
	if p.needs(c, pi) == nil {
		return fmt.Sprintf("%s has no such MIG profile (it has %s)", model, strings.Join(pi.names, ", ")), obstacleNoSuchProfile
	}
	for profile, n := range c.mig {
		pr, _ := pi.product.Profile(profile)
		if !slices.Contains(pi.allowed, pr.Name) && !p.currentlyOffered(ni, pr.Name) {
			allowed := "nothing"
			if len(pi.allowed) > 0 {
				allowed = strings.Join(pi.allowed, ", ")
			}
			return fmt.Sprintf("the policy's catalog does not allow %s on %s (it allows %s)", pr.Name, model, allowed), obstacleCatalog
		}
		if int(n) > pr.MaxCount*len(ni.gpus) {
			return fmt.Sprintf("%d x %s exceed what the %d GPU(s) of a %s node can hold", n, pr.Name, len(ni.gpus), model), obstacleNodeTooSmall
		}
	}
	if c.whole > 0 {
		if !pi.wholeOK && !p.currentlyWhole(ni) {
			return fmt.Sprintf("the policy's catalog does not allow whole GPUs (MIG off) on %s (set allowWholeGPU: true in its catalog entry)", model), obstacleCatalog
		}
		if int(c.whole) > len(ni.gpus) {
			return fmt.Sprintf("%d whole GPUs exceed the %d GPU(s) of a %s node", c.whole, len(ni.gpus), model), obstacleNodeTooSmall
		}
	}
	return "", 0
}

// productLabel names the node's GPU model as users write it in a catalog (the
// nvidia.com/gpu.product spelling, inventory.GPU.Label), not by the built-in table's key.
func productLabel(ni *nodeInfo) string {
	if len(ni.node.GPUs) > 0 {
		if name := ni.node.GPUs[0].Label(); name != "" {
			return name
		}
	}
	return ni.prod.product.Name
}

func (p *planState) currentlyOffered(ni *nodeInfo, profile string) bool {
	for _, gi := range ni.gpus {
		if gi.current[ni.prod.index[profile]] > 0 {
			return true
		}
	}
	return false
}

func (p *planState) currentlyWhole(ni *nodeInfo) bool {
	for _, gi := range ni.gpus {
		if !gi.gpu.MIGEnabled {
			return true
		}
	}
	return false
}

// resourceObstacle says which non-GPU resource the node lacks for one pod, or "".
func (p *planState) resourceObstacle(c *class, ni *nodeInfo) string {
	for d, per := range c.vec {
		if per > ni.free[d] {
			name := p.dims.names[d]
			return fmt.Sprintf("node %s has %s free, the pod needs %s", ni.node.Name,
				demand.Amount(name, ni.free[d]), demand.Amount(name, per))
		}
	}
	return ""
}

// evictionsToHost estimates the evictions a node needs to host one pod of the class by
// re-carving its cheapest GPUs, or says what forbids it.
func (p *planState) evictionsToHost(c *class, ni *nodeInfo) (int, string) {
	if ni.blocker != "" {
		return 0, fmt.Sprintf("node %s may not change: %s", ni.node.Name, ni.blocker)
	}
	perGPU := 1
	need := int(c.whole)
	for profile, n := range c.mig {
		pr, _ := ni.prod.product.Profile(profile)
		per := max(1, pr.MaxCount)
		need = max(need, (int(n)+per-1)/per)
		perGPU = max(perGPU, per)
	}
	costs := make([]int, 0, len(ni.gpus))
	why := ""
	for _, gi := range ni.gpus {
		if !gi.changeable {
			if why == "" {
				why = gi.blocker
			}
			continue
		}
		costs = append(costs, len(gi.pods))
	}
	if len(costs) < need {
		return 0, why
	}
	if why := ni.toggleObstacle(c, need); why != "" {
		return 0, why
	}
	slices.Sort(costs)
	total := 0
	for _, n := range costs[:need] {
		total += n
	}
	return total, ""
}

// toggleObstacle says why the node cannot host a pod of the class when doing so needs a GPU's
// MIG mode changed and toggleHurts forbids every such change; "" otherwise.
func (ni *nodeInfo) toggleObstacle(c *class, need int) string {
	inMode := 0
	for _, gi := range ni.gpus {
		if gi.changeable && gi.gpu.MIGEnabled == (c.whole == 0) {
			inMode++
		}
	}
	if inMode >= need {
		return ""
	}
	if len(ni.stayers) > 0 {
		names := make([]string, 0, 3)
		for _, key := range ni.stayers[:min(3, len(ni.stayers))] {
			names = append(names, key.String())
		}
		if more := len(ni.stayers) - len(names); more > 0 {
			names = append(names, fmt.Sprintf("%d more", more))
		}
		return fmt.Sprintf("hosting it on node %s changes a GPU's MIG mode, and %s: the reboot would kill %s, "+
			"which gpupool does not evict, so the change waits until no such pod runs there",
			ni.node.Name, ni.rebootRisk, strings.Join(names, ", "))
	}
	for _, gi := range ni.gpus {
		if !gi.changeable && !gi.idle && ni.resetAll {
			return fmt.Sprintf("hosting it on node %s changes a GPU's MIG mode, which there resets every GPU of the node "+
				"(or reboots it), and GPU %d is in use and may not change (%s)", ni.node.Name, gi.gpu.Index, gi.blocker)
		}
	}
	return ""
}
