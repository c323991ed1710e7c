package fragmentation

import (
	"fmt"
	"strings"
	"testing"
)

// claimStep is one step of a claim sequence on one node: a claim of a shape arrives (and is
// allocated at once), or the claim of an earlier step goes.
type claimStep struct {
	name  string
	shape Shape
	free  bool
}

// firstFitDevices runs steps through the benchmark's first-fit model on one node of gpus GPUs
// and names the device each claim gets as the driver names it, without the GI profile ID:
// gpu-<minor>-mig-<profile without dots>-<start>, or gpu-<minor> for a whole GPU; "" when the
// model finds no device.
func firstFitDevices(t *testing.T, gpus int, steps []claimStep) map[string]string {
	t.Helper()
	var pods []PodSpec
	idx := map[string]int32{}
	for _, st := range steps {
		if !st.free {
			idx[st.name] = int32(len(pods))
			pods = append(pods, PodSpec{Name: st.name, CPU: 1, MemMiB: 1, Shape: st.shape})
		}
	}
	s, err := newSim(cfg(t, DMFirstFit), []NodeSpec{{Name: "n", CPU: 1 << 30, MemMiB: 1 << 30, GPUs: gpus}}, pods)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, st := range steps {
		p := idx[st.name]
		if st.free {
			s.unbind(p)
			continue
		}
		s.st[p].queued = true
		if !s.placeOn(p, 0) {
			out[st.name] = ""
			continue
		}
		g := s.st[p].gpus[0]
		if st.shape.Whole > 0 {
			out[st.name] = fmt.Sprintf("gpu-%d", g)
			continue
		}
		for _, in := range s.nodes[0].gpus[g].insts {
			if in.pod == p {
				out[st.name] = fmt.Sprintf("gpu-%d-mig-%s-%d", g, strings.ReplaceAll(in.profile, ".", ""), in.start)
			}
		}
		if err := s.dmCheck(); err != nil {
			t.Fatalf("after %s: %v", st.name, err)
		}
	}
	return out
}

// ffSequence is the claim sequence the model and the real scheduler are compared on (see
// TestFirstFitModelMatchesTheScheduler): placements filled in order across two GPUs, holes
// refilled lowest start first, a 2g skipping a blocked placement, a whole GPU taken only once
// idle.
var ffSequence = []claimStep{
	{name: "a", shape: Shape{Slices: 1}}, {name: "b", shape: Shape{Slices: 1}}, {name: "c", shape: Shape{Slices: 2}},
	{name: "d", shape: Shape{Slices: 3}}, {name: "e", shape: Shape{Slices: 1}},
	{name: "b", free: true}, {name: "d", free: true},
	{name: "f", shape: Shape{Slices: 1}}, {name: "g", shape: Shape{Slices: 3}}, {name: "h", shape: Shape{Slices: 2}},
	{name: "i", shape: Shape{Slices: 1}},
	{name: "e", free: true}, {name: "h", free: true}, {name: "i", free: true},
	{name: "j", shape: Shape{Whole: 1}},
}

// The model's answers on ffSequence, worked by hand from NVIDIA's H100 placements: what the
// cluster test then holds the real scheduler to.
func TestFirstFitModelOnTheSequence(t *testing.T) {
	got := firstFitDevices(t, 2, ffSequence)
	want := map[string]string{
		"a": "gpu-0-mig-1g10gb-0", "b": "gpu-0-mig-1g10gb-1", "c": "gpu-0-mig-2g20gb-2", "d": "gpu-0-mig-3g40gb-4",
		"e": "gpu-1-mig-1g10gb-0", "f": "gpu-0-mig-1g10gb-1", "g": "gpu-0-mig-3g40gb-4", "h": "gpu-1-mig-2g20gb-2",
		"i": "gpu-1-mig-1g10gb-1", "j": "gpu-1",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("claim %s: model says %q, want %q", k, got[k], v)
		}
	}
}

// The dra-driver-nvidia-gpu#933 pattern in the replay: first-fit leaves 1g claims at slices
// 0, 1 and 5, a 3g claim pends with five slices free, and that is stranded by placement;
// moves evict one claim and the 3g claim runs; the reserve, which never moves a claim, cannot.
func TestDynamicMIG933Pattern(t *testing.T) {
	node := []NodeSpec{{Name: "n0", CPU: 64000, MemMiB: 262144, GPUs: 1}}
	var pods []PodSpec
	for k := range 6 {
		depart := int64(0) // never
		if k >= 2 && k <= 4 {
			depart = 50
		}
		pods = append(pods, pod(fmt.Sprintf("small-%d", k), 1, 0, int64(k), depart))
	}
	pods = append(pods, pod("big", 3, 0, 100, 0), pod("end", 1, 0, 1000, 0))
	run := func(st Strategy) *Result {
		c := cfg(t, st)
		c.Budget = "1"
		s, err := newSim(c, node, pods)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.loop(); err != nil {
			t.Fatal(err)
		}
		if err := s.dmCheck(); err != nil {
			t.Fatal(err)
		}
		return s.result()
	}
	ff := run(DMFirstFit)
	if ff.Placed != 7 || ff.StrandedPlacementPct <= 0 || ff.Evictions != 0 {
		t.Errorf("first-fit: placed %d of 8 (want 7: big waits), stranded by placement %.2f%% (want > 0), %d evictions",
			ff.Placed, ff.StrandedPlacementPct, ff.Evictions)
	}
	mv := run(DMMoves)
	if mv.Placed != 8 || mv.Evictions != 1 {
		t.Errorf("moves: placed %d of 8, %d evictions; want 8 and one claim moved", mv.Placed, mv.Evictions)
	}
	if mv.StrandedPlacementPct >= ff.StrandedPlacementPct {
		t.Errorf("moves strand %.2f%% by placement, first-fit %.2f%%", mv.StrandedPlacementPct, ff.StrandedPlacementPct)
	}
	if mv.ServedPct <= ff.ServedPct {
		t.Errorf("moves serve %.2f%%, first-fit %.2f%%", mv.ServedPct, ff.ServedPct)
	}
	rs := run(DMReserve)
	if rs.Evictions != 0 || rs.Placed != 7 {
		t.Errorf("reserve: placed %d, %d evictions; want 7 (big waits) and none", rs.Placed, rs.Evictions)
	}
}

// The reserve's taints steer first-fit: with a 1g claim at slice 0 and a 3g claim arrived since
// the last call, the reserve holds slices 4-7, so the next 1g claims pack into slices 1-3 and
// the 3g claim that follows finds 4-7 free; first-fit alone fills slices 1-5 and the 3g claim
// finds nothing.
func TestDynamicMIGReserveKeepsAPlacementFree(t *testing.T) {
	pods := []PodSpec{pod("first", 1, 0, 0, 0)}
	for k := range 5 {
		pods = append(pods, pod(fmt.Sprintf("late-%d", k), 1, 0, 0, 0))
	}
	pods = append(pods, pod("big", 3, 0, 0, 0))
	run := func(st Strategy) (placed []string) {
		s, err := newSim(cfg(t, st), []NodeSpec{{Name: "n0", CPU: 64000, MemMiB: 262144, GPUs: 1}}, pods)
		if err != nil {
			t.Fatal(err)
		}
		try := func(p int32) {
			s.st[p].queued = true
			if s.placeOn(p, 0) {
				placed = append(placed, s.pods[p].Name)
			}
		}
		try(0)
		if st == DMReserve {
			s.dm.arrive(Shape{Slices: 3})
			if s.dmReserve() {
				t.Error("holding a placement opened nothing, yet the reserve says it did")
			}
		}
		for p := range int32(len(pods) - 1) {
			if p > 0 {
				try(p)
			}
		}
		try(int32(len(pods) - 1))
		if err := s.dmCheck(); err != nil {
			t.Fatal(err)
		}
		return placed
	}
	if got, want := strings.Join(run(DMFirstFit), " "), "first late-0 late-1 late-2 late-3 late-4"; got != want {
		t.Errorf("first-fit placed %q, want %q", got, want)
	}
	if got, want := strings.Join(run(DMReserve), " "), "first late-0 late-1 late-2 big"; got != want {
		t.Errorf("reserve placed %q, want %q", got, want)
	}
}
