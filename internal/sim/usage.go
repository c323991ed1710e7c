package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/agent"
)

// AnnotationUsage on a pod declares how much memory its simulated workload uses on each device
// it holds alone, so that the node's NVML reports it and the agent samples it:
//
//   - steady:<quantity>: that much, all the time ("steady:9Gi");
//   - bursty:<low>-<high>[/<period>]: <low>, and <high> for the first fifth of every period
//     (default 1m) from the moment the pod got its device ("bursty:4Gi-60Gi/30s");
//   - preallocate:<fraction>: that fraction of the device's memory, flat, as JAX/XLA or vLLM
//     take it at start ("preallocate:0.9").
//
// Use never exceeds the device's memory. Pods without the annotation, or with one that does not
// parse, report no memory use at all (as a device NVML cannot read), so their GPUNode carries no
// status.usage for them; a bad value is named in the agent's log.
const AnnotationUsage = "sim.gpupool.io/usage"

// Usage pattern kinds of AnnotationUsage.
const (
	usageSteady      = "steady"
	usageBursty      = "bursty"
	usagePreallocate = "preallocate"
)

// defaultBurstPeriod is a bursty pattern's period when the annotation gives none.
const defaultBurstPeriod = time.Minute

// burstFraction is the part of each period a bursty pattern spends at its high.
const burstFraction = 0.2

// usagePattern is a parsed AnnotationUsage.
type usagePattern struct {
	kind string
	// low and high are bytes; steady uses low.
	low, high uint64
	period    time.Duration
	fraction  float64
}

// parseUsagePattern reads an AnnotationUsage value.
func parseUsagePattern(v string) (usagePattern, error) {
	kind, arg, ok := strings.Cut(strings.TrimSpace(v), ":")
	if !ok || arg == "" {
		return usagePattern{}, fmt.Errorf("%s=%q: want steady:<quantity>, bursty:<low>-<high>[/<period>] or preallocate:<fraction>", AnnotationUsage, v)
	}
	bytes := func(s string) (uint64, error) {
		q, err := resource.ParseQuantity(strings.TrimSpace(s))
		if err != nil || q.Sign() < 0 {
			return 0, fmt.Errorf("%s=%q: %q is not a memory quantity (e.g. 9Gi)", AnnotationUsage, v, s)
		}
		return uint64(q.Value()), nil
	}
	p := usagePattern{kind: kind}
	var err error
	switch kind {
	case usageSteady:
		p.low, err = bytes(arg)
		return p, err
	case usageBursty:
		levels, period, hasPeriod := strings.Cut(arg, "/")
		lo, hi, ok := strings.Cut(levels, "-")
		if !ok {
			return usagePattern{}, fmt.Errorf("%s=%q: bursty needs <low>-<high> (e.g. bursty:4Gi-60Gi)", AnnotationUsage, v)
		}
		if p.low, err = bytes(lo); err != nil {
			return usagePattern{}, err
		}
		if p.high, err = bytes(hi); err != nil {
			return usagePattern{}, err
		}
		if p.high < p.low {
			return usagePattern{}, fmt.Errorf("%s=%q: the high (%s) is below the low (%s)", AnnotationUsage, v, hi, lo)
		}
		p.period = defaultBurstPeriod
		if hasPeriod {
			if p.period, err = time.ParseDuration(period); err != nil || p.period <= 0 {
				return usagePattern{}, fmt.Errorf("%s=%q: the period %q is not a positive Go duration (e.g. 30s)", AnnotationUsage, v, period)
			}
		}
		return p, nil
	case usagePreallocate:
		if p.fraction, err = strconv.ParseFloat(arg, 64); err != nil || p.fraction <= 0 || p.fraction > 1 {
			return usagePattern{}, fmt.Errorf("%s=%q: the fraction must be in (0, 1], e.g. preallocate:0.9", AnnotationUsage, v)
		}
		return p, nil
	}
	return usagePattern{}, fmt.Errorf("%s=%q: unknown pattern %q: want steady, bursty or preallocate", AnnotationUsage, v, kind)
}

// bytesAt is the memory in use elapsed after the pod got its device, on a device of total bytes.
func (p usagePattern) bytesAt(elapsed time.Duration, total uint64) uint64 {
	var used uint64
	switch p.kind {
	case usageSteady:
		used = p.low
	case usageBursty:
		used = p.low
		if elapsed%p.period < time.Duration(burstFraction*float64(p.period)) {
			used = p.high
		}
	case usagePreallocate:
		used = uint64(p.fraction * float64(total))
	}
	return min(used, total)
}

// podUsage is what a node remembers of a pod's AnnotationUsage: the value and when the pod
// got its devices, from which its pattern's phase runs.
type podUsage struct {
	value string
	since time.Time
}

// trackUsageLocked remembers the usage annotation of each pod holding devices. n.mu must be
// held.
func (n *Node) trackUsageLocked(live map[types.NamespacedName]*corev1.Pod) {
	if n.usage == nil {
		n.usage = map[types.NamespacedName]podUsage{}
	}
	for key, pod := range live {
		v, ok := pod.Annotations[AnnotationUsage]
		if _, assigned := n.assigned[key]; !ok || !assigned {
			delete(n.usage, key)
			continue
		}
		if old, had := n.usage[key]; !had || old.value != v {
			n.usage[key] = podUsage{value: v, since: n.clock()}
		}
	}
	maps.DeleteFunc(n.usage, func(key types.NamespacedName, _ podUsage) bool { return live[key] == nil })
}

// clock is the node's time, the real one unless the simulator was given a clock.
func (n *Node) clock() time.Time {
	if n.now != nil {
		return n.now()
	}
	return time.Now()
}

// ReadUsage is the node agent's UsageFunc in the simulator: it sets the memory in use NVML
// reports on each device a pod with AnnotationUsage holds alone, as the pod's workload would
// use it now, then reads it back through the agent's own NVML reader. Only those devices are
// returned: the others have no simulated workload whose use could be told.
func (n *Node) ReadUsage(context.Context) (map[string]agent.DeviceMemory, error) {
	// A first read learns each device's memory, which preallocation is a fraction of.
	totals, err := agent.ReadMemoryUsage(n.NVML())
	if totals == nil {
		return nil, err
	}
	declared, problems := n.setUsage(totals)
	used, err := agent.ReadMemoryUsage(n.NVML())
	maps.DeleteFunc(used, func(uuid string, _ agent.DeviceMemory) bool { return !declared[uuid] })
	return used, errors.Join(append(problems, err)...)
}

// setUsage makes NVML report each declared pod's use on the devices it holds alone, and none on
// the others; it returns those devices and the annotations that do not parse.
func (n *Node) setUsage(totals map[string]agent.DeviceMemory) (map[string]bool, []error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.clock()
	declared := map[string]bool{}
	var problems []error
	owners := n.ownersLocked()
	for _, uuid := range slices.Sorted(maps.Keys(totals)) {
		var used uint64
		var pod types.NamespacedName
		if refs := owners[uuid]; len(refs) == 1 {
			pod = types.NamespacedName{Namespace: refs[0].Namespace, Name: refs[0].Name}
			if u, ok := n.usage[pod]; ok {
				p, err := parseUsagePattern(u.value)
				if err != nil {
					problems = append(problems, fmt.Errorf("pod %s: %w", pod, err))
				} else {
					used = p.bytesAt(now.Sub(u.since), uint64(totals[uuid].TotalMiB)<<20)
					declared[uuid] = true
				}
			}
		}
		if strings.HasPrefix(uuid, "MIG-") {
			n.migDevices.SetMemoryUsed(uuid, used)
			continue
		}
		// A GPU used whole: the agent sums its compute processes' memory.
		var procs []nvml.ProcessInfo
		if declared[uuid] {
			procs = []nvml.ProcessInfo{{Pid: fakePID(pod), UsedGpuMemory: used}}
		}
		n.migDevices.SetProcesses(uuid, procs)
	}
	return declared, problems
}
