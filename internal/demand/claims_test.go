package demand

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// claim is a ResourceClaim in team-a with one exact request per (class, CEL selector) pair; an
// empty selector means none.
func claim(name string, requests ...resourcev1.DeviceRequest) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name},
		Spec:       resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: requests}},
	}
}

func exactly(name, class, selector string, count int64) resourcev1.DeviceRequest {
	ex := &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count}
	if selector != "" {
		ex.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: selector}}}
	}
	return resourcev1.DeviceRequest{Name: name, Exactly: ex}
}

func profileIs(p string) string { return "device.attributes['gpu.nvidia.com'].profile == '" + p + "'" }

// usesClaim makes the pod use a claim: by name, or generated from a template when generated is
// the name the ResourceClaim controller gave it ("" while it has not).
func usesClaim(ref, template, generated string) podOpt {
	return func(p *corev1.Pod) {
		c := corev1.PodResourceClaim{Name: ref}
		if template == "" {
			c.ResourceClaimName = ptr.To(generated)
		} else {
			c.ResourceClaimTemplateName = ptr.To(template)
			if generated != "" {
				p.Status.ResourceClaimStatuses = append(p.Status.ResourceClaimStatuses,
					corev1.PodResourceClaimStatus{Name: ref, ResourceClaimName: ptr.To(generated)})
			}
		}
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, c)
	}
}

func lookup(claims ...*resourcev1.ResourceClaim) ClaimLookup {
	return func(ns, name string) *resourcev1.ResourceClaim {
		i := slices.IndexFunc(claims, func(c *resourcev1.ResourceClaim) bool { return c.Namespace == ns && c.Name == name })
		if i < 0 {
			return nil
		}
		return claims[i]
	}
}

func TestPendingWithClaims(t *testing.T) {
	cpuOnly := withMain(fixture.Resources("cpu", "1"), nil)
	allocated := claim("done", exactly("gpu", nvidia.DeviceClassMIG, profileIs("1g.5gb"), 1))
	allocated.Status.Allocation = &resourcev1.AllocationResult{}
	tests := []struct {
		name       string
		pod        corev1.Pod
		claims     []*resourcev1.ResourceClaim
		want       []GPURequest
		wantReason string // the pod is skipped with a reason containing this
	}{{
		name:   "a claim generated from a template asks for two 1g.5gb",
		pod:    pendingPod("p", cpuOnly, usesClaim("mig", "mig-devices", "p-mig-x7k2q")),
		claims: []*resourcev1.ResourceClaim{claim("p-mig-x7k2q", exactly("mig", nvidia.DeviceClassMIG, profileIs("1g.5gb"), 2))},
		want:   []GPURequest{{Resource: "nvidia.com/mig-1g.5gb", Kind: KindMIG, Profile: "1g.5gb", Count: 2}},
	}, {
		name: "the selector the other way round, in double quotes, and a count left to its default",
		pod:  pendingPod("p", cpuOnly, usesClaim("mig", "", "shared")),
		claims: []*resourcev1.ResourceClaim{claim("shared",
			exactly("mig", nvidia.DeviceClassMIG, `"3g.40gb" == device.attributes["gpu.nvidia.com"].profile`, 0))},
		want: []GPURequest{{Resource: "nvidia.com/mig-3g.40gb", Kind: KindMIG, Profile: "3g.40gb", Count: 1}},
	}, {
		name:   "Blackwell variants keep their attribute",
		pod:    pendingPod("p", cpuOnly, usesClaim("v", "", "video")),
		claims: []*resourcev1.ResourceClaim{claim("video", exactly("v", nvidia.DeviceClassMIG, profileIs("1g.24gb+me.all"), 1))},
		want:   []GPURequest{{Resource: "nvidia.com/mig-1g.24gb.me.all", Kind: KindMIG, Profile: "1g.24gb+me.all", Count: 1}},
	}, {
		name:   "whole GPUs by count",
		pod:    pendingPod("p", cpuOnly, usesClaim("g", "", "two-gpus")),
		claims: []*resourcev1.ResourceClaim{claim("two-gpus", exactly("g", nvidia.DeviceClassGPU, "", 2))},
		want:   []GPURequest{{Resource: "nvidia.com/gpu", Kind: KindGPU, Count: 2}},
	}, {
		// NVIDIA's DRA driver and device plugin never serve the same GPU, so no node has both.
		name:       "GPUs asked of the device plugin and of claims at once are reported",
		pod:        pendingPod("p", usesClaim("g", "", "two-gpus")),
		claims:     []*resourcev1.ResourceClaim{claim("two-gpus", exactly("g", nvidia.DeviceClassGPU, "", 2))},
		wantReason: "both through the device plugin and through DRA claims",
	}, {
		name:   "an allocated claim is no demand",
		pod:    pendingPod("p", cpuOnly, usesClaim("mig", "", "done")),
		claims: []*resourcev1.ResourceClaim{allocated},
	}, {
		name: "a claim not generated yet, or not known, is no demand until it is",
		pod:  pendingPod("p", cpuOnly, usesClaim("mig", "mig-devices", ""), usesClaim("other", "", "missing")),
	}, {
		name:   "another driver's device is not a GPU",
		pod:    pendingPod("p", cpuOnly, usesClaim("nic", "", "nic")),
		claims: []*resourcev1.ResourceClaim{claim("nic", exactly("nic", "sriov.example.com", "device.attributes['sriov.example.com'].vf == 1", 1))},
	}, {
		name:       "a selector on capacity is reported, never guessed",
		pod:        pendingPod("p", cpuOnly, usesClaim("mig", "", "big")),
		claims:     []*resourcev1.ResourceClaim{claim("big", exactly("mig", nvidia.DeviceClassMIG, "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('10Gi'))", 1))},
		wantReason: `ResourceClaim big, request "mig": selector "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('10Gi'))" is not of the form`,
	}, {
		name:       "a profile selector with more conditions is reported",
		pod:        pendingPod("p", cpuOnly, usesClaim("mig", "", "and")),
		claims:     []*resourcev1.ResourceClaim{claim("and", exactly("mig", nvidia.DeviceClassMIG, profileIs("1g.5gb")+" && device.attributes['gpu.nvidia.com'].productName == 'x'", 1))},
		wantReason: "is not of the form",
	}, {
		name: "firstAvailable is reported",
		pod:  pendingPod("p", cpuOnly, usesClaim("mig", "", "alt")),
		claims: []*resourcev1.ResourceClaim{claim("alt", resourcev1.DeviceRequest{Name: "mig", FirstAvailable: []resourcev1.DeviceSubRequest{
			{Name: "small", DeviceClassName: nvidia.DeviceClassMIG}, {Name: "big", DeviceClassName: nvidia.DeviceClassGPU}}})},
		wantReason: "firstAvailable alternatives are not modelled",
	}, {
		name:       "another NVIDIA class is reported",
		pod:        pendingPod("p", cpuOnly, usesClaim("v", "", "vfio")),
		claims:     []*resourcev1.ResourceClaim{claim("vfio", exactly("v", "vfio.gpu.nvidia.com", "", 1))},
		wantReason: "device class vfio.gpu.nvidia.com is not modelled",
	}, {
		name:       "a claim pod that is already scheduled is skipped for that, not for its claim",
		pod:        pendingPod("p", cpuOnly, fixture.Running("node-1"), usesClaim("mig", "", "alt2")),
		claims:     []*resourcev1.ResourceClaim{claim("alt2", exactly("mig", nvidia.DeviceClassMIG, "true", 1))},
		wantReason: "scheduled to node node-1",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs, skipped := PendingWithClaims(pointers([]corev1.Pod{tt.pod}), lookup(tt.claims...), nil, now, minAge)
			if tt.wantReason != "" {
				if len(reqs) != 0 || len(skipped) != 1 || !strings.Contains(skipped[0].Reason, tt.wantReason) {
					t.Fatalf("reqs %+v, skipped %+v; want the pod skipped for %q", reqs, skipped, tt.wantReason)
				}
				return
			}
			if len(skipped) != 0 {
				t.Fatalf("skipped %+v", skipped)
			}
			if len(tt.want) == 0 {
				if len(reqs) != 0 {
					t.Fatalf("reqs %+v, want none", reqs)
				}
				return
			}
			if len(reqs) != 1 || !slices.Equal(reqs[0].GPUs, tt.want) {
				t.Fatalf("reqs %+v, want one with GPUs %+v", reqs, tt.want)
			}
			if _, ok := reqs[0].Requests["cpu"]; !ok {
				t.Error("the pod's other requests are lost")
			}
			if !reqs[0].ViaClaims {
				t.Error("a pod asking through claims is not marked ViaClaims: a device-plugin node could be carved for it")
			}
		})
	}
	// Without a claim lookup (the device plugin only), claims are not read at all.
	pod := pendingPod("p", cpuOnly, usesClaim("mig", "", "shared"))
	if reqs, skipped := Pending(pointers([]corev1.Pod{pod}), now, minAge); len(reqs)+len(skipped) != 0 {
		t.Errorf("Pending read claims: %+v %+v", reqs, skipped)
	}
}
