package triage

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/gpupool/gpupool/internal/inventory"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/snapshot"
)

// cudaOOM matches what CUDA runtimes and the common frameworks print when a device allocation
// fails: the CUDA runtime's and driver's error names, PyTorch's and TensorFlow's messages.
var cudaOOM = regexp.MustCompile(`(?i)CUDA out of memory|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY|` +
	`OutOfMemoryError|RESOURCE_EXHAUSTED: OOM|failed to allocate .* on device`)

// explainRunning checks that a bound pod holds the device it asked for, and whether its
// containers report CUDA out-of-memory, which repartitioning does not fix.
func explainRunning(s *snapshot.Snapshot, pod *corev1.Pod, v *Verdict) {
	held := heldDevices(s, pod)
	wanted := wantedProfiles(s, pod)
	v.Layer, v.Blocking = LayerRunning, "none"
	switch {
	case len(held) == 0:
		v.Reason = fmt.Sprintf("bound to node %s; its agent reports no GPU or MIG instance held by this pod (not reported yet, "+
			"or the agent cannot see its processes)", pod.Spec.NodeName)
	case len(wanted) > 0 && !slices.ContainsFunc(held, func(h string) bool { return slices.Contains(wanted, h) }):
		v.Reason = fmt.Sprintf("bound to node %s and holds %s, but asked for %s", pod.Spec.NodeName, strings.Join(held, ", "), strings.Join(wanted, ", "))
		v.Blocking = "device"
	default:
		v.Reason = fmt.Sprintf("bound to node %s and holds %s, as it asked", pod.Spec.NodeName, strings.Join(held, ", "))
	}
	v.Next = "nothing to do"
	if containers := oomContainers(pod); len(containers) > 0 {
		v.Layer, v.Blocking = LayerAllocator, "CUDA memory"
		v.Reason += fmt.Sprintf("; container(s) %s report CUDA out-of-memory", strings.Join(containers, ", "))
		v.Next = "this is the allocator layer, not the partitioning: repartitioning frees no memory inside the pod's device. " +
			"Request a larger profile only if the workload's peak exceeds the device's memory"
		v.Evidence = []string{
			fmt.Sprintf("kubectl logs -n %s %s -c %s --previous: the failed allocation's size and the allocator's reserved vs allocated memory",
				pod.Namespace, pod.Name, containers[0]),
			fmt.Sprintf("kubectl exec -n %s %s -- nvidia-smi -q -d MEMORY: the device's total and used framebuffer", pod.Namespace, pod.Name),
			"the workload's peak device memory (PyTorch: torch.cuda.max_memory_allocated) against the device's total",
			"fragmentation inside the allocator: PyTorch's memory summary (torch.cuda.memory_summary); PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces it",
		}
	}
}

// heldDevices lists what the pod's node's agent reports the pod holds: MIG profiles, or "GPU
// <index>" for a whole GPU.
func heldDevices(s *snapshot.Snapshot, pod *corev1.Pod) []string {
	i := slices.IndexFunc(s.GPUNodes, func(g v1alpha1.GPUNode) bool { return g.Name == pod.Spec.NodeName })
	if i < 0 {
		return nil
	}
	ref := v1alpha1.PodReference{Namespace: pod.Namespace, Name: pod.Name}
	// Devices NVIDIA's DRA driver allocated to the pod's claims: the agent attributes only the
	// device plugin's.
	claimed := inventory.DRAHolders(s.Claims, s.Slices)
	heldByClaim := func(uuid string) bool {
		// Every pod a shared claim is reserved for holds its device.
		return slices.Contains(claimed[uuid].Pods, types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
	}
	var out []string
	for _, gpu := range s.GPUNodes[i].Status.GPUs {
		for _, inst := range gpu.Instances {
			if (inst.Pod != nil && *inst.Pod == ref) || (inst.UUID != "" && heldByClaim(inst.UUID)) {
				out = append(out, inst.Profile)
			}
		}
		if len(gpu.Instances) == 0 && (slices.Contains(gpu.Pods, ref) || (gpu.UUID != "" && heldByClaim(gpu.UUID))) {
			out = append(out, fmt.Sprintf("GPU %d", gpu.Index))
		}
	}
	return out
}

// wantedProfiles are the MIG profiles the pod asks for; empty when it asks for whole or shared
// GPUs, whose holding the agent reports by GPU.
func wantedProfiles(s *snapshot.Snapshot, pod *corev1.Pod) []string {
	var out []string
	req, _, _ := requestsOf(s, pod)
	for name := range req {
		if kind, profile, ok := demand.Classify(name); ok && kind == demand.KindMIG {
			out = append(out, profile)
		}
	}
	return out
}

// oomContainers names the containers whose current or last termination reports CUDA OOM.
func oomContainers(pod *corev1.Pod) []string {
	var out []string
	for _, st := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		for _, t := range []*corev1.ContainerStateTerminated{st.State.Terminated, st.LastTerminationState.Terminated} {
			if t != nil && (cudaOOM.MatchString(t.Message) || cudaOOM.MatchString(t.Reason)) {
				out = append(out, st.Name)
				break
			}
		}
	}
	return out
}
