package fragmentation

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Summary aggregates one strategy's results over seeds.
type Summary struct {
	Strategy Strategy
	// Budget and Reconfigure are the run's maxDisruptedNodes and maxReconfiguringNodes ("" when
	// left unset), named in the labels of the strategies that take them.
	Budget, Reconfigure string
	Runs                []*Result
}

func (s Summary) label() string { return s.Strategy.Label(s.Budget, s.Reconfigure) }

// stat is mean, min and max of one metric over seeds.
type stat struct{ mean, lo, hi float64 }

func statOf(runs []*Result, f func(*Result) float64) stat {
	st := stat{lo: math.Inf(1), hi: math.Inf(-1)}
	for _, r := range runs {
		v := f(r)
		st.mean += v / float64(len(runs))
		st.lo, st.hi = min(st.lo, v), max(st.hi, v)
	}
	return st
}

func (s stat) format(unit string, digits int) string {
	return fmt.Sprintf("%.*f%s [%.*f-%.*f]", digits, s.mean, unit, digits, s.lo, digits, s.hi)
}

func placedPct(x *Result) float64 { return 100 * float64(x.Placed) / float64(max(x.GPUPods, 1)) }

func evictionsPer1k(x *Result) float64 {
	return 1000 * float64(x.Evictions) / float64(max(x.GPUPods, 1))
}

// placedOf formats pods placed of pods offered, averaged over seeds, or "-" when none were
// offered: a share alone would hide that 8-GPU pods are a few dozen of thousands.
func placedOf(runs []*Result, placed, offered func(*Result) int) string {
	off := statOf(runs, func(x *Result) float64 { return float64(offered(x)) })
	if off.hi == 0 {
		return "-"
	}
	pl := statOf(runs, func(x *Result) float64 { return float64(placed(x)) })
	return fmt.Sprintf("%.0f of %.0f (%.1f%%)", pl.mean, off.mean, 100*pl.mean/off.mean)
}

// servedNothing says whether no run of any strategy placed a single pod of a workload that
// offered some: the table would be all zeros, and the reader needs to be told why instead.
func servedNothing(sums []Summary) bool {
	offered := false
	for _, s := range sums {
		for _, r := range s.Runs {
			if r.Placed > 0 {
				return false
			}
			offered = offered || r.GPUPods > 0
		}
	}
	return offered
}

// Table renders one workload's summaries as a Markdown table.
func Table(title string, sums []Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n", title)
	var warnings strings.Builder
	for _, s := range sums {
		// A dynamic strategy never called while pods pended would show the initial layout's
		// figures as if they were its own: say so rather than print them silently.
		idle := len(s.Runs) > 0
		for _, r := range s.Runs {
			idle = idle && r.PlannerCalls == 0 && r.Placed < r.GPUPods
		}
		if s.Strategy.Dynamic() && idle {
			fmt.Fprintf(&warnings, "Warning: %s was never called although pods pended; the measured window is shorter than a planner "+
				"interval, so its row shows the initial layout, not the strategy.\n\n", s.label())
		}
	}
	if servedNothing(sums) {
		fmt.Fprintf(&b, "No strategy placed a single pod of this workload (%d GPU pods in the measured window), so there is "+
			"nothing to compare.", sums[0].Runs[0].GPUPods)
		if warnings.Len() == 0 {
			b.WriteString(" Its pods ask for more than any node has free (GPUs, CPU or memory).")
		}
		b.WriteString("\n\n" + warnings.String())
		return b.String()
	}
	b.WriteString("| strategy | served GPU demand % | pods placed % | multi-GPU pods placed | 8-GPU pods placed | pending mean min | pending p95 min | free slices % | stranded by layout % | stranded by CPU/mem % | evictions / 1k pods | planner calls | planner ms mean | planner ms p95 | invalid layouts |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range sums {
		r := s.Runs
		ms := func(d func(*Result) time.Duration) stat {
			return statOf(r, func(x *Result) float64 { return float64(d(x).Microseconds()) / 1000 })
		}
		invalid := "-"
		prop := statOf(r, func(x *Result) float64 { return float64(x.Proposed) })
		if prop.hi > 0 {
			inv := statOf(r, func(x *Result) float64 { return float64(x.Invalid) })
			invalid = fmt.Sprintf("%.0f of %.0f (%.1f%%)", inv.mean, prop.mean, 100*inv.mean/max(prop.mean, 1))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.label(),
			statOf(r, func(x *Result) float64 { return x.ServedPct }).format("", 1),
			statOf(r, placedPct).format("", 1),
			placedOf(r, func(x *Result) int { return x.MultiPlaced }, func(x *Result) int { return x.MultiPods }),
			placedOf(r, func(x *Result) int { return x.EightPlaced }, func(x *Result) int { return x.EightPods }),
			statOf(r, func(x *Result) float64 { return x.MeanPending / 60 }).format("", 1),
			statOf(r, func(x *Result) float64 { return x.P95Pending / 60 }).format("", 1),
			statOf(r, func(x *Result) float64 { return x.FreePct }).format("", 1),
			statOf(r, func(x *Result) float64 { return x.StrandedPct }).format("", 2),
			statOf(r, func(x *Result) float64 { return x.StrandedCPUPct }).format("", 1),
			statOf(r, evictionsPer1k).format("", 1),
			statOf(r, func(x *Result) float64 { return float64(x.PlannerCalls) }).format("", 0),
			ms(func(x *Result) time.Duration { return x.PlannerMean }).format("", 1),
			ms(func(x *Result) time.Duration { return x.PlannerP95 }).format("", 1),
			invalid)
	}
	b.WriteString("\n" + warnings.String())
	return b.String()
}

// NoGPUDemand is what the report says for a pod list without a single GPU pod, in place of a
// table of zeros.
func NoGPUDemand(title string, l *PodList) string {
	return fmt.Sprintf("### %s\n\nNo GPU demand: %s has %d CPU-only pods and no GPU pod, so no strategy has anything to "+
		"serve and nothing was replayed.\n\n", title, l.File, l.CPUOnly)
}

// ListRow is one pod list's line in the all-lists summary.
type ListRow struct {
	File, Product string
	// Work is the replayed workload, for its offered load.
	Work Workload
	// Note replaces the figures when there are none, e.g. "no GPU demand".
	Note string
	Sums []Summary
}

// ListsSummary renders one line per pod list: served demand per strategy and evictions per
// 1,000 pods for the gpupool strategies that evict, so that lists can be compared at a glance.
func ListsSummary(rows []ListRow, strategies []Strategy, budget, reconfigure string) string {
	var b strings.Builder
	var evicting []Strategy
	for _, st := range strategies {
		if st.Gpupool() && !st.autoIdle() {
			evicting = append(evicting, st)
		}
	}
	b.WriteString("| list | product | offered % |")
	for _, st := range strategies {
		fmt.Fprintf(&b, " %s served %% |", st.Short(budget, reconfigure))
	}
	for _, st := range evicting {
		fmt.Fprintf(&b, " %s evictions / 1k pods |", st.Short(budget, reconfigure))
	}
	b.WriteString("\n|---|---|---|" + strings.Repeat("---|", len(strategies)+len(evicting)) + "\n")
	for _, row := range rows {
		offered := fmt.Sprintf("%.0f", 100*row.Work.Offered)
		if row.Work.Capped {
			offered += " (capped)"
		}
		fmt.Fprintf(&b, "| %s | %s |", row.File, row.Product)
		note := row.Note
		if note == "" && servedNothing(row.Sums) {
			note = "no strategy placed any pod"
		}
		if note != "" {
			fmt.Fprintf(&b, " %s | %s |%s\n", offered, note, strings.Repeat(" |", len(strategies)+len(evicting)-1))
			continue
		}
		by := map[Strategy]Summary{}
		for _, s := range row.Sums {
			by[s.Strategy] = s
		}
		fmt.Fprintf(&b, " %s |", offered)
		cell := func(st Strategy, f func(*Result) float64, digits int) string {
			s, ok := by[st]
			if !ok {
				return "-"
			}
			return fmt.Sprintf("%.*f", digits, statOf(s.Runs, f).mean)
		}
		for _, st := range strategies {
			fmt.Fprintf(&b, " %s |", cell(st, func(x *Result) float64 { return x.ServedPct }, 1))
		}
		for _, st := range evicting {
			fmt.Fprintf(&b, " %s |", cell(st, evictionsPer1k, 1))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	return b.String()
}

// SweepPoint is the gpupool replays of one maxDisruptedNodes budget in the budget sweep.
type SweepPoint struct {
	Budget      string
	Idle, Evict Summary
}

// SweepTable renders the budget sweep: served demand and evictions per budget for AutoIdle and
// Auto, next to the fluid ceilings, which no budget moves.
func SweepTable(title string, pts []SweepPoint, ceilings []Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n", title)
	b.WriteString("| maxDisruptedNodes | AutoIdle served % | Auto served % | Auto evictions / 1k pods | AutoIdle planner calls | Auto planner calls |\n|---|---|---|---|---|---|\n")
	for _, pt := range pts {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", pt.Budget,
			statOf(pt.Idle.Runs, func(x *Result) float64 { return x.ServedPct }).format("", 1),
			statOf(pt.Evict.Runs, func(x *Result) float64 { return x.ServedPct }).format("", 1),
			statOf(pt.Evict.Runs, evictionsPer1k).format("", 1),
			statOf(pt.Idle.Runs, func(x *Result) float64 { return float64(x.PlannerCalls) }).format("", 0),
			statOf(pt.Evict.Runs, func(x *Result) float64 { return float64(x.PlannerCalls) }).format("", 0))
	}
	b.WriteString("\n")
	for _, c := range ceilings {
		fmt.Fprintf(&b, "%s, whatever the budget: %s served.\n\n", c.label(),
			statOf(c.Runs, func(x *Result) float64 { return x.ServedPct }).format("%", 1))
	}
	return b.String()
}

// moveGoals checks the cross-node moves goals: Auto at the 5% budget within 0.5 points of the fluid
// ceiling without migration, Auto with every node above it, placing at least 3x the 8-GPU
// pods that the same planner places when evicted pods must come back on their own node.
func moveGoals(by map[Strategy]Summary, ceiling float64) string {
	var b strings.Builder
	served := func(s Summary) float64 { return statOf(s.Runs, func(x *Result) float64 { return x.ServedPct }).mean }
	perK := func(s Summary) float64 {
		return statOf(s.Runs, func(x *Result) float64 { return 1000 * float64(x.Evictions) / float64(max(x.GPUPods, 1)) }).mean
	}
	eight := func(s Summary) float64 {
		return statOf(s.Runs, func(x *Result) float64 { return float64(x.EightPlaced) }).mean
	}
	if g, ok := by[GpupoolEvict]; ok {
		v := served(g)
		fmt.Fprintf(&b, "- %s within 0.5 points of the fluid ceiling without migration: %s (%.1f vs %.1f, gap %.2f points; %.1f evictions per 1,000 pods)\n",
			g.label(), yesNo(ceiling-v <= 0.5), v, ceiling, ceiling-v, perK(g))
	}
	if g, ok := by[GpupoolEvictAll]; ok {
		v := served(g)
		fmt.Fprintf(&b, "- %s above the fluid ceiling without migration: %s (%.1f vs %.1f; %.1f evictions per 1,000 pods)\n",
			g.label(), yesNo(v > ceiling), v, ceiling, perK(g))
		if base, ok := by[GpupoolEvictAllNoMoves]; ok && eight(base) == 0 && eight(g) == 0 {
			fmt.Fprintf(&b, "- 8-GPU pods: neither %s nor %s places one (the window offers %d): the goal does not apply\n",
				g.Strategy.Short(g.Budget, g.Reconfigure), base.Strategy.Short(base.Budget, base.Reconfigure), g.Runs[0].EightPods)
		} else if ok {
			fmt.Fprintf(&b, "- %s places at least 3x the 8-GPU pods of %s: %s (%.1f vs %.1f placed per run, %.2fx)\n",
				g.Strategy.Short(g.Budget, g.Reconfigure), base.Strategy.Short(base.Budget, base.Reconfigure),
				yesNo(eight(g) >= 3*eight(base)), eight(g), eight(base), eight(g)/max(eight(base), 1e-9))
		}
	}
	return b.String()
}

// Goals checks the goals for one workload and says plainly which hold.
func Goals(title string, sums []Summary) string {
	by := map[Strategy]Summary{}
	for _, s := range sums {
		by[s.Strategy] = s
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Goals, %s:\n\n", title)
	fluid, ok := by[Fluid]
	if !ok {
		return ""
	}
	fl := statOf(fluid.Runs, func(x *Result) float64 { return x.ServedPct })
	ceiling := fl.mean
	if mig, ok := by[FluidMigrate]; ok {
		ceiling = max(ceiling, statOf(mig.Runs, func(x *Result) float64 { return x.ServedPct }).mean)
	}
	var above []string
	most := ceiling
	for _, s := range sums {
		if v := statOf(s.Runs, func(x *Result) float64 { return x.ServedPct }).mean; s.Strategy != Fluid && s.Strategy != FluidMigrate && v > ceiling {
			above = append(above, s.Strategy.Short(s.Budget, s.Reconfigure))
			most = max(most, v)
		}
	}
	if len(above) > 0 {
		// The ceilings drop MIG geometry but schedule in the same first-fit order as everyone
		// else, so over time another strategy's different choices can serve more.
		fmt.Fprintf(&b, "- above the fluid ceilings (%.1f): %s, by up to %.1f points; the ceilings bound packing at each moment, "+
			"not where first-fit scheduling leads over the replay\n", ceiling, strings.Join(above, ", "), most-ceiling)
	}
	if mig, ok := by[FluidMigrate]; ok {
		ms := statOf(mig.Runs, func(x *Result) float64 { return x.ServedPct })
		moves := statOf(mig.Runs, func(x *Result) float64 { return 1000 * float64(x.Migrations) / float64(max(x.GPUPods, 1)) })
		fmt.Fprintf(&b, "- migration: free moves of running pods at each planner interval add %+.2f points to the fluid ceiling "+
			"(%.1f vs %.1f), moving %.0f running pods per 1,000 pods\n", ms.mean-fl.mean, ms.mean, fl.mean, moves.mean)
	}
	b.WriteString(moveGoals(by, fl.mean))
	for _, st := range []Strategy{GpupoolIdle, GpupoolEvict, GpupoolIdleAll, GpupoolEvictAll, GpupoolShare} {
		g, ok := by[st]
		if !ok {
			continue
		}
		name := g.label()
		gs := statOf(g.Runs, func(x *Result) float64 { return x.ServedPct })
		fmt.Fprintf(&b, "- %s within 1 point of the fluid ceiling: %s (%.1f vs %.1f, gap %.1f points)\n",
			name, yesNo(fl.mean-gs.mean <= 1), gs.mean, fl.mean, fl.mean-gs.mean)
		for _, base := range []Strategy{CountsOnly, CountsOnlyIdle} {
			c, ok := by[base]
			if !ok {
				continue
			}
			worse := 0
			for i, r := range g.Runs {
				if i < len(c.Runs) && r.ServedPct < c.Runs[i].ServedPct {
					worse++
				}
			}
			cs := statOf(c.Runs, func(x *Result) float64 { return x.ServedPct })
			fmt.Fprintf(&b, "- %s never below %s on any seed: %s (%d of %d seeds below; %.1f vs %.1f)\n",
				name, base, yesNo(worse == 0), worse, len(g.Runs), gs.mean, cs.mean)
		}
		str := statOf(g.Runs, func(x *Result) float64 { return x.StrandedPct })
		fmt.Fprintf(&b, "- %s stranded by layout <= 2%% of all slices: %s (mean %.2f%%, max %.2f%%)\n", name, yesNo(str.hi <= 2), str.mean, str.hi)
		viol := statOf(g.Runs, func(x *Result) float64 { return float64(x.Violations) })
		if viol.hi > 0 {
			fmt.Fprintf(&b, "- %s: planner changed GPUs still holding pods it did not evict: %.0f per run on average (the sim evicted them)\n", name, viol.mean)
		}
		skip := statOf(g.Runs, func(x *Result) float64 { return float64(x.SkippedDisruptive) })
		if skip.hi > 0 {
			fmt.Fprintf(&b, "- %s: steps with evictions under AutoIdle (not applied): %.0f per run\n", name, skip.mean)
		}
	}
	for _, pair := range [][2]Strategy{{GpupoolIdle, GpupoolEvict}, {GpupoolIdleAll, GpupoolEvictAll}} {
		i, iok := by[pair[0]]
		e, eok := by[pair[1]]
		if !iok || !eok {
			continue
		}
		is := statOf(i.Runs, func(x *Result) float64 { return x.ServedPct })
		es := statOf(e.Runs, func(x *Result) float64 { return x.ServedPct })
		ev := statOf(e.Runs, func(x *Result) float64 { return 1000 * float64(x.Evictions) / float64(max(x.GPUPods, 1)) })
		fmt.Fprintf(&b, "- evict-and-repack vs no eviction, maxDisruptedNodes %s: %+.2f points served for %.1f evictions per 1,000 pods\n",
			pair[0].BudgetFor(i.Budget), es.mean-is.mean, ev.mean)
	}
	if sh, ok := by[GpupoolShare]; ok {
		if e, ok := by[GpupoolEvict]; ok {
			ss := statOf(sh.Runs, func(x *Result) float64 { return x.ServedPct })
			es := statOf(e.Runs, func(x *Result) float64 { return x.ServedPct })
			sp := statOf(sh.Runs, func(x *Result) float64 { return 100 * float64(x.Placed) / float64(max(x.GPUPods, 1)) })
			ep := statOf(e.Runs, func(x *Result) float64 { return 100 * float64(x.Placed) / float64(max(x.GPUPods, 1)) })
			fmt.Fprintf(&b, "- MPS sharing for fractional pods vs MIG for them (both Auto): %+.2f points served, %+.1f points of pods placed\n",
				ss.mean-es.mean, sp.mean-ep.mean)
		}
	}
	b.WriteString("\n")
	return b.String()
}

func yesNo(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// MethodNotes says how the replay works, so that the table can be read without the code.
const MethodNotes = `How the replay works:

- Scheduler: kube-scheduler-like whole-pod fit (CPU, memory and a free instance of exactly the
  pod's MIG profile, or that many idle MIG-off GPUs on one node), first fit over the node order
  (shuffled per seed), pending pods retried in pending-since order at every arrival, departure
  and applied plan.
- Runtimes: a pod runs its trace runtime (deletion_time - creation_time) from when it starts; an
  evicted pod is re-queued and, once placed again, runs what it had left.
- gpupool, counts-only: start from all-balanced on every GPU (what an operator would install
  first). Their planner runs at interval boundaries, only while pods pend and something changed
  since its last call (or its last plan changed something); plans apply at once (no drain or
  mig-parted delay is simulated, which flatters every dynamic strategy equally). gpupool gets
  planner.Plan on a snapshot built as inventory.Build would (every pod evictable, no PDBs), a
  policy whose catalog lists the five profiles the mapping uses (the ones counts-only carves),
  allowWholeGPU, minPendingAge 0 and the budget shown; every changed GPU is destroyed and recreated at mig.Product.Place(To), and under
  AutoIdle a step with evictions is not applied.
- Budget: maxDisruptedNodes caps the nodes one plan changes with evictions, and
  maxReconfiguringNodes (API default 50% when the policy leaves it unset) the nodes it changes
  by re-carving idle GPUs only (each one cordons its node while mig-manager works). Plans apply
  at once here, so both are nodes changed per planner interval. The rows marked
  maxDisruptedNodes 100% (and maxReconfiguringNodes 100%) give gpupool what the counts-only
  planner has, no budget at all: they compare the planners, the others show the cost of the
  budgets the run names.
- counts-only (nos-style): per pending pod, the first GPU whose busy instances plus those
  already planned plus the pod's profile stay within 7 compute and 8 memory slices; free
  instances are dropped and the GPU rebuilt around the busy ones. A layout the hardware cannot
  place around the busy instances is counted invalid and not applied. No budget, no evictions.
  Adding instances next to a running pod is what nos does through NVML; the unchanged GPU
  Operator cannot: mig-parted destroys every instance of a GPU whose layout changes, and
  destroying one a pod uses fails. So the same planner is also run on idle GPUs only ("on
  mig-parted"): the actuator gpupool has. Its gap to counts-only is the actuator's price; the
  gap between gpupool and it is the planners'.
- gpupool + MPS sharing (the sharing run): pods below 7 slices ask for one nvidia.com/gpu.shared
  replica and 7-slice single-GPU pods for a whole GPU (MIG off); the policy allows MPS with 7
  replicas per GPU. This run assumes a device plugin that can run MPS: under the mixed MIG
  strategy, which gpupool needs for MIG, NVIDIA's plugin refuses MPS, and gpupool then never
  plans it. The planner turns idle nodes into MIG-disabled shared nodes (it never
  changes a node that runs pods for sharing) and disables MIG on idle GPUs for whole-GPU pods.
  A shared GPU takes a pod while its pods' slices stay <= 7 and a replica is free: MPS with each
  client held to its slices, so served demand is counted as for every other strategy.
- static all-7g: MIG off; every pod takes whole GPUs (a 1g pod takes a whole GPU).
- fluid ceiling, no migration: a GPU serves any set of single-GPU pods whose slices sum to
  <= 7; whole-GPU pods need that many fully free GPUs on one node; a pod stays where it
  started.
- fluid ceiling with migration: the same pools of compute slices, and at each planner interval
  while pods pend every running pod may move to any node and GPU at no cost (no eviction, no
  lost runtime): the pool is repacked largest pod first (first fit over the node order, the
  fullest GPU that fits), and the repack is kept only when every running pod still runs and
  a pending pod now fits. It bounds what cross-node repacking could add, as far as that
  first-fit-decreasing repack packs tightly (it is a heuristic, not an optimum).
- multi-GPU and 8-GPU pods placed: the window's pods asking for more than one GPU (and for 8),
  placed before the replay ends, of those offered (mean over seeds); an 8-GPU pod needs a whole
  idle 8-GPU node, so it is what a fragmented pool starves first.
- Pod lists: every openb_pod_list_*.csv reads the same way. A list without creation and
  deletion times (the multigpu lists) takes them from the default list: a pod with a namesake
  there takes its namesake's times (those lists repeat the default list's rows under the same
  names), and each appended pod takes its arrival from one default GPU pod and its runtime from
  one default pod asking for as many GPUs, both picked by a hash of its name. gpu_spec (the
  GPU models a gpuspec pod accepts) cannot be honoured, since every trace GPU is modelled as
  one product; CPU-only pods are skipped, so the cpu lists replay their GPU pods only.
- Load: the compression is capped so that the measured window spans at least the minimum
  number of planner intervals stated with each list; a list that cannot offer the target load
  in a window that long is replayed at the load it can offer, marked "capped".
- A replay depends only on its pod list, product, strategy, budget and seed; one that appears
  in two tables (the sharing run repeats the first list's baselines, the budget sweep its
  budget and 100% rows) is run once.
- Evictions and moves: a pod the planner evicts goes back to the pending queue with no tie to
  its node and lands wherever the scheduler finds room once the plan is applied, so a pod the
  planner expects on another node (a cross-node move) can land there. Every eviction of a plan
  happens before any GPU changes, so the order of its steps does not change the outcome.
- Metrics, over the measured window: served GPU demand = time average of the mapped compute
  slices of running pods / all compute slices (a whole GPU counts 7; a 1g pod on a whole GPU
  counts 1); pods placed = pods arriving in the window placed before the replay ends; pending =
  arrival to first placement, placed pods only; free = slices no pod holds; stranded = free
  slices while pods pend, in two parts by cause. Stranded by CPU/mem: the free slices of nodes
  whose free CPU or memory no pending pod fits, which no layout could serve. Stranded by layout:
  on the other nodes, the free slices that no pending pod fitting the node's CPU and memory
  could use as the layout stands (free instances of a profile none of them asks for, uncarved
  slices, idle MIG-off GPUs when none of them wants whole GPUs; for the fluid ceiling, free
  slices fewer than the smallest of them needs). The goal of <= 2% is on the layout part: it is
  what a partitioner answers for. Both are sampled every sample period and counted zero while
  nothing pends, so a strategy that keeps a pod pending (say an 8-GPU pod that no node has
  room for) is sampled at every period. Evictions per 1,000 window pods; planner time per call
  is wall time of planner.Plan (or of the counts-only pass).
`
