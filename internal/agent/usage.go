package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/rightsize"
)

// DeviceMemory is how much memory one device (a GPU used whole, or a MIG device) has in use,
// as NVML reports it.
type DeviceMemory struct {
	UsedMiB, TotalMiB int64
}

// UsageFunc reads the memory in use per device, keyed by the UUID the device plugin hands to
// pods (GPU-... for whole GPUs, MIG-... for MIG devices). It may return a partial map with an
// error naming the devices it could not read.
type UsageFunc func(context.Context) (map[string]DeviceMemory, error)

// NVMLUsageReader adapts ReadMemoryUsage to a UsageFunc.
func NVMLUsageReader(lib NVML) UsageFunc {
	return func(context.Context) (map[string]DeviceMemory, error) { return ReadMemoryUsage(lib) }
}

// ReadMemoryUsage reads the memory in use on every device a pod may hold. A MIG device's
// handle reports its GPU instance's memory (GetMemoryInfo). A GPU used whole reports the sum of
// its compute processes' memory (GetComputeRunningProcesses): unlike the device's own
// GetMemoryInfo, that leaves out what the driver reserves, which is not the pod's to give back.
// Where NVML cannot give a process's memory (NVML_VALUE_NOT_AVAILABLE, e.g. without access to
// the host's PID namespace) the device's total use stands in, which errs on the large side.
//
// A device that cannot be read is left out (no sample is better than a wrong one) and named
// in the error; the map holds the others.
func ReadMemoryUsage(lib NVML) (map[string]DeviceMemory, error) {
	return readUsage(lib)
}

// notAvailable is NVML_VALUE_NOT_AVAILABLE as a process's UsedGpuMemory carries it.
const notAvailable = ^uint64(0)

func readUsage[D Device[D, G], G GPUInstance](lib Library[D, G]) (map[string]DeviceMemory, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, initError(ret)
	}
	defer func() { _ = lib.Shutdown() }() // as in read: reference counted, nothing to act on
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, &Error{Reason: ReasonDeviceCountFailed, Op: "DeviceGetCount", Return: ret}
	}
	out := map[string]DeviceMemory{}
	var errs failures
	for i := range n {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			errs.add(fmt.Sprintf("DeviceGetHandleByIndex(%d)", i), ret)
			continue
		}
		current, _, ret := dev.GetMigMode()
		if ret == nvml.SUCCESS && current == nvml.DEVICE_MIG_ENABLE {
			readMIGUsage(dev, out, &errs)
			continue
		}
		if ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_SUPPORTED {
			errs.add(fmt.Sprintf("GPU %d: GetMigMode", i), ret)
			continue
		}
		readWholeUsage(i, dev, out, &errs)
	}
	if len(errs) > 0 {
		return out, errors.New("reading GPU memory in use: " + strings.Join(errs, "; "))
	}
	return out, nil
}

// readWholeUsage reads a GPU used whole.
func readWholeUsage[D Device[D, G], G GPUInstance](i int, dev D, out map[string]DeviceMemory, errs *failures) {
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		errs.add(fmt.Sprintf("GPU %d: GetUUID", i), ret)
		return
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		errs.add(fmt.Sprintf("GPU %s: GetMemoryInfo", uuid), ret)
		return
	}
	procs, ret := dev.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		errs.add(fmt.Sprintf("GPU %s: GetComputeRunningProcesses", uuid), ret)
		return
	}
	var used uint64
	for _, p := range procs {
		if p.UsedGpuMemory == notAvailable {
			used = mem.Used
			break
		}
		used += p.UsedGpuMemory
	}
	out[uuid] = DeviceMemory{UsedMiB: int64(used / mib), TotalMiB: int64(mem.Total / mib)}
}

// readMIGUsage reads every MIG device of a GPU.
func readMIGUsage[D Device[D, G], G GPUInstance](dev D, out map[string]DeviceMemory, errs *failures) {
	for i, mdev := range migDevices(dev, errs) {
		uuid, ret := mdev.GetUUID()
		if ret != nvml.SUCCESS {
			errs.add(fmt.Sprintf("MIG device %d: GetUUID", i), ret)
			continue
		}
		mem, ret := mdev.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			errs.add(fmt.Sprintf("MIG device %s: GetMemoryInfo", uuid), ret)
			continue
		}
		out[uuid] = DeviceMemory{UsedMiB: int64(mem.Used / mib), TotalMiB: int64(mem.Total / mib)}
	}
}

// sampleUsage takes one usage sample and returns status.usage. Without a usage reader it
// publishes none; when this pass cannot tell which pod holds what (NVML or the kubelet did not
// answer) or how much memory is in use, it keeps what is published and samples nothing.
func (p *Publisher) sampleUsage(ctx context.Context, published []v1alpha1.PodUsage, gpus []v1alpha1.GPUStatus, gpusKnown bool,
	owners map[string][]v1alpha1.PodReference, now time.Time) []v1alpha1.PodUsage {
	if p.Usage == nil {
		return nil
	}
	if !gpusKnown || owners == nil {
		return published
	}
	log := logf.FromContext(ctx).WithValues("gpunode", p.NodeName)
	mem, err := p.Usage(ctx)
	if err != nil {
		log.V(1).Info("reading GPU memory in use", "error", err.Error(), "devicesRead", len(mem))
		if mem == nil {
			return published
		}
	}
	p.usage.rule = p.UsageRule
	usage, changed := p.usage.sample(now, devicePods(gpus, owners), mem, published)
	if len(changed) > 0 {
		log.V(1).Info("usage summaries changed", "pods", changed)
	}
	return usage
}

// maxPodUsages is status.usage's maxItems.
const maxPodUsages = 512

// usageSampler keeps one decaying histogram per pod holding a device alone, and decides what
// the agent publishes of them.
type usageSampler struct {
	rule     rightsize.PublishRule
	halfLife time.Duration
	hist     map[v1alpha1.PodReference]*rightsize.Histogram
}

// minSamples is the rule's MinSamples, defaulted as the rule defaults it.
func (s *usageSampler) minSamples() int64 {
	return cmp.Or(s.rule.MinSamples, rightsize.DefaultMinSamples)
}

// devicePods maps each device held by exactly one pod to that pod. Devices shared by several
// pods (time-slicing, MPS) are left out: NVML's memory per device cannot be split between pods.
func devicePods(gpus []v1alpha1.GPUStatus, owners map[string][]v1alpha1.PodReference) map[string]v1alpha1.PodReference {
	out := map[string]v1alpha1.PodReference{}
	one := func(uuid string) {
		if pods := owners[uuid]; uuid != "" && len(pods) == 1 {
			out[uuid] = pods[0]
		}
	}
	for _, g := range gpus {
		if g.MIGMode != nil && g.MIGMode.Current == MIGEnabled {
			for _, in := range g.Instances {
				one(in.UUID)
			}
			continue
		}
		one(g.UUID)
	}
	return out
}

// sample feeds one reading into the pods' histograms and returns status.usage: per pod, its
// new summary where that changed materially from the published one, else the published one.
// Pods that hold no device alone any more are dropped, histogram and summary alike.
func (s *usageSampler) sample(now time.Time, pods map[string]v1alpha1.PodReference, mem map[string]DeviceMemory,
	published []v1alpha1.PodUsage) (usage []v1alpha1.PodUsage, changed []string) {
	if s.hist == nil {
		s.hist = map[v1alpha1.PodReference]*rightsize.Histogram{}
	}
	present := map[v1alpha1.PodReference]bool{}
	for uuid, pod := range pods {
		present[pod] = true
		m, ok := mem[uuid]
		if !ok {
			continue // not read this time; the pod keeps its histogram
		}
		h := s.hist[pod]
		if h == nil {
			h = rightsize.NewHistogram(s.halfLife)
			s.hist[pod] = h
		}
		h.Add(now, m.UsedMiB, m.TotalMiB)
	}
	for pod := range s.hist {
		if !present[pod] {
			delete(s.hist, pod)
		}
	}
	prev := map[v1alpha1.PodReference]v1alpha1.PodUsage{}
	for _, u := range published {
		prev[v1alpha1.PodReference{Namespace: u.Namespace, Name: u.Name}] = u
	}
	for pod := range present {
		old, had := prev[pod]
		h := s.hist[pod]
		if h == nil || h.Samples() == 0 {
			if had {
				usage = append(usage, old)
			}
			continue
		}
		var pub *rightsize.Summary
		if had {
			p := rightsize.SummaryOf(old)
			pub = &p
			// A histogram with fewer samples than the published summary was started after it:
			// the agent restarted and lost the history behind it. The published summary stands
			// until the new histogram holds the minimum samples (or as many), so a restart
			// never trades a day of evidence for one sample.
			if h.Samples() < min(p.Samples, s.minSamples()) {
				usage = append(usage, old)
				continue
			}
		}
		cur := h.Summary()
		if ok, why := s.rule.Changed(pub, cur); ok {
			usage = append(usage, cur.PodUsage(pod))
			changed = append(changed, pod.Namespace+"/"+pod.Name+": "+why)
			continue
		}
		usage = append(usage, old)
	}
	slices.SortFunc(usage, func(a, b v1alpha1.PodUsage) int {
		return comparePod(v1alpha1.PodReference{Namespace: a.Namespace, Name: a.Name}, v1alpha1.PodReference{Namespace: b.Namespace, Name: b.Name})
	})
	slices.Sort(changed)
	return usage[:min(len(usage), maxPodUsages)], changed
}
