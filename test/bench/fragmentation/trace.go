// Package fragmentation replays the Alibaba GPU trace v2023 against simulated MIG clusters to
// compare gpupool's planner with static layouts, a counts-only greedy planner and the fluid
// ceiling. The data stays in ../shared: the package reads it at run time and never
// embeds it, because the trace is licensed for research use only.
package fragmentation

import (
	"encoding/csv"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// NodeSpec is one trace node: its CPU, memory and GPU count.
type NodeSpec struct {
	Name   string
	CPU    int64 // millicores
	MemMiB int64
	GPUs   int
}

// Shape is what a pod asks of the GPUs: either one MIG instance of Slices compute slices
// (1, 2, 3, 4 or 7) or Whole whole GPUs on one node.
type Shape struct {
	Slices int
	Whole  int
}

// DemandSlices is the compute slices the shape takes when it runs; a whole GPU counts 7.
func (s Shape) DemandSlices() int {
	if s.Whole > 0 {
		return 7 * s.Whole
	}
	return s.Slices
}

// String names the shape as the report prints it.
func (s Shape) String() string {
	if s.Whole > 0 {
		return fmt.Sprintf("%dxGPU", s.Whole)
	}
	return fmt.Sprintf("%dg", s.Slices)
}

// PodSpec is one GPU pod of the trace with its mapped shape.
type PodSpec struct {
	Name   string
	CPU    int64 // millicores
	MemMiB int64
	Shape  Shape
	// Arrive and Depart are seconds from the trace start; Depart <= Arrive means the pod
	// never leaves within the replay.
	Arrive, Depart int64
}

// MapShape maps a trace request to a MIG shape: gpu_milli is only meaningful for num_gpu 1,
// where it rounds up to the smallest covering profile (1g <= 142, 2g <= 285, 3g <= 428,
// 4g <= 571, else 7g, and 1000 is a 7g instance, not a MIG-off GPU, so that single-GPU pods
// stay on MIG GPUs); num_gpu > 1 asks for that many whole GPUs on one node. ok is false for
// CPU-only pods.
func MapShape(numGPU, gpuMilli int) (Shape, bool) {
	switch {
	case numGPU <= 0:
		return Shape{}, false
	case numGPU > 1:
		return Shape{Whole: numGPU}, true
	case gpuMilli <= 142:
		return Shape{Slices: 1}, true
	case gpuMilli <= 285:
		return Shape{Slices: 2}, true
	case gpuMilli <= 428:
		return Shape{Slices: 3}, true
	case gpuMilli <= 571:
		return Shape{Slices: 4}, true
	default:
		return Shape{Slices: 7}, true
	}
}

// MappingText is the mapping as the report states it.
const MappingText = "num_gpu 1: gpu_milli <= 142 -> 1g, <= 285 -> 2g, <= 428 -> 3g, <= 571 -> 4g, " +
	"else (including 1000) -> one 7g MIG instance; num_gpu N > 1 -> N whole GPUs (MIG off) on one node; " +
	"num_gpu 0 (CPU-only) skipped"

// readCSV reads a CSV file with a header row into one map per row, and returns the header.
func readCSV(path string) ([]string, []map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open trace file: %w", err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	header, err := r.Read()
	if err != nil {
		return nil, nil, fmt.Errorf("read header of %s: %w", path, err)
	}
	var rows []map[string]string
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return header, rows, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", path, err)
		}
		row := make(map[string]string, len(header))
		for i, h := range header {
			if i < len(rec) {
				row[h] = rec[i]
			}
		}
		rows = append(rows, row)
	}
}

func atoi(row map[string]string, col string) (int64, error) {
	v := row[col]
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("column %s: %w", col, err)
	}
	return n, nil
}

// LoadNodes reads openb_node_list_gpu_node.csv from dir.
func LoadNodes(dir string) ([]NodeSpec, error) {
	path := filepath.Join(dir, "openb_node_list_gpu_node.csv")
	_, rows, err := readCSV(path)
	if err != nil {
		return nil, err
	}
	nodes := make([]NodeSpec, 0, len(rows))
	for i, row := range rows {
		cpu, err1 := atoi(row, "cpu_milli")
		mem, err2 := atoi(row, "memory_mib")
		gpus, err3 := atoi(row, "gpu")
		for _, err := range []error{err1, err2, err3} {
			if err != nil {
				return nil, fmt.Errorf("%s row %d: %w", path, i+2, err)
			}
		}
		if gpus <= 0 {
			continue
		}
		nodes = append(nodes, NodeSpec{Name: row["sn"], CPU: cpu, MemMiB: mem, GPUs: int(gpus)})
	}
	return nodes, nil
}

// ListFile is the file name of a pod list, e.g. openb_pod_list_default.csv for "default".
func ListFile(list string) string { return "openb_pod_list_" + list + ".csv" }

// ListNames returns the pod lists in dir (every openb_pod_list_*.csv), sorted by name.
func ListNames(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, ListFile("*")))
	if err != nil {
		return nil, fmt.Errorf("list pod lists in %s: %w", dir, err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "openb_pod_list_"), ".csv"))
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("no %s in %s", ListFile("*"), dir)
	}
	return names, nil
}

// PodList is one pod list as read from the trace.
type PodList struct {
	// Name is the list's name, e.g. "default"; File its file name.
	Name, File string
	// Pods are its GPU pods, in file order.
	Pods []PodSpec
	// CPUOnly counts the pods asking for no GPU, which the replay skips.
	CPUOnly int
	// Timed is false when the file has no creation_time column (the multigpu lists): its pods
	// then read as all arriving at 0 and never leaving, and need BorrowTimes before a replay.
	Timed bool
	// GPUSpec counts GPU pods that name GPU models (gpu_spec, the gpuspec lists); every trace
	// GPU is modelled as one product, so the replay cannot honour them.
	GPUSpec int
}

// LoadList reads one pod list (e.g. "default" for openb_pod_list_default.csv) from dir.
func LoadList(dir, list string) (*PodList, error) {
	path := filepath.Join(dir, ListFile(list))
	header, rows, err := readCSV(path)
	if err != nil {
		return nil, err
	}
	// A list without creation_time would otherwise replay every pod at t=0, forever.
	l := &PodList{Name: list, File: ListFile(list), Timed: slices.Contains(header, "creation_time")}
	for i, row := range rows {
		var v [6]int64
		for k, col := range []string{"cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "creation_time", "deletion_time"} {
			if v[k], err = atoi(row, col); err != nil {
				return nil, fmt.Errorf("%s row %d: %w", path, i+2, err)
			}
		}
		shape, ok := MapShape(int(v[2]), int(v[3]))
		if !ok {
			l.CPUOnly++
			continue
		}
		if row["gpu_spec"] != "" {
			l.GPUSpec++
		}
		l.Pods = append(l.Pods, PodSpec{Name: row["name"], CPU: v[0], MemMiB: v[1], Shape: shape, Arrive: v[4], Depart: v[5]})
	}
	return l, nil
}

// Mix is the drift workload's second half: the pods of second on even rows and of third on
// odd rows, so that the volume stays that of one list while the shapes change.
func Mix(second, third []PodSpec) []PodSpec {
	var out []PodSpec
	for k, list := range [][]PodSpec{second, third} {
		for i, p := range list {
			if i%2 == k {
				// Both lists reuse the default list's pod names.
				p.Name = fmt.Sprintf("mix%d-%s", k, p.Name)
				out = append(out, p)
			}
		}
	}
	return out
}

// BorrowTimes gives the pods of a list without times (the multigpu lists) times from ref, a
// timed list. A pod with a namesake in ref takes its namesake's creation and deletion times:
// the multigpu lists repeat the default list's rows under the same names and then append
// their extra multi-GPU pods. Every other pod takes its arrival from one GPU pod of ref and its
// runtime from one pod of ref asking for as many GPUs (any GPU pod when ref has none of that
// size), each picked by a hash of its name: the added pods spread over the trace's arrivals
// and run as long as the trace's pods of their size do, and the picks do not depend on the
// seed. Dropping them instead, as this function once did, replayed the multigpu lists as the
// default list. It returns the pods and how many took picked rather than namesake times.
func BorrowTimes(pods, ref []PodSpec) ([]PodSpec, int, error) {
	if len(ref) == 0 {
		return nil, 0, fmt.Errorf("no timed GPU pods to borrow times from")
	}
	byName := make(map[string]PodSpec, len(ref))
	bySize := map[int][]PodSpec{}
	for _, p := range ref {
		byName[p.Name] = p
		bySize[p.Shape.gpus()] = append(bySize[p.Shape.gpus()], p)
	}
	out := make([]PodSpec, 0, len(pods))
	picked := 0
	for _, p := range pods {
		if r, ok := byName[p.Name]; ok {
			p.Arrive, p.Depart = r.Arrive, r.Depart
			out = append(out, p)
			continue
		}
		picked++
		at := ref[nameHash(p.Name, "arrival")%uint64(len(ref))]
		same := bySize[p.Shape.gpus()]
		if len(same) == 0 {
			same = ref
		}
		run := same[nameHash(p.Name, "runtime")%uint64(len(same))]
		p.Arrive, p.Depart = at.Arrive, at.Arrive
		if run.Depart > run.Arrive {
			p.Depart = at.Arrive + run.Depart - run.Arrive
		}
		out = append(out, p)
	}
	return out, picked, nil
}

func nameHash(name, salt string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(salt))
	h.Write([]byte{0})
	h.Write([]byte(name))
	return h.Sum64()
}

// gpus is how many GPUs the shape asks for: whole GPUs, or one for a MIG instance.
func (s Shape) gpus() int { return max(s.Whole, 1) }

// Workload is a pod list ready to replay: the trace looped and time-compressed so that the
// cluster sees a steady offered load, and the time from which the replay measures.
type Workload struct {
	Pods []PodSpec
	// MeasureFrom is the start of the measured window: the first copy of the trace is warm-up.
	MeasureFrom int64
	// Offered is the GPU demand offered inside the measured window, as a fraction of the
	// cluster's compute slices (slices times the part of each runtime inside the window).
	Offered float64
	// Target is the load asked for; Offered falls short of it when Capped.
	Target float64
	// Capped says the compression stopped at the shortest window allowed: the list offers
	// less than Target in any window that long (its pods are too few, or run too briefly).
	Capped bool
	// Window is the measured window's length in replayed seconds.
	Window int64
	// Compression is how many times faster than the trace the arrivals come.
	Compression float64
}

// maxCompression bounds the search for a compression: beyond it a list's arrivals all fall
// within seconds.
const maxCompression = 1e7

// Prepare plays the lists in copies back to back (copy r renamed "<name>~r") and compresses the
// arrival times toward the first one, keeping every runtime, so that the demand offered in the
// window after the first copy is load (a fraction of capacity). The raw trace offers well under
// 1% of the modelled cluster (runtimes are minutes, arrivals span months), where no strategy
// fragments; a single copy cannot offer a steady load either, because its first arrivals find
// an empty cluster. load <= 0 keeps the raw timestamps of one copy.
//
// The compression never shrinks the measured window below minWindow seconds (callers pass a
// number of planner intervals): a list whose runtimes are short next to its compressed span
// offers little more however hard it is compressed, and the search would otherwise squeeze
// the whole window into a second, which ends the replay before the first planner call, so
// every dynamic strategy would serve what the initial layout serves. Such a list is replayed
// at the load the shortest window allows, and Capped says so.
func Prepare(copies [][]PodSpec, totalGPUs int, load float64, minWindow int64) Workload {
	if len(copies) == 0 || len(copies[0]) == 0 {
		return Workload{Target: load}
	}
	lo, hi := copies[0][0].Arrive, copies[0][0].Arrive
	for _, c := range copies {
		for _, p := range c {
			lo, hi = min(lo, p.Arrive), max(hi, p.Arrive)
		}
	}
	repeat := len(copies)
	if load <= 0 {
		repeat = 1
	}
	span := hi - lo + 1
	var looped []PodSpec
	for r := range repeat {
		for _, p := range copies[r] {
			if r > 0 {
				p.Name = fmt.Sprintf("%s~%d", p.Name, r)
				if p.Depart > p.Arrive {
					p.Depart += int64(r) * span
				}
				p.Arrive += int64(r) * span
			}
			looped = append(looped, p)
		}
	}
	end := lo + int64(repeat)*span - 1
	from := lo + span
	if repeat == 1 {
		from = lo
	}
	if load <= 0 {
		return Workload{Pods: looped, MeasureFrom: from, Offered: windowLoad(looped, totalGPUs, lo, from, end, 1), Compression: 1,
			Target: load, Window: end - from}
	}
	// The windowed load grows with the compression, so bisect on its logarithm.
	a, b := 0.0, math.Log10(maxCompression)
	for range 50 {
		mid := (a + b) / 2
		if windowLoad(looped, totalGPUs, lo, from, end, math.Pow(10, mid)) < load {
			a = mid
		} else {
			b = mid
		}
	}
	k := math.Pow(10, b)
	capped := false
	if minWindow > 0 {
		if most := float64(end-from) / float64(minWindow); k > most {
			k, capped = max(most, 1), true
		}
	}
	out := make([]PodSpec, len(looped))
	for i, p := range looped {
		run := p.Depart - p.Arrive
		p.Arrive = lo + int64(float64(p.Arrive-lo)/k)
		if run > 0 {
			p.Depart = p.Arrive + run
		}
		out[i] = p
	}
	measureFrom := lo + int64(float64(from-lo)/k)
	return Workload{Pods: out, MeasureFrom: measureFrom, Compression: k, Target: load, Capped: capped,
		Window: lo + int64(float64(end-lo)/k) - measureFrom, Offered: windowLoad(looped, totalGPUs, lo, from, end, k)}
}

// windowLoad is the demand pods offer in [from, end] once their arrivals are compressed k-fold
// toward lo, over the window's capacity; a pod that never departs runs to the end.
func windowLoad(pods []PodSpec, totalGPUs int, lo, from, end int64, k float64) float64 {
	f := float64(lo) + float64(from-lo)/k
	e := float64(lo) + float64(end-lo)/k
	if e <= f || totalGPUs == 0 {
		return 0
	}
	var work float64
	for _, p := range pods {
		a := float64(lo) + float64(p.Arrive-lo)/k
		d := e
		if p.Depart > p.Arrive {
			d = a + float64(p.Depart-p.Arrive)
		}
		if ov := min(d, e) - max(a, f); ov > 0 {
			work += float64(p.Shape.DemandSlices()) * ov
		}
	}
	return work / ((e - f) * float64(7*totalGPUs))
}
