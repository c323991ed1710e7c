package placement

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/mig"
)

// check holds a result to every rule of the plan, independently of how Plan searched.
func check(in Input, res Result) error {
	gpu := map[string]*GPU{}
	for i := range in.GPUs {
		g := &in.GPUs[i]
		gpu[fmt.Sprint(g.Node, "/", g.Index)] = g
	}
	canon := func(g *GPU, name string) string {
		if pr, ok := g.Product.Profile(name); ok {
			return pr.Name
		}
		return name
	}
	overlap := func(a, b mig.Placement) bool { return a.Start < b.Start+b.Size && b.Start < a.Start+a.Size }
	type spot struct {
		key string
		pl  mig.Placement
	}
	var openings, landings []spot
	final := map[string][]mig.Instance{} // per GPU key: holders not moved, landings, claims
	moved := map[string]bool{}           // GPU key + claim
	nodes := map[string]bool{}
	evictions := 0
	pdb := map[string]int{}
	for _, o := range res.Openings {
		key := fmt.Sprint(o.Node, "/", o.GPU)
		g := gpu[key]
		if g == nil || nodes[o.Node] {
			return fmt.Errorf("opening on %s: unknown GPU or a second opening on the node", key)
		}
		nodes[o.Node] = true
		if !allowed(o.Claim.Nodes, o.Node) {
			return fmt.Errorf("opening on %s: the claim may not use the node", key)
		}
		pr, ok := g.Product.Profile(o.Claim.Profile)
		if !ok || !slices.Contains(pr.Placements, o.Placement) {
			return fmt.Errorf("opening %s at %v is not an allowed placement", o.Claim.Profile, o.Placement)
		}
		openings = append(openings, spot{key, o.Placement})
		final[key] = append(final[key], mig.Instance{Profile: pr.Name, Placement: o.Placement})
		var inWay []string
		for _, h := range g.Holders {
			if overlap(h.Placement, o.Placement) {
				inWay = append(inWay, h.Claim)
			}
		}
		var got []string
		for _, m := range o.Moves {
			got = append(got, m.Holder.Claim)
			moved[key+" "+m.Holder.Claim] = true
			for _, p := range m.Holder.Pods {
				if p.DoNotDisrupt || p.Blocker != "" || (!p.Controlled && !in.Options.MoveUncontrolled) {
					return fmt.Errorf("pod %s may not move", p.Name)
				}
				evictions++
				for _, b := range p.PDBs {
					pdb[b]++
				}
			}
			if len(m.Holder.Pods) == 0 || m.Holder.Claim == "" {
				return fmt.Errorf("a holder without pods or claim moves")
			}
			lk := fmt.Sprint(m.Landing.Node, "/", m.Landing.GPU)
			lg := gpu[lk]
			if lg == nil || !allowed(m.Holder.Nodes, m.Landing.Node) || (in.Options.SameNodeOnly && m.Landing.Node != o.Node) {
				return fmt.Errorf("landing of %s on %s is not allowed", m.Holder.Claim, lk)
			}
			lp, ok := lg.Product.Profile(m.Holder.Profile)
			if !ok || !slices.Contains(lp.Placements, m.Landing.Placement) {
				return fmt.Errorf("landing of %s at %v is not an allowed placement", m.Holder.Claim, m.Landing.Placement)
			}
			for _, h := range lg.Holders {
				if overlap(h.Placement, m.Landing.Placement) {
					return fmt.Errorf("landing of %s on %s at %v is not free before the eviction", m.Holder.Claim, lk, m.Landing.Placement)
				}
			}
			landings = append(landings, spot{lk, m.Landing.Placement})
			final[lk] = append(final[lk], mig.Instance{Profile: lp.Name, Placement: m.Landing.Placement})
		}
		slices.Sort(got)
		slices.Sort(inWay)
		if !slices.Equal(got, inWay) {
			return fmt.Errorf("opening on %s at %v moves %q, the claims in the way are %q", key, o.Placement, got, inWay)
		}
		for _, k := range o.KeepFree {
			if !overlap(k.Placement, o.Placement) || (canon(g, k.Profile) == pr.Name && k.Placement == o.Placement) {
				return fmt.Errorf("keepFree %v on %s is wrong", k, key)
			}
		}
	}
	all := append(slices.Clone(openings), landings...)
	for i := range all {
		for j := range i {
			if all[i].key == all[j].key && overlap(all[i].pl, all[j].pl) {
				return fmt.Errorf("%v and %v overlap on %s", all[i].pl, all[j].pl, all[i].key)
			}
		}
	}
	for key, g := range gpu {
		var base []mig.Instance
		for _, h := range g.Holders {
			base = append(base, mig.Instance{Profile: canon(g, h.Profile), Placement: h.Placement})
			if !moved[key+" "+h.Claim] || h.Claim == "" {
				final[key] = append(final[key], mig.Instance{Profile: canon(g, h.Profile), Placement: h.Placement})
			}
		}
		if g.Product.Validate(base) == nil {
			if err := g.Product.Validate(final[key]); err != nil {
				return fmt.Errorf("GPU %s after the plan: %w", key, err)
			}
		}
	}
	if b := in.Budget; (b.MaxNodes != Unlimited && len(nodes) > b.MaxNodes) || (b.MaxEvictions != Unlimited && evictions > b.MaxEvictions) {
		return fmt.Errorf("%d nodes and %d evictions break the budget %+v", len(nodes), evictions, b)
	}
	for k, n := range pdb {
		if n > in.Budget.PDBAllowed[k] {
			return fmt.Errorf("PDB %s: %d evictions, %d allowed", k, n, in.Budget.PDBAllowed[k])
		}
	}
	return nil
}

// randomGPUs fills GPUs first-fit with random profiles, then frees some, as claims come and go.
func randomGPUs(r *rand.Rand, p *mig.Product, nodes, perNode int) []GPU {
	names := []string{"1g.18gb", "1g.18gb", "1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb"}
	var out []GPU
	k := 0
	for n := range nodes {
		for i := range perNode {
			g := GPU{Node: fmt.Sprint("n", n), Index: i, Product: p}
			for range 6 {
				prof := names[r.IntN(len(names))]
				var occ []mig.Instance
				for _, h := range g.Holders {
					occ = append(occ, mig.Instance{Profile: h.Profile, Placement: h.Placement})
				}
				free, _ := p.FreePlacements(prof, occ)
				if len(free) == 0 || p.Validate(append(occ, mig.Instance{Profile: prof, Placement: free[0]})) != nil {
					continue
				}
				k++
				pd := Pod{Name: types.NamespacedName{Namespace: "t", Name: fmt.Sprint("p", k)}, Controlled: true, Priority: int32(r.IntN(3))}
				pd.DoNotDisrupt = r.IntN(8) == 0
				if r.IntN(4) == 0 {
					pd.PDBs = []string{"pdb"}
				}
				g.Holders = append(g.Holders, Holder{Claim: fmt.Sprint("t/c", k), Profile: prof, Placement: free[0], Pods: []Pod{pd}})
			}
			g.Holders = slices.DeleteFunc(g.Holders, func(Holder) bool { return r.IntN(3) == 0 })
			out = append(out, g)
		}
	}
	return out
}

// bruteMoves is the fewest pods any valid plan evicts to open one placement for c, -1 when
// none can, 0 when c fits as it is: every GPU, placement, subset of its holders to move and
// assignment of landings.
func bruteMoves(in Input, c Claim) int {
	best := -1
	overlap := func(a, b mig.Placement) bool { return a.Start < b.Start+b.Size && b.Start < a.Start+a.Size }
	for gi := range in.GPUs {
		g := in.GPUs[gi]
		if !allowed(c.Nodes, g.Node) {
			continue
		}
		pr, ok := g.Product.Profile(c.Profile)
		if !ok {
			continue
		}
		for _, pl := range pr.Placements {
			for subset := 0; subset < 1<<len(g.Holders); subset++ {
				var moving []Holder
				var stay []mig.Instance
				pods, ok := 0, true
				for i, h := range g.Holders {
					if subset&(1<<i) == 0 {
						stay = append(stay, mig.Instance{Profile: h.Profile, Placement: h.Placement})
						ok = ok && !overlap(h.Placement, pl)
						continue
					}
					moving = append(moving, h)
					pods += len(h.Pods)
					for _, p := range h.Pods {
						ok = ok && !p.DoNotDisrupt && len(p.PDBs) == 0
					}
				}
				if !ok || (best >= 0 && pods >= best) {
					continue
				}
				stay = append(stay, mig.Instance{Profile: pr.Name, Placement: pl})
				extra := map[int][]mig.Instance{gi: stay}
				if assign(in, moving, extra, gi, pl) {
					best = pods
				}
			}
		}
	}
	return best
}

// assign tries every landing for every moving holder: free now, outside the opening, not
// overlapping each other, each GPU valid after.
func assign(in Input, moving []Holder, after map[int][]mig.Instance, opened int, pl mig.Placement) bool {
	if len(moving) == 0 {
		for gi, g := range in.GPUs {
			ins, ok := after[gi]
			if !ok {
				continue
			}
			if gi != opened {
				for _, h := range g.Holders {
					ins = append(ins, mig.Instance{Profile: h.Profile, Placement: h.Placement})
				}
			}
			if g.Product.Validate(ins) != nil {
				return false
			}
		}
		return true
	}
	h := moving[0]
	for gi, g := range in.GPUs {
		pr, _ := g.Product.Profile(h.Profile)
		for _, lp := range pr.Placements {
			free := gi != opened || !overlaps(lp, pl)
			for _, o := range g.Holders {
				free = free && !overlaps(o.Placement, lp)
			}
			if !free {
				continue
			}
			prev, had := after[gi]
			after[gi] = append(slices.Clone(prev), mig.Instance{Profile: pr.Name, Placement: lp})
			if gi != opened && !had {
				after[gi] = after[gi][:len(after[gi]):len(after[gi])]
			}
			if assign(in, moving[1:], after, opened, pl) {
				return true
			}
			if had {
				after[gi] = prev
			} else {
				delete(after, gi)
			}
		}
	}
	return false
}

func overlaps(a, b mig.Placement) bool { return a.Start < b.Start+b.Size && b.Start < a.Start+a.Size }

// Every plan on random GPUs is valid, and with one pending claim it evicts no more pods than
// the fewest any valid plan does (brute force), and finds one whenever one exists.
func TestPlanProperty(t *testing.T) {
	p := h200(t)
	r := rand.New(rand.NewPCG(38, 3))
	profiles := []string{"3g.71gb", "4g.71gb", "2g.35gb", "7g.141gb", "1g.35gb"}
	seen := map[string]int{} // the test means something only if every kind of case occurs
	for it := range 400 {
		gpus := randomGPUs(r, p, 1+r.IntN(2), 1+r.IntN(2))
		c := Claim{Claim: "t/pending", Profile: profiles[r.IntN(len(profiles))]}
		in := Input{GPUs: gpus, Pending: []Claim{c}, Budget: Budget{MaxNodes: Unlimited, MaxEvictions: Unlimited, PDBAllowed: map[string]int{"pdb": 0}},
			Options: Options{MaxMovesPerOpening: 8}}
		res := Plan(in)
		if err := check(in, res); err != nil {
			t.Fatalf("case %d: %v\n%+v", it, err, gpus)
		}
		want := bruteMoves(in, c)
		got := -1
		if len(res.Openings) == 1 {
			got = 0
			for _, m := range res.Openings[0].Moves {
				got += len(m.Holder.Pods)
			}
		} else if len(res.Unplanned) == 1 && res.Unplanned[0].Why == WhyFitsNow {
			got = 0
		}
		if got != want {
			t.Fatalf("case %d: %s evicts %d pods, the fewest is %d\n%+v\n%+v", it, c.Profile, got, want, gpus, res)
		}
		switch {
		case want > 1:
			seen["several pods move"]++
		case want == 1:
			seen["one pod moves"]++
		case want == 0:
			seen["fits now"]++
		default:
			seen["no plan"]++
		}
		// Several claims at once, with a PDB allowance and budgets: still valid.
		in.Pending = append(in.Pending, Claim{Claim: "t/second", Profile: profiles[r.IntN(len(profiles))]},
			Claim{Claim: "t/third", Profile: profiles[r.IntN(len(profiles))], Nodes: []string{"n0"}})
		in.Budget = Budget{MaxNodes: r.IntN(3), MaxEvictions: r.IntN(4), PDBAllowed: map[string]int{"pdb": r.IntN(2)}}
		if err := check(in, Plan(in)); err != nil {
			t.Fatalf("case %d with three claims: %v\n%+v", it, err, gpus)
		}
	}
	for _, kind := range []string{"several pods move", "one pod moves", "fits now", "no plan"} {
		if seen[kind] < 10 {
			t.Errorf("only %d cases where %s: %v", seen[kind], kind, seen)
		}
	}
	t.Logf("cases: %v", seen)
}

// BenchmarkPlanLargePool plans 50 pending claims over 200 nodes of 8 fragmented H200s, the
// scale the fragmentation benchmark runs at.
func BenchmarkPlanLargePool(b *testing.B) {
	p := h200(b)
	r := rand.New(rand.NewPCG(38, 4))
	gpus := randomGPUs(r, p, 200, 8)
	var pending []Claim
	for k := range 50 {
		pending = append(pending, Claim{Claim: fmt.Sprint("t/pending-", k), Profile: []string{"3g.71gb", "4g.71gb", "7g.141gb"}[k%3]})
	}
	in := Input{GPUs: gpus, Pending: pending, Budget: Budget{MaxNodes: Unlimited, MaxEvictions: Unlimited, PDBAllowed: map[string]int{"pdb": 3}}}
	for b.Loop() {
		Plan(in)
	}
}
