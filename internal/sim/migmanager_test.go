package sim

import "testing"

// mig-manager acts on every change of nvidia.com/mig.config to a non-empty value, including
// back to a value it applied before (unset+set), and on nothing else: repeats of the same
// value and removals of the label are no requests.
func TestLabelChanged(t *testing.T) {
	m := migManagerMemory{current: "all-1g"}
	for i, step := range []struct {
		value string
		want  bool
	}{
		{"all-1g", false},
		{"gpupool-a", true},
		{"gpupool-a", false},
		{"", false},
		{"gpupool-a", true},
		{"gpupool-b", true},
		{"all-1g", true},
	} {
		if got := m.labelChanged(step.value); got != step.want {
			t.Errorf("step %d: labelChanged(%q) = %v, want %v", i, step.value, got, step.want)
		}
	}
	if value, seq, begun, _, ok := m.next(); !ok || value != "all-1g" || seq != 4 || begun {
		t.Errorf("next() = %q, %d, begun %v, ok %v; want all-1g, 4, not begun", value, seq, begun, ok)
	}
	m.finish(4)
	if _, _, _, _, ok := m.next(); ok {
		t.Error("next() after finishing the latest change still has work")
	}
}

// A restart of mig-manager (a new value of AnnotationRestartMIGManager) applies the label's
// current value again, even one already applied; the same value again, an empty one, or a
// restart on a node without the label, request nothing.
func TestRestarted(t *testing.T) {
	m := migManagerMemory{current: "gpupool-a", seq: 1, handled: 1}
	for i, step := range []struct {
		value string
		want  bool
	}{
		{"", false},
		{"1", true},
		{"1", false},
		{"", false},
		{"2", true},
	} {
		if got := m.restarted(step.value); got != step.want {
			t.Errorf("step %d: restarted(%q) = %v, want %v", i, step.value, got, step.want)
		}
	}
	if value, seq, _, _, ok := m.next(); !ok || value != "gpupool-a" || seq != 3 {
		t.Errorf("next() = %q, %d, ok %v; want gpupool-a, 3", value, seq, ok)
	}
	unlabelled := migManagerMemory{}
	if unlabelled.restarted("1") {
		t.Error("a restart on a node without nvidia.com/mig.config requested an apply")
	}
}

// mig-manager stops every deployed GPU client while it changes MIG settings, third-party ones
// included (mig-parted v0.15.0, gpuClientDeployLabel: how NVIDIA's DRA kubelet plugin gets to
// rescan), and leaves alone an operand switched off ("false") or not deployed (no label).
func TestPauseLabelsStopsEveryDeployedClient(t *testing.T) {
	labels := map[string]string{
		labelDevicePluginDeploy:                     "true",
		labelDeployClient:                           "true",
		labelDeployPrefix + "dcgm-exporter":         "false",
		labelDeployPrefix + "mig-manager":           "true",
		labelDeployPrefix + "gpu-feature-discovery": pausedValue,
	}
	paused := (&reconciler{}).pauseLabels(&Node{}, labels, Faults{})
	got := map[string]string{}
	for k, v := range paused {
		got[k] = *v
	}
	want := map[string]string{labelDevicePluginDeploy: pausedValue, labelDeployClient: pausedValue}
	if len(got) != len(want) || got[labelDevicePluginDeploy] != pausedValue || got[labelDeployClient] != pausedValue {
		t.Fatalf("paused %v, want %v", got, want)
	}
	for k, v := range got {
		labels[k] = v
	}
	restored := restoreLabels(labels)
	if len(restored) != 3 || *restored[labelDeployClient] != "true" || *restored[labelDevicePluginDeploy] != "true" {
		t.Fatalf("restored %d labels (%v), want the device plugin, GPU Feature Discovery and the client back to true", len(restored), restored)
	}
}
