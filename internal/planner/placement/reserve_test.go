package placement

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpupool/gpupool/internal/mig"
)

// holdText is a hold as the table writes it: node/gpu:profile@start.
func holdText(h Hold) string {
	return fmt.Sprintf("%s/%d:%s@%d", h.Node, h.GPU, h.Profile, h.Placement.Start)
}

func taintText(ps []Partition) string {
	var out []string
	for _, p := range ps {
		s := fmt.Sprintf("%s@%d", p.Profile, p.Placement.Start)
		if p.Device != "" {
			s = p.Device
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func TestReserveTable(t *testing.T) {
	p := h200(t)
	gpu := func(node string, index int, holders ...Holder) GPU {
		return GPU{Node: node, Index: index, Product: p, Holders: holders}
	}
	oneG := func(name string, start int) Holder { return holder(name, "1g.18gb", start, 1) }
	cases := []struct {
		name     string
		gpus     []GPU
		headroom []Headroom
		holds    []string
		short    map[string]int
	}{
		{"a GPU in use before an idle one, highest free start first",
			[]GPU{gpu("a", 0), gpu("b", 0, oneG("x", 0), oneG("y", 1))},
			[]Headroom{{"3g.71gb", 1}}, []string{"b/0:3g.71gb@4"}, nil},
		{"an idle GPU when no GPU in use has the placement free; its last placement first",
			[]GPU{gpu("a", 0, oneG("x", 0), oneG("y", 5)), gpu("b", 1)},
			[]Headroom{{"3g.71gb", 1}}, []string{"b/1:3g.71gb@4"}, nil},
		{"two holds on one idle GPU never overlap",
			[]GPU{gpu("a", 0)},
			[]Headroom{{"3g.71gb", 2}}, []string{"a/0:3g.71gb@0", "a/0:3g.71gb@4"}, nil},
		{"the dra-driver#933 pattern leaves nothing to hold: short, no move",
			[]GPU{gpu("a", 0, oneG("x", 0), oneG("y", 1), oneG("z", 5))},
			[]Headroom{{"3g.71gb", 1}}, nil, map[string]int{"3g.71gb": 1}},
		{"largest profile first: 7g takes the idle GPU before 3g could split it",
			[]GPU{gpu("a", 0), gpu("a", 1, oneG("x", 0))},
			[]Headroom{{"3g.71gb", 2}, {"7g.141gb", 1}}, []string{"a/0:7g.141gb@0", "a/1:3g.71gb@4"}, map[string]int{"3g.71gb": 1}},
		{"zero headroom holds nothing",
			[]GPU{gpu("a", 0)}, []Headroom{{"3g.71gb", 0}}, nil, nil},
		{"a GPU without a product is never held",
			[]GPU{{Node: "a", Index: 0}}, []Headroom{{"3g.71gb", 1}}, nil, map[string]int{"3g.71gb": 1}},
		{"an unknown profile holds nothing and is short",
			[]GPU{gpu("a", 0)}, []Headroom{{"5g.99gb", 1}}, nil, map[string]int{"5g.99gb": 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := Reserve(c.gpus, c.headroom)
			var got []string
			for _, h := range res.Holds {
				got = append(got, holdText(h))
			}
			if !slices.Equal(got, c.holds) {
				t.Errorf("holds = %v, want %v", got, c.holds)
			}
			if len(res.Short) != len(c.short) {
				t.Errorf("short = %v, want %v", res.Short, c.short)
			}
			for k, v := range c.short {
				if res.Short[k] != v {
					t.Errorf("short = %v, want %v", res.Short, c.short)
				}
			}
		})
	}
}

// The partitions a hold names to taint are exactly the smaller profiles' partitions over its
// slices: never the held profile's own, never a larger one, never one outside the placement.
func TestReserveTaintsSmallerPartitionsOverTheHold(t *testing.T) {
	p := h200(t)
	res := Reserve([]GPU{{Node: "a", Index: 0, Product: p, Holders: []Holder{holder("x", "1g.18gb", 0, 1)}}},
		[]Headroom{{"3g.71gb", 1}})
	if len(res.Holds) != 1 {
		t.Fatalf("holds = %+v", res.Holds)
	}
	h := res.Holds[0]
	if h.Placement != (mig.Placement{Start: 4, Size: 4}) {
		t.Fatalf("hold at %+v, want slices 4-7", h.Placement)
	}
	want := "1g.18gb@4 1g.18gb@5 1g.18gb@6 1g.18gb+me@4 1g.18gb+me@5 1g.18gb+me@6 1g.35gb@4 1g.35gb@6 2g.35gb@4"
	if got := taintText(h.Taint); got != want {
		t.Errorf("taints = %s\nwant     %s", got, want)
	}
	for _, part := range h.Taint {
		if q, _ := p.Profile(part.Profile); q.MemorySlices >= 4 {
			t.Errorf("taints %s, not smaller than 3g", part.Profile)
		}
	}
}

// With the driver's partitions given, a hold goes only where the held profile is published,
// and the taints are the published small partitions, by their device names.
func TestReserveUsesPublishedPartitions(t *testing.T) {
	p := h200(t)
	var parts []Partition
	for _, pr := range []string{"1g.18gb", "3g.71gb"} {
		q, _ := p.Profile(pr)
		for _, pl := range q.Placements {
			// The driver here publishes the 3g partition at 0 only.
			if pr == "3g.71gb" && pl.Start == 4 {
				continue
			}
			parts = append(parts, Partition{Profile: pr, Placement: pl,
				Device: fmt.Sprintf("gpu-0-mig-%s-%d", strings.ReplaceAll(pr, ".", ""), pl.Start)})
		}
	}
	res := Reserve([]GPU{{Node: "a", Index: 0, Product: p, Partitions: parts}}, []Headroom{{"3g.71gb", 1}})
	if len(res.Holds) != 1 || res.Holds[0].Placement.Start != 0 {
		t.Fatalf("holds = %+v, want 3g at 0, the only published 3g partition", res.Holds)
	}
	if got, want := taintText(res.Holds[0].Taint), "gpu-0-mig-1g18gb-0 gpu-0-mig-1g18gb-1 gpu-0-mig-1g18gb-2 gpu-0-mig-1g18gb-3"; got != want {
		t.Errorf("taints = %s, want %s", got, want)
	}
}

// The product's own limits hold: a GPU whose instances leave a placement's memory slices free
// but no compute slice for one more instance gets no hold there.
func TestReserveRespectsTheProductsLimits(t *testing.T) {
	p := h200(t)
	// Seven 1g instances use every compute slice; memory slice 7 stays free, and no 1g
	// placement covers it anyway. A 1g.35gb would need slices 6-7: 6 is held.
	var hs []Holder
	for s := range 7 {
		hs = append(hs, holder(fmt.Sprintf("x%d", s), "1g.18gb", s, 1))
	}
	res := Reserve([]GPU{{Node: "a", Index: 0, Product: p, Holders: hs}}, []Headroom{{"1g.35gb", 1}})
	if len(res.Holds) != 0 || res.Short["1g.35gb"] != 1 {
		t.Errorf("holds = %+v short %v, want none and 1 short", res.Holds, res.Short)
	}
}
