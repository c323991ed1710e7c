// Command fragbench replays the Alibaba GPU trace v2023 against simulated H100 and H200 MIG
// clusters and compares gpupool's planner with static layouts, a counts-only planner and the
// fluid ceilings. `make bench-fragmentation` runs it; `make test` does not.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/planner"
	frag "github.com/gpupool/gpupool/test/bench/fragmentation"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fragbench:", err)
		os.Exit(1)
	}
}

type workload struct {
	// id names the pods replayed: workloads with one id replay the same pods, so a replay of
	// one product, strategy, budget and seed is run once for all of them.
	id      string
	title   string
	product *mig.Product
	w       frag.Workload
	seeds   int
	// strategies, when set, replace the run's chosen strategies for this workload.
	strategies []frag.Strategy
}

// options are the flags that shape every replay.
type options struct {
	interval, sample int64
	// budget and reconfigure are gpupool's maxDisruptedNodes and maxReconfiguringNodes ("":
	// unset, so the API default applies).
	budget, reconfigure string
	workers             int
	// dynamicMIG is the DynamicMIG mode: its tables, goal and notes.
	dynamicMIG bool
}

func run() error {
	dir := flag.String("trace", "../shared/traces/alibaba-gpu-v2023/csv", "directory of the trace CSV files (research use only; never copied into the project)")
	lists := flag.String("lists", "default", "comma-separated pod lists (openb_pod_list_<list>.csv), or all for every openb_pod_list_*.csv in -trace; "+
		"the first is the one the drift and sharing runs, the budget sweep and the time plot use")
	list := flag.String("list", "", "one pod list; the same as -lists with one name (kept for older command lines)")
	timesFrom := flag.String("times-from", "default", "timed pod list whose times lists without times (the multigpu lists) borrow")
	seeds := flag.Int("seeds", 5, "seeds per workload")
	driftSeeds := flag.Int("drift-seeds", 5, "seeds for the drift workload (0 skips it)")
	sharingSeeds := flag.Int("sharing-seeds", 5, "seeds for the sharing run, where fractional pods ask for MPS replicas (0 skips it)")
	interval := flag.Int64("interval", 60, "simulated seconds between planner calls")
	sample := flag.Int64("sample", 60, "simulated seconds between free/stranded samples")
	load := flag.Float64("load", 1.0, "offered GPU load (fraction of capacity) in the measured window; 0 replays one copy at raw timestamps")
	repeat := flag.Int("repeat", 4, "copies of each list played back to back; the first is warm-up")
	minWindow := flag.Int64("min-window", 20, "the compression never makes the measured window shorter than this many planner intervals")
	budget := flag.String("budget", "5%", "maxDisruptedNodes of gpupool's policy: nodes whose steps evict pods")
	reconfigure := flag.String("reconfigure-budget", "", "maxReconfiguringNodes of gpupool's policy: nodes that only re-carve idle GPUs "+
		"(empty: leave it unset, so the API default applies)")
	sweep := flag.String("sweep", "1%,2%,5%,10%,25%,100%", "maxDisruptedNodes budgets of the budget sweep on the first list and product (empty skips it)")
	sweepSeeds := flag.Int("sweep-seeds", 1, "seeds per budget of the sweep")
	products := flag.String("products", "H100-80GB,H200-141GB", "GPU models every trace GPU is modelled as; lists after the first run on the first one only")
	strategies := flag.String("strategies", "", fmt.Sprintf("comma-separated subset of strategies by index 0-%d, in report order (empty: all)", len(frag.Strategies)-1))
	write := flag.String("write", "", "also write the report to this Markdown file, and its plots next to it (X.md: X/*.svg)")
	workers := flag.Int("workers", runtime.NumCPU(), "replays run in parallel")
	mode := flag.String("mode", "static", "static: the strategies -strategies picks; dynamicmig: NVIDIA's DRA driver in its DynamicMIG mode "+
		"(first-fit alone, with gpupool's reserve taints, with gpupool's moves at -budget) beside the static strategies -strategies "+
		"picks (default in this mode: 1, gpupool Auto; none for no static row)")
	flag.Parse()
	started := time.Now()
	opt := options{interval: *interval, sample: *sample, budget: *budget, reconfigure: *reconfigure, workers: *workers}
	switch *mode {
	case "static":
	case "dynamicmig":
		opt.dynamicMIG = true
		if *strategies == "" {
			*strategies = "1"
		}
	default:
		return fmt.Errorf("-mode %q: want static or dynamicmig", *mode)
	}

	nodes, err := frag.LoadNodes(*dir)
	if err != nil {
		return err
	}
	gpus := 0
	for _, n := range nodes {
		gpus += n.GPUs
	}
	names, err := listNames(*dir, *lists, *list)
	if err != nil {
		return err
	}
	var prods []*mig.Product
	for _, name := range strings.Split(*products, ",") {
		p, ok := mig.LookupProduct(name)
		if !ok {
			return fmt.Errorf("unknown product %q", name)
		}
		prods = append(prods, p)
	}
	var chosen []frag.Strategy
	if *strategies != "none" {
		if chosen, err = pickStrategies(*strategies); err != nil {
			return err
		}
	}
	if opt.dynamicMIG {
		chosen = append(slices.Clone(frag.DynamicMIGStrategies), chosen...)
	}
	var timeRef *frag.PodList
	loadList := func(name string) (*frag.PodList, int, error) {
		l, err := frag.LoadList(*dir, name)
		if err != nil || l.Timed || len(l.Pods) == 0 {
			return l, 0, err
		}
		if timeRef == nil {
			if timeRef, err = frag.LoadList(*dir, *timesFrom); err != nil {
				return nil, 0, err
			}
			if !timeRef.Timed {
				return nil, 0, fmt.Errorf("-times-from %s has no times itself", timeRef.File)
			}
		}
		pods, picked, err := frag.BorrowTimes(l.Pods, timeRef.Pods)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", l.File, err)
		}
		l.Pods = pods
		return l, picked, nil
	}
	prepare := func(copies [][]frag.PodSpec) frag.Workload {
		return frag.Prepare(copies, gpus, *load, *minWindow**interval)
	}

	var out, intro strings.Builder
	if *seeds < 5 || (*driftSeeds > 0 && *driftSeeds < 5) {
		fmt.Fprintf(&intro, "**Reduced run**: %d seeds per configuration and %d for the drift workload (the issue asks for 5), "+
			"to fit the time available.\n\n", *seeds, *driftSeeds)
	}
	files := make([]string, len(names))
	for i, n := range names {
		files[i] = "`" + frag.ListFile(n) + "`"
	}
	fmt.Fprintf(&intro, "Pod lists (%d): %s.\n\n", len(names), strings.Join(files, ", "))
	fmt.Fprintf(&intro, "Cluster: %d GPU nodes, %d GPUs (openb_node_list_gpu_node.csv), CPU and memory per node from the trace.\n\n", len(nodes), gpus)
	fmt.Fprintf(&intro, "Mapping: %s.\n\n", frag.MappingText)
	if len(names) > 1 && len(prods) > 1 {
		fmt.Fprintf(&intro, "Products: %s; lists after the first on %s only (the product changes only the planner's time).\n\n",
			strings.Join(strings.Split(*products, ","), ", "), prods[0].Name)
	}
	reconfText := planner.DefaultMaxReconfiguringNodes + ", the API default (unset in the policy)"
	if *reconfigure != "" {
		reconfText = *reconfigure
	}
	fmt.Fprintf(&intro, "Planner interval %ds, budgets maxDisruptedNodes %s for nodes with evictions and maxReconfiguringNodes %s "+
		"for nodes that only re-carve idle GPUs, free/stranded sampled every %ds of simulated time in the window; the compression "+
		"keeps every measured window at least %d planner intervals long.\n\n", *interval, *budget, reconfText, *sample, *minWindow)

	// writePartial keeps a partial report on disk, so that a run cut short leaves its tables.
	writePartial := func() error {
		if *write == "" {
			return nil
		}
		if err := os.WriteFile(*write, []byte(header(cmdline())+intro.String()+out.String()+"\n(run in progress)\n"), 0o644); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
		return nil
	}

	cache := replays{}
	var rows []frag.ListRow
	var mainW frag.Workload
	var mainPods []frag.PodSpec
	var mainSums []frag.Summary
	for li, name := range names {
		l, picked, err := loadList(name)
		if err != nil {
			return err
		}
		fmt.Fprintf(&out, "## %s\n\n", l.File)
		fmt.Fprintf(&out, "Pods: %s\n\n", describe(l, picked, timeRef, prods[0]))
		listProds := prods
		if li > 0 {
			listProds = prods[:1]
		}
		if len(l.Pods) == 0 {
			for _, p := range listProds {
				title := fmt.Sprintf("%s, %s", p.Name, l.File)
				out.WriteString(frag.NoGPUDemand(title, l))
				rows = append(rows, frag.ListRow{File: l.File, Product: p.Name, Note: "no GPU demand"})
			}
			if err := writePartial(); err != nil {
				return err
			}
			continue
		}
		copies := make([][]frag.PodSpec, max(*repeat, 1))
		for i := range copies {
			copies[i] = l.Pods
		}
		w := prepare(copies)
		raw := frag.Prepare([][]frag.PodSpec{l.Pods}, gpus, 0, 0)
		out.WriteString(loadText(l, raw, w, len(copies), *load, *minWindow, *interval))
		if li == 0 {
			mainW, mainPods = w, l.Pods
		}
		for pi, p := range listProds {
			wl := workload{id: "list:" + name, title: fmt.Sprintf("%s, %s", p.Name, l.File), product: p, w: w, seeds: *seeds}
			sums, err := runWorkload(&out, wl, nodes, chosen, opt, cache)
			if err != nil {
				return err
			}
			rows = append(rows, frag.ListRow{File: l.File, Product: p.Name, Work: w, Sums: sums})
			if li == 0 && pi == 0 {
				mainSums = sums
			}
			if err := writePartial(); err != nil {
				return err
			}
		}
	}
	first := names[0]
	firstFile := frag.ListFile(first)

	if *driftSeeds > 0 && len(mainPods) > 0 {
		share, _, err := loadList("gpushare100")
		if err != nil {
			return err
		}
		multi, _, err := loadList("multigpu50")
		if err != nil {
			return err
		}
		mix := frag.Mix(share.Pods, multi.Pods)
		drift := make([][]frag.PodSpec, max(*repeat, 1))
		for i := range drift {
			drift[i] = mainPods
			if i >= len(drift)/2 {
				drift[i] = mix
			}
		}
		dw := prepare(drift)
		p := prods[0]
		wl := workload{id: "drift:" + first, title: fmt.Sprintf("%s, drift: %s, then from copy %d of %d %s (even rows) + %s (odd rows)",
			p.Name, firstFile, len(drift)/2+1, len(drift), share.File, multi.File), product: p, w: dw, seeds: *driftSeeds}
		fmt.Fprintf(&out, "## Drift\n\nOffered %.0f%% in a %.0f-minute window, arrivals compressed %.0fx%s.\n\n", 100*dw.Offered,
			float64(dw.Window)/60, dw.Compression, cappedNote(dw))
		if _, err := runWorkload(&out, wl, nodes, chosen, opt, cache); err != nil {
			return err
		}
		if err := writePartial(); err != nil {
			return err
		}
	}

	if *sharingSeeds > 0 && len(mainPods) > 0 {
		p := prods[0]
		wl := workload{id: "list:" + first, title: fmt.Sprintf("%s, %s, sharing: pods below 7 slices ask for a replica of an "+
			"MPS-shared GPU (nvidia.com/gpu.shared), 7-slice pods for a whole GPU", p.Name, firstFile),
			product: p, w: mainW, seeds: *sharingSeeds, strategies: frag.SharingStrategies}
		out.WriteString("## Sharing\n\n")
		if _, err := runWorkload(&out, wl, nodes, chosen, opt, cache); err != nil {
			return err
		}
		if err := writePartial(); err != nil {
			return err
		}
	}

	plotDir, plotRel := "", ""
	if *write != "" {
		plotDir = strings.TrimSuffix(*write, filepath.Ext(*write))
		plotRel = filepath.Base(plotDir)
		if err := os.MkdirAll(plotDir, 0o755); err != nil {
			return fmt.Errorf("plot folder: %w", err)
		}
	}
	var figures strings.Builder
	if len(mainSums) > 0 {
		if err := timePlot(&figures, mainSums, mainW, prods[0], firstFile, plotDir, plotRel); err != nil {
			return err
		}
	}
	if *sweep != "" && len(mainPods) > 0 {
		wl := workload{id: "list:" + first, title: fmt.Sprintf("%s, %s", prods[0].Name, firstFile), product: prods[0], w: mainW, seeds: *sweepSeeds}
		if err := budgetSweep(&figures, wl, strings.Split(*sweep, ","), nodes, opt, cache, plotDir, plotRel); err != nil {
			return err
		}
	}

	var doc strings.Builder
	doc.WriteString(intro.String())
	switch {
	case opt.dynamicMIG:
		doc.WriteString("## All lists, DynamicMIG\n\nServed GPU demand % per strategy (mean over seeds), stranded by placement % for " +
			"the DynamicMIG strategies, evictions per 1,000 pods for the strategies that evict, and the goal (moves serve more than " +
			"first-fit on the default list and at least as much on the others, stranded by placement at most half of first-fit's); " +
			"each list's section below has the full table.\n\n")
		doc.WriteString(frag.DynamicMIGListsSummary(rows, chosen, *budget, *reconfigure, frag.ListFile("default")))
	case len(rows) > 1:
		doc.WriteString("## All lists\n\nServed GPU demand % per strategy (mean over seeds) and evictions per 1,000 pods for the gpupool " +
			"strategies that evict; each list's section below has the full table.\n\n")
		doc.WriteString(frag.ListsSummary(rows, chosen, *budget, *reconfigure))
	}
	doc.WriteString(figures.String())
	doc.WriteString(out.String())
	elapsed := time.Since(started).Round(time.Second)
	fmt.Fprintf(&doc, "Total wall time: %s.\n\n%s", elapsed, frag.MethodNotes)
	if opt.dynamicMIG {
		doc.WriteString("\n" + frag.DynamicMIGNotes)
	}
	fmt.Print(doc.String())
	if *write != "" {
		if err := os.WriteFile(*write, []byte(header(cmdline())+doc.String()), 0o644); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	}
	return nil
}

// listNames resolves -lists (or the older -list) to pod list names, "all" to every list in dir.
func listNames(dir, lists, list string) ([]string, error) {
	if list != "" {
		lists = list
	}
	if lists == "all" {
		return frag.ListNames(dir)
	}
	var names []string
	seen := map[string]bool{}
	for _, n := range strings.Split(lists, ",") {
		n = strings.TrimSpace(n)
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		names = append(names, n)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("-lists names no pod list")
	}
	return names, nil
}

func pickStrategies(flagValue string) ([]frag.Strategy, error) {
	if flagValue == "" {
		return frag.Strategies, nil
	}
	var chosen []frag.Strategy
	for _, f := range strings.Split(flagValue, ",") {
		var i int
		if _, err := fmt.Sscanf(f, "%d", &i); err != nil || i < 0 || i >= len(frag.Strategies) {
			return nil, fmt.Errorf("strategy index %q: want 0-%d", f, len(frag.Strategies)-1)
		}
		chosen = append(chosen, frag.Strategies[i])
	}
	return chosen, nil
}

// describe says what a list holds and what the replay made of it.
func describe(l *frag.PodList, picked int, timeRef *frag.PodList, product *mig.Product) string {
	multi, eight := 0, 0
	for _, p := range l.Pods {
		if p.Shape.Whole > 1 {
			multi++
			if p.Shape.Whole == 8 {
				eight++
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d GPU pods (%d asking for several GPUs, %d of them for 8); %d CPU-only pods skipped.", len(l.Pods), multi, eight, l.CPUOnly)
	if !l.Timed && len(l.Pods) > 0 {
		fmt.Fprintf(&b, " The file has no creation or deletion times: %d pods took their namesakes' times from %s, and the %d "+
			"pods it adds took an arrival and a runtime picked there by a hash of their names.", len(l.Pods)-picked, timeRef.File, picked)
	}
	if l.GPUSpec > 0 {
		fmt.Fprintf(&b, " %d pods name the GPU models they accept (gpu_spec); the replay ignores that, since every GPU is modelled as %s.",
			l.GPUSpec, product.Name)
	}
	return b.String()
}

func cappedNote(w frag.Workload) string {
	if !w.Capped {
		return ""
	}
	return fmt.Sprintf(" (capped: target %.0f%% not reachable in a window that long)", 100*w.Target)
}

// loadText states how a list was turned into an offered load.
func loadText(l *frag.PodList, raw, w frag.Workload, copies int, load float64, minWindow, interval int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Load: at its own timestamps %s offers %.2f%% of the cluster's compute slices (runtimes are minutes, "+
		"arrivals span months). The replay plays %d copies back to back, the first as warm-up, with arrivals compressed %.0fx "+
		"(runtimes kept), so that the measured window, %.0f minutes of simulated time, is offered %.0f%% of capacity (target -load %.2f).",
		l.File, 100*raw.Offered, copies, w.Compression, float64(w.Window)/60, 100*w.Offered, load)
	if spread, ok := bulk(l.Pods); ok {
		fmt.Fprintf(&b, " The middle 98%% of its pods arrive within %.0f%% of its span (the rest are mostly long-lived pods created "+
			"earlier), so each copy arrives as one burst rather than as a steady stream; the time plot shows it for the first list.", 100*spread)
	}
	if w.Capped {
		fmt.Fprintf(&b, " **Capped**: this list cannot offer %.0f%% in a window of %d planner intervals (%d s), because its runtimes are "+
			"short next to its compressed arrivals; compressing further would end the replay before the planner runs, so it is "+
			"replayed at the load such a window allows. More copies (-repeat) raise it.", 100*load, minWindow, minWindow*interval)
	}
	b.WriteString("\n\n")
	return b.String()
}

// bulk is the part of a list's arrival span that holds its middle 98% of pods.
func bulk(pods []frag.PodSpec) (float64, bool) {
	if len(pods) < 100 {
		return 0, false
	}
	at := make([]int64, len(pods))
	for i, p := range pods {
		at[i] = p.Arrive
	}
	slices.Sort(at)
	span := at[len(at)-1] - at[0]
	if span <= 0 {
		return 0, false
	}
	return float64(at[len(at)*99/100]-at[len(at)/100]) / float64(span), true
}

// replayKey identifies a replay: its result depends on nothing else.
type replayKey struct {
	workload, product   string
	strategy            frag.Strategy
	budget, reconfigure string
	seed                int
}

// replays keeps every replay's result, so a workload shown twice (the sharing run repeats the
// main list's baselines, the sweep repeats its budget and 100%) runs each replay once.
type replays map[replayKey]*frag.Result

// job is one replay to run.
type job struct {
	st                  frag.Strategy
	budget, reconfigure string
	seed                int
}

// key names a job's replay in the cache: the gpupool strategies with fixed 100% budgets are
// the budgeted ones at 100%, and strategies that take no budget ignore it.
func (j job) key(w workload) replayKey {
	st, b, r := j.st, j.st.BudgetFor(j.budget), j.st.ReconfigureFor(j.reconfigure)
	switch st {
	case frag.GpupoolIdleAll:
		st = frag.GpupoolIdle
	case frag.GpupoolEvictAll:
		st = frag.GpupoolEvict
	}
	switch {
	case st == frag.DMMoves:
		r = ""
	case !st.Gpupool():
		b, r = "", ""
	}
	return replayKey{w.id, w.product.Name, st, b, r, j.seed}
}

// replay runs the jobs not yet in the cache, workers at a time, and returns every job's result.
func replay(w workload, jobs []job, nodes []frag.NodeSpec, opt options, cache replays) ([]*frag.Result, error) {
	results := make([]*frag.Result, len(jobs))
	todo := make(chan int)
	errs := make(chan error, len(jobs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range max(1, opt.workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range todo {
				j := jobs[i]
				r, err := frag.Run(frag.Config{Product: w.product, Strategy: j.st, Seed: uint64(j.seed + 1),
					Interval: opt.interval, SampleEvery: opt.sample, Budget: j.budget, Reconfigure: j.reconfigure,
					MeasureFrom: w.w.MeasureFrom}, nodes, w.w.Pods)
				if err != nil {
					errs <- fmt.Errorf("%s: %w", w.title, err)
					continue
				}
				fmt.Fprintf(os.Stderr, "%s | %s | seed %d: served %.1f%%, placed %d/%d, %d planner calls, %s\n",
					w.title, j.st.Label(j.budget, j.reconfigure), r.Seed, r.ServedPct, r.Placed, r.GPUPods, r.PlannerCalls, r.Wall.Round(time.Millisecond))
				mu.Lock()
				results[i] = r
				mu.Unlock()
			}
		}()
	}
	// Callers list the slow gpupool replays first, so that the short ones fill the gaps at the end.
	for i, j := range jobs {
		if r, ok := cache[j.key(w)]; ok {
			results[i] = r
			continue
		}
		todo <- i
	}
	close(todo)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	for i, j := range jobs {
		cache[j.key(w)] = results[i]
	}
	return results, nil
}

func runWorkload(out *strings.Builder, w workload, nodes []frag.NodeSpec, chosen []frag.Strategy, opt options, cache replays) ([]frag.Summary, error) {
	if w.strategies != nil {
		chosen = w.strategies
	}
	var jobs []job
	for _, st := range chosen {
		for seed := range w.seeds {
			jobs = append(jobs, job{st, opt.budget, opt.reconfigure, seed})
		}
	}
	results, err := replay(w, jobs, nodes, opt, cache)
	if err != nil {
		return nil, err
	}
	var sums []frag.Summary
	for si, st := range chosen {
		sums = append(sums, frag.Summary{Strategy: st, Budget: opt.budget, Reconfigure: opt.reconfigure, Runs: results[si*w.seeds : (si+1)*w.seeds]})
	}
	title := fmt.Sprintf("%s (%d GPU pods replayed, %d in the measured window, offered %.0f%%%s, %d seeds)",
		w.title, len(w.w.Pods), sums[0].Runs[0].GPUPods, 100*w.w.Offered, cappedNote(w.w), w.seeds)
	if opt.dynamicMIG {
		out.WriteString(frag.DynamicMIGTable(title, sums))
		out.WriteString(frag.DynamicMIGGoals(w.title, sums, w.id == "list:default"))
		return sums, nil
	}
	out.WriteString(frag.Table(title, sums))
	out.WriteString(frag.Goals(w.title, sums))
	return sums, nil
}

// timePlot draws served demand over time for the first seed of every strategy of the first
// list and product.
func timePlot(out *strings.Builder, sums []frag.Summary, w frag.Workload, p *mig.Product, file, dir, rel string) error {
	if dir == "" {
		return nil
	}
	t0 := w.Pods[0].Arrive
	for _, pod := range w.Pods {
		t0 = min(t0, pod.Arrive)
	}
	var series []frag.Series
	for _, s := range sums {
		series = append(series, frag.Series{Label: s.Strategy.Label(s.Budget, s.Reconfigure), Points: s.Runs[0].Series})
	}
	const name = "served-over-time.svg"
	title := fmt.Sprintf("%s, %s, seed 1: served GPU demand over simulated time", p.Name, file)
	if err := frag.PlotServed(filepath.Join(dir, name), title, series, w.MeasureFrom-t0); err != nil {
		return err
	}
	fmt.Fprintf(out, "## Served demand over time\n\n%s (the tables average the part after the dashed rule; before it is warm-up).\n\n"+
		"![%s](%s/%s)\n\n", title, title, rel, name)
	return nil
}

// budgetSweep replays gpupool AutoIdle and Auto at each budget, tabulates them and plots them
// against the fluid ceilings.
func budgetSweep(out *strings.Builder, w workload, budgets []string, nodes []frag.NodeSpec, opt options, cache replays, dir, rel string) error {
	var jobs []job
	for _, b := range budgets {
		for _, st := range []frag.Strategy{frag.GpupoolIdle, frag.GpupoolEvict} {
			for seed := range w.seeds {
				jobs = append(jobs, job{st, b, opt.reconfigure, seed})
			}
		}
	}
	ceilings := []frag.Strategy{frag.Fluid, frag.FluidMigrate}
	for _, st := range ceilings {
		for seed := range w.seeds {
			jobs = append(jobs, job{st, opt.budget, opt.reconfigure, seed})
		}
	}
	results, err := replay(w, jobs, nodes, opt, cache)
	if err != nil {
		return err
	}
	take := func() []*frag.Result {
		r := results[:w.seeds]
		results = results[w.seeds:]
		return r
	}
	var pts []frag.SweepPoint
	lines := []frag.SweepLine{{Label: "gpupool AutoIdle (no evictions)"}, {Label: "gpupool Auto (evictions)"}}
	mean := func(runs []*frag.Result) float64 {
		v := 0.0
		for _, r := range runs {
			v += r.ServedPct / float64(len(runs))
		}
		return v
	}
	for _, b := range budgets {
		pt := frag.SweepPoint{Budget: b, Idle: frag.Summary{Strategy: frag.GpupoolIdle, Budget: b, Reconfigure: opt.reconfigure, Runs: take()},
			Evict: frag.Summary{Strategy: frag.GpupoolEvict, Budget: b, Reconfigure: opt.reconfigure, Runs: take()}}
		pts = append(pts, pt)
		lines[0].Served = append(lines[0].Served, mean(pt.Idle.Runs))
		lines[1].Served = append(lines[1].Served, mean(pt.Evict.Runs))
	}
	var ceil []frag.Summary
	var marks []frag.Ceiling
	for _, st := range ceilings {
		s := frag.Summary{Strategy: st, Runs: take()}
		ceil = append(ceil, s)
		marks = append(marks, frag.Ceiling{Label: string(st), Served: mean(s.Runs)})
	}
	reconf := "unset (API default " + planner.DefaultMaxReconfiguringNodes + ")"
	if opt.reconfigure != "" {
		reconf = opt.reconfigure
	}
	title := fmt.Sprintf("Budget sweep, %s, maxReconfiguringNodes %s (%d seed(s) per budget)", w.title, reconf, w.seeds)
	out.WriteString("## Budget sweep\n\n")
	out.WriteString(frag.SweepTable(title, pts, ceil))
	if dir != "" {
		const name = "budget-sweep.svg"
		if err := frag.PlotSweep(filepath.Join(dir, name), title, budgets, lines, marks); err != nil {
			return err
		}
		fmt.Fprintf(out, "![%s](%s/%s)\n\n", title, rel, name)
	}
	return nil
}

// cmdline is the command that ran, quoted so that it can be pasted into a shell: an empty
// value (an empty -sweep skips the sweep) must stay an argument.
func cmdline() string {
	args := make([]string, 0, len(os.Args)-1)
	for _, a := range os.Args[1:] {
		if a == "" || strings.ContainsAny(a, " '\"$`\\*?[]{}()<>|&;#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		args = append(args, a)
	}
	return "go run ./test/bench/fragmentation/cmd/fragbench " + strings.Join(args, " ")
}

// header describes the machine and the command, so the numbers can be reproduced.
func header(cmdline string) string {
	cpu := "unknown"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	goVersion := runtime.Version()
	if b, err := exec.Command("go", "version").Output(); err == nil {
		goVersion = strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("# Benchmarks\n\n## Trace-driven fragmentation\n\n"+
		"Generated by this command (`make bench-fragmentation` runs it with BENCH_FLAGS):\n\n```\n%s\n```\n\n"+
		"Machine: nproc %d, CPU %s, %s, run %s.\n\n",
		cmdline, runtime.NumCPU(), cpu, goVersion, time.Now().UTC().Format(time.RFC3339))
}
