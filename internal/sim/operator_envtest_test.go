package sim_test

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/sim"
)

// A config file mig-parted's decoder refuses makes mig-manager refuse every name in it: state
// failed straight away (it validates before it sets pending or pauses anything), an Event
// saying why, no GPU touched. The entry is valid once the file is fixed, and the documented
// retry (unset and set the label) applies it.
func TestMIGManagerRefusesInvalidConfig(t *testing.T) {
	const name = "invalid-h200"
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}})
	good := "version: v1\nmig-configs:\n  gpupool-a:\n" + indent(perGPU(gpu0Two3))
	before := f.gpus(name)
	for _, tc := range []struct{ name, file, want string }{
		{"unknown field", "version: v1\nmig-configs:\n  gpupool-a:\n  - {devices: all, mig-enabled: true, mig-devices: {\"3g.71gb\": 2}, placement: [0, 4]}\n",
			"unexpected field: placement"},
		{"bad version", "version: v2\nmig-configs:\n  gpupool-a:\n" + indent(perGPU(gpu0Two3)), "unknown version: v2"},
		{"negative count", "version: v1\nmig-configs:\n  gpupool-a:\n  - {devices: [0], mig-enabled: true, mig-devices: {\"3g.71gb\": -2}}\n",
			"invalid count"},
		{"devices missing", "version: v1\nmig-configs:\n  gpupool-a:\n  - {mig-enabled: false}\n", "missing required field: devices"},
	} {
		f.setMIGParted(tc.file)
		history := f.watchLabels(name, sim.LabelMIGConfigState, deployDevicePlugin)
		f.flip(name, "gpupool-a")
		f.g.Eventually(f.state(name)).Should(Equal("failed"), tc.name)
		f.g.Eventually(f.events(name, "MIGConfigInvalid")).Should(ContainElement(ContainSubstring(tc.want)), tc.name)
		f.g.Expect(history.of(sim.LabelMIGConfigState)).NotTo(ContainElement("pending"), tc.name)
		f.g.Eventually(func() []string { return history.of(deployDevicePlugin) }).Should(Equal([]string{"true"}), tc.name+": nothing paused")
		f.g.Expect(f.gpus(name)).To(Equal(before), tc.name)
		f.unsetConfig(name)
	}
	f.setMIGParted(good)
	f.flip(name, "gpupool-a")
	f.g.Eventually(f.state(name)).Should(Equal("success"))
	f.g.Expect(f.gpus(name)[0].Layout()).To(Equal(two3g))
}

// An entry that selects every GPU as it already is succeeds at once, without pending or
// pausing anything (mig-parted's assert). NVIDIA-style entries with device-filter lists apply
// to the GPUs whose PCI ID they list and leave the others alone.
func TestMIGManagerAppliesNVIDIAStyleEntries(t *testing.T) {
	const name = "nvidia-style-h200"
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}})
	f.addEntries(map[string]string{
		"all-1g.18gb": "- devices: all\n  mig-enabled: true\n  mig-devices:\n    \"1g.18gb\": 7\n",
		"all-balanced": `# H100-80GB, H800-80GB, A100-80GB, A800-80GB
- device-filter: ["0x233010DE", "0x233110DE", "0x232210DE", "0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE", "0x232410DE"]
  devices: all
  mig-enabled: true
  mig-devices:
    "1g.10gb": 2
    "2g.20gb": 1
    "3g.40gb": 1
# H200 141GB, H200 NVL
- device-filter: ["0x233510DE", "0x233B10DE"]
  devices: all
  mig-enabled: true
  mig-devices:
    "1g.18gb": 2
    "2g.35gb": 1
    "3g.71gb": 1
`,
		"h100-only": "- device-filter: \"0x233010DE\"\n  devices: all\n  mig-enabled: false\n",
	})
	history := f.watchLabels(name, sim.LabelMIGConfigState, deployDevicePlugin)
	f.flip(name, "all-1g.18gb")
	f.g.Eventually(f.state(name)).Should(Equal("success"))
	f.g.Eventually(func() []string { return history.of(sim.LabelMIGConfigState) }).Should(Equal([]string{"success", "", "success"}), "already applied: no pending")
	f.g.Eventually(func() []string { return history.of(deployDevicePlugin) }).Should(Equal([]string{"true"}))

	f.flip(name, "all-balanced")
	f.g.Eventually(f.state(name)).Should(Equal("success"))
	balanced := mig.Layout{"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
	f.g.Expect(f.gpus(name)[0].Layout()).To(Equal(balanced))
	f.g.Expect(f.gpus(name)[1].Layout()).To(Equal(balanced))

	// An entry whose filter selects no GPU of the node changes nothing; mig-parted still goes
	// through pending (its assert finds GPUs the entry does not cover) and reports success.
	f.flip(name, "h100-only")
	f.g.Eventually(f.state(name)).Should(Equal("success"))
	f.g.Expect(f.gpus(name)[0].Layout()).To(Equal(balanced))
}

// The simulated operands read the ConfigMaps the ClusterPolicy names only in its
// status.namespace, as the GPU Operator mounts them into its DaemonSets: ConfigMaps of those
// names elsewhere are not read, and until the namespace holds them mig-manager does not run (no
// state is written) and the device plugin advertises nothing.
func TestOperandsReadOnlyTheOperatorNamespace(t *testing.T) {
	const name = "ns-h200"
	ctx := context.Background()
	const operatorNS = "gpu-operator-sim-test"
	if err := startEnv(t).Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNS}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	f := startSim(t, sim.Options{Nodes: []sim.NodeSpec{h200Node(name)}}, testOptions{noDevicePluginConfigMap: true})
	// The fixture's ConfigMaps are in configNamespace; point the ClusterPolicy elsewhere.
	cp := sim.ClusterPolicyObject(f.policy)
	f.g.Expect(f.c.Get(ctx, types.NamespacedName{Name: f.policy.Name}, cp)).To(Succeed())
	cp.Object["status"] = map[string]any{"namespace": operatorNS}
	f.g.Expect(f.c.Status().Update(ctx, cp)).To(Succeed())
	f.setDevicePluginConfig(map[string]string{exclusiveKey: exclusiveConfig})
	f.addEntries(map[string]string{"gpupool-a": perGPU(gpu0Two3)})

	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(map[corev1.ResourceName]string{res1g: "0"}))
	f.g.Eventually(f.events(name, "DevicePluginConfigInvalid")).Should(ContainElement(
		ContainSubstring("ConfigMap " + operatorNS + "/" + f.dp.Name + " does not exist")))
	before := f.gpus(name)
	f.flip(name, "gpupool-a")
	f.g.Consistently(f.state(name), "500ms", pollInterval).Should(BeEmpty(), "mig-manager cannot start")
	f.g.Expect(f.gpus(name)).To(Equal(before))

	for _, cm := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: f.dp.Name}, Data: map[string]string{exclusiveKey: exclusiveConfig}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: f.cm.Name},
			Data: map[string]string{"config.yaml": "version: v1\nmig-configs:\n  gpupool-a:\n" + indent(perGPU(gpu0Two3))}},
	} {
		f.g.Expect(f.c.Create(ctx, cm)).To(Succeed())
		t.Cleanup(func() { _ = f.c.Delete(context.Background(), cm) })
	}
	f.g.Eventually(f.state(name)).Should(Equal("success"))
	f.g.Expect(f.gpus(name)[0].Layout()).To(Equal(two3g))
	f.g.Eventually(f.gpuResources(name, "allocatable")).Should(Equal(map[corev1.ResourceName]string{res1g: "7", res3g: "2"}))
}

// indent puts a YAML list of specs under an entry name.
func indent(s string) string {
	out := ""
	for line := range strings.SplitSeq(strings.TrimRight(s, "\n"), "\n") {
		out += "    " + line + "\n"
	}
	return out
}
