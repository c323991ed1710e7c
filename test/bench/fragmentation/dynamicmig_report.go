package fragmentation

import (
	"fmt"
	"strings"
)

func servedOf(x *Result) float64    { return x.ServedPct }
func placementOf(x *Result) float64 { return x.StrandedPlacementPct }

// DynamicMIGTable renders one workload of the DynamicMIG mode: the DynamicMIG strategies with
// their stranded-by-placement figure, beside static-MIG rows, whose stranded figure is by
// layout (free instances of a profile no pending pod asks for) and which have no placement
// figure.
func DynamicMIGTable(title string, sums []Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n", title)
	if servedNothing(sums) {
		fmt.Fprintf(&b, "No strategy placed a single pod of this workload (%d GPU pods in the measured window), so there is "+
			"nothing to compare.\n\n", sums[0].Runs[0].GPUPods)
		return b.String()
	}
	b.WriteString("| strategy | served GPU demand % | pods placed % | multi-GPU pods placed | pending mean min | free slices % | " +
		"stranded % (DynamicMIG: no pending claim fits; static: by layout) | stranded by placement % | evictions / 1k pods | planner calls | planner ms mean |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range sums {
		r := s.Runs
		placementCell := "-"
		if s.Strategy.DynamicMIG() {
			placementCell = statOf(r, placementOf).format("", 3)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.label(),
			statOf(r, servedOf).format("", 1),
			statOf(r, placedPct).format("", 1),
			placedOf(r, func(x *Result) int { return x.MultiPlaced }, func(x *Result) int { return x.MultiPods }),
			statOf(r, func(x *Result) float64 { return x.MeanPending / 60 }).format("", 1),
			statOf(r, func(x *Result) float64 { return x.FreePct }).format("", 1),
			statOf(r, func(x *Result) float64 { return x.StrandedPct }).format("", 2),
			placementCell,
			statOf(r, evictionsPer1k).format("", 1),
			statOf(r, func(x *Result) float64 { return float64(x.PlannerCalls) }).format("", 0),
			statOf(r, func(x *Result) float64 { return float64(x.PlannerMean.Microseconds()) / 1000 }).format("", 1))
	}
	b.WriteString("\n")
	return b.String()
}

// DynamicMIGVerdict is the goal on one list: moves serve more than first-fit on the
// default list and at least as much on the others, with stranded-by-placement at most half of
// first-fit's. ok is false when the list lacks either row.
func DynamicMIGVerdict(sums []Summary, defaultList bool) (text string, met, ok bool) {
	by := map[Strategy]Summary{}
	for _, s := range sums {
		by[s.Strategy] = s
	}
	ff, fok := by[DMFirstFit]
	mv, mok := by[DMMoves]
	if !fok || !mok {
		return "", false, false
	}
	fs, ms := statOf(ff.Runs, servedOf).mean, statOf(mv.Runs, servedOf).mean
	fp, mp := statOf(ff.Runs, placementOf).mean, statOf(mv.Runs, placementOf).mean
	servedOK := ms >= fs
	rel := "at least as much as"
	if defaultList {
		servedOK = ms > fs
		rel = "more than"
	}
	strandOK := mp <= fp/2
	met = servedOK && strandOK
	text = fmt.Sprintf("moves serve %s first-fit: %s (%.2f vs %.2f, %+.2f points); stranded by placement at most half of first-fit's: %s (%.3f%% vs %.3f%%)",
		rel, yesNo(servedOK), ms, fs, ms-fs, yesNo(strandOK), mp, fp)
	return text, met, true
}

// DynamicMIGGoals says for one workload whether the goal holds.
func DynamicMIGGoals(title string, sums []Summary, defaultList bool) string {
	text, _, ok := DynamicMIGVerdict(sums, defaultList)
	if !ok {
		return ""
	}
	return fmt.Sprintf("Goal, %s: %s.\n\n", title, text)
}

// DynamicMIGListsSummary renders one line per pod list for the DynamicMIG mode: served demand
// per strategy, stranded by placement for the DynamicMIG strategies, evictions per 1,000 pods
// for the strategies that evict, and whether the goal holds on the list.
func DynamicMIGListsSummary(rows []ListRow, strategies []Strategy, budget, reconfigure, defaultFile string) string {
	var b strings.Builder
	var dm, evicting []Strategy
	for _, st := range strategies {
		if st.DynamicMIG() {
			dm = append(dm, st)
		}
		if st == DMMoves || st.Gpupool() && !st.autoIdle() {
			evicting = append(evicting, st)
		}
	}
	b.WriteString("| list | offered % |")
	for _, st := range strategies {
		fmt.Fprintf(&b, " %s served %% |", st.Short(budget, reconfigure))
	}
	for _, st := range dm {
		fmt.Fprintf(&b, " %s stranded by placement %% |", st.Short(budget, reconfigure))
	}
	for _, st := range evicting {
		fmt.Fprintf(&b, " %s evictions / 1k pods |", st.Short(budget, reconfigure))
	}
	b.WriteString(" goal |\n|---|---|" + strings.Repeat("---|", len(strategies)+len(dm)+len(evicting)+1) + "\n")
	for _, row := range rows {
		offered := fmt.Sprintf("%.0f", 100*row.Work.Offered)
		if row.Work.Capped {
			offered += " (capped)"
		}
		note := row.Note
		if note == "" && servedNothing(row.Sums) {
			note = "no strategy placed any pod"
		}
		if note != "" {
			fmt.Fprintf(&b, "| %s | %s | %s |%s\n", row.File, offered, note, strings.Repeat(" |", len(strategies)+len(dm)+len(evicting)))
			continue
		}
		by := map[Strategy]Summary{}
		for _, s := range row.Sums {
			by[s.Strategy] = s
		}
		cell := func(st Strategy, f func(*Result) float64, digits int) string {
			s, ok := by[st]
			if !ok {
				return "-"
			}
			return fmt.Sprintf("%.*f", digits, statOf(s.Runs, f).mean)
		}
		fmt.Fprintf(&b, "| %s | %s |", row.File, offered)
		for _, st := range strategies {
			fmt.Fprintf(&b, " %s |", cell(st, servedOf, 2))
		}
		for _, st := range dm {
			fmt.Fprintf(&b, " %s |", cell(st, placementOf, 3))
		}
		for _, st := range evicting {
			fmt.Fprintf(&b, " %s |", cell(st, evictionsPer1k, 1))
		}
		goal := "-"
		if _, met, ok := DynamicMIGVerdict(row.Sums, row.File == defaultFile); ok {
			goal = yesNo(met)
		}
		fmt.Fprintf(&b, " %s |\n", goal)
	}
	b.WriteString("\n")
	return b.String()
}

// DynamicMIGNotes says how the DynamicMIG mode works, so its tables can be read without the code.
const DynamicMIGNotes = `How the DynamicMIG mode works:

- The driver: NVIDIA's DRA driver with its DynamicMIG gate (dra-driver-nvidia-gpu
  cmd/gpu-kubelet-plugin/partitions.go, nvlib.go, device_state.go; docs/design/dra.md). Every GPU
  starts with no instance; a claim's instance is created at the partition the allocator gives
  it and destroyed when the claim goes, so a GPU's live instances are its claims where
  first-fit put them. A whole-GPU claim (the trace's multi-GPU pods) takes gpu-<minor>, which
  consumes every counter: only an idle GPU. The trace's pods map to the same five profiles as
  the static rows (MIG geometry: mig.Product.FreePlacements, NVIDIA's placement tables).
  Counters other than memory slices (multiprocessors, engines) are not modelled.
- The allocator's first-fit: the node is chosen as for every static row, the first node in
  the seeded node order whose free CPU and memory fit the pod and whose devices fit its claim
  (the static rows' scheduler model; the real kube-scheduler scores the nodes that pass its
  filters, and DRA adds no score). Within the node the allocator takes the first device that
  fits in the driver's order: GPUs in index order (one ResourceSlice of devices per GPU, slices
  walked by name; k8s.io/dynamic-resource-allocation v0.37.2 structured/internal/*/pools_*.go),
  and within a GPU the profile's partitions by ascending placement start (devices sorted by
  name, gpu-<minor>-mig-<profile>-<GI profile ID>-<start>). TestFirstFitModelMatchesTheScheduler
  holds this order to the real kube-scheduler with gpusim's DynamicMIG driver.
- reserve: at each planner interval while pods pend, placement.Reserve holds, per large
  profile (3g, 4g and 7g: half the GPU's memory slices or more), as many free placements as
  claims of it pend plus claims of it that arrived since the last call (whole-GPU claims count
  toward 7g); the small partitions over the holds are tainted NoSchedule until the next call.
  No evictions. The rule was fixed before any replay and is the same on every list.
- moves: at each planner interval while pods pend, placement.Plan with every running claim
  movable (a controller recreates its pod, no PodDisruptionBudget) and the run's
  maxDisruptedNodes as the plan's node budget (rounded up, as the static planner reads it);
  each opening's KeepFree partitions are tainted, the claims in its way are evicted and
  requeued, the queue is scheduled first-fit with the taints in place, and the taints are
  removed. A moved claim lands where first-fit puts it, not necessarily on the plan's landing.
  To keep a call under a second on 6,212 GPUs at saturation (a call given every GPU and every
  pending claim ran for minutes), the plan is given the GPUs with a free memory slice, and per
  pending MIG claim the nodes whose free CPU and memory fit its pod and where a GPU has the
  profile's memory and compute slices free in count (the claims stranded by placement), at most
  as many claims of one profile as the budget has nodes, oldest first.
- stranded by placement: on the nodes whose free CPU and memory fit some pending pod, the free
  compute slices of GPUs where no pending claim such a node could host fits at a free
  placement, but one of their profiles has enough free memory and compute slices in count
  (dra-driver-nvidia-gpu#933); sampled and averaged as the static rows' stranded figures.
  "stranded" is the same without the in-count condition: free slices no pending claim fits.
`
