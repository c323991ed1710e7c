// A proposal (one node's change and what it serves), its cost, and the order proposals are accepted in.

package planner

import (
	"cmp"
	"slices"
)

// proposal is the best change found for one node against the current remaining demand.
type proposal struct {
	node      *nodeInfo
	choice    choice
	gain      score
	served    []int
	evictions int
	changed   int
	version   int
	leftover  int // stranded compute slices this choice leaves; -1 until computed
	// landings are the evicted pods this choice moves to other nodes.
	landings []landing
	// carves are the changes on other nodes that make room for some of the landings.
	carves []*carve
	// seq is the order the proposal was accepted in, from 1; 0 until it is.
	seq int
}

// proposalHeap orders proposals best first: most served, then fewest evictions, fewest GPUs
// changed, then node name, so that equal inputs give equal plans. With pack set, nodes with
// fewer idle GPUs come first whatever they serve; see greedy.
type proposalHeap struct {
	items []*proposal
	pack  bool
}

func (h *proposalHeap) Len() int { return len(h.items) }

func (h *proposalHeap) Less(i, j int) bool { return h.before(h.items[i], h.items[j]) }

// before is the heap's order: servesBefore, or fewest idle GPUs first while packing.
func (h *proposalHeap) before(a, b *proposal) bool {
	if h.pack && a.node.idleGPUs != b.node.idleGPUs {
		return a.node.idleGPUs < b.node.idleGPUs
	}
	return servesBefore(a, b)
}

func (h *proposalHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }

func (h *proposalHeap) Push(x any) { h.items = append(h.items, x.(*proposal)) }

func (h *proposalHeap) Pop() any {
	old := h.items
	x := old[len(old)-1]
	h.items = old[:len(old)-1]
	return x
}

// servesBefore is the plain proposal order: most served, fewest evictions, fewest GPUs changed,
// node name.
func servesBefore(a, b *proposal) bool {
	if c := compareProposals(a, b); c != 0 {
		return c < 0
	}
	return a.node.node.Name < b.node.node.Name
}

// compareProposals orders proposals by what they serve (more first), then evictions and GPUs
// changed (fewer first): negative when a comes first, 0 when they tie on all three.
func compareProposals(a, b *proposal) int {
	return cmp.Or(-a.gain.compare(b.gain), cmp.Compare(a.evictions, b.evictions), cmp.Compare(a.changed, b.changed))
}

// cost is how many nodes of each budget accepting the proposal spends.
func (pr *proposal) cost() (disrupt, reconfigure int) {
	if pr.evictions > 0 {
		disrupt++
	} else {
		reconfigure++
	}
	for _, c := range pr.carves {
		if len(c.evictions) > 0 {
			disrupt++
		} else {
			reconfigure++
		}
	}
	return disrupt, reconfigure
}

func changedGPUs(pr *proposal) []*gpuInfo {
	var out []*gpuInfo
	for i, gi := range pr.node.gpus {
		if pr.choice[i] != keep {
			out = append(out, gi)
		}
	}
	return out
}

// keepCopy turns a candidate that lives in reused buffers into a proposal of its own.
func keepCopy(cand *proposal) *proposal {
	out := *cand
	out.choice = slices.Clone(cand.choice)
	out.served = slices.Clone(cand.served)
	out.gain = score{tiers: slices.Clone(cand.gain.tiers), byClass: out.served, pods: cand.gain.pods}
	out.landings = slices.Clone(cand.landings)
	out.carves = slices.Clone(cand.carves)
	return &out
}
