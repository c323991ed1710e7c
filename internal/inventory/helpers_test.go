package inventory_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
)

// now is the fixed clock of every test: the package never reads the real one.
var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

const (
	// h100 is the product name NVML reports for an H100 SXM board.
	h100 = "NVIDIA H100 80GB HBM3"
	// h100Label is the same board as GPU Feature Discovery labels it.
	h100Label = "NVIDIA-H100-80GB-HBM3"
	// nodeA is the node most tests bind their pods to.
	nodeA = "node-a"
)

// list builds a ResourceList from name, quantity pairs.
func list(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// sameList compares resource lists by value, so "1" and "1000m" are the same request.
func sameList(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, qa := range a {
		qb, ok := b[k]
		if !ok || qa.Cmp(qb) != 0 {
			return false
		}
	}
	return true
}

// listString renders a ResourceList in a stable order for failure messages.
func listString(l corev1.ResourceList) string {
	names := make([]string, 0, len(l))
	for k := range l {
		names = append(names, string(k))
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, n := range names {
		q := l[corev1.ResourceName(n)]
		parts[i] = n + "=" + q.String()
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// gpuHost is a Node as the kubelet and GPU Feature Discovery publish it: allocatable CPU,
// memory and pods, and the GPU product label.
func gpuHost(name string, allocatable corev1.ResourceList) corev1.Node {
	if allocatable == nil {
		allocatable = list("cpu", "64", "memory", "512Gi", "pods", "110")
	}
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name,
			v1alpha1.LabelGPUPresent: "true",
			v1alpha1.LabelGPUProduct: h100Label,
		}},
		Status: corev1.NodeStatus{Capacity: allocatable.DeepCopy(), Allocatable: allocatable},
	}
}

// reportOpt changes one thing of a GPUNode report.
type reportOpt func(*v1alpha1.GPUNode)

// report is a GPUNode as a healthy agent writes it: NVMLReady True, read ten seconds ago.
func report(name string, gpus []v1alpha1.GPUStatus, opts ...reportOpt) v1alpha1.GPUNode {
	gn := v1alpha1.GPUNode{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Status: v1alpha1.GPUNodeStatus{
			GPUs:         gpus,
			ObservedTime: ptr.To(metav1.NewTime(now.Add(-10 * time.Second))),
			Conditions: []metav1.Condition{{
				Type: v1alpha1.ConditionNVMLReady, Status: metav1.ConditionTrue, Reason: "Read",
				ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour)),
			}},
		},
	}
	for _, o := range opts {
		o(&gn)
	}
	return gn
}

// nvml sets the NVMLReady condition's status and message.
func nvml(status metav1.ConditionStatus, message string) reportOpt {
	return func(gn *v1alpha1.GPUNode) {
		gn.Status.Conditions[0].Status = status
		gn.Status.Conditions[0].Reason = "Probe"
		gn.Status.Conditions[0].Message = message
	}
}

// noConditions removes every condition, as on a report the agent never finished.
func noConditions() reportOpt {
	return func(gn *v1alpha1.GPUNode) { gn.Status.Conditions = nil }
}

// observedAgo sets when the agent last read NVML; a negative age is in the future.
func observedAgo(d time.Duration) reportOpt {
	return func(gn *v1alpha1.GPUNode) { gn.Status.ObservedTime = ptr.To(metav1.NewTime(now.Add(-d))) }
}

// neverObserved clears observedTime.
func neverObserved() reportOpt {
	return func(gn *v1alpha1.GPUNode) { gn.Status.ObservedTime = nil }
}

// migGPU is a GPU with MIG enabled holding the given instances.
func migGPU(index int32, product string, instances ...v1alpha1.MIGInstance) v1alpha1.GPUStatus {
	return v1alpha1.GPUStatus{
		Index: index, UUID: fmt.Sprintf("GPU-%04d", index), Product: product, PCIDeviceID: "0x233010DE",
		MemoryMiB: 81559, MIGMode: &v1alpha1.MIGModeStatus{Current: "Enabled", Pending: "Enabled"},
		Instances: instances, Sharing: v1alpha1.SharingNone,
	}
}

// wholeGPU is a GPU with MIG disabled, held by the given pods ("namespace/name").
func wholeGPU(index int32, product string, pods ...string) v1alpha1.GPUStatus {
	g := migGPU(index, product)
	g.MIGMode = &v1alpha1.MIGModeStatus{Current: "Disabled", Pending: "Disabled"}
	for _, p := range pods {
		g.Pods = append(g.Pods, ref(p))
	}
	return g
}

// ref parses "namespace/name" into a PodReference.
func ref(key string) v1alpha1.PodReference {
	ns, name, _ := strings.Cut(key, "/")
	return v1alpha1.PodReference{Namespace: ns, Name: name}
}

// nn parses "namespace/name" into a NamespacedName.
func nn(key string) types.NamespacedName {
	ns, name, _ := strings.Cut(key, "/")
	return types.NamespacedName{Namespace: ns, Name: name}
}

// inst is an idle MIG instance at memory slices [start, start+size).
func inst(profile string, start, size int32) v1alpha1.MIGInstance {
	return v1alpha1.MIGInstance{
		Profile:   profile,
		Placement: v1alpha1.SlicePlacement{Start: start, Size: size},
		UUID:      fmt.Sprintf("MIG-%s-%d", profile, start),
	}
}

// heldBy marks an instance as used by a pod ("namespace/name"), as the agent reports it from
// the kubelet PodResources API.
func heldBy(in v1alpha1.MIGInstance, key string) v1alpha1.MIGInstance {
	r := ref(key)
	in.Pod, in.Busy = &r, true
	return in
}

// busy marks an instance as used by a process that is no pod's.
func busy(in v1alpha1.MIGInstance) v1alpha1.MIGInstance {
	in.Busy = true
	return in
}

// podOpt changes one thing of a pod, so a table row reads as the difference it tests.
type podOpt func(*corev1.Pod)

// pod is a running pod of a ReplicaSet in namespace "team", bound to node-a, asking for one CPU
// and 1Gi; key is "name" or "namespace/name".
func pod(key string, opts ...podOpt) corev1.Pod {
	ns, name := "team", key
	if n, rest, ok := strings.Cut(key, "/"); ok {
		ns, name = n, rest
	}
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name),
			Labels:            map[string]string{"app": name},
			CreationTimestamp: metav1.NewTime(now.Add(-time.Hour)),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet",
				Name: name + "-rs", UID: types.UID("rs-" + name), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			NodeName: nodeA,
			Containers: []corev1.Container{{Name: "main", Image: "registry.example/app:1",
				Resources: corev1.ResourceRequirements{Requests: list("cpu", "1", "memory", "1Gi")}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, o := range opts {
		o(&p)
	}
	return p
}

// onNode binds the pod to a node; "" leaves it unbound, as a pending pod is.
func onNode(node string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = node } }

// phase sets the pod's phase.
func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

// pendingUnbound is a pod the scheduler has not placed yet.
func pendingUnbound() podOpt {
	return func(p *corev1.Pod) { p.Spec.NodeName, p.Status.Phase = "", corev1.PodPending }
}

// requests replaces the main container's requests, and sets limits equal for GPU resources as
// the device plugin requires.
func requests(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		r := list(kv...)
		lim := corev1.ResourceList{}
		for k, q := range r {
			if strings.HasPrefix(string(k), "nvidia.com/") {
				lim[k] = q.DeepCopy()
			}
		}
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: r, Limits: lim}
	}
}

// withContainer adds a main container with the given requests.
func withContainer(name string, kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name,
			Resources: corev1.ResourceRequirements{Requests: list(kv...)}})
	}
}

// withInit adds an init container with the given requests.
func withInit(name string, kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: name,
			Resources: corev1.ResourceRequirements{Requests: list(kv...)}})
	}
}

// withPriority sets the pod's resolved priority.
func withPriority(v int32) podOpt { return func(p *corev1.Pod) { p.Spec.Priority = &v } }

// annotated sets one annotation.
func annotated(k, v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

// labelled sets one label.
func labelled(k, v string) podOpt { return func(p *corev1.Pod) { p.Labels[k] = v } }

// ownedBy makes a controller of the given kind the pod's only owner.
func ownedBy(apiVersion, kind, name string) podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name,
			UID: types.UID(kind + "-" + name), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	}
}

// unowned removes every owner reference: a bare pod nothing recreates.
func unowned() podOpt { return func(p *corev1.Pod) { p.OwnerReferences = nil } }

// nonControllerOwner leaves one owner reference that is not a controller.
func nonControllerOwner() podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "cm", UID: "cm"}}
	}
}

// mirror makes the pod the API server's mirror of a static pod, as the kubelet creates it.
func mirror() podOpt {
	return func(p *corev1.Pod) {
		annotated(corev1.MirrorPodAnnotationKey, "3f9a1c")(p)
		annotated("kubernetes.io/config.source", "file")(p)
		ownedBy("v1", "Node", p.Spec.NodeName)(p)
	}
}

// terminating marks the pod as being deleted.
func terminating() podOpt {
	return func(p *corev1.Pod) {
		p.DeletionTimestamp = ptr.To(metav1.NewTime(now.Add(-5 * time.Second)))
		p.DeletionGracePeriodSeconds = ptr.To(int64(30))
	}
}

// withVolume adds a volume of the given source.
func withVolume(name string, src corev1.VolumeSource) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: src})
	}
}

// emptyDir is an emptyDir volume source.
func emptyDir() corev1.VolumeSource {
	return corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
}

// pdbOpt changes one thing of a PodDisruptionBudget.
type pdbOpt func(*policyv1.PodDisruptionBudget)

// pdb is a PodDisruptionBudget in namespace "team" (or the namespace of "namespace/name")
// selecting app=<app>, whose status the disruption controller has computed.
func pdb(key, app string, allowed int32, opts ...pdbOpt) policyv1.PodDisruptionBudget {
	ns, name := "team", key
	if n, rest, ok := strings.Cut(key, "/"); ok {
		ns, name = n, rest
	}
	b := policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 2},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
		Status: policyv1.PodDisruptionBudgetStatus{
			ObservedGeneration: 2, DisruptionsAllowed: allowed,
			CurrentHealthy: 3, DesiredHealthy: 3 - allowed, ExpectedPods: 3,
		},
	}
	for _, o := range opts {
		o(&b)
	}
	return b
}

// staleStatus makes the PDB's spec newer than the status the disruption controller computed.
func staleStatus() pdbOpt {
	return func(b *policyv1.PodDisruptionBudget) { b.Generation = b.Status.ObservedGeneration + 1 }
}

// nilSelector clears the PDB's selector.
func nilSelector() pdbOpt {
	return func(b *policyv1.PodDisruptionBudget) { b.Spec.Selector = nil }
}

// invalidSelector gives the PDB a selector LabelSelectorAsSelector rejects.
func invalidSelector() pdbOpt {
	return func(b *policyv1.PodDisruptionBudget) {
		b.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: "Near", Values: []string{"web"}}}}
	}
}

// nodeNamed finds a node of the snapshot by name or fails the test.
func nodeNamed(t *testing.T, s *inventory.Snapshot, name string) *inventory.Node {
	t.Helper()
	for _, n := range s.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("node %s not in the snapshot", name)
	return nil
}

// podOf finds a pod of a node by "namespace/name" or fails the test.
func podOf(t *testing.T, n *inventory.Node, key string) *inventory.Pod {
	t.Helper()
	p := n.Pod(nn(key))
	if p == nil {
		t.Fatalf("pod %s not on node %s", key, n.Name)
	}
	return p
}

// keys renders pod keys as "namespace/name" strings.
func keys(ks []types.NamespacedName) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.String()
	}
	return out
}

// placed renders instances as "profile@start+size", busy ones with "*" and held ones with
// "<namespace/name>".
func placed(ins []inventory.Instance) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		s := fmt.Sprintf("%s@%d+%d", in.Profile, in.Placement.Start, in.Placement.Size)
		if in.Busy {
			s += "*"
		}
		if in.Pod != nil {
			s += "<" + in.Pod.String() + ">"
		}
		out[i] = s
	}
	return out
}

// builtinProduct looks up a built-in product or fails the test.
func builtinProduct(t *testing.T, name string) *mig.Product {
	t.Helper()
	p, ok := mig.LookupProduct(name)
	if !ok {
		t.Fatalf("no built-in product %q", name)
	}
	return p
}
