package fragmentation

import (
	"cmp"
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/planner"
)

// Strategy is one way of partitioning the cluster's GPUs.
type Strategy string

// The strategies the benchmark compares side by side.
const (
	// GpupoolIdle is gpupool's planner with approval AutoIdle: idle GPUs are re-carved, no pod
	// is evicted.
	GpupoolIdle Strategy = "gpupool (AutoIdle, no evictions)"
	// GpupoolEvict is gpupool's planner with approval Auto: evictions within the budget.
	GpupoolEvict Strategy = "gpupool (Auto, evictions)"
	// GpupoolIdleAll and GpupoolEvictAll are the same with maxDisruptedNodes 100%: every node
	// may change in one plan, as the counts-only planner, which has no budget, may.
	GpupoolIdleAll  Strategy = "gpupool (AutoIdle, no evictions, maxDisruptedNodes 100%)"
	GpupoolEvictAll Strategy = "gpupool (Auto, evictions, maxDisruptedNodes 100%)"
	// StaticBalanced is mig-parted's all-balanced layout on every GPU, never changed.
	StaticBalanced Strategy = "static all-balanced"
	// Static7g is MIG off: every pod takes whole GPUs.
	Static7g Strategy = "static all-7g (MIG off)"
	// CountsOnly is a nos-style greedy planner that checks slice sums, not placements.
	CountsOnly Strategy = "counts-only greedy (nos-style)"
	// CountsOnlyIdle is the same planner changing idle GPUs only, as it would have to when
	// mig-parted applies its layouts: mig-parted destroys every instance of a GPU whose layout
	// changes, so instances cannot be added next to a running pod without evicting it.
	CountsOnlyIdle Strategy = "counts-only greedy, idle GPUs only (nos-style on mig-parted)"
	// Fluid is the ceiling without migration: compute slices only, no geometry, and a pod
	// stays where it started.
	Fluid Strategy = "fluid ceiling, no migration"
	// FluidMigrate is the ceiling with migration: compute slices only, and at every planner
	// interval any running pod may move to any node or GPU at no cost, so it bounds what
	// cross-node repacking could add to the fluid ceiling.
	FluidMigrate Strategy = "fluid ceiling with migration"
	// GpupoolShare is gpupool's planner with approval Auto where fractional pods (below 7
	// slices) ask for a replica of an MPS-shared GPU (nvidia.com/gpu.shared) instead of a MIG
	// instance, and single-GPU pods of 7 slices for a whole GPU: nodes are exclusive or shared.
	GpupoolShare Strategy = "gpupool + MPS sharing (Auto)"
	// GpupoolEvictAllNoMoves is GpupoolEvictAll with every evicted pod back on its own node,
	// as gpupool planned before cross-node moves: the baseline for what moves add.
	GpupoolEvictAllNoMoves Strategy = "gpupool without moves (Auto, evictions, maxDisruptedNodes 100%)"
)

// SharingStrategies are compared in the sharing run.
var SharingStrategies = []Strategy{GpupoolEvict, GpupoolShare, CountsOnly, Fluid, FluidMigrate}

// sharedReplicas is the MPS replica count the sharing run's catalog allows: as many clients as
// a GPU has compute slices, each held to its own slices (the sim checks the slice sum).
const sharedReplicas = 7

// Strategies lists every strategy in report order; -strategies picks them by index, so new
// ones go at the end.
var Strategies = []Strategy{GpupoolIdle, GpupoolEvict, GpupoolIdleAll, GpupoolEvictAll, CountsOnly, CountsOnlyIdle,
	StaticBalanced, Static7g, Fluid, FluidMigrate, GpupoolEvictAllNoMoves}

// Dynamic says whether the strategy changes the cluster at planner intervals while pods pend.
func (st Strategy) Dynamic() bool {
	switch st {
	case CountsOnly, CountsOnlyIdle, FluidMigrate, DMReserve, DMMoves:
		return true
	}
	return st.Gpupool()
}

// Gpupool says whether the strategy is gpupool's planner.
func (st Strategy) Gpupool() bool {
	switch st {
	case GpupoolIdle, GpupoolEvict, GpupoolIdleAll, GpupoolEvictAll, GpupoolShare, GpupoolEvictAllNoMoves:
		return true
	}
	return false
}

// everyNode says whether the strategy's policy lets every node change in one plan.
func (st Strategy) everyNode() bool {
	return st == GpupoolIdleAll || st == GpupoolEvictAll || st == GpupoolEvictAllNoMoves
}

// reconfiguring names a maxReconfiguringNodes as the labels print it; "" is the policy leaving
// it unset, which the planner (and the API server's default) reads as 50%.
func reconfiguring(v string) string {
	if v == "" {
		return planner.DefaultMaxReconfiguringNodes + " (default)"
	}
	return v
}

// Label is the strategy's name in a report whose gpupool policy has the given budgets
// (maxDisruptedNodes, and maxReconfiguringNodes, "" when left unset): the gpupool strategies
// say which they get.
func (st Strategy) Label(budget, reconfigure string) string {
	name := string(st)
	switch st {
	case GpupoolIdle, GpupoolEvict, GpupoolShare:
		return name[:len(name)-1] + ", maxDisruptedNodes " + budget + ", maxReconfiguringNodes " + reconfiguring(reconfigure) + ")"
	case GpupoolIdleAll, GpupoolEvictAll, GpupoolEvictAllNoMoves:
		return name[:len(name)-1] + ", maxReconfiguringNodes 100%)"
	case DMMoves:
		return name + " (maxDisruptedNodes " + budget + ")"
	}
	return name
}

// Short is the strategy's column heading in the all-lists summary.
func (st Strategy) Short(budget, reconfigure string) string {
	if reconfigure == "" {
		reconfigure = planner.DefaultMaxReconfiguringNodes
	}
	r := " (reconfiguring " + reconfigure + ")"
	switch st {
	case GpupoolIdle:
		return "gpupool AutoIdle " + budget + r
	case GpupoolEvict:
		return "gpupool Auto " + budget + r
	case GpupoolIdleAll:
		return "gpupool AutoIdle 100%"
	case GpupoolEvictAll:
		return "gpupool Auto 100%"
	case GpupoolEvictAllNoMoves:
		return "gpupool Auto 100%, no moves"
	case GpupoolShare:
		return "gpupool + MPS, Auto " + budget + r
	case CountsOnly:
		return "counts-only"
	case CountsOnlyIdle:
		return "counts-only, idle GPUs"
	case StaticBalanced:
		return "static balanced"
	case Static7g:
		return "MIG off"
	case Fluid:
		return "fluid, no migration"
	case FluidMigrate:
		return "fluid with migration"
	case DMFirstFit:
		return "DynamicMIG first-fit"
	case DMReserve:
		return "DynamicMIG reserve"
	case DMMoves:
		return "DynamicMIG moves " + budget
	}
	return string(st)
}

// BudgetFor is the maxDisruptedNodes the strategy's policy gets in a run whose budget is
// given.
func (st Strategy) BudgetFor(budget string) string {
	if st.everyNode() {
		return "100%"
	}
	return budget
}

// ReconfigureFor is the maxReconfiguringNodes the strategy's policy gets in a run whose
// -reconfigure-budget is given ("" leaves it unset): the 100% rows stand for no budget at
// all, as the counts-only planner has, so they get 100% of both.
func (st Strategy) ReconfigureFor(reconfigure string) string {
	if st.everyNode() {
		return "100%"
	}
	return reconfigure
}

// autoIdle says whether the strategy's policy has approval AutoIdle, under which a step with
// evictions is never applied.
func (st Strategy) autoIdle() bool { return st == GpupoolIdle || st == GpupoolIdleAll }

// Config is one replay.
type Config struct {
	Product  *mig.Product
	Strategy Strategy
	// Seed shuffles the order of pods with equal creation times and the node order.
	Seed uint64
	// Interval is the simulated seconds between planner calls.
	Interval int64
	// SampleEvery is the simulated seconds between free/stranded samples.
	SampleEvery int64
	// Budget is the policy's maxDisruptedNodes, e.g. "5%".
	Budget string
	// Reconfigure is the policy's maxReconfiguringNodes; "" leaves it unset, so the planner
	// applies the API default.
	Reconfigure string
	// MeasureFrom is when the measured window starts; what happens before is warm-up.
	MeasureFrom int64
}

// Result is what one replay measured.
type Result struct {
	Strategy Strategy
	Seed     uint64
	// GPUPods and Placed count the pods arriving inside the measured window and those of them
	// placed before the replay ended.
	GPUPods int
	Placed  int
	// ServedPct is the time-averaged demand slices running over all compute slices.
	ServedPct float64
	// MeanPending and P95Pending are seconds from arrival to first placement, placed pods only.
	MeanPending, P95Pending float64
	// FreePct, StrandedPct and StrandedCPUPct are samples averaged: compute slices no pod
	// holds; the part of them the layout keeps from every pending pod whose CPU and memory fit
	// their node; and the part on nodes whose free CPU and memory no pending pod fits (both
	// zero while nothing pends).
	FreePct, StrandedPct, StrandedCPUPct float64
	// StrandedPlacementPct is, in the DynamicMIG mode, the part of StrandedPct on GPUs where some
	// pending claim's profile has enough free memory and compute slices in count but no free
	// allowed placement (dra-driver-nvidia-gpu#933); zero elsewhere.
	StrandedPlacementPct float64
	Evictions            int
	PlannerCalls         int
	PlannerMean          time.Duration
	PlannerP95           time.Duration
	// Proposed and Invalid count GPU layouts a planner proposed and those it could not apply
	// (the hardware cannot place them, or mig.Product.Place refused them).
	Proposed, Invalid int
	// Violations counts GPUs a gpupool step changed while a pod it did not evict held them;
	// the sim evicts such pods anyway so the replay continues, and reports the count.
	Violations int
	// SkippedDisruptive counts AutoIdle steps with evictions, which that approval never applies.
	SkippedDisruptive int
	// MultiPods and MultiPlaced count the window's pods asking for more than one GPU and those
	// of them placed; EightPods and EightPlaced the same for pods asking for 8 GPUs, which
	// need a whole idle 8-GPU node and are the first a fragmented pool starves.
	MultiPods, MultiPlaced, EightPods, EightPlaced int
	// Migrations counts running pods the migration ceiling moved to another node or GPU.
	Migrations int
	// Series is served demand (% of all compute slices) at each sample time, warm-up included.
	Series []Point
	Wall   time.Duration
}

// Point is one sample of a replay's served demand: T seconds from the first arrival.
type Point struct {
	T      int64
	Served float64
}

// memSlices is the memory slices of the canonical profile of each compute size.
var memSlices = map[int]int{1: 1, 2: 2, 3: 4, 4: 4, 7: 8}

type instance struct {
	profile string
	compute int
	start   int
	size    int
	pod     int32 // -1 when free
	// canon is true when profile is the canonical profile of its compute size, the only one a
	// trace pod of that size asks for.
	canon bool
}

type simGPU struct {
	mig      bool
	insts    []instance
	wholePod int32 // pod holding the GPU with MIG off, -1 when none
	used     int   // fluid, and shared GPUs: compute slices in use
	// replicas is the GPU's MPS replica count when its node shares, else 0; sharedPods
	// counts the replicas held.
	replicas, sharedPods int
	// DynamicMIG only: taints are the partitions tainted NoSchedule, and fit has bit c set when
	// the canonical profile of c compute slices has a free partition no taint covers.
	taints []partitionKey
	fit    uint8
}

func (g *simGPU) idle() bool {
	if g.wholePod >= 0 || g.used > 0 {
		return false
	}
	for _, in := range g.insts {
		if in.pod >= 0 {
			return false
		}
	}
	return true
}

type simNode struct {
	spec    NodeSpec
	cpuFree int64
	memFree int64
	gpus    []simGPU
	running []int32
	// freeCanon counts free canonical instances per compute size, so that the scheduler skips
	// a node with nothing for a pod's shape without walking its GPUs: the scheduler runs for
	// every pending pod at every event and dominated the replay's time.
	freeCanon [8]int
}

// recount recomputes a node's free canonical instances after its layouts changed.
func (n *simNode) recount() {
	n.freeCanon = [8]int{}
	for g := range n.gpus {
		if !n.gpus[g].mig {
			continue
		}
		for _, in := range n.gpus[g].insts {
			if in.pod < 0 && in.canon {
				n.freeCanon[in.compute]++
			}
		}
	}
}

// sharedReplicas is the MPS replicas a shared node advertises, 0 when it does not share.
func (n *simNode) sharedReplicas() int {
	total := 0
	for _, g := range n.gpus {
		total += g.replicas
	}
	return total
}

type podState struct {
	node       int32 // -1 when not running
	gpus       []int32
	since      int64 // pending since
	firstStart int64 // -1 until first placed
	ran        int64 // seconds run before an eviction
	startedAt  int64
	seq        int32 // invalidates departure events after an eviction
	queued     bool
	done       bool
}

type departure struct {
	at  int64
	pod int32
	seq int32
}

type depHeap []departure

// Len, Less, Swap, Push and Pop make depHeap a container/heap of departures, earliest first
// (pod index breaks ties so that replays are deterministic).
func (h depHeap) Len() int { return len(h) }

// Less orders departures by time, then pod.
func (h depHeap) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].pod < h[j].pod
}

// Swap is heap.Interface's swap.
func (h depHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }

// Push is heap.Interface's push.
func (h *depHeap) Push(x any) { *h = append(*h, x.(departure)) }

// Pop is heap.Interface's pop.
func (h *depHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
func (h depHeap) top() departure { return h[0] }

type sim struct {
	cfg     Config
	nodes   []*simNode
	pods    []PodSpec
	st      []podState
	order   []int32 // arrival order
	queue   []int32
	deps    depHeap
	now     int64
	profile map[int]string // compute slices -> canonical profile name

	usedSlices  int64
	totalSlices int64
	servedInt   float64
	freeSum     float64
	strandedSum float64
	// strandedCPUSum adds up free slices on nodes no pending pod's CPU and memory fit.
	strandedCPUSum float64
	// strandedPlacementSum adds up, in the DynamicMIG mode, the stranded slices a pending
	// claim's profile fits by count but at no free placement.
	strandedPlacementSum float64
	samples              int
	evictions            int
	plannerDur           []time.Duration
	proposed             int
	invalid              int
	violations           int
	skipped              int
	migrations           int
	series               []Point
	gp                   *gpupoolPlanner
	dm                   *dmState
}

func (s *sim) migKind() bool {
	switch s.cfg.Strategy {
	case Fluid, FluidMigrate, Static7g:
		return false
	}
	return true
}

// fluid says whether GPUs are pools of compute slices rather than MIG instances.
func (s *sim) fluid() bool { return s.cfg.Strategy == Fluid || s.cfg.Strategy == FluidMigrate }

// dynamic says whether the strategy acts at planner intervals.
func (s *sim) dynamic() bool { return s.cfg.Strategy.Dynamic() }

// sharedShape says whether a pod asks for a shared replica under the sharing strategy.
func (s *sim) sharedShape(sh Shape) bool {
	return s.cfg.Strategy == GpupoolShare && sh.Whole == 0 && sh.Slices < 7
}

// newSim lays out the cluster for the strategy: dynamic strategies start from all-balanced,
// the layout an operator would install before gpupool, so that both begin equal.
func newSim(cfg Config, nodes []NodeSpec, pods []PodSpec) (*sim, error) {
	s := &sim{cfg: cfg, pods: pods, profile: map[int]string{}}
	for _, pr := range cfg.Product.Profiles {
		if pr.Special() {
			continue
		}
		// The catalog lists larger memory first for equal compute; keep the smallest memory
		// profile of each compute size, the canonical one (1g.10gb, not 1g.20gb).
		if _, ok := s.profile[pr.ComputeSlices]; !ok || pr.MemorySlices == memSlices[pr.ComputeSlices] {
			s.profile[pr.ComputeSlices] = pr.Name
		}
	}
	balanced := mig.Layout{s.profile[1]: 2, s.profile[2]: 1, s.profile[3]: 1}
	placed, err := cfg.Product.Place(balanced, nil)
	if err != nil {
		return nil, fmt.Errorf("all-balanced on %s: %w", cfg.Product.Name, err)
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))
	perm := rng.Perm(len(nodes))
	for _, i := range perm {
		ns := nodes[i]
		n := &simNode{spec: ns, cpuFree: ns.CPU, memFree: ns.MemMiB, gpus: make([]simGPU, ns.GPUs)}
		for g := range n.gpus {
			n.gpus[g].wholePod = -1
			if s.dmig() {
				// The DynamicMIG driver starts with no instance: it destroys those no claim holds.
				n.gpus[g].mig = true
			} else if s.migKind() {
				n.gpus[g].mig = true
				n.gpus[g].insts = s.instances(placed)
			}
		}
		n.recount()
		s.totalSlices += int64(7 * ns.GPUs)
		s.nodes = append(s.nodes, n)
	}
	s.st = make([]podState, len(pods))
	tie := make([]uint64, len(pods))
	for i := range pods {
		s.order = append(s.order, int32(i))
		tie[i] = rng.Uint64()
		s.st[i] = podState{node: -1, firstStart: -1}
	}
	sort.SliceStable(s.order, func(a, b int) bool {
		pa, pb := s.order[a], s.order[b]
		if pods[pa].Arrive != pods[pb].Arrive {
			return pods[pa].Arrive < pods[pb].Arrive
		}
		return tie[pa] < tie[pb]
	})
	if cfg.Strategy.Gpupool() {
		s.gp = newGpupoolPlanner(s)
	}
	if s.dmig() {
		s.dm = newDMState(s)
		for _, n := range s.nodes {
			for g := range n.gpus {
				s.dmRefit(&n.gpus[g])
			}
			n.dmRecount()
		}
		if cfg.Strategy == DMMoves {
			s.dm.mv = newDMMoves(s)
		}
	}
	return s, nil
}

func (s *sim) instances(placed []mig.Instance) []instance {
	out := make([]instance, len(placed))
	for i, in := range placed {
		pr, _ := s.cfg.Product.Profile(in.Profile)
		out[i] = instance{profile: in.Profile, compute: pr.ComputeSlices, start: in.Placement.Start, size: in.Placement.Size, pod: -1,
			canon: in.Profile == s.profile[pr.ComputeSlices]}
	}
	return out
}

// Run replays pods on nodes with one strategy.
func Run(cfg Config, nodes []NodeSpec, pods []PodSpec) (*Result, error) {
	start := time.Now()
	if cfg.Interval <= 0 || cfg.SampleEvery <= 0 {
		return nil, fmt.Errorf("interval %d and sample period %d must be positive", cfg.Interval, cfg.SampleEvery)
	}
	seen := make(map[string]bool, len(pods))
	for _, p := range pods {
		if seen[p.Name] {
			return nil, fmt.Errorf("pod name %s appears twice; the planner tells pods apart by name", p.Name)
		}
		seen[p.Name] = true
	}
	s, err := newSim(cfg, nodes, pods)
	if err != nil {
		return nil, err
	}
	if err := s.loop(); err != nil {
		return nil, fmt.Errorf("%s seed %d: %w", cfg.Strategy, cfg.Seed, err)
	}
	r := s.result()
	r.Wall = time.Since(start)
	return r, nil
}

const never = int64(1) << 62

func (s *sim) loop() error {
	if len(s.order) == 0 {
		return nil
	}
	t0 := s.pods[s.order[0]].Arrive
	tEnd := s.pods[s.order[len(s.order)-1]].Arrive
	s.now = t0
	next := 0
	nextSample := t0
	nextTick := never
	dirty := false
	for {
		t := never
		if next < len(s.order) {
			t = s.pods[s.order[next]].Arrive
		}
		if len(s.deps) > 0 {
			t = min(t, s.deps.top().at)
		}
		t = min(t, nextTick, nextSample)
		if t > tEnd {
			break
		}
		s.integrate(t)
		s.now = t
		full := false
		var arrived []int32
		for len(s.deps) > 0 && s.deps.top().at == t {
			d := heap.Pop(&s.deps).(departure)
			if s.st[d.pod].seq != d.seq || s.st[d.pod].node < 0 {
				continue
			}
			s.unbind(d.pod)
			s.st[d.pod].done = true
			full, dirty = true, true
		}
		for next < len(s.order) && s.pods[s.order[next]].Arrive == t {
			p := s.order[next]
			next++
			s.st[p].since = t
			arrived = append(arrived, p)
			dirty = true
		}
		s.queue = append(s.queue, arrived...)
		for _, p := range arrived {
			s.st[p].queued = true
			if s.dm != nil {
				s.dm.arrive(s.pods[p].Shape)
			}
		}
		if full {
			s.schedule(s.queue)
		} else if len(arrived) > 0 {
			s.schedule(arrived)
		}
		if t == nextTick {
			nextTick = never
			changed, err := s.plan()
			if err != nil {
				return err
			}
			dirty = changed
			if changed {
				s.schedule(s.queue)
			}
		}
		if t == nextSample {
			if t >= s.cfg.MeasureFrom {
				s.sample()
			}
			s.series = append(s.series, Point{T: t - t0, Served: 100 * float64(s.usedSlices) / float64(max(s.totalSlices, 1))})
			nextSample += s.cfg.SampleEvery
		}
		if s.dynamic() && dirty && len(s.queue) > 0 && nextTick == never {
			nextTick = (t/s.cfg.Interval + 1) * s.cfg.Interval
		}
	}
	s.integrate(tEnd)
	if from := max(t0, s.cfg.MeasureFrom); tEnd > from {
		s.servedInt /= float64(tEnd - from)
	}
	return nil
}

// integrate adds the demand running from now to t, inside the measured window only.
func (s *sim) integrate(t int64) {
	if from := max(s.now, s.cfg.MeasureFrom); t > from {
		s.servedInt += float64(s.usedSlices) * float64(t-from)
	}
}

// schedule places pending pods in queue order, first fit over the (seeded) node order, as the
// kube-scheduler would with whole-pod fit. A failed pod is a lower bound for its shape in this
// pass: any pod of the same shape asking for at least its CPU and memory fails too, which keeps
// a long queue cheap without changing the outcome.
func (s *sim) schedule(cands []int32) {
	type floor struct{ cpu, mem int64 }
	failed := map[Shape]floor{}
	placedAny := false
	for _, p := range cands {
		if !s.st[p].queued {
			continue
		}
		spec := &s.pods[p]
		if f, ok := failed[spec.Shape]; ok && spec.CPU >= f.cpu && spec.MemMiB >= f.mem {
			continue
		}
		if s.place(p) {
			placedAny = true
			continue
		}
		f, ok := failed[spec.Shape]
		if !ok || spec.CPU <= f.cpu && spec.MemMiB <= f.mem {
			failed[spec.Shape] = floor{spec.CPU, spec.MemMiB}
		}
	}
	if placedAny {
		s.queue = slices.DeleteFunc(s.queue, func(p int32) bool { return !s.st[p].queued })
	}
}

// place binds one pending pod to the first node that fits it whole; it reports success.
func (s *sim) place(p int32) bool {
	for ni := range s.nodes {
		if s.placeOn(p, ni) {
			return true
		}
	}
	return false
}

// placeOn binds a pending pod to node ni if the node fits it whole.
func (s *sim) placeOn(p int32, ni int) bool {
	spec := &s.pods[p]
	shape := spec.Shape
	if (s.cfg.Strategy == Static7g || s.cfg.Strategy == GpupoolShare) && shape.Whole == 0 && shape.Slices == 7 {
		shape = Shape{Whole: 1}
	}
	if s.cfg.Strategy == Static7g && shape.Whole == 0 {
		shape = Shape{Whole: 1}
	}
	n := s.nodes[ni]
	if n.cpuFree < spec.CPU || n.memFree < spec.MemMiB {
		return false
	}
	var gpus []int32
	if s.dmig() {
		if gpus = s.dmAllocate(p, n, shape); gpus == nil {
			return false
		}
	} else if s.sharedShape(shape) {
		for g := range n.gpus {
			gp := &n.gpus[g]
			if gp.replicas > 0 && gp.sharedPods < gp.replicas && gp.used+shape.Slices <= 7 {
				gp.used += shape.Slices
				gp.sharedPods++
				gpus = []int32{int32(g)}
				break
			}
		}
		if gpus == nil {
			return false
		}
	} else if shape.Whole > 0 {
		for g := range n.gpus {
			gp := &n.gpus[g]
			if !gp.mig && gp.replicas == 0 && gp.idle() {
				gpus = append(gpus, int32(g))
				if len(gpus) == shape.Whole {
					break
				}
			}
		}
		if len(gpus) < shape.Whole {
			return false
		}
		for _, g := range gpus {
			n.gpus[g].wholePod = p
			if s.fluid() {
				n.gpus[g].used = 7
			}
		}
	} else if s.fluid() {
		for g := range n.gpus {
			gp := &n.gpus[g]
			if gp.used+shape.Slices <= 7 {
				gp.used += shape.Slices
				gpus = []int32{int32(g)}
				break
			}
		}
		if gpus == nil {
			return false
		}
	} else {
		if n.freeCanon[shape.Slices] == 0 {
			return false
		}
	search:
		for g := range n.gpus {
			gp := &n.gpus[g]
			if !gp.mig {
				continue
			}
			for k := range gp.insts {
				if in := &gp.insts[k]; in.pod < 0 && in.canon && in.compute == shape.Slices {
					in.pod = p
					n.freeCanon[shape.Slices]--
					gpus = []int32{int32(g)}
					break search
				}
			}
		}
		if gpus == nil {
			return false
		}
	}
	st := &s.st[p]
	st.node, st.gpus, st.queued = int32(ni), gpus, false
	n.cpuFree -= spec.CPU
	n.memFree -= spec.MemMiB
	n.running = append(n.running, p)
	s.usedSlices += int64(spec.Shape.DemandSlices())
	if st.firstStart < 0 {
		st.firstStart = s.now
	}
	st.startedAt = s.now
	if spec.Depart > spec.Arrive {
		heap.Push(&s.deps, departure{at: s.now + (spec.Depart - spec.Arrive) - st.ran, pod: p, seq: st.seq})
	}
	return true
}

// unbind stops a running pod and frees what it holds.
func (s *sim) unbind(p int32) {
	s.release(p)
	s.usedSlices -= int64(s.pods[p].Shape.DemandSlices())
	s.st[p].seq++
}

// release frees what a running pod holds on its node and leaves it nowhere; unless unbind
// follows, the pod keeps running (its departure stays due), as when the migration ceiling
// moves it.
func (s *sim) release(p int32) {
	st := &s.st[p]
	spec := &s.pods[p]
	n := s.nodes[st.node]
	for _, g := range st.gpus {
		gp := &n.gpus[g]
		if s.dmig() {
			s.dmRelease(n, g, p)
			continue
		}
		if gp.wholePod == p {
			gp.wholePod = -1
			if s.fluid() {
				gp.used = 0
			}
			continue
		}
		if s.fluid() {
			gp.used -= spec.Shape.Slices
			continue
		}
		if gp.replicas > 0 {
			gp.used -= spec.Shape.Slices
			gp.sharedPods--
			continue
		}
		for k := range gp.insts {
			if in := &gp.insts[k]; in.pod == p {
				in.pod = -1
				if in.canon {
					n.freeCanon[in.compute]++
				}
			}
		}
	}
	n.cpuFree += spec.CPU
	n.memFree += spec.MemMiB
	n.running = slices.DeleteFunc(n.running, func(q int32) bool { return q == p })
	st.node, st.gpus = -1, nil
}

// evict stops a running pod and puts it back in the pending queue with its remaining runtime,
// as its controller would recreate it.
func (s *sim) evict(p int32) {
	st := &s.st[p]
	st.ran += s.now - st.startedAt
	s.unbind(p)
	st.queued = true
	st.since = s.now
	s.queue = append(s.queue, p)
	if s.now >= s.cfg.MeasureFrom {
		s.evictions++
	}
}

// demandKind indexes what a pending pod asks of a GPU in the stranded accounting: 1-7 a MIG
// instance (or, for the fluid ceiling, that many slices) of that many compute slices, kindWhole
// whole GPUs, and kindShared+c (9-14) a shared replica for c slices, 1 <= c <= 6.
const (
	kindWhole  = 8
	kindShared = kindWhole
	kinds      = kindShared + 7
)

// cpuMem is a pending pod's CPU and memory request.
type cpuMem struct{ cpu, mem int64 }

// pendingFrontier keeps, per demand kind, the pending requests no other pending request of the
// kind undercuts in both CPU and memory, sorted by CPU: a node can host some pending pod of
// the kind exactly when it can host one of these.
type pendingFrontier [kinds][]cpuMem

func (s *sim) demandKind(sh Shape) int {
	switch {
	case s.sharedShape(sh):
		return kindShared + sh.Slices
	case sh.Whole > 0 || s.cfg.Strategy == Static7g || (s.cfg.Strategy == GpupoolShare && sh.Slices == 7):
		return kindWhole
	}
	return sh.Slices
}

func (s *sim) frontier() *pendingFrontier {
	var f pendingFrontier
	for _, p := range s.queue {
		k := s.demandKind(s.pods[p].Shape)
		f[k] = append(f[k], cpuMem{s.pods[p].CPU, s.pods[p].MemMiB})
	}
	for k, pts := range f {
		slices.SortFunc(pts, func(a, b cpuMem) int { return cmp.Or(cmp.Compare(a.cpu, b.cpu), cmp.Compare(a.mem, b.mem)) })
		kept := pts[:0]
		for _, pt := range pts {
			if len(kept) == 0 || pt.mem < kept[len(kept)-1].mem {
				kept = append(kept, pt)
			}
		}
		f[k] = kept
	}
	return &f
}

// hosts says which demand kinds have a pending pod whose CPU and memory fit the node's free
// CPU and memory.
func (f *pendingFrontier) hosts(n *simNode) (out [kinds]bool, any bool) {
	for k, pts := range f {
		// Along the frontier memory falls as CPU rises: the last point within the CPU is the
		// one most likely to fit the memory.
		i := sort.Search(len(pts), func(i int) bool { return pts[i].cpu > n.cpuFree })
		if i > 0 && pts[i-1].mem <= n.memFree {
			out[k], any = true, true
		}
	}
	return out, any
}

// sample records free compute slices and the part no pending pod can use as things stand, in
// two parts: slices on nodes whose free CPU or memory no pending pod fits (no layout could
// help), and slices on the other nodes that the layout keeps from every pending pod the node's
// CPU and memory could take (the part a GPU partitioner answers for).
func (s *sim) sample() {
	var free, byLayout, byCPU, byPlacement int64
	pending := len(s.queue) > 0
	var front *pendingFrontier
	if pending {
		front = s.frontier()
	}
	for _, n := range s.nodes {
		var want [kinds]bool
		hostsAny := false
		if pending {
			want, hostsAny = front.hosts(n)
		}
		minMIG, minShared := 8, 8
		for c := 7; c >= 1; c-- {
			if want[c] {
				minMIG = c
			}
			if c < 7 && want[kindShared+c] {
				minShared = c
			}
		}
		wantWhole := want[kindWhole]
		var nodeFree, nodeStranded, nodePlacement int64
		for g := range n.gpus {
			gp := &n.gpus[g]
			var f, st int64
			switch {
			case s.dmig():
				var sp int64
				f, st, sp = s.dmStranded(gp, &want)
				nodePlacement += sp
			case gp.wholePod >= 0:
			case gp.replicas > 0:
				f = int64(7 - gp.used)
				if minShared > 7-gp.used || gp.sharedPods == gp.replicas {
					st = f
				}
			case s.fluid():
				f = int64(7 - gp.used)
				if minMIG > 7-gp.used && (!wantWhole || gp.used != 0) {
					st = f
				}
			case !gp.mig:
				f = 7
				if !wantWhole {
					st = f
				}
			default:
				used := 0
				for _, in := range gp.insts {
					if in.pod >= 0 {
						used += in.compute
					} else if !want[in.compute] || in.profile != s.profile[in.compute] {
						st += int64(in.compute)
					}
				}
				f = int64(7 - used)
				carved := 0
				for _, in := range gp.insts {
					carved += in.compute
				}
				// Compute slices no instance covers serve nobody until a planner carves them.
				st += int64(7 - carved)
			}
			nodeFree += f
			nodeStranded += st
		}
		free += nodeFree
		switch {
		case !pending:
		case !hostsAny:
			byCPU += nodeFree
		default:
			byLayout += nodeStranded
			byPlacement += nodePlacement
		}
	}
	total := float64(s.totalSlices)
	s.freeSum += float64(free) / total
	s.strandedSum += float64(byLayout) / total
	s.strandedCPUSum += float64(byCPU) / total
	s.strandedPlacementSum += float64(byPlacement) / total
	s.samples++
}

func (s *sim) plan() (bool, error) {
	switch {
	case s.cfg.Strategy.Gpupool():
		return s.gp.plan()
	case s.cfg.Strategy == CountsOnly || s.cfg.Strategy == CountsOnlyIdle:
		start := time.Now()
		changed := s.countsOnly()
		s.plannerDur = append(s.plannerDur, time.Since(start))
		return changed, nil
	case s.cfg.Strategy == FluidMigrate:
		start := time.Now()
		changed := s.migrate()
		s.plannerDur = append(s.plannerDur, time.Since(start))
		return changed, nil
	case s.dmig():
		start := time.Now()
		changed, err := s.dmPlan()
		s.plannerDur = append(s.plannerDur, time.Since(start))
		return changed, err
	}
	return false, nil
}

func (s *sim) result() *Result {
	r := &Result{Strategy: s.cfg.Strategy, Seed: s.cfg.Seed, Evictions: s.evictions,
		PlannerCalls: len(s.plannerDur), Proposed: s.proposed, Invalid: s.invalid, Violations: s.violations,
		SkippedDisruptive: s.skipped, Migrations: s.migrations, Series: s.series}
	if s.totalSlices > 0 {
		r.ServedPct = 100 * s.servedInt / float64(s.totalSlices)
	}
	var waits []float64
	for i := range s.st {
		if s.pods[i].Arrive < s.cfg.MeasureFrom {
			continue
		}
		r.GPUPods++
		placed := s.st[i].firstStart >= 0
		if placed {
			r.Placed++
			waits = append(waits, float64(s.st[i].firstStart-s.pods[i].Arrive))
		}
		if w := s.pods[i].Shape.Whole; w > 1 {
			r.MultiPods++
			if placed {
				r.MultiPlaced++
			}
			if w == 8 {
				r.EightPods++
				if placed {
					r.EightPlaced++
				}
			}
		}
	}
	r.MeanPending, r.P95Pending = meanP95(waits)
	if s.samples > 0 {
		r.FreePct = 100 * s.freeSum / float64(s.samples)
		r.StrandedPct = 100 * s.strandedSum / float64(s.samples)
		r.StrandedCPUPct = 100 * s.strandedCPUSum / float64(s.samples)
		r.StrandedPlacementPct = 100 * s.strandedPlacementSum / float64(s.samples)
	}
	if n := len(s.plannerDur); n > 0 {
		d := slices.Clone(s.plannerDur)
		slices.Sort(d)
		var sum time.Duration
		for _, v := range d {
			sum += v
		}
		r.PlannerMean = sum / time.Duration(n)
		r.PlannerP95 = d[min(n-1, n*95/100)]
	}
	return r
}

func meanP95(v []float64) (mean, p95 float64) {
	if len(v) == 0 {
		return 0, 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	var sum float64
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v)), v[min(len(v)-1, len(v)*95/100)]
}
