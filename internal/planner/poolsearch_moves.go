package planner

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strings"
)

// A node's moves in the pool search, and the states the walk over nodes keeps.

// poolMove is one way a node takes part in a plan: an outcome and one of its fills, by its
// effect on the walk's state.
type poolMove struct {
	outcome, fill int
	// delta is, per class, pending pods placed, or for running pods room made less pods
	// evicted.
	delta           []int
	disrupt, reconf int
	pdb             []int // per budget of pdbKeys
	evictions       int
}

// moves lists a node's distinct moves that no other move of the same cost beats.
func (ps *poolSearch) moves(outcomes []*poolOutcome, pdbKeys []string) ([]*poolMove, bool) {
	n := len(ps.classes)
	seen := map[string]bool{}
	groups := map[string][]*poolMove{}
	var order []string
	for oi, oc := range outcomes {
		base := poolMove{outcome: oi, pdb: make([]int, len(pdbKeys)), evictions: len(oc.evicted)}
		if oc.disrupts() {
			base.disrupt = 1
		} else if oc.changed {
			base.reconf = 1
		}
		copy(base.pdb, oc.spend)
		group := string(appendKey(appendKey(nil, int64(base.disrupt), int64(base.reconf), int64(base.evictions)), ints64(base.pdb)...))
		for fi, f := range oc.fills {
			if ps.work += poolCompareWork; ps.work > poolMaxWork {
				return nil, false
			}
			m := base
			m.fill = fi
			m.delta = make([]int, n)
			for k, pc := range ps.classes {
				m.delta[k] = int(f[k])
				if pc.pending == nil {
					m.delta[k] -= oc.evicts[k]
				}
			}
			key := string(appendKey([]byte(group), ints64(m.delta)...))
			if seen[key] {
				continue
			}
			seen[key] = true
			if groups[group] == nil {
				order = append(order, group)
			}
			groups[group] = append(groups[group], &m)
		}
	}
	var out []*poolMove
	for _, group := range order {
		list := groups[group]
		if len(list) > poolMaxCompared {
			// Comparing every pair of a large group costs more than the states its beaten
			// moves would add; the walk's own pruning drops what they lead to.
			out = append(out, list...)
			continue
		}
		sum := func(m *poolMove) int {
			t := 0
			for _, v := range m.delta {
				t += v
			}
			return t
		}
		slices.SortStableFunc(list, func(a, b *poolMove) int { return cmp.Compare(sum(b), sum(a)) })
		var kept []*poolMove
		for _, m := range list {
			if ps.work += len(kept) + 1; ps.work > poolMaxWork { // comparing two moves: about one unit
				return nil, false
			}
			if !slices.ContainsFunc(kept, func(k *poolMove) bool { return atLeast(k.delta, m.delta) }) {
				kept = append(kept, m)
			}
		}
		out = append(out, kept...)
	}
	return out, true
}

func atLeast(a, b []int) bool {
	for i, v := range a {
		if v < b[i] {
			return false
		}
	}
	return true
}

// undominated drops the states another one beats: as many pods placed and as much room in
// every class, at no more cost of any kind. nil when the pruning runs past the work bound.
func (ps *poolSearch) undominated(codec poolCodec, states map[string]poolEntry) map[string]poolEntry {
	type item struct {
		key string
		s   poolState
		sum int
	}
	list := make([]item, 0, len(states))
	for key := range states {
		s := codec.decode(key)
		sum := 0
		for _, v := range s.counts {
			sum += v
		}
		list = append(list, item{key, s, sum})
	}
	slices.SortFunc(list, func(a, b item) int { return cmp.Or(cmp.Compare(b.sum, a.sum), strings.Compare(a.key, b.key)) })
	var kept []item
	out := map[string]poolEntry{}
	for _, it := range list {
		if ps.work += poolCompareWork * len(kept); ps.work > poolMaxWork {
			return nil
		}
		if !slices.ContainsFunc(kept, func(k item) bool { return k.s.dominates(&it.s) }) {
			kept = append(kept, it)
			out[it.key] = states[it.key]
		}
	}
	return out
}

// poolState is a state between two nodes of the walk.
type poolState struct {
	// counts are, per class, pending pods placed, or for running pods the room made less the
	// pods evicted.
	counts          []int
	disrupt, reconf int
	pdb             []int
	evictions       int
}

func (s *poolState) dominates(o *poolState) bool {
	if s.disrupt > o.disrupt || s.reconf > o.reconf || s.evictions > o.evictions {
		return false
	}
	for j, v := range s.pdb {
		if v > o.pdb[j] {
			return false
		}
	}
	for k, v := range s.counts {
		if v < o.counts[k] {
			return false
		}
	}
	return true
}

// poolCodec writes states as map keys: an int16 per class, then disrupted and reconfigured
// nodes, evictions (uint16) and a byte per PodDisruptionBudget.
type poolCodec struct{ classes, pdbs int }

func (c poolCodec) size() int { return 2*c.classes + 4 + c.pdbs }

// encodeInto writes s into b, of c.size() bytes.
func (c poolCodec) encodeInto(s *poolState, b []byte) {
	for k, v := range s.counts {
		binary.LittleEndian.PutUint16(b[2*k:], uint16(int16(v)))
	}
	o := 2 * c.classes
	b[o], b[o+1] = byte(s.disrupt), byte(s.reconf)
	binary.LittleEndian.PutUint16(b[o+2:], uint16(s.evictions))
	for j, v := range s.pdb {
		b[o+4+j] = byte(v)
	}
}

func (c poolCodec) decode(key string) poolState {
	s := poolState{counts: make([]int, c.classes), pdb: make([]int, c.pdbs)}
	c.decodeInto(key, &s)
	return s
}

// decodeInto reads key into s, whose slices have the codec's lengths.
func (c poolCodec) decodeInto(b string, s *poolState) {
	for k := range s.counts {
		s.counts[k] = int(int16(uint16(b[2*k]) | uint16(b[2*k+1])<<8))
	}
	o := 2 * c.classes
	s.disrupt, s.reconf = int(b[o]), int(b[o+1])
	s.evictions = int(uint16(b[o+2]) | uint16(b[o+3])<<8)
	for j := range s.pdb {
		s.pdb[j] = int(b[o+4+j])
	}
}
