package fragmentation

import (
	"fmt"
	"slices"

	"github.com/gpupool/gpupool/internal/mig"
)

// The DynamicMIG mode: NVIDIA's DRA driver in its DynamicMIG mode publishes every (profile,
// placement) of each GPU as a partition device consuming the GPU's shared counters (one per
// memory slice, plus engines), creates the instance when a claim is allocated and destroys it
// when the claim goes (kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/
// partitions.go, nvlib.go inspectMigProfilesAndPlacements, device_state.go prepareDevices;
// docs/design/dra.md "DynamicMIG: what the driver publishes and does"). The kube-scheduler's DRA
// allocator takes the first device that fits and never moves a claim
// (k8s.io/dynamic-resource-allocation v0.37.2 structured/internal/*/pools_*.go sorts a pool's
// slices by name, and the allocator walks each slice's devices in order). So a GPU's live
// instances are exactly its allocated claims at the placements first-fit gave them.

// The DynamicMIG strategies; DynamicMIGStrategies lists them in report order.
const (
	// DMFirstFit is the allocator alone: every claim takes the first free partition of its
	// profile in the driver's device order, and nothing ever moves.
	DMFirstFit Strategy = "DynamicMIG: scheduler first-fit alone"
	// DMReserve adds gpupool's reserve (placement.Reserve): at each planner interval the small
	// partitions over placements held for large profiles are tainted NoSchedule, so first-fit
	// packs small claims elsewhere. No evictions.
	DMReserve Strategy = "DynamicMIG: first-fit + gpupool reserve taints"
	// DMMoves adds gpupool's moves (placement.Plan): at each planner interval the claims in
	// the way of a pending claim's placement are evicted and re-allocated first-fit, with the
	// partitions the plan keeps free tainted meanwhile.
	DMMoves Strategy = "DynamicMIG: first-fit + gpupool moves"
)

// DynamicMIGStrategies are the DynamicMIG mode's strategies, in report order.
var DynamicMIGStrategies = []Strategy{DMFirstFit, DMReserve, DMMoves}

// DynamicMIG says whether the strategy models NVIDIA's DRA driver in its DynamicMIG mode.
func (st Strategy) DynamicMIG() bool {
	return st == DMFirstFit || st == DMReserve || st == DMMoves
}

// dmig says whether the replay models the DynamicMIG driver.
func (s *sim) dmig() bool { return s.cfg.Strategy.DynamicMIG() }

// partitionKey is one partition device of a GPU: a profile at a placement start. The driver
// names it gpu-<minor>-mig-<profile>-<GI profile ID>-<start>, so this is the device.
type partitionKey struct {
	profile string
	start   int
}

// dmState is what the DynamicMIG replay keeps beside the GPUs: the canonical profiles by
// compute size, resolved once.
type dmState struct {
	prof [8]*mig.Profile // index: compute slices; nil where the mapping uses none
	// arrivals counts, per compute size (0: whole GPUs, counted per GPU), the claims that
	// arrived since the last planner call: the reserve's recent demand.
	arrivals [8]int
	// mv drives the moves strategy.
	mv *dmMoves
	// nodeIdx finds a node by name.
	nodeIdx map[string]int
}

func newDMState(s *sim) *dmState {
	d := &dmState{}
	for c, name := range s.profile {
		if pr, ok := s.cfg.Product.Profile(name); ok && c < len(d.prof) {
			d.prof[c] = pr
		}
	}
	return d
}

// occupied is the GPU's live instances, as mig.Product's placement functions take them.
func (g *simGPU) occupied() []mig.Instance {
	out := make([]mig.Instance, 0, len(g.insts))
	for _, in := range g.insts {
		out = append(out, mig.Instance{Profile: in.profile, Placement: mig.Placement{Start: in.start, Size: in.size}})
	}
	return out
}

// tainted says whether the partition carries a NoSchedule device taint.
func (g *simGPU) tainted(profile string, start int) bool {
	return slices.Contains(g.taints, partitionKey{profile, start})
}

// firstFree is the first partition of profile in the driver's device order whose memory
// slices are free and which no taint covers, -1 when none. The driver's devices of one GPU
// sit in one slice sorted by name, and a profile's names differ only in the placement start
// (one digit), so that order is ascending start, the order mig.Product.FreePlacements gives.
func (s *sim) firstFree(g *simGPU, pr *mig.Profile, honourTaints bool) int {
	if g.wholePod >= 0 {
		return -1
	}
	free, err := s.cfg.Product.FreePlacements(pr.Name, g.occupied())
	if err != nil {
		return -1
	}
	for _, pl := range free {
		if !honourTaints || !g.tainted(pr.Name, pl.Start) {
			return pl.Start
		}
	}
	return -1
}

// dmRefit recomputes which canonical profiles have an untainted free partition on the GPU.
func (s *sim) dmRefit(g *simGPU) {
	g.fit = 0
	for c, pr := range s.dm.prof {
		if pr != nil && s.firstFree(g, pr, true) >= 0 {
			g.fit |= 1 << c
		}
	}
}

// dmRecount refreshes the node's count of GPUs with room per compute size (freeCanon) and of
// idle GPUs (freeCanon[0]), which let the scheduler skip a node without walking its GPUs.
func (n *simNode) dmRecount() {
	n.freeCanon = [8]int{}
	for g := range n.gpus {
		gp := &n.gpus[g]
		if gp.idle() {
			n.freeCanon[0]++
		}
		for c := 1; c < 8; c++ {
			if gp.fit&(1<<c) != 0 {
				n.freeCanon[c]++
			}
		}
	}
}

// dmAllocate is the allocator on one node: shape's claim gets the first free, untainted
// partition of its profile over the node's GPUs in index order (the driver publishes one slice
// of devices per GPU, and the allocator walks slices in name order), or, for whole GPUs, the
// first idle GPUs: the gpu-<minor> device consumes every counter of its GPU. It returns the
// GPUs taken, nil when the node has no room.
func (s *sim) dmAllocate(p int32, n *simNode, shape Shape) []int32 {
	if shape.Whole > 0 {
		if n.freeCanon[0] < shape.Whole {
			return nil
		}
		var gpus []int32
		for g := range n.gpus {
			if n.gpus[g].idle() {
				gpus = append(gpus, int32(g))
				if len(gpus) == shape.Whole {
					break
				}
			}
		}
		for _, g := range gpus {
			n.gpus[g].wholePod = p
			n.gpus[g].fit = 0
		}
		n.dmRecount()
		return gpus
	}
	c := shape.Slices
	pr := s.dm.prof[c]
	if pr == nil || n.freeCanon[c] == 0 {
		return nil
	}
	for g := range n.gpus {
		gp := &n.gpus[g]
		if gp.fit&(1<<c) == 0 {
			continue
		}
		start := s.firstFree(gp, pr, true)
		if start < 0 {
			continue
		}
		gp.insts = append(gp.insts, instance{profile: pr.Name, compute: c, start: start, size: pr.MemorySlices, pod: p, canon: true})
		s.dmRefit(gp)
		n.dmRecount()
		return []int32{int32(g)}
	}
	return nil
}

// dmRelease destroys what the pod's claim holds on GPU g: its instance, or the whole GPU.
func (s *sim) dmRelease(n *simNode, g int32, p int32) {
	gp := &n.gpus[g]
	if gp.wholePod == p {
		gp.wholePod = -1
	}
	gp.insts = slices.DeleteFunc(gp.insts, func(in instance) bool { return in.pod == p })
	s.dmRefit(gp)
	n.dmRecount()
}

// setTaints replaces every GPU's device taints with the given ones (per node, per GPU); it
// reports whether a partition lost its taint.
func (s *sim) setTaints(taints map[[2]int][]partitionKey) (opened bool) {
	for ni, n := range s.nodes {
		changed := false
		for g := range n.gpus {
			gp := &n.gpus[g]
			want := taints[[2]int{ni, g}]
			if len(gp.taints) == 0 && len(want) == 0 {
				continue
			}
			for _, k := range gp.taints {
				opened = opened || !slices.Contains(want, k)
			}
			gp.taints = want
			s.dmRefit(gp)
			changed = true
		}
		if changed {
			n.dmRecount()
		}
	}
	return opened
}

// dmStranded says, for one GPU of a node some pending claim fits by CPU and memory, how many of
// its compute slices are free, how many of those no pending claim the node could host can use
// (stranded), and how many of those are stranded by placement: some such claim's profile has
// enough free memory and compute slices in count on the GPU, but at no allowed placement.
// Taints are ignored: a held placement is free, and free placements are what this counts.
func (s *sim) dmStranded(g *simGPU, want *[kinds]bool) (free, stranded, byPlacement int64) {
	if g.wholePod >= 0 {
		return 0, 0, 0
	}
	used := 0
	for _, in := range g.insts {
		used += in.compute
	}
	free = int64(s.cfg.Product.ComputeSlices - used)
	if free <= 0 {
		return max(free, 0), 0, 0
	}
	if want[kindWhole] && len(g.insts) == 0 {
		return free, 0, 0
	}
	freeMem := s.cfg.Product.FreeMemorySlices(g.occupied())
	byCount := false
	for c := 1; c < 8; c++ {
		pr := s.dm.prof[c]
		if !want[c] || pr == nil {
			continue
		}
		if s.firstFree(g, pr, false) >= 0 {
			return free, 0, 0
		}
		byCount = byCount || (pr.MemorySlices <= freeMem && pr.ComputeSlices <= int(free))
	}
	if byCount {
		return free, free, free
	}
	return free, free, 0
}

// dmPlan is the DynamicMIG strategies' work at a planner interval.
func (s *sim) dmPlan() (bool, error) {
	switch s.cfg.Strategy {
	case DMReserve:
		return s.dmReserve(), nil
	case DMMoves:
		return s.dmMove()
	}
	return false, nil
}

// dmCheck verifies the replay's DynamicMIG state: every GPU's instances at allowed,
// non-overlapping placements (mig.Product.Validate), each held by the pod that runs there.
func (s *sim) dmCheck() error {
	for _, n := range s.nodes {
		for g := range n.gpus {
			gp := &n.gpus[g]
			if err := s.cfg.Product.Validate(gp.occupied()); err != nil {
				return fmt.Errorf("node %s GPU %d: %w", n.spec.Name, g, err)
			}
			if gp.wholePod >= 0 && len(gp.insts) > 0 {
				return fmt.Errorf("node %s GPU %d: whole-GPU claim beside %d instances", n.spec.Name, g, len(gp.insts))
			}
		}
	}
	return nil
}
