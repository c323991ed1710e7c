// What keeps Plan cheap on a large or saturated pool: a necessary condition checked before any
// landing search, and a bound on the work of one call.

package placement

import "github.com/gpupool/gpupool/internal/mig"

// defaultMaxWork bounds the landing tries and candidates of one Plan call when Options.MaxWork
// is 0. The policy controller calls Plan on every pass over the pool; a saturated pool of
// 1,000 GPUs with 100 pending claims needs about 10^5 with the landable check below, and
// about 10^9 without it.
const defaultMaxWork = 2_000_000

// landable says whether some GPU of the pool has a partition of profile free now: no holder,
// no landing or opening of the plan, its counters left, and the GPU able to hold it beside the
// rest. Every landing of a moved claim needs one, so when none exists no candidate whose
// claims in the way include that profile can land, and none is searched. The answer is kept
// until the plan commits an opening, which only ever takes free partitions away.
func (p *planner) landable(profile string) bool {
	if ok, known := p.landableMemo[profile]; known {
		return ok
	}
	ok := false
	for _, s := range p.gpus {
		pr, has := s.g.Product.Profile(profile)
		if !has {
			continue
		}
		for _, part := range s.parts[pr.Name] {
			p.work++
			if maskOf(part.Placement)&(s.held|s.reserved) != 0 || !s.countersLeft(part.Counters, nil, false) {
				continue
			}
			if s.valid(s.instances(nil, []mig.Instance{{Profile: part.Profile, Placement: part.Placement}})) {
				ok = true
				break
			}
		}
		if ok {
			break
		}
	}
	if p.landableMemo == nil {
		p.landableMemo = map[string]bool{}
	}
	p.landableMemo[profile] = ok
	return ok
}

// outOfWork says whether this call has spent its bound; the claims not yet served are then
// answered with WhyBudget, and the next pass, once the pool has changed, tries again.
func (p *planner) outOfWork() bool {
	limit := p.opts.MaxWork
	if limit <= 0 {
		limit = defaultMaxWork
	}
	return p.work > limit
}
