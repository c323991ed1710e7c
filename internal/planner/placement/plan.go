// Plan: per pending claim, the cheapest placement to open and a landing for each claim in its way.

package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpupool/gpupool/internal/mig"
)

// maxSearch bounds the landing search of one candidate opening: each try of one landing for
// one claim counts. Real openings move one to four claims, which takes a few dozen tries.
const maxSearch = 20000

// Plan opens, per pending claim that fits no free placement, the placement whose claims in
// the way are the fewest and least disruptive to move, each to a landing free before its
// eviction. Claims are served highest priority first, then larger profiles, then by name; each
// node gets at most one opening; landings and openings never overlap and are consumed as the
// plan goes; do-not-disrupt pods, pods without a controller, and PodDisruptionBudgets without
// allowance left are never moved.
func Plan(in Input) Result {
	res, _ := plan(in)
	return res
}

// plan is Plan, also returning the work it took (bounds.go).
func plan(in Input) (Result, int) {
	p := newPlanner(in)
	pending := slices.Clone(in.Pending)
	slices.SortStableFunc(pending, func(a, b Claim) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(p.size(b), p.size(a)),
			cmp.Compare(a.Claim, b.Claim), cmp.Compare(a.Pod.String(), b.Pod.String()))
	})
	var res Result
	for _, c := range pending {
		o, miss := p.serve(c)
		if o == nil {
			res.Unplanned = append(res.Unplanned, miss)
			continue
		}
		res.Openings = append(res.Openings, *o)
	}
	slices.SortFunc(res.Openings, func(a, b Opening) int { return strings.Compare(a.Node, b.Node) })
	return res, p.work
}

type planner struct {
	opts      Options
	gpus      []*gpuState // by node, then index
	opened    map[string]bool
	nodesLeft int
	evictLeft int
	pdbLeft   map[string]int
	// work counts landing tries and candidates (bounds.go); landableMemo caches landable.
	work         int
	landableMemo map[string]bool
}

func newPlanner(in Input) *planner {
	p := &planner{opts: in.Options, opened: map[string]bool{}, nodesLeft: in.Budget.MaxNodes,
		evictLeft: in.Budget.MaxEvictions, pdbLeft: map[string]int{}}
	for k, v := range in.Budget.PDBAllowed {
		p.pdbLeft[k] = v
	}
	for i := range in.GPUs {
		if in.GPUs[i].Product != nil && in.GPUs[i].Product.Err() == nil {
			p.gpus = append(p.gpus, newGPUState(&in.GPUs[i]))
		}
	}
	slices.SortStableFunc(p.gpus, func(a, b *gpuState) int {
		return cmp.Or(strings.Compare(a.g.Node, b.g.Node), cmp.Compare(a.g.Index, b.g.Index))
	})
	if p.opts.MaxMovesPerOpening <= 0 {
		p.opts.MaxMovesPerOpening = 7
	}
	return p
}

// size is how many memory slices the claim's profile takes on the first GPU that knows it.
func (p *planner) size(c Claim) int {
	for _, s := range p.gpus {
		if pr, ok := s.g.Product.Profile(c.Profile); ok {
			return pr.MemorySlices
		}
	}
	return 0
}

func allowed(nodes []string, node string) bool { return nodes == nil || slices.Contains(nodes, node) }

// candidate is one way to open a placement: the holders in the way and their landings.
type candidate struct {
	gpu      *gpuState
	part     Partition
	inWay    []int
	freed    map[string]int64 // what the claims in the way give back of the GPU's counters
	landings []landingAt
	cost     cost
}

type landingAt struct {
	gpu  *gpuState
	part Partition
}

// cost orders candidates: fewer pods evicted, fewer claims moved, lower priorities moved,
// fewer landings off the node, then node, GPU and placement for determinism.
type cost struct {
	pods, claims                   int
	maxPriority, sumPriority, away int64
}

func (a cost) compare(b cost) int {
	return cmp.Or(cmp.Compare(a.pods, b.pods), cmp.Compare(a.claims, b.claims),
		cmp.Compare(a.maxPriority, b.maxPriority), cmp.Compare(a.sumPriority, b.sumPriority), cmp.Compare(a.away, b.away))
}

// miss keeps the reason of the failed candidate that came closest: the furthest step it
// reached, then the fewest claims in its way.
type miss struct {
	why         Why
	msg         string
	rank, inWay int
}

var whyRank = map[Why]int{WhyNoProfile: 0, WhyNodeTaken: 1, WhyProtected: 2, WhyNoLanding: 3, WhyBudget: 4}

func (m *miss) note(why Why, format string, args ...any) { m.noteAt(why, 0, format, args...) }

// noteAt notes a candidate with inWay claims in the way.
func (m *miss) noteAt(why Why, inWay int, format string, args ...any) {
	if m.wants(why, inWay) {
		m.why, m.rank, m.inWay, m.msg = why, whyRank[why], inWay, fmt.Sprintf(format, args...)
	}
}

// wants says whether a note would replace the one kept: on a large pool most candidates fail
// alike, and spelling each reason would cost more than the search.
func (m *miss) wants(why Why, inWay int) bool {
	r := whyRank[why]
	return m.why == "" || r > m.rank || (r == m.rank && inWay < m.inWay)
}

// serve finds the cheapest opening for c and commits it, or says why there is none.
func (p *planner) serve(c Claim) (*Opening, Unplanned) {
	var m miss
	var best *candidate
	// A claim that fits somewhere as the pool is needs no opening: looked for on every GPU
	// before any candidate is built, which costs far more.
	for _, s := range p.gpus {
		if !allowed(c.Nodes, s.g.Node) {
			continue
		}
		if pr, ok := s.g.Product.Profile(c.Profile); ok {
			for _, part := range s.parts[pr.Name] {
				if s.fitsFree(part) {
					return nil, Unplanned{Claim: c, Why: WhyFitsNow, Message: fmt.Sprintf(
						"%s fits node %s GPU %d at %s as it is: the allocator places it", pr.Name, s.g.Node, s.g.Index, slicesText(part.Placement))}
				}
			}
		}
	}
	for _, s := range p.gpus {
		if p.outOfWork() {
			m.note(WhyBudget, "the search for this pass is spent (%d tries); the next pass tries again", p.work)
			break
		}
		if !allowed(c.Nodes, s.g.Node) {
			continue
		}
		pr, ok := s.g.Product.Profile(c.Profile)
		if !ok || len(s.parts[pr.Name]) == 0 {
			m.note(WhyNoProfile, "no GPU the pod may use has a %s partition", c.Profile)
			continue
		}
		if p.opened[s.g.Node] {
			m.note(WhyNodeTaken, "the plan already opens a placement on node %s", s.g.Node)
			continue
		}
		for _, part := range s.parts[pr.Name] {
			cand := p.try(s, part, &m, best)
			if cand != nil && (best == nil || cand.cost.compare(best.cost) < 0) {
				best = cand
			}
		}
	}
	if best == nil {
		if m.why == "" {
			m.note(WhyNoProfile, "no DynamicMIG GPU of the pool is on a node the pod may use")
		}
		return nil, Unplanned{Claim: c, Why: m.why, Message: m.msg}
	}
	return p.commit(c, best), Unplanned{}
}

// fitsFree says whether the partition's slices and counters are free as the plan leaves the
// GPU so far, within the product's limits.
func (s *gpuState) fitsFree(part Partition) bool {
	m := maskOf(part.Placement)
	if m&(s.held|s.reserved) != 0 || !s.countersLeft(part.Counters, nil, false) {
		return false
	}
	return s.valid(s.instances(nil, []mig.Instance{{Profile: part.Profile, Placement: part.Placement}}))
}

// try builds the candidate that opens part on s for c, or notes why it cannot.
func (p *planner) try(s *gpuState, part Partition, m *miss, best *candidate) *candidate {
	pm := maskOf(part.Placement)
	// Spelled only when a reason is noted: most candidates of a large pool never need it.
	where := func() string {
		return fmt.Sprintf("%s on node %s GPU %d", slicesText(part.Placement), s.g.Node, s.g.Index)
	}
	if pm&s.reserved != 0 {
		if m.wants(WhyNodeTaken, 0) {
			m.note(WhyNodeTaken, "%s is a landing or an opening of the plan already", where())
		}
		return nil
	}
	p.work++
	cand := &candidate{gpu: s, part: part}
	pods, inWay := 0, 0
	for i, h := range s.holders {
		if !s.moved[i] && maskOf(h.Placement)&pm != 0 {
			inWay++
		}
	}
	pdbNeed := map[string]int{}
	for i, h := range s.holders {
		if s.moved[i] || maskOf(h.Placement)&pm == 0 {
			continue
		}
		if why := p.unmovable(h, pdbNeed); why != "" {
			if m.wants(WhyProtected, inWay) {
				m.noteAt(WhyProtected, inWay, "%s holds %s: %s", h.what(), where(), why)
			}
			return nil
		}
		cand.inWay = append(cand.inWay, i)
		pods += len(h.Pods)
		for _, pod := range h.Pods {
			cand.cost.maxPriority = max(cand.cost.maxPriority, int64(pod.Priority))
			cand.cost.sumPriority += int64(pod.Priority)
		}
	}
	cand.cost.pods, cand.cost.claims = pods, len(cand.inWay)
	switch {
	case len(cand.inWay) == 0:
		if m.wants(WhyNoLanding, 0) {
			m.note(WhyNoLanding, "%s is free, but the GPU's engines or limits leave no room for %s", where(), part.Profile)
		}
		return nil
	case len(cand.inWay) > p.opts.MaxMovesPerOpening:
		if m.wants(WhyBudget, 0) {
			m.note(WhyBudget, "%s is held by %d claims, more than the %d one opening may move", where(), len(cand.inWay), p.opts.MaxMovesPerOpening)
		}
		return nil
	case p.nodesLeft != Unlimited && p.nodesLeft < 1:
		if m.wants(WhyBudget, 0) {
			m.note(WhyBudget, "the disruption budget has no node left for %s", where())
		}
		return nil
	case p.evictLeft != Unlimited && pods > p.evictLeft:
		if m.wants(WhyBudget, 0) {
			m.note(WhyBudget, "opening %s evicts %d pods, the budget allows %d more", where(), pods, p.evictLeft)
		}
		return nil
	}
	for _, i := range cand.inWay {
		if h := s.holders[i]; !p.landable(h.Profile) {
			if m.wants(WhyNoLanding, 0) {
				m.note(WhyNoLanding, "%s holds %s and no GPU of the pool has a %s free", h.what(), where(), h.Profile)
			}
			return nil
		}
	}
	if best != nil {
		// The landings only add to the cost: a candidate that cannot beat the best one even
		// with every landing on its node is not searched (on large pools most are not).
		if c := cand.cost.compare(best.cost); c > 0 || (c == 0 && best.cost.away == 0) {
			return nil
		}
	}
	// The opening itself: the claim at part beside what stays, within the GPU's counters.
	opened := s.instances(cand.inWay, []mig.Instance{{Profile: part.Profile, Placement: part.Placement}})
	freed := map[string]int64{}
	for _, i := range cand.inWay {
		addCounters(freed, s.holderCounters(s.holders[i]))
	}
	cand.freed = freed
	if !s.valid(opened) || !s.countersAfterMoves(part.Counters, freed) {
		if m.wants(WhyNoLanding, 0) {
			m.note(WhyNoLanding, "%s would free the slices, but the GPU's limits or engines would still not take %s", where(), part.Profile)
		}
		return nil
	}
	if !p.land(cand) {
		var what []string
		for _, i := range cand.inWay {
			what = append(what, s.holders[i].what())
		}
		if m.wants(WhyNoLanding, 0) {
			m.note(WhyNoLanding, "%s holds %s and has nowhere free to go", strings.Join(what, " and "), where())
		}
		return nil
	}
	for _, l := range cand.landings {
		if l.gpu.g.Node != s.g.Node {
			cand.cost.away++
		}
	}
	return cand
}

// countersAfterMoves says whether need fits once the claims in the way give theirs back.
func (s *gpuState) countersAfterMoves(need, freed map[string]int64) bool {
	if s.g.FreeCounters == nil {
		return true
	}
	for name, v := range need {
		if v > s.g.FreeCounters[name]-s.counterUse[name]+s.counterFreed[name]+freed[name] {
			return false
		}
	}
	return true
}

// unmovable says why a holder may not move, "" when it may; pdbNeed accumulates the PDB
// allowance the candidate's pods take so far.
func (p *planner) unmovable(h Holder, pdbNeed map[string]int) string {
	if h.Claim == "" {
		return "no claim explains the instance, so no eviction frees it"
	}
	if len(h.Pods) == 0 {
		return "no pod holds the claim, so no eviction frees it"
	}
	for _, pod := range h.Pods {
		switch {
		case pod.DoNotDisrupt:
			return fmt.Sprintf("pod %s is marked do-not-disrupt", pod.Name)
		case pod.Blocker != "":
			return fmt.Sprintf("pod %s may not be evicted: %s", pod.Name, pod.Blocker)
		case !pod.Controlled && !p.opts.MoveUncontrolled:
			return fmt.Sprintf("pod %s has no controller to recreate it", pod.Name)
		}
		for _, pdb := range pod.PDBs {
			pdbNeed[pdb]++
			if pdbNeed[pdb] > p.pdbLeft[pdb] {
				return fmt.Sprintf("PodDisruptionBudget %s allows no more disruptions for pod %s", pdb, pod.Name)
			}
		}
	}
	return ""
}

// what names a holder in a few words.
func (h Holder) what() string {
	who := "claim " + h.Claim
	if h.Claim == "" {
		who = "an instance no claim explains"
	}
	return fmt.Sprintf("%s (%s at %s)", who, h.Profile, slicesText(h.Placement))
}
