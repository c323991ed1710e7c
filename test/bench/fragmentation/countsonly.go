package fragmentation

import "github.com/gpupool/gpupool/internal/mig"

// gpuPlan is what the counts-only planner wants on one GPU.
type gpuPlan struct {
	off   bool
	added []int // compute sizes of the instances to add
}

type gpuKey struct{ node, gpu int }

// countsOnly is a nos-style greedy planner: for each pending pod in queue order it looks for a
// GPU whose busy instances plus the planned ones plus the pod's profile stay within 7 compute
// and 8 memory slices, ignoring where the instances sit. Free instances are dropped and the
// layout is rebuilt around the busy ones; when the hardware cannot place the result (a busy
// instance blocks the slots the sums promised) the layout is counted invalid and not applied.
// It never evicts. Under CountsOnlyIdle it changes idle GPUs only. It reports whether it
// changed any GPU.
func (s *sim) countsOnly() bool {
	idleOnly := s.cfg.Strategy == CountsOnlyIdle
	plans := map[gpuKey]*gpuPlan{}
	cpu := make([]int64, len(s.nodes))
	mem := make([]int64, len(s.nodes))
	for i, n := range s.nodes {
		cpu[i], mem[i] = n.cpuFree, n.memFree
	}
	usage := func(k gpuKey) (compute, memory int) {
		gp := &s.nodes[k.node].gpus[k.gpu]
		for _, in := range gp.insts {
			if in.pod >= 0 {
				compute += in.compute
				memory += in.size
			}
		}
		if p := plans[k]; p != nil {
			for _, c := range p.added {
				compute += c
				memory += memSlices[c]
			}
		}
		return compute, memory
	}
	for _, p := range s.queue {
		spec := &s.pods[p]
		sh := spec.Shape
	nodes:
		for ni, n := range s.nodes {
			if cpu[ni] < spec.CPU || mem[ni] < spec.MemMiB {
				continue
			}
			if sh.Whole > 0 {
				var idle []int
				for g := range n.gpus {
					if plans[gpuKey{ni, g}] == nil && n.gpus[g].idle() {
						idle = append(idle, g)
					}
				}
				if len(idle) < sh.Whole {
					continue
				}
				for _, g := range idle[:sh.Whole] {
					plans[gpuKey{ni, g}] = &gpuPlan{off: true}
				}
				cpu[ni] -= spec.CPU
				mem[ni] -= spec.MemMiB
				break
			}
			for g := range n.gpus {
				k := gpuKey{ni, g}
				gp := &n.gpus[g]
				if pl := plans[k]; pl != nil && pl.off || gp.wholePod >= 0 || !gp.mig && !gp.idle() || idleOnly && !gp.idle() {
					continue
				}
				c, m := usage(k)
				if c+sh.Slices > 7 || m+memSlices[sh.Slices] > 8 {
					continue
				}
				if plans[k] == nil {
					plans[k] = &gpuPlan{}
				}
				plans[k].added = append(plans[k].added, sh.Slices)
				cpu[ni] -= spec.CPU
				mem[ni] -= spec.MemMiB
				break nodes
			}
		}
	}
	changed := false
	for k, pl := range plans {
		s.proposed++
		node := s.nodes[k.node]
		gp := &node.gpus[k.gpu]
		if pl.off {
			gp.mig, gp.insts = false, nil
			node.recount()
			changed = true
			continue
		}
		want := mig.Layout{}
		var fixed []mig.Instance
		var busy []instance
		for _, in := range gp.insts {
			if in.pod >= 0 {
				want[in.profile]++
				fixed = append(fixed, mig.Instance{Profile: in.profile, Placement: mig.Placement{Start: in.start, Size: in.size}})
				busy = append(busy, in)
			}
		}
		for _, c := range pl.added {
			want[s.profile[c]]++
		}
		placed, err := s.cfg.Product.Place(want, fixed)
		if err != nil {
			s.invalid++
			continue
		}
		insts := s.instances(placed)
		for i := range insts {
			for _, b := range busy {
				if b.start == insts[i].start && b.profile == insts[i].profile {
					insts[i].pod = b.pod
				}
			}
		}
		gp.mig, gp.insts = true, insts
		node.recount()
		changed = true
	}
	return changed
}
