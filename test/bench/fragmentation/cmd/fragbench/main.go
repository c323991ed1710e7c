// Command fragbench replays the Alibaba GPU trace v2023 against simulated H100 and H200 MIG
// clusters and compares gpupool's planner with static layouts, a counts-only planner and the
// fluid ceiling (issue 8). `make bench-fragmentation` runs it; `make test` does not.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/gpupool/gpupool/internal/mig"
	frag "github.com/gpupool/gpupool/test/bench/fragmentation"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fragbench:", err)
		os.Exit(1)
	}
}

type workload struct {
	// id names the pod list: workloads with one id replay the same pods, so a replay of one
	// product, strategy and seed is run once for all of them.
	id      string
	title   string
	product *mig.Product
	w       frag.Workload
	cpuOnly int
	seeds   int
	// strategies, when set, replace the run's chosen strategies for this workload.
	strategies []frag.Strategy
}

func run() error {
	dir := flag.String("trace", "../shared/traces/alibaba-gpu-v2023/csv", "directory of the trace CSV files (research use only; never copied into the project)")
	list := flag.String("list", "default", "pod list, openb_pod_list_<list>.csv")
	seeds := flag.Int("seeds", 5, "seeds per workload")
	driftSeeds := flag.Int("drift-seeds", 5, "seeds for the drift workload (0 skips it)")
	sharingSeeds := flag.Int("sharing-seeds", 5, "seeds for the sharing run, where fractional pods ask for MPS replicas (0 skips it)")
	interval := flag.Int64("interval", 60, "simulated seconds between planner calls")
	sample := flag.Int64("sample", 60, "simulated seconds between free/stranded samples")
	load := flag.Float64("load", 1.0, "offered GPU load (fraction of capacity) in the measured window; 0 replays one copy at raw timestamps")
	repeat := flag.Int("repeat", 4, "copies of the list played back to back; the first is warm-up")
	budget := flag.String("budget", "5%", "maxDisruptedNodes of gpupool's policy")
	products := flag.String("products", "H100-80GB,H200-141GB", "GPU models every trace GPU is modelled as")
	strategies := flag.String("strategies", "", "comma-separated subset of strategies by index 0-8, in report order (empty: all)")
	write := flag.String("write", "", "also write the report to this Markdown file")
	workers := flag.Int("workers", runtime.NumCPU(), "replays run in parallel")
	flag.Parse()
	started := time.Now()

	nodes, err := frag.LoadNodes(*dir)
	if err != nil {
		return err
	}
	pods, cpuOnly, err := frag.LoadPods(*dir, *list)
	if err != nil {
		return err
	}
	gpus := 0
	for _, n := range nodes {
		gpus += n.GPUs
	}
	copies := make([][]frag.PodSpec, max(*repeat, 1))
	for i := range copies {
		copies[i] = pods
	}
	main := frag.Prepare(copies, gpus, *load)
	var chosen []frag.Strategy
	if *strategies == "" {
		chosen = frag.Strategies
	} else {
		for _, f := range strings.Split(*strategies, ",") {
			var i int
			if _, err := fmt.Sscanf(f, "%d", &i); err != nil || i < 0 || i >= len(frag.Strategies) {
				return fmt.Errorf("strategy index %q: want 0-%d", f, len(frag.Strategies)-1)
			}
			chosen = append(chosen, frag.Strategies[i])
		}
	}
	var loads []workload
	for _, name := range strings.Split(*products, ",") {
		p, ok := mig.LookupProduct(name)
		if !ok {
			return fmt.Errorf("unknown product %q", name)
		}
		loads = append(loads, workload{id: "main", title: fmt.Sprintf("%s, list %s", p.Name, *list), product: p, w: main,
			cpuOnly: cpuOnly, seeds: *seeds})
	}
	if *driftSeeds > 0 {
		share, _, err := frag.LoadPods(*dir, "gpushare100")
		if err != nil {
			return err
		}
		multi, _, err := frag.LoadPods(*dir, "multigpu50")
		if err != nil {
			return err
		}
		mix := frag.Mix(share, frag.BorrowTimes(multi, pods))
		drift := make([][]frag.PodSpec, len(copies))
		for i := range drift {
			drift[i] = pods
			if i >= len(drift)/2 {
				drift[i] = mix
			}
		}
		p := loads[0].product
		loads = append(loads, workload{id: "drift", title: fmt.Sprintf("%s, drift: %s, then from copy %d of %d gpushare100 (even rows) + multigpu50 (odd rows)",
			p.Name, *list, len(drift)/2+1, len(drift)), product: p, w: frag.Prepare(drift, gpus, *load), seeds: *driftSeeds})
	}

	if *sharingSeeds > 0 {
		p := loads[0].product
		loads = append(loads, workload{id: "main", title: fmt.Sprintf("%s, list %s, sharing: pods below 7 slices ask for a replica of an "+
			"MPS-shared GPU (nvidia.com/gpu.shared), 7-slice pods for a whole GPU", p.Name, *list),
			product: p, w: main, cpuOnly: cpuOnly, seeds: *sharingSeeds, strategies: frag.SharingStrategies})
	}

	var out strings.Builder
	if *seeds < 5 || (*driftSeeds > 0 && *driftSeeds < 5) {
		fmt.Fprintf(&out, "**Reduced run**: %d seeds per configuration and %d for the drift workload (the issue asks for 5), "+
			"to fit the time available.\n\n", *seeds, *driftSeeds)
	}
	fmt.Fprintf(&out, "Pods: %d GPU pods in openb_pod_list_%s.csv; %d CPU-only pods skipped.\n\n", len(pods), *list, cpuOnly)
	fmt.Fprintf(&out, "Cluster: %d GPU nodes, %d GPUs (openb_node_list_gpu_node.csv), CPU and memory per node from the trace.\n\n", len(nodes), gpus)
	fmt.Fprintf(&out, "Mapping: %s.\n\n", frag.MappingText)
	raw := frag.Prepare([][]frag.PodSpec{pods}, gpus, 0)
	fmt.Fprintf(&out, "Load: at its own timestamps the %s list offers %.2f%% of the cluster's compute slices (runtimes are minutes, "+
		"arrivals span months). The replay plays %d copies back to back, the first as warm-up, with arrivals compressed %.0fx "+
		"(runtimes kept) so that the measured window is offered %.0f%% of capacity (target -load %.2f). "+
		"Planner interval %ds, budget maxDisruptedNodes %s, free/stranded sampled every %ds of simulated time in the window.\n\n",
		*list, 100*raw.Offered, len(copies), main.Compression, 100*main.Offered, *load, *interval, *budget, *sample)

	cache := replays{}
	for _, w := range loads {
		strategies := chosen
		if w.strategies != nil {
			strategies = w.strategies
		}
		if err := runWorkload(&out, w, nodes, strategies, *interval, *sample, *budget, *workers, cache); err != nil {
			return err
		}
		// A partial report survives a run cut short.
		if *write != "" {
			if err := os.WriteFile(*write, []byte(header(cmdline())+out.String()+"\n(run in progress)\n"), 0o644); err != nil {
				return fmt.Errorf("write report: %w", err)
			}
		}
	}
	elapsed := time.Since(started).Round(time.Second)
	fmt.Fprintf(&out, "Total wall time: %s.\n\n%s", elapsed, frag.MethodNotes)
	fmt.Print(out.String())
	if *write != "" {
		doc := header(cmdline()) + out.String()
		if err := os.WriteFile(*write, []byte(doc), 0o644); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	}
	return nil
}

// replayKey identifies a replay: its result depends on nothing else.
type replayKey struct {
	workload, product string
	strategy          frag.Strategy
	seed              int
}

// replays keeps every replay's result, so a workload shown twice (the sharing run repeats the
// main list's baselines) runs each replay once.
type replays map[replayKey]*frag.Result

func runWorkload(out *strings.Builder, w workload, nodes []frag.NodeSpec, chosen []frag.Strategy,
	interval, sample int64, budget string, workers int, cache replays) error {
	type job struct {
		si   int
		seed int
	}
	results := make([][]*frag.Result, len(chosen))
	for i := range results {
		results[i] = make([]*frag.Result, w.seeds)
	}
	key := func(j job) replayKey { return replayKey{w.id, w.product.Name, chosen[j.si], j.seed} }
	jobs := make(chan job)
	errs := make(chan error, len(chosen)*w.seeds)
	var wg sync.WaitGroup
	for range max(1, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				r, err := frag.Run(frag.Config{Product: w.product, Strategy: chosen[j.si], Seed: uint64(j.seed + 1),
					Interval: interval, SampleEvery: sample, Budget: budget, MeasureFrom: w.w.MeasureFrom}, nodes, w.w.Pods)
				if err != nil {
					errs <- fmt.Errorf("%s: %w", w.title, err)
					continue
				}
				fmt.Fprintf(os.Stderr, "%s | %s | seed %d: served %.1f%%, placed %d/%d, %d planner calls, %s\n",
					w.title, r.Strategy, r.Seed, r.ServedPct, r.Placed, r.GPUPods, r.PlannerCalls, r.Wall.Round(time.Millisecond))
				results[j.si][j.seed] = r
			}
		}()
	}
	// The slow gpupool replays go first so that the short ones fill the gaps at the end.
	for si := range chosen {
		for seed := range w.seeds {
			if r, ok := cache[key(job{si, seed})]; ok {
				results[si][seed] = r
				continue
			}
			jobs <- job{si, seed}
		}
	}
	close(jobs)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	for si := range chosen {
		for seed := range w.seeds {
			cache[key(job{si, seed})] = results[si][seed]
		}
	}
	var sums []frag.Summary
	for si, st := range chosen {
		sums = append(sums, frag.Summary{Strategy: st, Budget: budget, Runs: results[si]})
	}
	fmt.Fprintf(out, "%s\n", frag.Table(fmt.Sprintf("%s (%d GPU pods replayed, %d in the measured window, offered %.0f%%, %d seeds)",
		w.title, len(w.w.Pods), sums[0].Runs[0].GPUPods, 100*w.w.Offered, w.seeds), sums))
	out.WriteString(frag.Goals(w.title, sums))
	return nil
}

// cmdline is the command as make runs it.
func cmdline() string {
	return "go run ./test/bench/fragmentation/cmd/fragbench " + strings.Join(os.Args[1:], " ")
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
	return fmt.Sprintf("# Benchmarks\n\n## Trace-driven fragmentation (issue 8)\n\n"+
		"Generated by `make bench-fragmentation`, that is:\n\n```\n%s\n```\n\n"+
		"Machine: nproc %d, CPU %s, %s, run %s.\n\n",
		cmdline, runtime.NumCPU(), cpu, goVersion, time.Now().UTC().Format(time.RFC3339))
}
