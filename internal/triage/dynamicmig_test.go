package triage_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/snapshot"
	"github.com/gpupool/gpupool/internal/triage"
)

const dmNode = "dm-node"

// dmSlices are the ResourceSlices NVIDIA's driver publishes in DynamicMIG mode for one H200
// (driver.go generateSplitResourceSlices, partitions.go): a slice with the GPU's counter set,
// and one with a device per profile and placement consuming its memory-slice counters, plus
// the GPU itself consuming all. Engine counters are left out: they do not bind here.
func dmSlices(t *testing.T) []resourcev1.ResourceSlice {
	p, ok := mig.LookupProduct("NVIDIA H200")
	if !ok {
		t.Fatal("no H200 in the built-in table")
	}
	one := resourcev1.Counter{Value: resource.MustParse("1")}
	pool := resourcev1.ResourcePool{Name: dmNode, ResourceSliceCount: 2}
	spec := func() resourcev1.ResourceSliceSpec {
		return resourcev1.ResourceSliceSpec{Driver: "gpu.nvidia.com", Pool: pool, NodeName: ptr.To(dmNode)}
	}
	all := map[string]resourcev1.Counter{}
	for s := range 8 {
		all[fmt.Sprintf("memory-slice-%d", s)] = one
	}
	counters := resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "dm-counters"}, Spec: spec()}
	counters.Spec.SharedCounters = []resourcev1.CounterSet{{Name: "gpu-0-counter-set", Counters: all}}
	devices := resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "dm-gpu-0"}, Spec: spec()}
	for _, pr := range p.Profiles {
		for _, pl := range pr.Placements {
			c := map[string]resourcev1.Counter{}
			for s := pl.Start; s < pl.Start+pl.Size; s++ {
				c[fmt.Sprintf("memory-slice-%d", s)] = one
			}
			devices.Spec.Devices = append(devices.Spec.Devices, resourcev1.Device{
				Name: fmt.Sprintf("gpu-0-mig-%s-%d-%d", strings.NewReplacer(".", "", "+", "-").Replace(pr.Name), pr.ID, pl.Start),
				Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
					"type": {StringValue: ptr.To("mig")}, "parentUUID": {StringValue: ptr.To("GPU-0000")}, "profile": {StringValue: ptr.To(pr.Name)}},
				ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: "gpu-0-counter-set", Counters: c}}})
		}
	}
	devices.Spec.Devices = append(devices.Spec.Devices, resourcev1.Device{Name: "gpu-0",
		Attributes:       map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"type": {StringValue: ptr.To("gpu")}, "uuid": {StringValue: ptr.To("GPU-0000")}},
		ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: "gpu-0-counter-set", Counters: all}}})
	return []resourcev1.ResourceSlice{counters, devices}
}

// claimPod is a pod asking through claim <name>-gpu for one MIG device of profile, only on the
// DynamicMIG node; allocated at device (and running there) unless device is "".
func claimPod(name, profile, device string) (corev1.Pod, resourcev1.ResourceClaim) {
	claim := resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name + "-gpu"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "mig.nvidia.com", Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
				Expression: fmt.Sprintf("device.attributes['gpu.nvidia.com'].profile == '%s'", profile)}}}}}}}}}
	pod := fixture.Pod("team/"+name, fixture.Unschedulable(fixture.Now.Add(-10*time.Minute)))
	pod.Spec.NodeSelector = map[string]string{"dynamic-mig": "true"}
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim.Name)}}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	if device != "" {
		claim.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: "gpu.nvidia.com", Pool: dmNode, Device: device}}}}
		claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: types.UID("uid-" + name)}}
		pod = fixture.Pod("team/"+name, fixture.Running(dmNode))
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim.Name)}}
		pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	}
	return pod, claim
}

// withDynamicMIG adds to the fragmented H200 sample a one-GPU H200 node that NVIDIA's DRA driver
// serves in DynamicMIG mode, in the sample's pool, holding 1g claims at the given slices, and
// a pending pod "big" asking for one bigProfile through a claim, which may run only there.
func withDynamicMIG(t *testing.T, s *snapshot.Snapshot, bigProfile string, starts ...int) {
	node := fixture.GPUHost(dmNode, "NVIDIA-H200", fixture.Resources("cpu", "96", "memory", "1Ti", "pods", "110"),
		"gpupool.io/pool", "h200", "dynamic-mig", "true")
	node.Status.Conditions = s.Nodes[0].Status.Conditions
	var instances []v1alpha1.MIGInstance
	for k, start := range starts {
		name := fmt.Sprintf("small-%d", k)
		p, c := claimPod(name, "1g.18gb", fmt.Sprintf("gpu-0-mig-1g18gb-0-%d", start))
		s.Pods, s.Claims = append(s.Pods, p), append(s.Claims, c)
		instances = append(instances, fixture.Instance("1g.18gb", int32(start), 1))
	}
	report := fixture.Report(dmNode, fixture.MIGGPU(0, "NVIDIA H200", instances...))
	report.Status.ObservedTime = s.GPUNodes[0].Status.ObservedTime
	s.Nodes = append(s.Nodes, node)
	s.GPUNodes = append(s.GPUNodes, report)
	s.Slices = append(s.Slices, dmSlices(t)...)
	p, c := claimPod("big", bigProfile, "")
	s.Pods, s.Claims = append(s.Pods, p), append(s.Claims, c)
}

// A 3g claim pod that may run only on a DynamicMIG H200 whose 1g claims sit at slices 0, 1 and
// 5 (dra-driver-nvidia-gpu#933) is held by placement: the verdict shows the slice map, names
// the claim whose move would free slices 4-7, and says truthfully that no plan proposes it.
func TestDynamicMIGPlacement(t *testing.T) {
	for _, tc := range []struct {
		name       string
		profile    string
		starts     []int
		noPolicies bool
		generated  bool // the 1g claims are generated for their pods, so they may move
		planned    bool // a live plan opens 4-7 for the pod
		layer      triage.Layer
		blocking   string
		fit        inventory.FitKind
		reasonHas  []string
		nextHas    []string
	}{{
		name: "dra-driver#933: five free slices, no 3g placement", profile: "3g.71gb", starts: []int{0, 1, 5},
		layer: triage.LayerPlacement, blocking: "memory-slice placement", fit: inventory.FitStranded,
		reasonHas: []string{"first fit and never moves it", "GPU 0 has 5 free memory slices, enough for 3g.71gb (4)",
			"4-7 holds 1g.18gb of pod team/small-2"},
		nextHas: []string{"no gpupool plan can open a placement for it", "pod team/small-2 may not be evicted",
			"not generated for it from a template", "by hand: on dm-node GPU 0, moving pod team/small-2 frees memory slices 4-7"},
	}, {
		name: "claims generated for their pods: the next plan moves one", profile: "3g.71gb", starts: []int{0, 1, 5}, generated: true,
		layer: triage.LayerPlacement, blocking: "memory-slice placement", fit: inventory.FitStranded,
		nextHas: []string{"no plan proposes this yet: policy h200-pool's next plan would open memory slices 4-7 of node dm-node GPU 0 by moving pod team/small-2"},
	}, {
		name: "a plan that opens the placement is named", profile: "3g.71gb", starts: []int{0, 1, 5}, generated: true, planned: true,
		layer: triage.LayerPlacement, blocking: "memory-slice placement", fit: inventory.FitStranded,
		nextHas: []string{"plan h200-opening opens memory slices 4-7 of node dm-node GPU 0 for it by moving pod team/small-2, and waits for approval"},
	}, {
		name: "the same without any policy", profile: "3g.71gb", starts: []int{0, 1, 5}, noPolicies: true,
		layer: triage.LayerPlacement, blocking: "memory-slice placement", fit: inventory.FitStranded,
		nextHas: []string{"moving pod team/small-2"},
	}, {
		name: "a free placement is the scheduler's to take", profile: "3g.71gb", starts: []int{0, 1, 2},
		layer: triage.LayerScheduling, blocking: "none", fit: inventory.FitFree,
		reasonHas: []string{"3g.71gb fits GPU 0 at memory slices 4-7"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := load(t, "fragmented-h200.yaml")
			withDynamicMIG(t, s, tc.profile, tc.starts...)
			if tc.noPolicies {
				s.Policies = nil
			}
			if tc.generated {
				generatedClaims(s)
			}
			var plans []v1alpha1.RepartitionPlan
			if tc.planned {
				plans = []v1alpha1.RepartitionPlan{openingPlan()}
				s.Plans = plans
			}
			v := explain(t, s, plans, "team", "big")
			if v.Layer != tc.layer || v.Blocking != tc.blocking {
				t.Fatalf("layer %s blocking %q, want %s %q\nreason: %s\nnext: %s", v.Layer, v.Blocking, tc.layer, tc.blocking, v.Reason, v.Next)
			}
			for _, w := range tc.reasonHas {
				if !strings.Contains(v.Reason, w) {
					t.Errorf("reason %q lacks %q", v.Reason, w)
				}
			}
			for _, w := range tc.nextHas {
				if !strings.Contains(v.Next, w) {
					t.Errorf("next %q lacks %q", v.Next, w)
				}
			}
			if (v.Plan != nil) != tc.planned {
				t.Errorf("plan %+v, want one: %v", v.Plan, tc.planned)
			}
			if len(v.SliceMaps) != 1 || v.SliceMaps[0].Node != dmNode || v.SliceMaps[0].Fit != tc.fit {
				t.Fatalf("slice maps %+v, want one of %s with fit %s", v.SliceMaps, dmNode, tc.fit)
			}
		})
	}
}

// The slice map is a letter per claim, "." per free slice, with a legend naming pod and claim.
func TestDynamicMIGSliceMap(t *testing.T) {
	s := load(t, "fragmented-h200.yaml")
	withDynamicMIG(t, s, "3g.71gb", 0, 1, 5)
	m := explain(t, s, nil, "team", "big").SliceMaps[0]
	if m.Map != "[A B . . . C . .]" {
		t.Errorf("map %q", m.Map)
	}
	want := []string{
		"A = 1g.18gb at slice 0: pod team/small-0 (claim team/small-0-gpu)",
		"B = 1g.18gb at slice 1: pod team/small-1 (claim team/small-1-gpu)",
		"C = 1g.18gb at slice 5: pod team/small-2 (claim team/small-2-gpu)",
	}
	if strings.Join(m.Legend, "\n") != strings.Join(want, "\n") {
		t.Errorf("legend\n%s\nwant\n%s", strings.Join(m.Legend, "\n"), strings.Join(want, "\n"))
	}
}

// A pod whose claim the allocator already allocated and reserved is the scheduler's to bind:
// its own device would read as taken, so the placement answer is not given.
func TestDynamicMIGAllocatedClaimIsNotPlacement(t *testing.T) {
	s := load(t, "fragmented-h200.yaml")
	withDynamicMIG(t, s, "3g.71gb", 0, 1, 2)
	c := &s.Claims[len(s.Claims)-1]
	c.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: "gpu.nvidia.com", Pool: dmNode, Device: "gpu-0-mig-3g71gb-2-4"}}}}
	c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "big"}}
	if v := explain(t, s, nil, "team", "big"); v.Layer == triage.LayerPlacement || len(v.SliceMaps) > 0 {
		t.Errorf("layer %s with %d slice maps for a pod whose claim is allocated", v.Layer, len(v.SliceMaps))
	}
}

// generatedClaims makes every allocated claim one the resourceclaim controller generated for
// its pod from a template: owned by the pod, deleted with it.
func generatedClaims(s *snapshot.Snapshot) {
	for i := range s.Claims {
		c := &s.Claims[i]
		if c.Status.Allocation == nil || len(c.Status.ReservedFor) == 0 {
			continue
		}
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: c.Status.ReservedFor[0].Name, Controller: ptr.To(true)}}
	}
}

// openingPlan is a live plan of policy h200-pool whose placement step opens 4-7 of the DynamicMIG
// GPU for pod big's claim by moving small-2.
func openingPlan() v1alpha1.RepartitionPlan {
	return v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "h200-opening"},
		Spec: v1alpha1.RepartitionPlanSpec{Policy: "h200-pool", Hash: "0123456789abcdef", Disruptive: true,
			Expected: v1alpha1.PlanExpectation{Pods: []v1alpha1.PodReference{{Namespace: "team", Name: "big"}}},
			Steps: []v1alpha1.NodeStep{{Node: dmNode, Disruptive: true,
				Evictions: []v1alpha1.Eviction{{PodReference: v1alpha1.PodReference{Namespace: "team", Name: "small-2"}, LandingNode: dmNode}},
				Placement: &v1alpha1.PlacementOpening{Driver: "gpu.nvidia.com", GPU: 0, Profile: "3g.71gb", Start: 4, Size: 4,
					Device: "gpu-0-mig-3g71gb-2-4", Claim: v1alpha1.PodReference{Namespace: "team", Name: "big-gpu"}}}}}}
}
