package snapshot

import (
	"strings"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
)

// taintRuleItem is a DeviceTaintRule as kubectl get devicetaintrules -o yaml prints it: the
// policy's reserve rule on one partition of node-1.
const taintRuleItem = `- apiVersion: resource.k8s.io/v1
  kind: DeviceTaintRule
  metadata:
    name: gpupool-reserve-0123456789abcdef0123
    labels: {gpupool.io/reserve: pool-a}
    creationTimestamp: "2026-11-29T11:00:00Z"
  spec:
    deviceSelector: {driver: gpu.nvidia.com, pool: node-1, device: gpu-0-mig-1g18gb-19-4}
    taint: {key: gpupool.io/reserve, value: 3g.71gb, effect: NoSchedule, timeAdded: "2026-11-29T12:30:00Z"}
`

// A snapshot's DeviceTaintRules are read, not ignored, so triage can see a tainted partition;
// their taint's timeAdded counts toward the snapshot's newest time, and a rule without a name
// is refused as the API server would refuse it.
func TestReadDeviceTaintRules(t *testing.T) {
	snap, err := Parse([]byte(list(policyItem, nodeItem, taintRuleItem)))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(snap.TaintRules) != 1 || snap.IgnoredCount() != 0 {
		t.Fatalf("%d taint rules, ignored %v; want the one rule read", len(snap.TaintRules), snap.Ignored)
	}
	r := snap.TaintRules[0]
	if sel := r.Spec.DeviceSelector; sel == nil || sel.Device == nil || *sel.Device != "gpu-0-mig-1g18gb-19-4" ||
		r.Spec.Taint.Effect != resourcev1.DeviceTaintEffectNoSchedule || r.Spec.Taint.Value != "3g.71gb" {
		t.Errorf("rule read as %+v", r.Spec)
	}
	if want := time.Date(2026, 11, 29, 12, 30, 0, 0, time.UTC); !snap.Newest.Equal(want) {
		t.Errorf("newest %s, want %s (the taint's timeAdded)", snap.Newest, want)
	}

	_, err = Parse([]byte(list(policyItem, strings.Replace(taintRuleItem, "name: gpupool-reserve-0123456789abcdef0123", "generateName: x-", 1))))
	if want := "item 1 (DeviceTaintRule): metadata.name: required"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	_, err = Parse([]byte(list(policyItem, strings.Replace(taintRuleItem, "resource.k8s.io/v1", "resource.k8s.io/v1alpha3", 1))))
	if err == nil || !strings.Contains(err.Error(), "want resource.k8s.io/v1") {
		t.Errorf("error %v, want the version refused", err)
	}
}
