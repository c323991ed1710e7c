// The landing ledger: the spare capacity of every node that may host a moved pod, kept current as proposals are accepted.

package planner

import (
	"cmp"
	"slices"
)

// ledger is the spare capacity of every node that may host a moved pod, indexed so that a
// landing is found without walking the whole pool.
type ledger struct {
	spare []*state // by node position; nil for a node that may host nothing
	// byProfile lists, per product id and profile position, the nodes with a spare instance
	// of it; whole lists, per product id, the nodes with a spare whole GPU.
	byProfile map[int][][]*nodeInfo
	whole     map[int][]*nodeInfo
}

// hostable reports whether a moved pod may land on the node: the scheduler may place pods
// there, the planner can read its GPUs, and no other plan is changing it.
func (p *planState) hostable(ni *nodeInfo) bool {
	return ni.schedulable && ni.prod != nil && p.in.Frozen[ni.node.Name] == ""
}

// refreshLedger computes the spare capacity of every node from scratch. Nothing reads the
// ledger while it is built: the parallel first pass of proposals only reads it.
func (p *planState) refreshLedger() {
	if !p.moves {
		return
	}
	p.ledger = &ledger{spare: make([]*state, len(p.nodes)), byProfile: map[int][][]*nodeInfo{}, whole: map[int][]*nodeInfo{}}
	for _, ni := range p.nodes {
		p.indexLedger(ni, true)
	}
}

// updateLedger recomputes the spare capacity of the nodes an acceptance (or its undoing)
// touched: the proposal's node, the nodes its pods land on and its carves. Only they change,
// and rebuilding the whole ledger at every acceptance would make a plan of a large pool
// quadratic in its nodes.
func (p *planState) updateLedger(pr *proposal) {
	if !p.moves || p.ledger == nil {
		return
	}
	touched := []*nodeInfo{pr.node}
	for _, l := range pr.landings {
		touched = append(touched, l.to)
	}
	for _, c := range pr.carves {
		touched = append(touched, c.node)
	}
	for _, ni := range touched {
		p.indexLedger(ni, false)
	}
}

// indexLedger records node ni's spare capacity in the ledger; fresh says the ledger holds
// nothing of it yet. The lists stay in node order, so landings are found in the same order as
// ever.
func (p *planState) indexLedger(ni *nodeInfo, fresh bool) {
	p.ledgerVersion++
	l := p.ledger
	var st *state
	if p.hostable(ni) {
		if s, ok := p.acceptedState(ni); ok {
			st = &s
		}
	}
	l.spare[ni.pos] = st
	if ni.prod == nil {
		return
	}
	id := ni.prod.id
	rows := l.byProfile[id]
	for len(rows) < len(ni.prod.names) {
		rows = append(rows, nil)
	}
	for k := range ni.prod.names {
		rows[k] = setMember(rows[k], ni, st != nil && st.free[k] > 0, fresh)
	}
	l.byProfile[id] = rows
	l.whole[id] = setMember(l.whole[id], ni, st != nil && st.whole > 0, fresh)
}

// setMember puts ni in (or takes it out of) a list sorted by node position.
func setMember(list []*nodeInfo, ni *nodeInfo, member, fresh bool) []*nodeInfo {
	if fresh {
		// Nodes are indexed in order on a fresh ledger: appending keeps the list sorted.
		if member {
			list = append(list, ni)
		}
		return list
	}
	i, found := slices.BinarySearchFunc(list, ni.pos, func(x *nodeInfo, pos int) int { return cmp.Compare(x.pos, pos) })
	switch {
	case member && !found:
		list = slices.Insert(list, i, ni)
	case !member && found:
		list = slices.Delete(list, i, i+1)
	}
	return list
}
