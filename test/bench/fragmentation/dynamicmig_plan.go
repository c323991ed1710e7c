package fragmentation

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/planner/placement"
)

// arrive counts an arriving claim toward the reserve's recent demand.
func (d *dmState) arrive(sh Shape) {
	if sh.Whole > 0 {
		d.arrivals[0] += sh.Whole
		return
	}
	d.arrivals[sh.Slices]++
}

// placementGPUs is the cluster as placement's model reads it: each GPU's claims at their
// placements, every pod movable (a controller recreates it, no PodDisruptionBudget), as the
// static replay's snapshot has them. A whole-GPU claim holds every memory slice and never
// moves: placement moves MIG claims only.
func (s *sim) placementGPUs() []placement.GPU {
	var out []placement.GPU
	full := mig.Placement{Start: 0, Size: s.cfg.Product.MemorySlices}
	for _, n := range s.nodes {
		for g := range n.gpus {
			gp := &n.gpus[g]
			pg := placement.GPU{Node: n.spec.Name, Index: g, Product: s.cfg.Product}
			if gp.wholePod >= 0 {
				pg.Holders = []placement.Holder{{Profile: s.profile[7], Placement: full}}
			}
			for _, in := range gp.insts {
				name := s.pods[in.pod].Name
				pg.Holders = append(pg.Holders, placement.Holder{Claim: namespace + "/" + name, Profile: in.profile,
					Placement: mig.Placement{Start: in.start, Size: in.size},
					Pods:      []placement.Pod{{Name: types.NamespacedName{Namespace: namespace, Name: name}, Controlled: true}}})
			}
			out = append(out, pg)
		}
	}
	return out
}

// largeProfiles are the compute sizes whose canonical profile takes at least half the GPU's
// memory slices: those first-fit strands (a 3g needs slices 0-3 or 4-7 whole).
func (s *sim) largeProfiles() []int {
	var out []int
	for c, pr := range s.dm.prof {
		if pr != nil && 2*pr.MemorySlices >= s.cfg.Product.MemorySlices {
			out = append(out, c)
		}
	}
	return out
}

// dmReserve is the reserve strategy's planner call: the headroom per large profile is the
// claims of it pending now plus those that arrived since the last call (whole-GPU claims
// count toward the 7g headroom, one per GPU), a rule fixed before any replay, not tuned; the
// taints placement.Reserve names replace the previous ones.
func (s *sim) dmReserve() bool {
	var pending [8]int
	for _, p := range s.queue {
		if sh := s.pods[p].Shape; sh.Whole > 0 {
			pending[0] += sh.Whole
		} else {
			pending[sh.Slices]++
		}
	}
	var headroom []placement.Headroom
	for _, c := range s.largeProfiles() {
		want := pending[c] + s.dm.arrivals[c]
		if c == 7 {
			want += pending[0] + s.dm.arrivals[0]
		}
		if want > 0 {
			headroom = append(headroom, placement.Headroom{Profile: s.dm.prof[c].Name, MinFree: want})
		}
	}
	s.dm.arrivals = [8]int{}
	res := placement.Reserve(s.placementGPUs(), headroom)
	// A partition the new taints leave open may take a pending claim: then the queue is
	// scheduled again.
	return s.setTaints(s.taintMap(res.Holds))
}

// taintMap indexes the holds' taints by node and GPU.
func (s *sim) taintMap(holds []placement.Hold) map[[2]int][]partitionKey {
	nodeIdx := s.nodeIndex()
	out := map[[2]int][]partitionKey{}
	for _, h := range holds {
		k := [2]int{nodeIdx[h.Node], h.GPU}
		for _, t := range h.Taint {
			out[k] = append(out[k], partitionKey{t.Profile, t.Placement.Start})
		}
	}
	return out
}

func (s *sim) nodeIndex() map[string]int {
	if s.dm.nodeIdx == nil {
		s.dm.nodeIdx = make(map[string]int, len(s.nodes))
		for i, n := range s.nodes {
			s.dm.nodeIdx[n.spec.Name] = i
		}
	}
	return s.dm.nodeIdx
}

// dmMoves drives the moves strategy: the budget in nodes and the pods by name.
type dmMoves struct {
	maxNodes int
	byName   map[string]int32
}

func newDMMoves(s *sim) *dmMoves {
	m := &dmMoves{byName: make(map[string]int32, len(s.pods))}
	b := intstr.Parse(s.cfg.Budget)
	if b.Type == intstr.Int {
		m.maxNodes = max(0, b.IntValue())
	} else if v, err := intstr.GetScaledValueFromIntOrPercent(&b, len(s.nodes), true); err == nil {
		// Rounded up, as the planner reads maxDisruptedNodes (internal/planner/pool.go).
		m.maxNodes = max(0, v)
	}
	for i, p := range s.pods {
		m.byName[p.Name] = int32(i)
	}
	return m
}

// dmMove is the moves strategy's planner call: placement.Plan with the budget in nodes, then
// each opening applied as the controller would: its KeepFree partitions tainted, the claims in
// the way evicted (their pods requeued, as their controller recreates them), the queue
// scheduled first-fit with the taints in place, and the taints removed. A moved claim lands
// wherever first-fit puts it, which need not be the landing the plan expected.
//
// What the plan is given, so that one call stays well under a second on the trace's 6,212
// GPUs at saturation (placement.Plan tries every partition of every GPU a claim may use, each
// with a landing search over every GPU): the GPUs with a free memory slice (a full GPU is no
// landing, and an opening there moves the most claims); and per pending MIG claim, the nodes
// whose free CPU and memory fit its pod and where some GPU has the profile's memory and compute
// slices free in count, the claims stranded by placement that moves exist to repair; at most as
// many claims of one profile as the budget has nodes (each opening takes a node), oldest first.
func (s *sim) dmMove() (bool, error) {
	var claims []placement.Claim
	var perProfile [8]int
	for _, p := range s.queue {
		sh := s.pods[p].Shape
		pr := s.dm.prof[sh.Slices]
		if sh.Whole > 0 || pr == nil || perProfile[sh.Slices] >= s.dm.mv.maxNodes {
			continue
		}
		spec := &s.pods[p]
		var nodes []string
		for _, n := range s.nodes {
			if n.cpuFree >= spec.CPU && n.memFree >= spec.MemMiB && s.roomInCount(n, pr) {
				nodes = append(nodes, n.spec.Name)
			}
		}
		if len(nodes) == 0 {
			continue
		}
		perProfile[sh.Slices]++
		claims = append(claims, placement.Claim{Claim: namespace + "/" + spec.Name + "-gpu",
			Pod: types.NamespacedName{Namespace: namespace, Name: spec.Name}, Profile: pr.Name, Nodes: nodes})
	}
	if len(claims) == 0 {
		return false, nil
	}
	var gpus []placement.GPU
	for _, g := range s.placementGPUs() {
		if s.cfg.Product.FreeMemorySlices(holderInstances(g.Holders)) > 0 {
			gpus = append(gpus, g)
		}
	}
	res := placement.Plan(placement.Input{GPUs: gpus, Pending: claims,
		Budget:  placement.Budget{MaxNodes: s.dm.mv.maxNodes, MaxEvictions: placement.Unlimited},
		Options: placement.Options{MoveUncontrolled: true}})
	if len(res.Openings) == 0 {
		return false, nil
	}
	nodeIdx := s.nodeIndex()
	keep := map[[2]int][]partitionKey{}
	evicted := map[int32]bool{}
	for _, o := range res.Openings {
		ni, ok := nodeIdx[o.Node]
		if !ok {
			return false, fmt.Errorf("placement plan at t=%ds names unknown node %s", s.now, o.Node)
		}
		k := [2]int{ni, o.GPU}
		for _, part := range o.KeepFree {
			keep[k] = append(keep[k], partitionKey{part.Profile, part.Placement.Start})
		}
		for _, mv := range o.Moves {
			for _, pod := range mv.Holder.Pods {
				p, ok := s.dm.mv.byName[pod.Name.Name]
				if !ok || s.st[p].node != int32(ni) {
					return false, fmt.Errorf("placement plan at t=%ds moves %s, not running on %s", s.now, pod.Name, o.Node)
				}
				if !evicted[p] {
					s.evict(p)
					evicted[p] = true
				}
			}
		}
	}
	s.setTaints(keep)
	s.schedule(s.queue)
	s.setTaints(nil)
	return true, nil
}

// roomInCount says whether some GPU of the node has the profile's memory and compute slices
// free in count, whatever their placement.
func (s *sim) roomInCount(n *simNode, pr *mig.Profile) bool {
	for g := range n.gpus {
		gp := &n.gpus[g]
		if gp.wholePod >= 0 {
			continue
		}
		used := 0
		for _, in := range gp.insts {
			used += in.compute
		}
		if s.cfg.Product.ComputeSlices-used >= pr.ComputeSlices && s.cfg.Product.FreeMemorySlices(gp.occupied()) >= pr.MemorySlices {
			return true
		}
	}
	return false
}

func holderInstances(hs []placement.Holder) []mig.Instance {
	out := make([]mig.Instance, len(hs))
	for i, h := range hs {
		out[i] = mig.Instance{Profile: h.Profile, Placement: h.Placement}
	}
	return out
}
