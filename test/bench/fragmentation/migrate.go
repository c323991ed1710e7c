package fragmentation

import (
	"cmp"
	"slices"
)

// migrate is the migration ceiling's pass at a planner interval: every running pod may move to
// any node and GPU for free, so the pool is repacked from scratch, running pods largest first
// (first fit over the node order, the fullest GPU that fits within a node), and the pending
// pods are then scheduled as usual. The repack is kept only when it keeps every running pod
// running and places at least one pending pod the current packing could not; otherwise every
// pod goes back where it was. A move costs nothing: the pod keeps its departure time, and it is
// not counted as an eviction. First fit decreasing is a heuristic, not an optimal packing, so
// this row bounds cross-node repacking from above only as far as that heuristic packs tightly;
// it never ends an interval serving less than the packing it started from.
func (s *sim) migrate() bool {
	if len(s.queue) == 0 {
		return false
	}
	type where struct {
		node int32
		gpus []int32
	}
	var running []int32
	for _, n := range s.nodes {
		running = append(running, n.running...)
	}
	if len(running) == 0 {
		return false
	}
	before := make(map[int32]where, len(running))
	for _, p := range running {
		before[p] = where{s.st[p].node, slices.Clone(s.st[p].gpus)}
		s.release(p)
	}
	slices.SortFunc(running, func(a, b int32) int {
		pa, pb := &s.pods[a], &s.pods[b]
		return cmp.Or(cmp.Compare(pb.Shape.DemandSlices(), pa.Shape.DemandSlices()),
			cmp.Compare(pb.CPU, pa.CPU), cmp.Compare(pb.MemMiB, pa.MemMiB), cmp.Compare(a, b))
	})
	packed := true
	for _, p := range running {
		if !s.pack(p) {
			packed = false
			break
		}
	}
	if packed {
		queued := len(s.queue)
		s.schedule(s.queue)
		if len(s.queue) < queued {
			for _, p := range running {
				if b := before[p]; s.st[p].node != b.node || !slices.Equal(s.st[p].gpus, b.gpus) {
					s.migrations++
				}
			}
			return true
		}
	}
	for _, p := range running {
		if s.st[p].node >= 0 {
			s.release(p)
		}
	}
	for _, p := range running {
		b := before[p]
		s.hold(p, int(b.node), b.gpus)
	}
	return false
}

// pack puts a running pod of a fluid strategy on the first node that fits it, on the fullest
// GPU with room for it (whole-GPU pods on idle GPUs), and reports success.
func (s *sim) pack(p int32) bool {
	spec := &s.pods[p]
	for ni, n := range s.nodes {
		if n.cpuFree < spec.CPU || n.memFree < spec.MemMiB {
			continue
		}
		if spec.Shape.Whole > 0 {
			var gpus []int32
			for g := range n.gpus {
				if gp := &n.gpus[g]; gp.used == 0 && gp.wholePod < 0 {
					gpus = append(gpus, int32(g))
					if len(gpus) == spec.Shape.Whole {
						s.hold(p, ni, gpus)
						return true
					}
				}
			}
			continue
		}
		best := -1
		for g := range n.gpus {
			gp := &n.gpus[g]
			if gp.wholePod < 0 && gp.used+spec.Shape.Slices <= 7 && (best < 0 || gp.used > n.gpus[best].used) {
				best = g
			}
		}
		if best >= 0 {
			s.hold(p, ni, []int32{int32(best)})
			return true
		}
	}
	return false
}

// hold puts a running pod of a fluid strategy on node ni's gpus, which must have room for it;
// unlike placeOn it starts nothing, so the pod's departure and the served total stay as they
// are.
func (s *sim) hold(p int32, ni int, gpus []int32) {
	spec := &s.pods[p]
	n := s.nodes[ni]
	for _, g := range gpus {
		gp := &n.gpus[g]
		if spec.Shape.Whole > 0 {
			gp.wholePod, gp.used = p, 7
		} else {
			gp.used += spec.Shape.Slices
		}
	}
	n.cpuFree -= spec.CPU
	n.memFree -= spec.MemMiB
	n.running = append(n.running, p)
	s.st[p].node, s.st[p].gpus = int32(ni), gpus
}
