package podrecord

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupool/gpupool/internal/fixture"
)

// The record keeps every volume whose data an eviction would lose, whatever the order of the
// pod's volumes: the first emptyDir and the first generic ephemeral volume.
func TestNewKeepsVolumesEvictionWouldLose(t *testing.T) {
	ephemeral := corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{}}}
	empty := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	config := corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}
	cases := []struct {
		name                string
		volumes             []corev1.Volume
		emptyDir, ephemeral string
	}{
		{"none", []corev1.Volume{{Name: "config", VolumeSource: config}}, "", ""},
		{"a generic ephemeral volume only", []corev1.Volume{{Name: "config", VolumeSource: config}, {Name: "cache", VolumeSource: ephemeral}}, "", "cache"},
		{"both, ephemeral first", []corev1.Volume{{Name: "cache", VolumeSource: ephemeral}, {Name: "scratch", VolumeSource: empty},
			{Name: "cache2", VolumeSource: ephemeral}}, "scratch", "cache"},
		{"both, emptyDir first", []corev1.Volume{{Name: "scratch", VolumeSource: empty}, {Name: "cache", VolumeSource: ephemeral}}, "scratch", "cache"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := fixture.Pod("team/x", fixture.Running("gpu-1"))
			p.Spec.Volumes = tc.volumes
			r := New(&p, &Interner{})
			if r.EmptyDirVolume != tc.emptyDir || r.EphemeralVolume != tc.ephemeral {
				t.Errorf("emptyDir %q, ephemeral %q; want %q, %q", r.EmptyDirVolume, r.EphemeralVolume, tc.emptyDir, tc.ephemeral)
			}
			if c := r.DeepCopy(); c.EphemeralVolume != tc.ephemeral {
				t.Errorf("DeepCopy lost the ephemeral volume: %q", c.EphemeralVolume)
			}
		})
	}
}
