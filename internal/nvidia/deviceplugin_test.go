package nvidia_test

import (
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// TestDevicePluginConfigRoundTrips guards that every sharing setting gpupool writes reads back
// as itself.
func TestDevicePluginConfigRoundTrips(t *testing.T) {
	for _, s := range []v1alpha1.SharingConfig{
		{Mode: v1alpha1.SharingNone},
		{Mode: v1alpha1.SharingTimeSlicing, Replicas: 2},
		{Mode: v1alpha1.SharingTimeSlicing, Replicas: 48},
		{Mode: v1alpha1.SharingMPS, Replicas: 4},
	} {
		g := NewWithT(t)
		data, err := nvidia.DevicePluginConfig(s)
		g.Expect(err).NotTo(HaveOccurred())
		got, err := nvidia.ParseDevicePluginConfig(data)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(Equal(s))
	}
}

// TestDevicePluginConfigNamesRoundTrip guards that a config key alone says its setting.
func TestDevicePluginConfigNamesRoundTrip(t *testing.T) {
	g := NewWithT(t)
	for _, s := range []v1alpha1.SharingConfig{{Mode: v1alpha1.SharingNone}, {Mode: v1alpha1.SharingTimeSlicing, Replicas: 2},
		{Mode: v1alpha1.SharingMPS, Replicas: 48}} {
		back, ok := nvidia.ParseDevicePluginConfigName(nvidia.DevicePluginConfigName(s))
		g.Expect(ok).To(BeTrue())
		g.Expect(back).To(Equal(s))
	}
	g.Expect(nvidia.DevicePluginConfigName(v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: 4})).To(Equal("gpupool-ts-4"))
	g.Expect(nvidia.DevicePluginConfigName(v1alpha1.SharingConfig{Mode: v1alpha1.SharingMPS, Replicas: 8})).To(Equal("gpupool-mps-8"))
	g.Expect(nvidia.DevicePluginConfigName(v1alpha1.SharingConfig{})).To(Equal(nvidia.DevicePluginNone))
	g.Expect(nvidia.DevicePluginNone).To(Equal("gpupool-none"))
	for _, bad := range []string{"gpupool-ts-1", "gpupool-mps-007", "gpupool-ts-", "all-disabled", "gpupool-mps-49"} {
		_, ok := nvidia.ParseDevicePluginConfigName(bad)
		g.Expect(ok).To(BeFalse(), bad)
	}
}

// TestDevicePluginConfigIsTheDevicePluginsSchema guards the exact fields k8s-device-plugin reads:
// renames to .shared, one mode, and the mixed MIG strategy gpupool plans with; time-slicing
// shares MIG devices too, MPS (which the plugin refuses on MIG devices) only whole GPUs.
func TestDevicePluginConfigIsTheDevicePluginsSchema(t *testing.T) {
	g := NewWithT(t)
	data, err := nvidia.DevicePluginConfig(v1alpha1.SharingConfig{Mode: v1alpha1.SharingMPS, Replicas: 4})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(data)).To(Equal(`flags:
  migStrategy: mixed
sharing:
  mps:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
version: v1
`))
	data, err = nvidia.DevicePluginConfig(v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: 4})
	g.Expect(err).NotTo(HaveOccurred())
	var f nvidia.DevicePluginFile
	g.Expect(yaml.UnmarshalStrict(data, &f)).To(Succeed())
	g.Expect(f.Sharing.TimeSlicing.RenameByDefault).To(BeTrue())
	g.Expect(f.Sharing.TimeSlicing.Resources).To(ContainElements(
		nvidia.ReplicatedResource{Name: "nvidia.com/gpu", Replicas: 4},
		nvidia.ReplicatedResource{Name: "nvidia.com/mig-1g.18gb", Replicas: 4},
		nvidia.ReplicatedResource{Name: "nvidia.com/mig-3g.40gb", Replicas: 4},
		// A name some drivers give the 80GB parts' 7g profile (mig.Profile.Aliases).
		nvidia.ReplicatedResource{Name: "nvidia.com/mig-7g.79gb", Replicas: 4}))
	g.Expect(f.Sharing.TimeSlicing.Resources[0].Name).To(Equal("nvidia.com/gpu"))
}

// TestDevicePluginConfigRefusesWhatThePluginWouldNot guards strict reading and the replica bounds.
func TestDevicePluginConfigRefusesWhatThePluginWouldNot(t *testing.T) {
	g := NewWithT(t)
	_, err := nvidia.DevicePluginConfig(v1alpha1.SharingConfig{Mode: v1alpha1.SharingMPS, Replicas: 1})
	g.Expect(err).To(MatchError(ContainSubstring("replicas must be between 2 and 256")))
	_, err = nvidia.DevicePluginConfig(v1alpha1.SharingConfig{Mode: v1alpha1.SharingMPS, Replicas: 49})
	g.Expect(err).To(MatchError(ContainSubstring("at most 48 clients")))
	_, err = nvidia.DevicePluginConfig(v1alpha1.SharingConfig{Mode: v1alpha1.SharingTimeSlicing, Replicas: 49})
	g.Expect(err).NotTo(HaveOccurred(), "time-slicing has no such bound")
	_, err = nvidia.ParseDevicePluginConfig([]byte("version: v1\nflags: {migStrategy: mixed}\nsharing:\n  timeSlicing: {resources: []}\n  mps: {resources: []}\n"))
	g.Expect(err).To(MatchError(ContainSubstring("one sharing mode per node")))
	_, err = nvidia.ParseDevicePluginConfig([]byte("version: v1\nflags: {migStrategy: mixed, typo: 1}\n"))
	g.Expect(err).To(HaveOccurred(), "unknown fields are errors")
}

// TestUpdateDevicePluginConfigMapCollectsOnlyUnusedKeysOfOurs guards garbage collection: the
// user's keys and every key a node still names stay; gpupool-none is always there.
func TestUpdateDevicePluginConfigMapCollectsOnlyUnusedKeysOfOurs(t *testing.T) {
	g := NewWithT(t)
	current := map[string]string{"user-default": "version: v1\n", "gpupool-ts-4": "old", "gpupool-ts-8": "old"}
	next, err := nvidia.UpdateDevicePluginConfigMap(current,
		[]v1alpha1.SharingConfig{{Mode: v1alpha1.SharingMPS, Replicas: 2}}, []string{"gpupool-ts-4"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(next).To(HaveKeyWithValue("user-default", "version: v1\n"))
	g.Expect(next).To(HaveKeyWithValue("gpupool-ts-4", "old"), "in use: kept as it is")
	g.Expect(next).NotTo(HaveKey("gpupool-ts-8"))
	g.Expect(next).To(HaveKey("gpupool-none"))
	g.Expect(next).To(HaveKey("gpupool-mps-2"))
}
