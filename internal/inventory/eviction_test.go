package inventory_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/inventory"
)

func TestEvictionBlockers(t *testing.T) {
	const (
		unmanaged = "not managed by a controller, so nothing would recreate it (policy evictUnmanaged is false)"
		scratch   = `uses emptyDir volume "scratch" whose data eviction would lose (policy evictEmptyDir is false)`
	)
	tests := []struct {
		name     string
		pod      []fixture.PodOption
		pdbs     []policyv1.PodDisruptionBudget
		opts     inventory.Options
		blocker  string
		wantPDBs []string
	}{{
		name: "a ReplicaSet pod without a budget may be evicted",
	}, {
		name:    "do-not-disrupt annotation",
		pod:     []fixture.PodOption{fixture.Annotated(v1alpha1.AnnotationDoNotDisrupt, "true")},
		blocker: "annotated gpupool.io/do-not-disrupt",
	}, {
		name: "do-not-disrupt with a value other than true does not block",
		pod:  []fixture.PodOption{fixture.Annotated(v1alpha1.AnnotationDoNotDisrupt, "false")},
	}, {
		name:    "do-not-disrupt is reported before every other reason",
		pod:     []fixture.PodOption{fixture.Annotated(v1alpha1.AnnotationDoNotDisrupt, "true"), fixture.OwnedBy("apps/v1", "DaemonSet", "agent"), terminating()},
		blocker: "annotated gpupool.io/do-not-disrupt",
	}, {
		name:    "mirror pod of a static pod",
		pod:     []fixture.PodOption{mirror()},
		blocker: "a static (mirror) pod",
	}, {
		name:    "terminating pod",
		pod:     []fixture.PodOption{terminating()},
		blocker: "already terminating",
	}, {
		name:    "DaemonSet pod",
		pod:     []fixture.PodOption{fixture.OwnedBy("apps/v1", "DaemonSet", "nvidia-device-plugin")},
		blocker: "a DaemonSet pod",
	}, {
		name:    "DaemonSet pod even when unmanaged pods may be evicted",
		pod:     []fixture.PodOption{fixture.OwnedBy("apps/v1", "DaemonSet", "nvidia-device-plugin")},
		opts:    inventory.Options{EvictUnmanaged: true, EvictEmptyDir: true},
		blocker: "a DaemonSet pod",
	}, {
		name:    "unmanaged pod with evictUnmanaged false",
		pod:     []fixture.PodOption{fixture.Unowned()},
		blocker: unmanaged,
	}, {
		name:    "an owner that is not a controller does not manage the pod",
		pod:     []fixture.PodOption{nonControllerOwner()},
		blocker: unmanaged,
	}, {
		// Any object may be a pod's controller; a ConfigMap never makes another pod.
		name:    "a controller that is no workload controller",
		pod:     []fixture.PodOption{fixture.OwnedBy("v1", "ConfigMap", "cm")},
		blocker: "controlled by ConfigMap, which gpupool does not know to recreate its pods, so eviction may lose it (policy evictUnmanaged is false; set it if that controller recreates them)",
	}, {
		name:    "a custom controller gpupool cannot vouch for",
		pod:     []fixture.PodOption{fixture.OwnedBy("example.com/v1", "TrainingRun", "run")},
		blocker: "controlled by TrainingRun.example.com, which gpupool does not know to recreate its pods, so eviction may lose it (policy evictUnmanaged is false; set it if that controller recreates them)",
	}, {
		name:    "a kind named like a built-in one in another group",
		pod:     []fixture.PodOption{fixture.OwnedBy("example.com/v1", "ReplicaSet", "rs")},
		blocker: "controlled by ReplicaSet.example.com, which gpupool does not know to recreate its pods, so eviction may lose it (policy evictUnmanaged is false; set it if that controller recreates them)",
	}, {
		name: "a custom controller under evictUnmanaged",
		pod:  []fixture.PodOption{fixture.OwnedBy("example.com/v1", "TrainingRun", "run")},
		opts: inventory.Options{EvictUnmanaged: true},
	}, {
		name: "a StatefulSet pod",
		pod:  []fixture.PodOption{fixture.OwnedBy("apps/v1", "StatefulSet", "db")},
	}, {
		name: "a Job pod",
		pod:  []fixture.PodOption{fixture.OwnedBy("batch/v1", "Job", "train")},
	}, {
		name: "a ReplicationController pod",
		pod:  []fixture.PodOption{fixture.OwnedBy("v1", "ReplicationController", "web")},
	}, {
		name: "unmanaged pod with evictUnmanaged true",
		pod:  []fixture.PodOption{fixture.Unowned()},
		opts: inventory.Options{EvictUnmanaged: true},
	}, {
		name:    "emptyDir with evictEmptyDir false",
		pod:     []fixture.PodOption{withVolume("config", corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}), withVolume("scratch", emptyDir())},
		blocker: scratch,
	}, {
		name: "emptyDir with evictEmptyDir true",
		pod:  []fixture.PodOption{withVolume("scratch", emptyDir())},
		opts: inventory.Options{EvictEmptyDir: true},
	}, {
		// Its claim is owned by the pod and deleted with it: the data is lost as an emptyDir's.
		name:    "generic ephemeral volume with evictEmptyDir false",
		pod:     []fixture.PodOption{withVolume("config", corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}), withVolume("cache", ephemeral())},
		blocker: `uses generic ephemeral volume "cache", whose PersistentVolumeClaim is deleted with the pod, so eviction would lose its data (policy evictEmptyDir is false)`,
	}, {
		name:    "emptyDir is reported before a generic ephemeral volume",
		pod:     []fixture.PodOption{withVolume("cache", ephemeral()), withVolume("scratch", emptyDir())},
		blocker: scratch,
	}, {
		name: "generic ephemeral volume with evictEmptyDir true",
		pod:  []fixture.PodOption{withVolume("cache", ephemeral())},
		opts: inventory.Options{EvictEmptyDir: true},
	}, {
		name: "a grace period shorter than drainTimeout",
		pod:  []fixture.PodOption{grace(600)},
		opts: inventory.Options{DrainTimeout: 15 * time.Minute},
	}, {
		// The kubelet may take the whole grace period: the step would time out after evicting.
		name:    "a grace period as long as drainTimeout",
		pod:     []fixture.PodOption{grace(900)},
		opts:    inventory.Options{DrainTimeout: 15 * time.Minute, EvictUnmanaged: true, EvictEmptyDir: true},
		blocker: "its terminationGracePeriodSeconds (15m0s) is not shorter than the policy's drainTimeout (15m0s), so the step would time out with the pod still terminating (raise spec.disruption.drainTimeout above it)",
	}, {
		name:    "an unset grace period is the API server's 30s",
		pod:     []fixture.PodOption{grace(-1)},
		opts:    inventory.Options{DrainTimeout: 20 * time.Second},
		blocker: "its terminationGracePeriodSeconds (30s) is not shorter than the policy's drainTimeout (20s), so the step would time out with the pod still terminating (raise spec.disruption.drainTimeout above it)",
	}, {
		name: "no drainTimeout checks no grace period",
		pod:  []fixture.PodOption{grace(7200)},
	}, {
		name: "volumes other than emptyDir do not block",
		pod: []fixture.PodOption{
			withVolume("config", corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}),
			withVolume("data", corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}),
		},
	}, {
		name:    "unmanaged is reported before emptyDir",
		pod:     []fixture.PodOption{fixture.Unowned(), withVolume("scratch", emptyDir())},
		blocker: unmanaged,
	}, {
		name:     "PDB with disruptionsAllowed 0",
		pod:      []fixture.PodOption{fixture.Labelled("app", "web")},
		pdbs:     []policyv1.PodDisruptionBudget{pdb("web", "web", 0)},
		blocker:  "PodDisruptionBudget team/web allows no disruption now",
		wantPDBs: []string{"team/web"},
	}, {
		name:     "PDB with a disruption to spare",
		pod:      []fixture.PodOption{fixture.Labelled("app", "web")},
		pdbs:     []policyv1.PodDisruptionBudget{pdb("web", "web", 1)},
		wantPDBs: []string{"team/web"},
	}, {
		// The disruption controller has not recomputed the budget since its spec changed; the
		// Eviction API answers 429 until it has.
		name:     "PDB whose status is older than its spec allows nothing",
		pod:      []fixture.PodOption{fixture.Labelled("app", "web")},
		pdbs:     []policyv1.PodDisruptionBudget{pdb("web", "web", 2, staleStatus())},
		blocker:  "PodDisruptionBudget team/web allows no disruption now",
		wantPDBs: []string{"team/web"},
	}, {
		name: "PDB with a nil selector covers nothing",
		pod:  []fixture.PodOption{fixture.Labelled("app", "web")},
		pdbs: []policyv1.PodDisruptionBudget{pdb("web", "web", 0, nilSelector())},
	}, {
		name: "PDB with an invalid selector covers nothing",
		pod:  []fixture.PodOption{fixture.Labelled("app", "web")},
		pdbs: []policyv1.PodDisruptionBudget{pdb("web", "web", 0, invalidSelector())},
	}, {
		name: "PDB in another namespace covers nothing",
		pod:  []fixture.PodOption{fixture.Labelled("app", "web")},
		pdbs: []policyv1.PodDisruptionBudget{pdb("other/web", "web", 0)},
	}, {
		name: "PDB selecting other labels covers nothing",
		pod:  []fixture.PodOption{fixture.Labelled("app", "web")},
		pdbs: []policyv1.PodDisruptionBudget{pdb("api", "api", 0)},
	}, {
		name:     "a blocked pod still lists its PDBs",
		pod:      []fixture.PodOption{fixture.Labelled("app", "web"), fixture.OwnedBy("apps/v1", "DaemonSet", "web")},
		pdbs:     []policyv1.PodDisruptionBudget{pdb("web", "web", 1)},
		blocker:  "a DaemonSet pod",
		wantPDBs: []string{"team/web"},
	}, {
		// The Eviction API answers 500 "This pod has more than one PodDisruptionBudget, which the
		// eviction subresource does not support." whatever either budget allows, so a pod two
		// budgets cover can never be evicted.
		name: "pod covered by two PDBs, listed sorted, cannot be evicted",
		pod:  []fixture.PodOption{fixture.Labelled("app", "web"), fixture.Labelled("tier", "front")},
		pdbs: []policyv1.PodDisruptionBudget{
			pdb("zeta", "web", 1),
			pdb("alpha", "web", 1, func(b *policyv1.PodDisruptionBudget) {
				b.Spec.Selector.MatchLabels = map[string]string{"tier": "front"}
			}),
		},
		blocker:  "covered by more than one PodDisruptionBudget (team/alpha, team/zeta), which the Eviction API refuses",
		wantPDBs: []string{"team/alpha", "team/zeta"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Now = now
			snap := inventory.Build([]corev1.Node{fixture.GPUHost(nodeA, h100Label, nil)}, []v1alpha1.GPUNode{report(nodeA, nil)},
				[]*corev1.Pod{ptr.To(pod("web-0", tc.pod...))}, tc.pdbs, tc.opts)
			p := podOf(t, snap.Nodes[0], "team/web-0")
			if p.Blocker != tc.blocker {
				t.Errorf("Blocker = %q\nwant      %q", p.Blocker, tc.blocker)
			}
			if p.Evictable != (tc.blocker == "") {
				t.Errorf("Evictable = %v with Blocker %q", p.Evictable, p.Blocker)
			}
			if !slices.Equal(p.PDBs, tc.wantPDBs) {
				t.Errorf("PDBs = %q, want %q", p.PDBs, tc.wantPDBs)
			}
		})
	}
}

func TestDisruptionsAllowed(t *testing.T) {
	tests := []struct {
		name string
		pdbs []policyv1.PodDisruptionBudget
		want map[string]int32
	}{{
		name: "no budgets",
		want: map[string]int32{},
	}, {
		name: "keyed namespace/name, with the computed status",
		pdbs: []policyv1.PodDisruptionBudget{pdb("web", "web", 2), pdb("other/web", "web", 0), pdb("batch/train", "train", 5)},
		want: map[string]int32{"team/web": 2, "other/web": 0, "batch/train": 5},
	}, {
		name: "a budget whose status is older than its spec allows nothing",
		pdbs: []policyv1.PodDisruptionBudget{pdb("web", "web", 2, staleStatus())},
		want: map[string]int32{"team/web": 0},
	}, {
		name: "budgets that select nothing are left out",
		pdbs: []policyv1.PodDisruptionBudget{pdb("nil", "x", 1, nilSelector()), pdb("bad", "x", 1, invalidSelector()), pdb("ok", "x", 1)},
		want: map[string]int32{"team/ok": 1},
	}, {
		name: "a budget that covers no pod is still listed",
		pdbs: []policyv1.PodDisruptionBudget{pdb("nobody", "nobody", 3)},
		want: map[string]int32{"team/nobody": 3},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			snap := inventory.Build([]corev1.Node{fixture.GPUHost(nodeA, h100Label, nil)}, []v1alpha1.GPUNode{report(nodeA, nil)},
				[]*corev1.Pod{ptr.To(pod("web-0", fixture.Labelled("app", "web")))}, tc.pdbs, inventory.Options{Now: now})
			if snap.DisruptionsAllowed == nil {
				t.Fatal("DisruptionsAllowed is nil")
			}
			if !maps.Equal(snap.DisruptionsAllowed, tc.want) {
				t.Errorf("DisruptionsAllowed = %v, want %v", snap.DisruptionsAllowed, tc.want)
			}
		})
	}
}
