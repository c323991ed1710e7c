package placement

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/mig"
)

func h200(t testing.TB) *mig.Product {
	t.Helper()
	p, ok := mig.LookupProduct("H200-141GB")
	if !ok {
		t.Fatal("no H200 product")
	}
	return p
}

// pod is a movable pod of a controller.
func pod(name string) Pod {
	return Pod{Name: types.NamespacedName{Namespace: "team", Name: name}, UID: types.UID(name + "-uid"), Controlled: true}
}

// holder is a claim of one pod at a placement.
func holder(name, profile string, start, size int, pods ...Pod) Holder {
	if pods == nil {
		pods = []Pod{pod(name)}
	}
	return Holder{Claim: "team/" + name, Profile: profile, Placement: mig.Placement{Start: start, Size: size}, Pods: pods}
}

func claim3g() Claim {
	return Claim{Claim: "team/big-gpu", Pod: types.NamespacedName{Namespace: "team", Name: "big"}, Profile: "3g.71gb"}
}

func unlimited() Budget { return Budget{MaxNodes: Unlimited, MaxEvictions: Unlimited} }

// The dra-driver-nvidia-gpu#933 pattern: 1g claims at slices 0, 1 and 5 leave five free
// slices but neither 3g placement; moving the one at 5 (to 2, 3 or 6) opens 4-7.
func TestPlanOpensThe933Pattern(t *testing.T) {
	g := GPU{Node: "n1", Index: 0, Product: h200(t), Holders: []Holder{
		holder("a", "1g.18gb", 0, 1), holder("b", "1g.18gb", 1, 1), holder("c", "1g.18gb", 5, 1)}}
	res := Plan(Input{GPUs: []GPU{g}, Pending: []Claim{claim3g()}, Budget: unlimited()})
	if len(res.Openings) != 1 {
		t.Fatalf("openings = %+v, unplanned %+v", res.Openings, res.Unplanned)
	}
	o := res.Openings[0]
	if o.Placement != (mig.Placement{Start: 4, Size: 4}) || len(o.Moves) != 1 || o.Moves[0].Holder.Claim != "team/c" {
		t.Fatalf("opening = %+v", o)
	}
	if l := o.Moves[0].Landing; l.Node != "n1" || l.GPU != 0 || l.Placement.Start+l.Placement.Size > 4 {
		t.Fatalf("landing = %+v, want slice 2 or 3 of GPU 0", l)
	}
	t.Logf("%+v", o)
}

func TestPlanTable(t *testing.T) {
	p := h200(t)
	dnd := pod("dnd")
	dnd.DoNotDisrupt = true
	bare := pod("bare")
	bare.Controlled = false
	guarded := pod("guarded")
	guarded.PDBs = []string{"team/pdb"}
	guarded2 := pod("guarded2")
	guarded2.PDBs = []string{"team/pdb"}
	blocked := pod("blocked")
	blocked.Blocker = "uses emptyDir volume scratch"
	hi := pod("hi")
	hi.Priority = 1000
	blocked933 := func(pods ...Pod) []Holder { // 1g at 0, 1 and 5; the one at 5 carries pods
		return []Holder{holder("a", "1g.18gb", 0, 1), holder("b", "1g.18gb", 1, 1), holder("c", "1g.18gb", 5, 1, pods...)}
	}
	cases := []struct {
		name    string
		gpus    []GPU
		pending []Claim
		budget  Budget
		opts    Options
		// want: per opening "node/gpu@start moves claims"; else the first unplanned reason
		openings []string
		why      Why
	}{
		{name: "933 pattern moves the one claim at slice 5",
			gpus: []GPU{{Node: "n1", Product: p, Holders: blocked933()}}, pending: []Claim{claim3g()}, budget: unlimited(),
			openings: []string{"n1/0@4 team/c"}},
		{name: "a free placement is the allocator's",
			gpus: []GPU{{Node: "n1", Product: p, Holders: []Holder{holder("a", "1g.18gb", 0, 1)}}}, pending: []Claim{claim3g()},
			budget: unlimited(), why: WhyFitsNow},
		{name: "do-not-disrupt keeps 4-7; 0-3 would move two claims",
			gpus: []GPU{{Node: "n1", Product: p, Holders: blocked933(dnd)}}, pending: []Claim{claim3g()}, budget: unlimited(),
			openings: []string{"n1/0@0 team/a,team/b"}},
		{name: "do-not-disrupt on every side",
			gpus:    []GPU{{Node: "n1", Product: p, Holders: []Holder{holder("a", "1g.18gb", 0, 1, dnd), holder("c", "1g.18gb", 5, 1, dnd)}}},
			pending: []Claim{claim3g()}, budget: unlimited(), why: WhyProtected},
		{name: "a pod without a controller does not move",
			gpus:    []GPU{{Node: "n1", Product: p, Holders: []Holder{holder("a", "1g.18gb", 0, 1, bare), holder("c", "1g.18gb", 5, 1, bare)}}},
			pending: []Claim{claim3g()}, budget: unlimited(), why: WhyProtected},
		{name: "the benchmark may move pods without a controller",
			gpus:    []GPU{{Node: "n1", Product: p, Holders: []Holder{holder("a", "1g.18gb", 0, 1, bare), holder("c", "1g.18gb", 5, 1, bare)}}},
			pending: []Claim{claim3g()}, budget: unlimited(), opts: Options{MoveUncontrolled: true}, openings: []string{"n1/0@0 team/a"}},
		{name: "a pod with a blocker does not move",
			gpus:    []GPU{{Node: "n1", Product: p, Holders: []Holder{holder("a", "1g.18gb", 0, 1, blocked), holder("c", "1g.18gb", 5, 1, blocked)}}},
			pending: []Claim{claim3g()}, budget: unlimited(), opts: Options{MoveUncontrolled: true}, why: WhyProtected},
		{name: "a PDB without allowance",
			gpus:    []GPU{{Node: "n1", Product: p, Holders: []Holder{holder("a", "1g.18gb", 0, 1, guarded), holder("c", "1g.18gb", 5, 1, guarded2)}}},
			pending: []Claim{claim3g()}, budget: Budget{MaxNodes: Unlimited, MaxEvictions: Unlimited, PDBAllowed: map[string]int{"team/pdb": 0}},
			why: WhyProtected},
		{name: "a PDB allowance of one serves one of two GPUs",
			gpus: []GPU{{Node: "n1", Product: p, Holders: []Holder{holder("a", "1g.18gb", 0, 1, guarded), holder("c", "1g.18gb", 5, 1, guarded)}},
				{Node: "n2", Product: p, Holders: []Holder{holder("d", "1g.18gb", 0, 1, guarded2), holder("e", "1g.18gb", 5, 1, guarded2)}}},
			pending:  []Claim{claim3g(), {Claim: "team/big2", Profile: "3g.71gb"}},
			budget:   Budget{MaxNodes: Unlimited, MaxEvictions: Unlimited, PDBAllowed: map[string]int{"team/pdb": 1}},
			openings: []string{"n1/0@0 team/a"}, why: WhyProtected},
		{name: "the lower priority claim moves",
			gpus:    []GPU{{Node: "n1", Product: p, Holders: []Holder{holder("a", "1g.18gb", 0, 1, hi), holder("c", "1g.18gb", 5, 1)}}},
			pending: []Claim{claim3g()}, budget: unlimited(), openings: []string{"n1/0@4 team/c"}},
		{name: "nowhere to land: a full GPU",
			gpus:    []GPU{{Node: "n1", Product: p, Holders: []Holder{holder("a", "4g.71gb", 0, 4), holder("b", "3g.71gb", 4, 4)}}},
			pending: []Claim{{Claim: "team/x", Profile: "7g.141gb"}}, budget: unlimited(), why: WhyNoLanding},
		{name: "a landing on another node",
			gpus: []GPU{{Node: "n1", Product: p, Holders: []Holder{holder("a", "4g.71gb", 0, 4), holder("b", "3g.71gb", 4, 4)}},
				{Node: "n2", Product: p, Holders: []Holder{holder("z", "3g.71gb", 0, 4)}}},
			pending: []Claim{{Claim: "team/x", Profile: "7g.141gb", Nodes: []string{"n1"}}}, budget: unlimited(), why: WhyNoLanding},
		{name: "the landing on another node takes the smaller move",
			gpus: []GPU{{Node: "n1", Product: p, Holders: []Holder{holder("b", "3g.71gb", 4, 4)}},
				{Node: "n2", Product: p, Holders: []Holder{holder("z", "1g.18gb", 0, 1)}}},
			pending: []Claim{{Claim: "team/x", Profile: "7g.141gb", Nodes: []string{"n1"}}}, budget: unlimited(),
			openings: []string{"n1/0@0 team/b"}},
		{name: "no node left in the budget",
			gpus: []GPU{{Node: "n1", Product: p, Holders: blocked933()}}, pending: []Claim{claim3g()},
			budget: Budget{MaxNodes: 0, MaxEvictions: Unlimited}, why: WhyBudget},
		{name: "no eviction left in the budget",
			gpus: []GPU{{Node: "n1", Product: p, Holders: blocked933()}}, pending: []Claim{claim3g()},
			budget: Budget{MaxNodes: 1, MaxEvictions: 0}, why: WhyBudget},
		{name: "one opening per node",
			gpus: []GPU{{Node: "n1", Index: 0, Product: p, Holders: blocked933()},
				{Node: "n1", Index: 1, Product: p, Holders: []Holder{holder("d", "1g.18gb", 1, 1), holder("e", "1g.18gb", 5, 1)}}},
			pending: []Claim{claim3g(), {Claim: "team/big2", Profile: "3g.71gb"}}, budget: unlimited(),
			openings: []string{"n1/0@4 team/c"}, why: WhyNodeTaken},
		{name: "an instance no claim explains never moves",
			gpus: []GPU{{Node: "n1", Product: p, Holders: []Holder{{Profile: "1g.18gb", Placement: mig.Placement{Start: 0, Size: 1}},
				{Profile: "1g.18gb", Placement: mig.Placement{Start: 5, Size: 1}}}}},
			pending: []Claim{claim3g()}, budget: unlimited(), why: WhyProtected},
		{name: "same node only keeps the landing home",
			gpus: []GPU{{Node: "n1", Product: p, Holders: []Holder{holder("b", "3g.71gb", 4, 4)}},
				{Node: "n2", Product: p}},
			pending: []Claim{{Claim: "team/x", Profile: "7g.141gb", Nodes: []string{"n1"}}}, budget: unlimited(),
			opts: Options{SameNodeOnly: true}, why: WhyNoLanding},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{GPUs: tc.gpus, Pending: tc.pending, Budget: tc.budget, Options: tc.opts}
			res := Plan(in)
			if err := check(in, res); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range res.Openings {
				var moved []string
				for _, m := range o.Moves {
					moved = append(moved, m.Holder.Claim)
				}
				got = append(got, fmt.Sprintf("%s/%d@%d %s", o.Node, o.GPU, o.Placement.Start, strings.Join(moved, ",")))
			}
			if !slices.Equal(got, tc.openings) {
				t.Errorf("openings = %q, want %q (unplanned %+v)", got, tc.openings, res.Unplanned)
			}
			switch {
			case tc.why == "" && len(res.Unplanned) > 0:
				t.Errorf("unplanned %+v", res.Unplanned)
			case tc.why != "" && (len(res.Unplanned) == 0 || res.Unplanned[0].Why != tc.why):
				t.Errorf("unplanned = %+v, want %s", res.Unplanned, tc.why)
			}
		})
	}
}

// The opening's KeepFree are every partition over its slices but the claim's own, and its
// GPU change counts the claim in and the moved claim out.
func TestPlanKeepFreeAndCounts(t *testing.T) {
	g := GPU{Node: "n1", Product: h200(t), Holders: []Holder{
		holder("a", "1g.18gb", 0, 1), holder("b", "1g.18gb", 1, 1), holder("c", "1g.18gb", 5, 1)}}
	res := Plan(Input{GPUs: []GPU{g}, Pending: []Claim{claim3g()}, Budget: unlimited()})
	o := res.Openings[0]
	var keep []string
	for _, k := range o.KeepFree {
		keep = append(keep, fmt.Sprintf("%s@%d", k.Profile, k.Placement.Start))
	}
	want := []string{"7g.141gb@0", "1g.18gb@4", "1g.18gb+me@4", "1g.35gb@4", "2g.35gb@4", "1g.18gb@5", "1g.18gb+me@5",
		"1g.18gb@6", "1g.18gb+me@6", "1g.35gb@6"} // 4g.71gb sits at 0-3 only
	slices.Sort(keep)
	slices.Sort(want)
	if !slices.Equal(keep, want) {
		t.Errorf("keepFree = %q, want %q", keep, want)
	}
	if len(o.GPUs) != 1 || !maps.Equal(o.GPUs[0].From, mig.Layout{"1g.18gb": 3}) || !maps.Equal(o.GPUs[0].To, mig.Layout{"1g.18gb": 3, "3g.71gb": 1}) {
		t.Errorf("gpus = %+v", o.GPUs)
	}
}

// Counters the driver publishes besides memory slices: a landing that would take the last
// multiprocessors is refused.
func TestPlanCounters(t *testing.T) {
	p := h200(t)
	var parts []Partition
	for _, pr := range p.Profiles {
		for _, pl := range pr.Placements {
			parts = append(parts, Partition{Profile: pr.Name, Placement: pl, Device: fmt.Sprintf("gpu-0-mig-%s-%d", pr.Name, pl.Start),
				Counters: map[string]int64{"multiprocessors": int64(pr.ComputeSlices)}})
		}
	}
	g := GPU{Node: "n1", Product: p, Partitions: parts, Holders: []Holder{
		holder("a", "1g.18gb", 0, 1), holder("b", "1g.18gb", 1, 1), holder("c", "1g.18gb", 5, 1)},
		FreeCounters: map[string]int64{"multiprocessors": 4}}
	res := Plan(Input{GPUs: []GPU{g}, Pending: []Claim{claim3g()}, Budget: unlimited()})
	if len(res.Openings) != 1 || res.Openings[0].Device != "gpu-0-mig-3g.71gb-4" || res.Openings[0].Moves[0].Landing.Device == "" {
		t.Fatalf("with 4 multiprocessors left: %+v %+v", res.Openings, res.Unplanned)
	}
	g.FreeCounters = map[string]int64{"multiprocessors": 2} // the landing takes one, the 3g three of what is left and freed
	res = Plan(Input{GPUs: []GPU{g}, Pending: []Claim{claim3g()}, Budget: unlimited()})
	if len(res.Openings) != 0 {
		t.Fatalf("with 2 multiprocessors left: %+v", res.Openings)
	}
}
