package inventory_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
)

// now is the fixtures' clock: the package never reads the real one.
var now = fixture.Now

const (
	// h100 is the product name NVML reports for an H100 SXM board.
	h100 = "NVIDIA H100 80GB HBM3"
	// h100Label is the same board as GPU Feature Discovery labels it.
	h100Label = "NVIDIA-H100-80GB-HBM3"
	// nodeA is the node most tests bind their pods to.
	nodeA = "node-a"
)

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

// reportOpt changes one thing of a GPUNode report.
type reportOpt func(*v1alpha1.GPUNode)

// report is fixture.Report changed by opts.
func report(name string, gpus []v1alpha1.GPUStatus, opts ...reportOpt) v1alpha1.GPUNode {
	gn := fixture.Report(name, gpus...)
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

// nn parses "namespace/name" into a NamespacedName.
func nn(key string) types.NamespacedName { return fixture.Key(key, "") }

// pod is a running pod of a ReplicaSet (fixture.Pod) bound to node-a, asking for one CPU and
// 1Gi; key is "name" or "namespace/name".
func pod(key string, opts ...fixture.PodOption) corev1.Pod {
	return fixture.Pod(key, append([]fixture.PodOption{fixture.Running(nodeA), fixture.Requests("cpu", "1", "memory", "1Gi")}, opts...)...)
}

// onNode binds the pod to a node; "" leaves it unbound, as a pending pod is.
func onNode(node string) fixture.PodOption { return func(p *corev1.Pod) { p.Spec.NodeName = node } }

// phase sets the pod's phase.
func phase(ph corev1.PodPhase) fixture.PodOption { return func(p *corev1.Pod) { p.Status.Phase = ph } }

// pendingUnbound is a pod the scheduler has not placed yet.
func pendingUnbound() fixture.PodOption {
	return func(p *corev1.Pod) { p.Spec.NodeName, p.Status.Phase = "", corev1.PodPending }
}

// nonControllerOwner leaves one owner reference that is not a controller.
func nonControllerOwner() fixture.PodOption {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "cm", UID: "cm"}}
	}
}

// mirror makes the pod the API server's mirror of a static pod, as the kubelet creates it.
func mirror() fixture.PodOption {
	return func(p *corev1.Pod) {
		fixture.Annotated(corev1.MirrorPodAnnotationKey, "3f9a1c")(p)
		fixture.Annotated("kubernetes.io/config.source", "file")(p)
		fixture.OwnedBy("v1", "Node", p.Spec.NodeName)(p)
	}
}

// terminating marks the pod as being deleted.
func terminating() fixture.PodOption {
	return func(p *corev1.Pod) {
		p.DeletionTimestamp = ptr.To(metav1.NewTime(now.Add(-5 * time.Second)))
		p.DeletionGracePeriodSeconds = ptr.To(int64(30))
	}
}

// withVolume adds a volume of the given source.
func withVolume(name string, src corev1.VolumeSource) fixture.PodOption {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: src})
	}
}

// emptyDir is an emptyDir volume source.
func emptyDir() corev1.VolumeSource {
	return corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
}

// grace sets spec.terminationGracePeriodSeconds; a negative value leaves it unset.
func grace(seconds int64) fixture.PodOption {
	return func(p *corev1.Pod) {
		p.Spec.TerminationGracePeriodSeconds = nil
		if seconds >= 0 {
			p.Spec.TerminationGracePeriodSeconds = ptr.To(seconds)
		}
	}
}

// ephemeral is a generic ephemeral volume source: a PersistentVolumeClaim made for the pod.
func ephemeral() corev1.VolumeSource {
	return corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}}}}
}

// pdbOpt changes one thing of a PodDisruptionBudget.
type pdbOpt func(*policyv1.PodDisruptionBudget)

// pdb is fixture.PDB changed by opts.
func pdb(key, app string, allowed int32, opts ...pdbOpt) policyv1.PodDisruptionBudget {
	b := fixture.PDB(key, app, allowed)
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
