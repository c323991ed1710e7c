package fragmentation

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpupool/gpupool/internal/mig"
)

func h100(t *testing.T) *mig.Product {
	t.Helper()
	p, ok := mig.LookupProduct("H100-80GB")
	if !ok {
		t.Fatal("no H100-80GB in the product table")
	}
	return p
}

func cfg(t *testing.T, st Strategy) Config {
	return Config{Product: h100(t), Strategy: st, Seed: 1, Interval: 60, SampleEvery: 60, Budget: "100%"}
}

func twoNodes() []NodeSpec {
	return []NodeSpec{{Name: "n0", CPU: 64000, MemMiB: 262144, GPUs: 1}, {Name: "n1", CPU: 64000, MemMiB: 262144, GPUs: 1}}
}

func pod(name string, slices, whole int, arrive, depart int64) PodSpec {
	return PodSpec{Name: name, CPU: 1000, MemMiB: 1024, Shape: Shape{Slices: slices, Whole: whole}, Arrive: arrive, Depart: depart}
}

func TestMapShape(t *testing.T) {
	cases := []struct {
		num, milli int
		want       Shape
		ok         bool
	}{
		{0, 0, Shape{}, false},
		{1, 50, Shape{Slices: 1}, true},
		{1, 142, Shape{Slices: 1}, true},
		{1, 143, Shape{Slices: 2}, true},
		{1, 285, Shape{Slices: 2}, true},
		{1, 428, Shape{Slices: 3}, true},
		{1, 571, Shape{Slices: 4}, true},
		{1, 572, Shape{Slices: 7}, true},
		{1, 1000, Shape{Slices: 7}, true},
		{2, 1000, Shape{Whole: 2}, true},
		{8, 1000, Shape{Whole: 8}, true},
	}
	for _, c := range cases {
		got, ok := MapShape(c.num, c.milli)
		if got != c.want || ok != c.ok {
			t.Errorf("MapShape(%d, %d) = %v, %v; want %v, %v", c.num, c.milli, got, ok, c.want, c.ok)
		}
	}
}

func TestLoadPodsSkipsCPUOnly(t *testing.T) {
	dir := t.TempDir()
	csv := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n" +
		"a,1000,1024,0,0,,LS,Running,0,10,0\nb,2000,2048,1,300,,LS,Running,5,20,5\nc,1000,1024,4,1000,,LS,Running,7,9,7\n"
	if err := os.WriteFile(filepath.Join(dir, "openb_pod_list_x.csv"), []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := LoadList(dir, "x")
	if err != nil {
		t.Fatal(err)
	}
	pods := l.Pods
	if l.CPUOnly != 1 || len(pods) != 2 || pods[0].Shape != (Shape{Slices: 3}) || pods[1].Shape != (Shape{Whole: 4}) ||
		pods[0].Arrive != 5 || pods[0].Depart != 20 || pods[0].CPU != 2000 || !l.Timed {
		t.Fatalf("got %+v, %d CPU-only", pods, l.CPUOnly)
	}
}

// A departing pod frees its instance for the next one, and the served integral counts only
// what runs.
func TestDepartureFreesInstance(t *testing.T) {
	// all-balanced has one 3g per GPU: two GPUs hold two 3g pods, the third waits for a departure.
	pods := []PodSpec{pod("a", 3, 0, 0, 100), pod("b", 3, 0, 0, 1000), pod("c", 3, 0, 10, 1010)}
	pods = append(pods, pod("end", 1, 0, 1000, 2000))
	s, err := newSim(cfg(t, StaticBalanced), twoNodes(), pods)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.loop(); err != nil {
		t.Fatal(err)
	}
	r := s.result()
	if r.Placed != 4 {
		t.Fatalf("placed %d of 4", r.Placed)
	}
	if got := s.st[2].firstStart; got != 100 {
		t.Fatalf("pod c started at %d, want 100 when a departs", got)
	}
	// a runs 0-100, b 0-1000, c 100-1000 inside the window [0, 1000]: 3*(100+1000+900) slice-seconds.
	want := 100 * 3.0 * 2000 / 1000 / 14
	if r.ServedPct < want-1e-9 || r.ServedPct > want+1e-9 {
		t.Fatalf("served %.4f%%, want %.4f%%", r.ServedPct, want)
	}
	if r.MeanPending != 90.0/4 {
		t.Fatalf("mean pending %v, want 22.5", r.MeanPending)
	}
}

// Static layouts never change, whatever pends.
func TestStaticNeverRecarves(t *testing.T) {
	pods := []PodSpec{pod("a", 7, 0, 0, 0), pod("b", 4, 0, 0, 0), pod("c", 1, 0, 100, 0)}
	for _, st := range []Strategy{StaticBalanced, Static7g} {
		s, err := newSim(cfg(t, st), twoNodes(), pods)
		if err != nil {
			t.Fatal(err)
		}
		before := layouts(s)
		if err := s.loop(); err != nil {
			t.Fatal(err)
		}
		after := layouts(s)
		if before != after {
			t.Fatalf("%s changed layouts: %s -> %s", st, before, after)
		}
		if s.proposed != 0 || len(s.plannerDur) != 0 {
			t.Fatalf("%s planned", st)
		}
	}
}

func layouts(s *sim) string {
	out := ""
	for _, n := range s.nodes {
		for _, g := range n.gpus {
			out += "|"
			if !g.mig {
				out += "off"
			}
			for _, in := range g.insts {
				out += in.profile + ","
			}
		}
	}
	return out
}

// gpupool re-carves idle GPUs for what pends, and the fluid ceiling serves at least as much as
// every strategy.
func TestFluidCeilingAndGpupoolRecarves(t *testing.T) {
	pods := []PodSpec{pod("a", 7, 0, 0, 0), pod("b", 4, 0, 0, 0), pod("c", 1, 0, 0, 0),
		pod("d", 2, 0, 0, 0), pod("end", 1, 0, 600, 0)}
	served := map[Strategy]float64{}
	for _, st := range Strategies {
		r, err := Run(cfg(t, st), twoNodes(), pods)
		if err != nil {
			t.Fatal(err)
		}
		served[st] = r.ServedPct
	}
	for st, v := range served {
		if v > served[Fluid]+1e-9 {
			t.Errorf("%s served %.2f%% > fluid %.2f%%", st, v, served[Fluid])
		}
	}
	if served[GpupoolIdle] <= served[StaticBalanced] {
		t.Errorf("gpupool served %.2f%%, static all-balanced %.2f%%: no re-carving", served[GpupoolIdle], served[StaticBalanced])
	}
}

// An eviction puts the pod back in the queue with its remaining runtime, and the scheduler
// places it again.
func TestEvictionRequeues(t *testing.T) {
	pods := []PodSpec{pod("a", 3, 0, 0, 500), pod("b", 1, 0, 0, 0)}
	s, err := newSim(cfg(t, StaticBalanced), twoNodes(), pods)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range s.order {
		s.st[p].queued = true
		s.queue = append(s.queue, p)
	}
	s.schedule(s.queue)
	if s.st[0].node < 0 || len(s.queue) != 0 {
		t.Fatal("pods not placed")
	}
	s.now = 100
	s.evict(0)
	if !s.st[0].queued || s.st[0].node != -1 || s.st[0].ran != 100 || s.evictions != 1 || len(s.queue) != 1 {
		t.Fatalf("after eviction: %+v, queue %v", s.st[0], s.queue)
	}
	s.schedule(s.queue)
	if s.st[0].node < 0 || len(s.queue) != 0 {
		t.Fatal("evicted pod not placed again")
	}
	// Departures carry the run's sequence, so the first run's departure is stale and the
	// current one keeps the remaining 400 s.
	current := 0
	for _, d := range s.deps {
		if d.pod == 0 && d.seq == s.st[0].seq {
			current++
			if d.at != 500 {
				t.Fatalf("re-placed pod departs at %d, want 500 (100 run + 400 left)", d.at)
			}
		}
	}
	if current != 1 {
		t.Fatalf("%d live departures for the re-placed pod, want 1", current)
	}
}

// Under approval Auto the planner may evict a small pod to carve a 7g for a pending one when
// the small pod fits again on the same node (the planner's never-a-net-loss rule); the evicted
// pod is re-queued and placed again.
func TestGpupoolAutoEvictionsRequeue(t *testing.T) {
	pods := []PodSpec{pod("small", 1, 0, 0, 0), pod("other", 1, 0, 0, 0), pod("big", 7, 0, 0, 0)}
	for _, st := range []Strategy{GpupoolIdle, GpupoolEvict} {
		nodes := []NodeSpec{{Name: "n0", CPU: 64000, MemMiB: 262144, GPUs: 2}}
		s, err := newSim(cfg(t, st), nodes, pods)
		if err != nil {
			t.Fatal(err)
		}
		// One small pod on each GPU, so no GPU is idle for the 7g: hide GPU 0 from the
		// scheduler while placing the second.
		gpus := s.nodes[0].gpus
		if !s.placeOn(0, 0) {
			t.Fatal("cannot place small")
		}
		gpus[0].mig = false
		if !s.placeOn(1, 0) || s.st[1].gpus[0] != 1 {
			t.Fatal("cannot place other on GPU 1")
		}
		gpus[0].mig = true
		s.st[2].queued = true
		s.queue = []int32{2}
		s.now = 60
		changed, err := s.plan()
		if err != nil {
			t.Fatal(err)
		}
		s.schedule(s.queue)
		switch st {
		case GpupoolIdle:
			if changed || s.evictions != 0 || s.st[2].node >= 0 {
				t.Fatalf("AutoIdle evicted %d pods, placed big: %v", s.evictions, s.st[2].node >= 0)
			}
		case GpupoolEvict:
			if s.evictions != 1 || s.violations != 0 {
				t.Fatalf("Auto: %d evictions, %d violations; want 1 and 0", s.evictions, s.violations)
			}
			for p := range pods {
				if s.st[p].node < 0 || s.st[p].queued {
					t.Fatalf("pod %s not running after the plan (queue %v)", pods[p].Name, s.queue)
				}
			}
		}
	}
}

func TestPrepareOffersLoad(t *testing.T) {
	pods := []PodSpec{pod("a", 7, 0, 0, 1000), pod("b", 7, 0, 500, 1500), pod("c", 7, 0, 1000, 2000)}
	w := Prepare([][]PodSpec{pods, pods, pods}, 10, 0.5, 0)
	if len(w.Pods) != 9 || w.Offered < 0.49 || w.Offered > 0.51 || w.Capped {
		t.Fatalf("got %d pods offering %.3f, capped %v", len(w.Pods), w.Offered, w.Capped)
	}
	raw := Prepare([][]PodSpec{pods}, 1, 0, 0)
	if len(raw.Pods) != 3 || raw.Compression != 1 || raw.Pods[1].Arrive != 500 {
		t.Fatalf("raw replay changed: %+v", raw)
	}
}

// The drift mix takes alternate rows of two lists that reuse the same pod names; the result
// must keep names unique, and a list without times borrows them from the reference list.
func TestMixAndBorrowTimes(t *testing.T) {
	ref := []PodSpec{pod("p0", 1, 0, 5, 50), pod("p1", 2, 0, 6, 60)}
	untimed := []PodSpec{pod("p0", 0, 2, 0, 0), pod("p1", 0, 4, 0, 0)}
	timed, picked, err := BorrowTimes(untimed, ref)
	if err != nil || picked != 0 || len(timed) != 2 || timed[1].Arrive != 6 || timed[1].Depart != 60 || timed[1].Shape.Whole != 4 {
		t.Fatalf("BorrowTimes = %+v, %d picked, %v", timed, picked, err)
	}
	mix := Mix(ref, timed)
	seen := map[string]bool{}
	for _, p := range mix {
		if seen[p.Name] {
			t.Fatalf("duplicate name %s in %+v", p.Name, mix)
		}
		seen[p.Name] = true
	}
	if len(mix) != 2 || mix[0].Shape.Slices != 1 || mix[1].Shape.Whole != 4 {
		t.Fatalf("Mix = %+v", mix)
	}
}

// The sharing strategy turns idle nodes into MPS-shared GPUs for fractional pods and packs them
// by compute slices: never more than 7 slices or more pods than replicas on a GPU.
func TestSharingPacksFractionalPodsOnSharedGPUs(t *testing.T) {
	var pods []PodSpec
	// Seven 2-slice pods: a shared GPU holds 3 of them (6 of 7 slices), so the two GPUs hold 6
	// and one waits; a 1-slice pod arriving later still fits the seventh slice of one GPU.
	for i := range 7 {
		pods = append(pods, pod("s"+string(rune('a'+i)), 2, 0, 0, 10000))
	}
	pods = append(pods, pod("small", 1, 0, 5000, 8000), pod("end", 1, 0, 6000, 9000))
	s, err := newSim(cfg(t, GpupoolShare), twoNodes(), pods)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.loop(); err != nil {
		t.Fatal(err)
	}
	running := map[int]int{}
	for _, n := range s.nodes {
		for _, g := range n.gpus {
			if g.replicas != sharedReplicas || g.mig {
				t.Fatalf("node %s GPU not shared by MPS with MIG off: %+v", n.spec.Name, g)
			}
			if g.used > 7 || g.sharedPods > g.replicas {
				t.Fatalf("node %s GPU over-committed: %d slices, %d pods", n.spec.Name, g.used, g.sharedPods)
			}
		}
		for _, p := range n.running {
			running[s.pods[p].Shape.Slices]++
		}
	}
	if running[2] != 6 || running[1] != 2 {
		t.Fatalf("running by slices %v, want six 2-slice pods and the two 1-slice pods", running)
	}
	if s.evictions != 0 {
		t.Fatalf("sharing evicted %d pods", s.evictions)
	}
}

// Free slices while pods pend are stranded by CPU and memory on a node no pending pod's CPU
// and memory fit, and by layout on the others, where only the instances no fitting pending
// pod can use count.
func TestStrandedSplitsByCause(t *testing.T) {
	pods := []PodSpec{pod("wants-4g", 4, 0, 0, 0), pod("wants-1g", 1, 0, 0, 0)}
	s, err := newSim(cfg(t, StaticBalanced), twoNodes(), pods)
	if err != nil {
		t.Fatal(err)
	}
	sampleWith := func(what string, queue []int32, byLayout, byCPU float64) {
		t.Helper()
		s.strandedSum, s.strandedCPUSum = 0, 0
		s.queue = queue
		s.sample()
		if s.strandedSum != byLayout || s.strandedCPUSum != byCPU {
			t.Errorf("%s: stranded %.3f by layout and %.3f by CPU/mem, want %.3f and %.3f",
				what, s.strandedSum, s.strandedCPUSum, byLayout, byCPU)
		}
	}
	// all-balanced has no 4g: every free slice of the node whose CPU fits the pod is stranded
	// by layout; the node without CPU strands its slices whatever its layout.
	s.nodes[0].cpuFree = 0
	sampleWith("4g pending", []int32{0}, 7.0/14, 7.0/14)
	// A pending 1g pod can use the two free 1g instances of the node with CPU.
	sampleWith("4g and 1g pending", []int32{0, 1}, 5.0/14, 7.0/14)
	sampleWith("nothing pending", nil, 0, 0)
}

// On mig-parted only idle GPUs change: the counts-only planner run that way carves the idle
// GPU for a pending 4g and leaves the GPU running a 3g pod alone, which the NVML-style run
// rebuilds around the pod.
func TestCountsOnlyIdleLeavesBusyGPUsAlone(t *testing.T) {
	for _, st := range []Strategy{CountsOnly, CountsOnlyIdle} {
		nodes := []NodeSpec{{Name: "n0", CPU: 64000, MemMiB: 262144, GPUs: 2}}
		s, err := newSim(cfg(t, st), nodes, []PodSpec{pod("runs-3g", 3, 0, 0, 0), pod("wants-4g", 4, 0, 0, 0)})
		if err != nil {
			t.Fatal(err)
		}
		if !s.placeOn(0, 0) || s.st[0].gpus[0] != 0 {
			t.Fatal("cannot place the 3g pod on GPU 0")
		}
		before := layouts(s)
		s.st[1].queued = true
		s.queue = []int32{1}
		if changed, err := s.plan(); err != nil || !changed {
			t.Fatalf("%s: changed %v, err %v", st, changed, err)
		}
		s.schedule(s.queue)
		if s.st[1].node < 0 {
			t.Fatalf("%s did not place the 4g pod", st)
		}
		gpu0Kept := strings.Split(layouts(s), "|")[1] == strings.Split(before, "|")[1]
		switch st {
		case CountsOnlyIdle:
			if !gpu0Kept || s.st[1].gpus[0] != 1 {
				t.Fatalf("on mig-parted: GPU 0 kept %v, 4g pod on GPU %d; want GPU 0 kept and GPU 1 used", gpu0Kept, s.st[1].gpus[0])
			}
		case CountsOnly:
			if gpu0Kept || s.st[1].gpus[0] != 0 {
				t.Fatalf("nos-style: GPU 0 kept %v, 4g pod on GPU %d; want GPU 0 rebuilt around the 3g pod", gpu0Kept, s.st[1].gpus[0])
			}
		}
	}
}
