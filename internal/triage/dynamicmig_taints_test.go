package triage_test

import (
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	sigsyaml "sigs.k8s.io/yaml"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/snapshot"
	"github.com/gpupool/gpupool/internal/triage"
)

// taintRules are DeviceTaintRules, one per 1g.18gb partition of the DynamicMIG GPU over memory
// slices 4-7. reserve makes them the policy h200-pool's reserve rules holding 3g.71gb at 4-7,
// as controllers/policy_reserve.go writes them; otherwise they are an admin's maintenance rules.
func taintRules(t *testing.T, s *snapshot.Snapshot, reserve bool) []resourcev1.DeviceTaintRule {
	t.Helper()
	var out []resourcev1.DeviceTaintRule
	for _, sl := range dmSlices(t) {
		for _, d := range sl.Spec.Devices {
			if a := d.Attributes["profile"]; a.StringValue == nil || *a.StringValue != "1g.18gb" {
				continue
			}
			over := false
			for c := range d.ConsumesCounters[0].Counters {
				over = over || c == "memory-slice-4" || c == "memory-slice-5" || c == "memory-slice-6" || c == "memory-slice-7"
			}
			if !over {
				continue
			}
			r := resourcev1.DeviceTaintRule{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceTaintRule"},
				ObjectMeta: metav1.ObjectMeta{Name: "maintenance-" + d.Name},
				Spec: resourcev1.DeviceTaintRuleSpec{
					DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr.To("gpu.nvidia.com"), Pool: ptr.To(dmNode), Device: ptr.To(d.Name)},
					Taint:          resourcev1.DeviceTaint{Key: "example.com/maintenance", Effect: resourcev1.DeviceTaintEffectNoSchedule}}}
			if reserve {
				r.Name = "gpupool-reserve-" + strings.ReplaceAll(d.Name, "gpu-0-mig-", "")
				r.Labels = map[string]string{"gpupool.io/reserve": "h200-pool"}
				r.OwnerReferences = []metav1.OwnerReference{{APIVersion: "gpupool.io/v1alpha1", Kind: "GPUPoolPolicy",
					Name: "h200-pool", UID: s.Policies[0].UID}}
				r.Spec.Taint = resourcev1.DeviceTaint{Key: "gpupool.io/reserve", Value: "3g.71gb", Effect: resourcev1.DeviceTaintEffectNoSchedule}
			}
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		t.Fatal("no 1g.18gb partition over memory slices 4-7")
	}
	return out
}

// throughFile writes the policies and rules out as kubectl get -o yaml would and reads them
// back, so the DeviceTaintRules reach triage the way a saved snapshot brings them.
func throughFile(t *testing.T, s *snapshot.Snapshot, rules []resourcev1.DeviceTaintRule) []resourcev1.DeviceTaintRule {
	t.Helper()
	var items []any
	for _, p := range s.Policies {
		p.APIVersion, p.Kind = v1alpha1.GroupVersion.String(), "GPUPoolPolicy"
		items = append(items, p)
	}
	for _, r := range rules {
		items = append(items, r)
	}
	data, err := sigsyaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		t.Fatal(err)
	}
	read, err := snapshot.Parse(data)
	if err != nil {
		t.Fatalf("reading the rules back: %v", err)
	}
	return read.TaintRules
}

// A 1g claim pod on a DynamicMIG H200 whose claims fill memory slices 0-3: free slices 4-7 are
// its to take unless a DeviceTaintRule taints their partitions. The policy's reserve (standby
// shape nvidia.com/mig-3g.71gb) is named as what holds it, with no move promised; anyone
// else's rule reads as the taint it is.
func TestDynamicMIGTaints(t *testing.T) {
	for _, tc := range []struct {
		name               string
		starts             []int
		rules              string // "", "reserve" or "maintenance"
		file               bool   // the rules come through a snapshot file
		layer              triage.Layer
		blocking           string
		fit                inventory.FitKind
		reasonHas, nextHas []string
	}{{
		name: "no rule: slices 4-7 are free to take", starts: []int{0, 1, 2, 3},
		layer: triage.LayerScheduling, blocking: "none", fit: inventory.FitFree,
		reasonHas: []string{"1g.18gb fits GPU 0 at memory slice 4"},
	}, {
		name: "the policy's reserve holds 4-7: no move, the shape named", starts: []int{0, 1, 2, 3}, rules: "reserve",
		layer: triage.LayerPlacement, blocking: "reserve headroom", fit: inventory.FitStranded,
		reasonHas: []string{"on DynamicMIG node dm-node GPU 0, 1g.18gb would fit at memory slice 4",
			"policy h200-pool's standby headroom (shape nvidia.com/mig-3g.71gb, minFree 1) holds the free placement at memory slices 4-7 for a 3g.71gb claim",
			"DeviceTaintRule gpupool-reserve-"},
		nextHas: []string{"gpupool moves no claim for it", "lower minFree of standby shape nvidia.com/mig-3g.71gb in GPUPoolPolicy h200-pool"},
	}, {
		name: "the same, read from a snapshot file", starts: []int{0, 1, 2, 3}, rules: "reserve", file: true,
		layer: triage.LayerPlacement, blocking: "reserve headroom", fit: inventory.FitStranded,
		reasonHas: []string{"policy h200-pool's standby headroom (shape nvidia.com/mig-3g.71gb, minFree 1)"},
	}, {
		name: "the reserve leaves slice 3 free: the scheduler's to take", starts: []int{0, 1, 2}, rules: "reserve",
		layer: triage.LayerScheduling, blocking: "none", fit: inventory.FitFree,
		reasonHas: []string{"1g.18gb fits GPU 0 at memory slice 3"},
	}, {
		name: "an admin's rule taints 4-7: the taint is named, not a reserve", starts: []int{0, 1, 2, 3}, rules: "maintenance",
		layer: triage.LayerPlacement, blocking: "memory-slice placement", fit: inventory.FitStranded,
		reasonHas: []string{"memory slice 4 is free but DeviceTaintRule maintenance-"},
		nextHas:   []string{"moving pod team/small-0 frees memory slice 0 "},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := load(t, "fragmented-h200.yaml")
			withDynamicMIG(t, s, "1g.18gb", tc.starts...)
			s.Policies[0].Spec.Shapes = append(s.Policies[0].Spec.Shapes, v1alpha1.StandbyShape{Resource: "nvidia.com/mig-3g.71gb", MinFree: 1})
			if tc.rules != "" {
				s.TaintRules = taintRules(t, s, tc.rules == "reserve")
			}
			if tc.file {
				s.TaintRules = throughFile(t, s, s.TaintRules)
			}
			v := explain(t, s, nil, "team", "big")
			if v.Layer != tc.layer || v.Blocking != tc.blocking {
				t.Fatalf("layer %s blocking %q, want %s %q\nreason: %s\nnext: %s", v.Layer, v.Blocking, tc.layer, tc.blocking, v.Reason, v.Next)
			}
			for _, w := range tc.reasonHas {
				if !strings.Contains(v.Reason, w) {
					t.Errorf("reason %q lacks %q", v.Reason, w)
				}
				// A free placement closed by a taint is named once, not listed as held by nobody.
				if strings.Contains(v.Reason, "holds ;") || strings.HasSuffix(v.Reason, "holds ") {
					t.Errorf("reason %q lists a placement held by nobody", v.Reason)
				}
			}
			for _, w := range tc.nextHas {
				if !strings.Contains(v.Next, w) {
					t.Errorf("next %q lacks %q", v.Next, w)
				}
			}
			if len(v.SliceMaps) != 1 || v.SliceMaps[0].Fit != tc.fit {
				t.Fatalf("slice maps %+v, want one with fit %s", v.SliceMaps, tc.fit)
			}
		})
	}
}
