package placement

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/mig"
)

// saturatedPool is nodes x 8 H200s, each carved into seven 1g claims: no placement of any
// profile is free anywhere, so no claim in the way of a 3g has a landing. It is the pool at
// its busiest, where every candidate opening fails, and the one where the search costs most.
func saturatedPool(t testing.TB, nodes int) []GPU {
	p := h200(t)
	var out []GPU
	k := 0
	for n := range nodes {
		for i := range 8 {
			g := GPU{Node: fmt.Sprint("n", n), Index: i, Product: p}
			for s := range 7 {
				k++
				g.Holders = append(g.Holders, Holder{Claim: fmt.Sprint("t/c", k), Profile: "1g.18gb",
					Placement: mig.Placement{Start: s, Size: 1},
					Pods:      []Pod{{Name: types.NamespacedName{Namespace: "t", Name: fmt.Sprint("p", k)}, Controlled: true}}})
			}
			out = append(out, g)
		}
	}
	return out
}

func saturatedInput(t testing.TB, nodes, claims int) Input {
	var pending []Claim
	for k := range claims {
		pending = append(pending, Claim{Claim: fmt.Sprint("t/pending-", k), Profile: "3g.71gb"})
	}
	return Input{GPUs: saturatedPool(t, nodes), Pending: pending,
		Budget: Budget{MaxNodes: Unlimited, MaxEvictions: Unlimited}}
}

// TestASaturatedPoolIsAnsweredCheaply guards the cost of a pool where nothing can land: the
// policy controller calls Plan on every pass, so 100 claims over 1,000 GPUs must be answered,
// each with its reason, without trying every landing of every candidate (about 10^9 tries,
// minutes of CPU). Work is counted in tries, so the bound holds on any machine.
func TestASaturatedPoolIsAnsweredCheaply(t *testing.T) {
	res, work := plan(saturatedInput(t, 125, 100))
	if len(res.Openings) != 0 || len(res.Unplanned) != 100 {
		t.Fatalf("got %d openings and %d unplanned, want 0 and 100", len(res.Openings), len(res.Unplanned))
	}
	for _, u := range res.Unplanned {
		if u.Why != WhyNoLanding {
			t.Fatalf("claim %s: %s (%s), want %s", u.Claim.Claim, u.Why, u.Message, WhyNoLanding)
		}
	}
	if work > 1_000_000 {
		t.Fatalf("Plan took %d tries over a saturated pool of 1,000 GPUs, want at most 10^6", work)
	}
}

// TestPlanStopsAtItsWorkBound: once a call has spent Options.MaxWork, the claims left are
// answered with WhyBudget, and the opening planned before stays.
func TestPlanStopsAtItsWorkBound(t *testing.T) {
	in := saturatedInput(t, 4, 3)
	// GPU 0 as in dra-driver#933: 1g claims at slices 0, 1 and 5 only, so the first claim is
	// served by moving the one at 5 to slice 2; nothing else can land anywhere.
	g := &in.GPUs[0]
	g.Holders = []Holder{g.Holders[0], g.Holders[1], g.Holders[5]}
	in.Options.MaxWork = 1
	res, _ := plan(in)
	if len(res.Openings) != 1 || len(res.Openings[0].Moves) != 1 || res.Openings[0].Moves[0].Holder.Placement.Start != 5 {
		t.Fatalf("openings %+v, want one that moves the claim at slice 5", res.Openings)
	}
	if len(res.Unplanned) != 2 {
		t.Fatalf("unplanned %+v, want the two claims left", res.Unplanned)
	}
	for _, u := range res.Unplanned {
		if u.Why != WhyBudget {
			t.Fatalf("claim %s: %s (%s), want %s once the work is spent", u.Claim.Claim, u.Why, u.Message, WhyBudget)
		}
	}
}

func BenchmarkPlanSaturatedPool(b *testing.B) {
	in := saturatedInput(b, 125, 100)
	for b.Loop() {
		Plan(in)
	}
}

// TestAWholeGPUClaimCanMoveEveryInstanceOfAGPU: a 7g claim on a pool whose one busy GPU holds
// five 1g claims, beside a GPU with room for all five whose own claim may not move, is served
// by moving the five: the budgets allow it, and no bound below a GPU's seven instances stands
// in the way.
func TestAWholeGPUClaimCanMoveEveryInstanceOfAGPU(t *testing.T) {
	gpus := saturatedPool(t, 1)[:2]
	gpus[0].Holders = gpus[0].Holders[:5] // slices 0-4
	gpus[1].Holders = gpus[1].Holders[:1] // slice 0: six 1g placements free, and no 7g
	gpus[1].Holders[0].Pods[0].DoNotDisrupt = true
	in := Input{GPUs: gpus, Pending: []Claim{{Claim: "t/whole", Profile: "7g.141gb"}},
		Budget: Budget{MaxNodes: Unlimited, MaxEvictions: Unlimited}}
	res := Plan(in)
	if len(res.Openings) != 1 {
		t.Fatalf("no opening: %+v", res.Unplanned)
	}
	o := res.Openings[0]
	if o.GPU != 0 || len(o.Moves) != 5 {
		t.Fatalf("opening on GPU %d moving %d claims, want GPU 0 moving its 5", o.GPU, len(o.Moves))
	}
	for _, m := range o.Moves {
		if m.Landing.GPU != 1 {
			t.Fatalf("claim %s lands on GPU %d, want GPU 1", m.Holder.Claim, m.Landing.GPU)
		}
	}
}
