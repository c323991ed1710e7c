package fragmentation

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/planner"
)

const podHeader = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"

func writeList(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, ListFile(name)), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Every layout of pod list the trace has reads the same way: with times, without them (the
// multigpu lists have five columns), with GPU model constraints, and with CPU-only pods only.
func TestLoadListReadsEveryLayout(t *testing.T) {
	cases := []struct {
		name, body               string
		pods, cpuOnly, gpuSpec   int
		timed                    bool
		firstArrive, firstDepart int64
		firstShape               Shape
	}{
		{"timed", podHeader + "a,1000,1024,1,300,,LS,Running,5,20,5\nb,1000,1024,0,0,,LS,Running,1,2,1\n",
			1, 1, 0, true, 5, 20, Shape{Slices: 3}},
		{"untimed", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,8,1000\nb,1000,1024,1,50\n",
			2, 0, 0, false, 0, 0, Shape{Whole: 8}},
		{"gpuspec", podHeader + "a,1000,1024,1,1000,V100M16|V100M32,LS,Running,5,20,5\nb,1000,1024,2,1000,,LS,Running,6,9,6\n",
			2, 0, 1, true, 5, 20, Shape{Slices: 7}},
		{"cpuonly", podHeader + "a,1000,1024,0,0,,LS,Running,5,20,5\nb,2000,1024,0,0,,BE,Running,6,9,6\n",
			0, 2, 0, true, 0, 0, Shape{}},
	}
	dir := t.TempDir()
	for _, c := range cases {
		writeList(t, dir, c.name, c.body)
	}
	names, err := ListNames(dir)
	if err != nil || strings.Join(names, ",") != "cpuonly,gpuspec,timed,untimed" {
		t.Fatalf("ListNames = %v, %v", names, err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := LoadList(dir, c.name)
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Pods) != c.pods || l.CPUOnly != c.cpuOnly || l.GPUSpec != c.gpuSpec || l.Timed != c.timed {
				t.Fatalf("got %d pods, %d CPU-only, %d gpu_spec, timed %v; want %d, %d, %d, %v",
					len(l.Pods), l.CPUOnly, l.GPUSpec, l.Timed, c.pods, c.cpuOnly, c.gpuSpec, c.timed)
			}
			if c.pods > 0 && (l.Pods[0].Arrive != c.firstArrive || l.Pods[0].Depart != c.firstDepart || l.Pods[0].Shape != c.firstShape) {
				t.Fatalf("first pod %+v", l.Pods[0])
			}
		})
	}
}

// traceDir is the real trace, when this machine has it: the tests that read it skip without.
func traceDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FRAGBENCH_TRACE")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "..", "shared", "traces", "alibaba-gpu-v2023", "csv")
	}
	if _, err := os.Stat(filepath.Join(dir, "openb_node_list_gpu_node.csv")); err != nil {
		t.Skipf("no trace at %s (set FRAGBENCH_TRACE): %v", dir, err)
	}
	return dir
}

// Every pod list of the trace parses, gets times, and can be prepared for a replay whose window
// spans the planner intervals asked for; a multigpu list keeps the multi-GPU pods it adds to the
// default list (borrowing times by name alone dropped them all).
func TestEveryTraceListPrepares(t *testing.T) {
	dir := traceDir(t)
	nodes, err := LoadNodes(dir)
	if err != nil {
		t.Fatal(err)
	}
	gpus := 0
	for _, n := range nodes {
		gpus += n.GPUs
	}
	ref, err := LoadList(dir, "default")
	if err != nil {
		t.Fatal(err)
	}
	names, err := ListNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 20 {
		t.Fatalf("only %d lists in %s", len(names), dir)
	}
	multiOf := func(pods []PodSpec) int {
		n := 0
		for _, p := range pods {
			if p.Shape.Whole > 1 {
				n++
			}
		}
		return n
	}
	const minWindow = 20 * 60
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			l, err := LoadList(dir, name)
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Pods) == 0 {
				t.Fatalf("%s has no GPU pods", l.File)
			}
			pods := l.Pods
			if !l.Timed {
				var picked int
				if pods, picked, err = BorrowTimes(l.Pods, ref.Pods); err != nil {
					t.Fatal(err)
				}
				if len(pods) != len(l.Pods) || picked == 0 || multiOf(pods) <= multiOf(ref.Pods) {
					t.Fatalf("borrowed times for %d of %d pods, %d picked, %d multi-GPU pods (default has %d)",
						len(pods), len(l.Pods), picked, multiOf(pods), multiOf(ref.Pods))
				}
			}
			lo, hi := pods[0].Arrive, pods[0].Arrive
			for _, p := range pods {
				lo, hi = min(lo, p.Arrive), max(hi, p.Arrive)
			}
			if hi-lo < 86400 {
				t.Fatalf("arrivals span %d s: the list replays as one burst", hi-lo)
			}
			w := Prepare([][]PodSpec{pods, pods}, gpus, 1, minWindow)
			if w.Window < minWindow-1 || w.Offered <= 0 || w.Offered > 1.01 {
				t.Fatalf("window %d s, offered %.3f, compression %.0f", w.Window, w.Offered, w.Compression)
			}
		})
	}
}

// A pod a timeless list adds takes an arrival from the reference list and a runtime from a
// reference pod of its size, the same on every call; a namesake keeps its namesake's times.
func TestBorrowTimesPicksBySize(t *testing.T) {
	ref := []PodSpec{pod("r0", 1, 0, 100, 110), pod("r1", 1, 0, 200, 220), pod("r8", 0, 8, 300, 5300)}
	in := []PodSpec{pod("r1", 2, 0, 0, 0), pod("added-8", 0, 8, 0, 0), pod("added-2", 0, 2, 0, 0)}
	got, picked, err := BorrowTimes(in, ref)
	if err != nil || picked != 2 || len(got) != 3 {
		t.Fatalf("got %+v, %d picked, %v", got, picked, err)
	}
	if got[0].Arrive != 200 || got[0].Depart != 220 {
		t.Fatalf("namesake times not kept: %+v", got[0])
	}
	if run := got[1].Depart - got[1].Arrive; run != 5000 {
		t.Fatalf("the 8-GPU pod runs %d s, want the reference 8-GPU pod's 5000", run)
	}
	if run := got[2].Depart - got[2].Arrive; run != 10 && run != 20 && run != 5000 {
		t.Fatalf("the 2-GPU pod, with no reference of its size, runs %d s, not a reference runtime", run)
	}
	again, _, _ := BorrowTimes(in, ref)
	for i := range got {
		if got[i] != again[i] {
			t.Fatalf("picks differ between calls: %+v vs %+v", got[i], again[i])
		}
	}
	if _, _, err := BorrowTimes(in, nil); err == nil {
		t.Fatal("borrowing from nothing must fail")
	}
}

// burst is a list whose load can only reach the target when its arrivals are squeezed into
// less than a planner interval: ten 7-slice pods of a second each, spread over 10,000 s.
func burst() []PodSpec {
	var pods []PodSpec
	for i := range 10 {
		pods = append(pods, pod("b"+string(rune('a'+i)), 7, 0, int64(i)*1000, int64(i)*1000+1))
	}
	return pods
}

// The compression stops at the shortest window allowed and says so, instead of squeezing the
// window into a second.
func TestPrepareCapsCompression(t *testing.T) {
	cases := []struct {
		name      string
		minWindow int64
		capped    bool
	}{
		{"uncapped squeezes the window", 0, false},
		{"capped keeps 20 intervals", 1200, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := Prepare([][]PodSpec{burst(), burst()}, 2, 1, c.minWindow)
			if w.Capped != c.capped {
				t.Fatalf("capped %v, want %v (window %d s, offered %.3f)", w.Capped, c.capped, w.Window, w.Offered)
			}
			if c.capped && (w.Window < c.minWindow-1 || w.Offered >= 1) {
				t.Fatalf("window %d s < %d or offered %.3f reached the target", w.Window, c.minWindow, w.Offered)
			}
			if !c.capped && w.Window >= 60 {
				t.Fatalf("uncapped window %d s: the case no longer shows the squeeze", w.Window)
			}
		})
	}
}

// The planner is called while pods pend: 7-slice pods pend on the initial all-balanced layout,
// so every dynamic strategy must be called on a capped burst. Squeezed into a second (no
// minimum window, as before the cap) the replay ended before the first call, and the report
// must then warn rather than show the initial layout as the strategy's result.
func TestPlannerCalledWhenPodsPend(t *testing.T) {
	for _, minWindow := range []int64{0, 1200} {
		w := Prepare([][]PodSpec{burst(), burst()}, 2, 1, minWindow)
		for _, st := range []Strategy{GpupoolIdle, GpupoolEvict, CountsOnly, CountsOnlyIdle} {
			c := cfg(t, st)
			c.MeasureFrom = w.MeasureFrom
			r, err := Run(c, twoNodes(), w.Pods)
			if err != nil {
				t.Fatal(err)
			}
			table := Table("burst", []Summary{{Strategy: st, Budget: "100%", Runs: []*Result{r}}})
			warned := strings.Contains(table, "was never called")
			switch {
			case minWindow > 0 && (r.PlannerCalls == 0 || warned):
				t.Errorf("%s, window %d s: %d planner calls, warned %v", st, w.Window, r.PlannerCalls, warned)
			case minWindow == 0 && (r.PlannerCalls != 0 || !warned):
				t.Errorf("%s squeezed: %d planner calls, warned %v; want 0 calls and a warning", st, r.PlannerCalls, warned)
			}
		}
	}
}

// First fit leaves two 3-slice pods on one GPU and a 4-slice pod alone on the other, so the
// second 4-slice pod pends forever without migration; with it, the next interval repacks to
// {4,3} and {4,3}. Moving is not evicting.
func TestMigrationCeilingRepacks(t *testing.T) {
	pods := []PodSpec{pod("a", 3, 0, 0, 0), pod("b", 3, 0, 1, 0), pod("c", 4, 0, 2, 0), pod("d", 4, 0, 3, 0),
		pod("end", 1, 0, 3000, 0)}
	served := map[Strategy]*Result{}
	for _, st := range []Strategy{Fluid, FluidMigrate} {
		for seed := uint64(1); seed <= 3; seed++ {
			c := cfg(t, st)
			c.Seed = seed
			r, err := Run(c, twoNodes(), pods)
			if err != nil {
				t.Fatal(err)
			}
			if prev, ok := served[st]; ok && prev.ServedPct != r.ServedPct {
				t.Fatalf("%s differs between seeds on symmetric nodes: %.2f vs %.2f", st, prev.ServedPct, r.ServedPct)
			}
			served[st] = r
		}
	}
	no, with := served[Fluid], served[FluidMigrate]
	if with.ServedPct <= no.ServedPct {
		t.Fatalf("migration served %.2f%%, no migration %.2f%%: want strictly more", with.ServedPct, no.ServedPct)
	}
	// Without migration d never runs and the last 1g pod takes the free slice; with it, d runs
	// from the first interval and the 1g pod finds every slice taken.
	if no.Placed != 4 || with.Placed != 4 || with.Migrations == 0 || with.Evictions != 0 || with.PlannerCalls == 0 {
		t.Fatalf("no migration placed %d, with migration placed %d, %d moves, %d evictions, %d calls",
			no.Placed, with.Placed, with.Migrations, with.Evictions, with.PlannerCalls)
	}
}

// On random small traces the migration ceiling never serves less than the one without
// migration: a repack is kept only when it places more.
func TestMigrationCeilingNotBelowNoMigration(t *testing.T) {
	sizes := []int{1, 2, 3, 4, 7}
	for trial := range 20 {
		var pods []PodSpec
		x := uint64(trial*7919 + 1)
		next := func(n int) int {
			x = x*6364136223846793005 + 1442695040888963407
			return int(x>>33) % n
		}
		for i := range 40 {
			arrive := int64(i * 30)
			sh := Shape{Slices: sizes[next(len(sizes))]}
			if next(10) == 0 {
				sh = Shape{Whole: 2}
			}
			pods = append(pods, PodSpec{Name: "p" + string(rune('A'+i/26)) + string(rune('a'+i%26)), CPU: 1000, MemMiB: 1024,
				Shape: sh, Arrive: arrive, Depart: arrive + int64(300+next(900))})
		}
		nodes := []NodeSpec{{Name: "n0", CPU: 64000, MemMiB: 262144, GPUs: 2}, {Name: "n1", CPU: 64000, MemMiB: 262144, GPUs: 2}}
		var got [2]float64
		for k, st := range []Strategy{Fluid, FluidMigrate} {
			r, err := Run(cfg(t, st), nodes, pods)
			if err != nil {
				t.Fatal(err)
			}
			got[k] = r.ServedPct
		}
		if got[1] < got[0]-1e-9 {
			t.Errorf("trial %d: migration served %.3f%% < no migration %.3f%%", trial, got[1], got[0])
		}
	}
}

// The tables report multi-GPU and 8-GPU pods placed of offered: one 8-GPU pod fits the only
// 8-GPU node, the second must wait for it and the replay ends first.
func TestEightGPUPodsReported(t *testing.T) {
	nodes := []NodeSpec{{Name: "big", CPU: 128000, MemMiB: 1 << 20, GPUs: 8}}
	pods := []PodSpec{pod("e0", 0, 8, 0, 0), pod("e1", 0, 8, 10, 0), pod("two", 0, 2, 20, 0), pod("end", 1, 0, 100, 0)}
	for _, st := range []Strategy{Fluid, Static7g} {
		r, err := Run(cfg(t, st), nodes, pods)
		if err != nil {
			t.Fatal(err)
		}
		if r.EightPods != 2 || r.EightPlaced != 1 || r.MultiPods != 3 || r.MultiPlaced != 1 {
			t.Fatalf("%s: 8-GPU %d of %d, multi-GPU %d of %d; want 1 of 2 and 1 of 3", st, r.EightPlaced, r.EightPods, r.MultiPlaced, r.MultiPods)
		}
		table := Table("eight", []Summary{{Strategy: st, Runs: []*Result{r}}})
		if !strings.Contains(table, "| 1 of 2 (50.0%) |") || !strings.Contains(table, "| 1 of 3 (33.3%) |") {
			t.Fatalf("%s table lacks the placed counts:\n%s", st, table)
		}
	}
}

// A list with CPU-only pods says "no GPU demand", in its section and in the summary; a
// workload no strategy can place a pod of says so instead of a table of zeros.
func TestNoDemandReportedPlainly(t *testing.T) {
	dir := t.TempDir()
	writeList(t, dir, "cpu", podHeader+"a,1000,1024,0,0,,LS,Running,5,20,5\n")
	l, err := LoadList(dir, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Pods) != 0 || l.CPUOnly != 1 {
		t.Fatalf("got %d GPU pods, %d CPU-only", len(l.Pods), l.CPUOnly)
	}
	if w := Prepare([][]PodSpec{l.Pods}, 2, 1, 1200); len(w.Pods) != 0 {
		t.Fatalf("prepared %d pods from none", len(w.Pods))
	}
	if got := NoGPUDemand("H100-80GB, "+l.File, l); !strings.Contains(got, "No GPU demand: openb_pod_list_cpu.csv has 1 CPU-only pods") {
		t.Fatalf("section: %s", got)
	}
	// Nine GPUs asked of nodes with one each: nobody places anything.
	r, err := Run(cfg(t, Fluid), twoNodes(), []PodSpec{pod("huge", 0, 9, 0, 0), pod("huge2", 0, 9, 100, 0)})
	if err != nil {
		t.Fatal(err)
	}
	sums := []Summary{{Strategy: Fluid, Runs: []*Result{r}}}
	if got := Table("huge", sums); !strings.Contains(got, "No strategy placed a single pod") || strings.Contains(got, "|---|") {
		t.Fatalf("table: %s", got)
	}
	summary := ListsSummary([]ListRow{{File: l.File, Product: "H100-80GB", Note: "no GPU demand"},
		{File: "huge.csv", Product: "H100-80GB", Sums: sums}}, []Strategy{Fluid, GpupoolEvict}, "5%", "")
	lines := strings.Split(strings.TrimSpace(summary), "\n")
	if len(lines) != 4 || !strings.Contains(lines[2], "no GPU demand") || !strings.Contains(lines[3], "no strategy placed any pod") {
		t.Fatalf("summary:\n%s", summary)
	}
	for _, line := range lines {
		if strings.Count(line, "|") != strings.Count(lines[0], "|") {
			t.Fatalf("ragged summary row %q in\n%s", line, summary)
		}
	}
}

// applyScenario builds a one-GPU-per-node cluster with a 1g pod running on n0 and a 7g pod
// pending, and a plan that evicts the 1g pod from n0 to carve a 7g there while n1 is re-carved
// into seven 1g instances, where the evicted pod is expected to land.
func applyScenario(t *testing.T) (*sim, *planner.Result, map[string]int) {
	t.Helper()
	s, err := newSim(cfg(t, GpupoolEvict), twoNodes(), []PodSpec{pod("mover", 1, 0, 0, 0), pod("big", 7, 0, 0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	idx := map[string]int{}
	for i, n := range s.nodes {
		idx[n.spec.Name] = i
	}
	if !s.placeOn(0, idx["n0"]) {
		t.Fatal("cannot place mover on n0")
	}
	s.st[1].queued = true
	s.queue = []int32{1}
	seven := mig.Layout{s.profile[7]: 1}
	ones := mig.Layout{s.profile[1]: 7}
	balanced := mig.Layout{s.profile[1]: 2, s.profile[2]: 1, s.profile[3]: 1}
	evicting := planner.Step{Node: "n0", GPUs: []planner.GPUChange{{Index: 0, From: balanced, To: seven}},
		Target:    []mig.GPUTarget{{Index: 0, MIGEnabled: true, Layout: seven}},
		Evictions: []planner.Eviction{{Pod: types.NamespacedName{Namespace: namespace, Name: "mover"}}}}
	carving := planner.Step{Node: "n1", GPUs: []planner.GPUChange{{Index: 0, From: balanced, To: ones}},
		Target: []mig.GPUTarget{{Index: 0, MIGEnabled: true, Layout: ones}}}
	return s, &planner.Result{Steps: []planner.Step{carving, evicting}}, idx
}

// Steps apply at once, so their order does not matter: the evicted pod is re-queued with no
// tie to its node and lands on the node carved for it, the pending pod on the freed GPU.
func TestApplyOrderDoesNotMatterAndEvictedPodsMove(t *testing.T) {
	var states []string
	for _, reverse := range []bool{false, true} {
		s, res, idx := applyScenario(t)
		if reverse {
			res.Steps[0], res.Steps[1] = res.Steps[1], res.Steps[0]
		}
		changed, err := s.gp.apply(res)
		if err != nil || !changed {
			t.Fatalf("apply: changed %v, %v", changed, err)
		}
		if s.st[0].node != -1 || !s.st[0].queued || s.evictions != 1 || s.violations != 0 {
			t.Fatalf("mover after apply: %+v, %d evictions, %d violations", s.st[0], s.evictions, s.violations)
		}
		s.schedule(s.queue)
		if s.st[0].node != int32(idx["n1"]) || s.st[1].node != int32(idx["n0"]) || len(s.queue) != 0 {
			t.Fatalf("reverse %v: mover on node %d, big on node %d (n0 is %d, n1 is %d), queue %v",
				reverse, s.st[0].node, s.st[1].node, idx["n0"], idx["n1"], s.queue)
		}
		states = append(states, layouts(s))
	}
	if states[0] != states[1] {
		t.Fatalf("step order changed the outcome: %s vs %s", states[0], states[1])
	}
}

// A plan naming a pod twice evicts it once; one naming a pod not on the step's node is an
// error, since the replay would otherwise diverge from what the planner saw.
func TestApplyRejectsForeignEvictions(t *testing.T) {
	s, res, _ := applyScenario(t)
	twice := res.Steps[1]
	twice.GPUs, twice.Target = nil, nil
	res.Steps = append(res.Steps, twice)
	if _, err := s.gp.apply(res); err != nil || s.evictions != 1 {
		t.Fatalf("a pod named twice: %v, %d evictions", err, s.evictions)
	}
	s, res, _ = applyScenario(t)
	res.Steps[1].Node = "n1"
	if _, err := s.gp.apply(res); err == nil {
		t.Fatal("evicting a pod from a node it does not run on must fail")
	}
}

// Both plots are well-formed SVG naming every line in the legend.
func TestPlotsAreSVG(t *testing.T) {
	dir := t.TempDir()
	served := filepath.Join(dir, "served.svg")
	if err := PlotServed(served, "served", []Series{{Label: "alpha", Points: []Point{{0, 0}, {60, 50}, {120, 80}}},
		{Label: "beta", Points: []Point{{0, 0}, {60, 40}}}}, 60); err != nil {
		t.Fatal(err)
	}
	sweep := filepath.Join(dir, "sweep.svg")
	if err := PlotSweep(sweep, "sweep", []string{"1%", "5%", "100%"}, []SweepLine{{Label: "gamma", Served: []float64{80, 82, 86}}},
		[]Ceiling{{Label: "delta", Served: 87}}); err != nil {
		t.Fatal(err)
	}
	if err := PlotSweep(filepath.Join(dir, "bad.svg"), "bad", []string{"1%"}, []SweepLine{{Label: "x", Served: []float64{1, 2}}}, nil); err == nil {
		t.Fatal("a line with more values than budgets must fail")
	}
	for path, labels := range map[string][]string{served: {"alpha", "beta", "measured window starts"}, sweep: {"gamma", "delta", "100%"}} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		dec := xml.NewDecoder(strings.NewReader(string(b)))
		for {
			if _, err := dec.Token(); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s is not well-formed XML: %v", path, err)
			}
		}
		if !strings.Contains(string(b), "<svg") {
			t.Fatalf("%s is not an SVG", path)
		}
		for _, l := range labels {
			if !strings.Contains(string(b), l) {
				t.Errorf("%s lacks %q", path, l)
			}
		}
	}
}

// -reconfigure-budget reaches the policy as maxReconfiguringNodes, unset when empty so the API
// default applies, 100% on the rows that stand for no budget, and the labels name it; a zero
// budget keeps AutoIdle from re-carving the idle GPU a pending 7g pod needs.
func TestReconfigureBudget(t *testing.T) {
	cases := []struct {
		st          Strategy
		flag, want  string
		labelSuffix string
	}{
		{GpupoolIdle, "", "", "maxReconfiguringNodes 50% (default))"},
		{GpupoolEvict, "10%", "10%", "maxReconfiguringNodes 10%)"},
		{GpupoolIdleAll, "", "100%", "maxReconfiguringNodes 100%)"},
	}
	for _, c := range cases {
		got := Policy(h100(t), []string{"1g.10gb"}, "Auto", "5%", c.st.ReconfigureFor(c.flag)).Spec.Disruption.MaxReconfiguringNodes
		if (got == nil) != (c.want == "") || got != nil && got.String() != c.want {
			t.Errorf("%s with %q: maxReconfiguringNodes %v, want %q", c.st, c.flag, got, c.want)
		}
		if l := c.st.Label("5%", c.flag); !strings.HasSuffix(l, c.labelSuffix) {
			t.Errorf("label %q lacks %q", l, c.labelSuffix)
		}
	}
	pods := []PodSpec{pod("big", 7, 0, 0, 0), pod("end", 1, 0, 600, 0)}
	placed := map[string]int{}
	for _, budget := range []string{"0", "100%"} {
		c := cfg(t, GpupoolIdle)
		c.Reconfigure = budget
		r, err := Run(c, twoNodes(), pods)
		if err != nil {
			t.Fatal(err)
		}
		placed[budget] = r.Placed
	}
	if placed["0"] != 1 || placed["100%"] != 2 {
		t.Fatalf("pods placed with maxReconfiguringNodes 0 and 100%%: %v; want the 7g pod only with 100%%", placed)
	}
}
