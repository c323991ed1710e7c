package sim

import (
	"hash/fnv"
	"maps"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podDeviceRequests returns the device-plugin resources a pod is handed: the sum over its
// containers, or the largest single init container's request when that is larger (init
// containers run one at a time and their devices are reused by the app containers, as the
// kubelet's device manager does). Extended resources must have limits equal to requests;
// limits are read first because a pod may give only those.
func podDeviceRequests(pod *corev1.Pod) map[corev1.ResourceName]int64 {
	out := map[corev1.ResourceName]int64{}
	amount := func(c corev1.Container, r corev1.ResourceName) int64 {
		if q, ok := c.Resources.Limits[r]; ok {
			return q.Value()
		}
		q := c.Resources.Requests[r]
		return q.Value()
	}
	names := func(c corev1.Container) []corev1.ResourceName {
		var rs []corev1.ResourceName
		for r := range c.Resources.Limits {
			rs = append(rs, r)
		}
		for r := range c.Resources.Requests {
			rs = append(rs, r)
		}
		return slices.DeleteFunc(rs, func(r corev1.ResourceName) bool { return !isDevicePluginResource(r) })
	}
	for _, c := range pod.Spec.Containers {
		for _, r := range slices.Compact(slices.Sorted(slices.Values(names(c)))) {
			out[r] += amount(c, r)
		}
	}
	for _, c := range pod.Spec.InitContainers {
		for _, r := range names(c) {
			out[r] = max(out[r], amount(c, r))
		}
	}
	maps.DeleteFunc(out, func(_ corev1.ResourceName, n int64) bool { return n <= 0 })
	return out
}

// holdsDevices reports whether a pod has, or is about to get, devices on its node: bound and
// not terminated. A terminating pod (deletionTimestamp set) still runs and keeps its devices
// until it is gone, which is what makes a slow termination block a reconfiguration.
func holdsDevices(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// syncAssignmentsLocked makes the node's device assignment match the pods that hold devices
// on it: pods no longer among them release theirs, pods without devices get free ones of what
// the device plugin advertises now (exclusive devices in advertisedDevices order, shared
// replicas of GPUs or MIG devices spread over the devices, see pickReplicas), and pods that
// have devices keep them for their whole life, even when a new sharing setting no longer
// advertises them: the kubelet does not stop running pods when the device plugin restarts. It returns the pods that asked
// for more than is free; the real kubelet would reject them, the simulator retries them.
// n.mu must be held.
func (n *Node) syncAssignmentsLocked(pods []*corev1.Pod, gpus []GPUState) []types.NamespacedName {
	live := map[types.NamespacedName]*corev1.Pod{}
	for _, p := range pods {
		if holdsDevices(p) {
			live[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
		}
	}
	for key := range n.assigned {
		if _, ok := live[key]; !ok {
			delete(n.assigned, key)
		}
	}
	taken := map[string]bool{}
	// replicasInUse counts, per shared GPU or MIG device (its UUID), the replicas pods hold,
	// so new replicas go to the least shared device.
	replicasInUse := map[string]int{}
	for _, devs := range n.assigned {
		for _, d := range devs {
			taken[d.id] = true
			if d.isReplica() {
				replicasInUse[physicalID(d.id)]++
			}
		}
	}
	free := map[corev1.ResourceName][]device{}
	advertised, failGreaterThanOne := n.advertisedLocked(gpus)
	for _, d := range advertised {
		if !taken[d.id] {
			free[d.resource] = append(free[d.resource], d)
		}
	}
	var starved []types.NamespacedName
	for _, key := range slices.SortedFunc(maps.Keys(live), comparePodKeys) {
		if _, ok := n.assigned[key]; ok {
			continue
		}
		want := podDeviceRequests(live[key])
		if len(want) == 0 {
			continue
		}
		resources := slices.Sorted(maps.Keys(want))
		if slices.ContainsFunc(resources, func(r corev1.ResourceName) bool { return int64(len(free[r])) < want[r] }) {
			starved = append(starved, key)
			continue
		}
		if failGreaterThanOne && slices.ContainsFunc(resources, func(r corev1.ResourceName) bool { return want[r] > 1 && free[r][0].isReplica() }) {
			// The plugin's Allocate refuses it ("maximum request size for shared resources is
			// 1"), so the kubelet never hands the pod devices.
			starved = append(starved, key)
			continue
		}
		var got []device
		for _, r := range resources {
			var picked []device
			if free[r][0].isReplica() {
				picked, free[r] = pickReplicas(free[r], int(want[r]), replicasInUse)
			} else {
				picked, free[r] = free[r][:want[r]], free[r][want[r]:]
			}
			got = append(got, picked...)
		}
		n.assigned[key] = got
	}
	n.setProcessesLocked(gpus)
	n.trackUsageLocked(live)
	return starved
}

// advertisedLocked is what the device plugin advertises on the GPUs now, nothing while it does
// not run, and whether it refuses requests for more than one replica
// (failRequestsGreaterThanOne). n.mu must be held.
func (n *Node) advertisedLocked(gpus []GPUState) ([]device, bool) {
	if n.plugin == nil {
		return nil, false
	}
	devices, err := advertise(gpus, *n.plugin)
	if err != nil {
		// The layout changed under a config the plugin started with and it would not start
		// again; the device plugin's next reconcile reports it.
		return nil, false
	}
	return devices, n.plugin.file.failRequestsGreaterThanOne()
}

// pickReplicas takes k shared replicas from free (ordered by GPU, then instance start, then
// replica), each from the GPU or MIG device whose replicas are least in use, first in that
// order on a tie, as the device plugin's preferred allocation for replicated resources
// spreads pods over the devices. It counts the picked replicas into inUse (keyed by the
// device's UUID) and returns them and the replicas left free.
func pickReplicas(free []device, k int, inUse map[string]int) (picked, rest []device) {
	rest = slices.Clone(free)
	for range k {
		best := 0
		for i, d := range rest {
			if inUse[physicalID(d.id)] < inUse[physicalID(rest[best].id)] {
				best = i
			}
		}
		picked = append(picked, rest[best])
		inUse[physicalID(rest[best].id)]++
		rest = slices.Delete(rest, best, best+1)
	}
	return picked, rest
}

// setProcessesLocked makes NVML report one compute process per pod on every MIG device a pod
// holds, exclusively or as a time-sliced replica, and none on the others, so the agent's Busy
// flag follows the assignment.
func (n *Node) setProcessesLocked(gpus []GPUState) {
	owners := map[string][]types.NamespacedName{}
	for _, key := range slices.SortedFunc(maps.Keys(n.assigned), comparePodKeys) {
		for _, d := range n.assigned[key] {
			id := physicalID(d.id)
			if !slices.Contains(owners[id], key) {
				owners[id] = append(owners[id], key)
			}
		}
	}
	for _, g := range gpus {
		for _, in := range g.Instances {
			var procs []nvml.ProcessInfo
			for _, key := range owners[in.UUID] {
				procs = append(procs, nvml.ProcessInfo{Pid: fakePID(key), UsedGpuMemory: 1 << 30})
			}
			n.migDevices.SetProcesses(in.UUID, procs)
		}
	}
}

// fakePID is a stable process ID for a pod's workload.
func fakePID(pod types.NamespacedName) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(pod.String()))
	return 1000 + h.Sum32()%4_000_000
}

// podsOnGPUsLocked returns, sorted, the pods holding a device on any of the given GPUs.
// n.mu must be held.
func (n *Node) podsOnGPUsLocked(gpuIndexes map[int]bool) []types.NamespacedName {
	var out []types.NamespacedName
	for key, devs := range n.assigned {
		if slices.ContainsFunc(devs, func(d device) bool { return gpuIndexes[d.gpu] }) {
			out = append(out, key)
		}
	}
	slices.SortFunc(out, comparePodKeys)
	return out
}
