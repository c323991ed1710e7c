package demand

import (
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// ClaimLookup finds a ResourceClaim by namespace and name; nil when it is not known.
type ClaimLookup func(namespace, name string) *resourcev1.ResourceClaim

// profileSelector is the one CEL form gpupool reads a MIG profile from, the form NVIDIA's
// examples use (demo/specs/quickstart/v1/gpu-test4.yaml):
// device.attributes['gpu.nvidia.com'].profile == '1g.5gb', either side of the ==, either quote.
var profileSelector = regexp.MustCompile(`^device\.attributes\[(['"])gpu\.nvidia\.com(['"])\]\.profile\s*==\s*(['"])([^'"]+)(['"])$` +
	`|^(['"])([^'"]+)(['"])\s*==\s*device\.attributes\[(['"])gpu\.nvidia\.com(['"])\]\.profile$`)

// selectedProfile reads the profile a CEL selector pins, or says why it cannot.
func selectedProfile(expr string) (string, bool) {
	m := profileSelector.FindStringSubmatch(strings.TrimSpace(expr))
	switch {
	case m == nil:
		return "", false
	case m[4] != "" && m[1] == m[2] && m[3] == m[5]:
		return m[4], true
	case m[7] != "" && m[6] == m[8] && m[9] == m[10]:
		return m[7], true
	}
	return "", false
}

// claimGPUs maps the ResourceClaims a pod uses to the GPU resources they stand for, as if the
// pod had asked the device plugin: a request of class mig.nvidia.com whose one selector pins a
// profile is that many nvidia.com/mig-<profile>, a request of class gpu.nvidia.com without
// selectors that many nvidia.com/gpu. Claims already allocated are no demand, and claims not
// yet generated from their template, or not known, are skipped until they are. Requests of
// other NVIDIA classes, or that select in ways gpupool does not model (firstAvailable, All,
// several or other selectors), make problem say so: the pod is then reported, never guessed
// at. Requests of classes that are not NVIDIA's GPU classes are some other device and ignored.
func claimGPUs(pod *corev1.Pod, claims ClaimLookup) (gpus corev1.ResourceList, problem string) {
	return claimGPUsOf(pod, claims, false)
}

// ClaimGPUs is what a pod asks NVIDIA's DRA driver for through all its claims, allocated or
// not, in the device plugin's resource names, for describing the pod (triage); problem says
// why a claim cannot be mapped. A nil claims reads none.
func ClaimGPUs(pod *corev1.Pod, claims ClaimLookup) (gpus corev1.ResourceList, problem string) {
	if claims == nil {
		return nil, ""
	}
	return claimGPUsOf(pod, claims, true)
}

func claimGPUsOf(pod *corev1.Pod, claims ClaimLookup, allocatedToo bool) (gpus corev1.ResourceList, problem string) {
	for _, ref := range pod.Spec.ResourceClaims {
		name, ok := claimName(pod, ref)
		if !ok {
			continue
		}
		claim := claims(pod.Namespace, name)
		if claim == nil || (claim.Status.Allocation != nil && !allocatedToo) {
			continue
		}
		for _, req := range claim.Spec.Devices.Requests {
			resource, n, why := mapRequest(req)
			switch {
			case why != "":
				return nil, fmt.Sprintf("ResourceClaim %s, request %q: %s", name, req.Name, why)
			case n > 0:
				if gpus == nil {
					gpus = corev1.ResourceList{}
				}
				q := gpus[resource]
				q.Add(*apiresource.NewQuantity(n, apiresource.DecimalSI))
				gpus[resource] = q
			}
		}
	}
	return gpus, ""
}

// mapRequest maps one device request to an extended resource and count; n is 0 for a request
// that is not for an NVIDIA GPU, why says what gpupool cannot model.
func mapRequest(req resourcev1.DeviceRequest) (resource corev1.ResourceName, n int64, why string) {
	if req.Exactly == nil {
		for _, sub := range req.FirstAvailable {
			if nvidiaClass(sub.DeviceClassName) {
				return "", 0, "firstAvailable alternatives are not modelled; ask for one device class and profile"
			}
		}
		return "", 0, ""
	}
	ex := req.Exactly
	if !nvidiaClass(ex.DeviceClassName) {
		return "", 0, ""
	}
	if ex.AllocationMode == resourcev1.DeviceAllocationModeAll {
		return "", 0, "allocationMode All is not modelled; ask for a count"
	}
	count := ex.Count
	if count == 0 {
		count = 1
	}
	switch ex.DeviceClassName {
	case nvidia.DeviceClassGPU:
		if len(ex.Selectors) > 0 {
			return "", 0, "selectors on whole GPUs are not modelled; gpupool plans whole GPUs by count"
		}
		return ResourceGPU, count, ""
	case nvidia.DeviceClassMIG:
		if len(ex.Selectors) != 1 || ex.Selectors[0].CEL == nil {
			return "", 0, fmt.Sprintf("want exactly one CEL selector device.attributes['%s'].profile == '<profile>', found %d selector(s)", nvidia.DRADriver, len(ex.Selectors))
		}
		profile, ok := selectedProfile(ex.Selectors[0].CEL.Expression)
		if !ok {
			return "", 0, fmt.Sprintf("selector %q is not of the form device.attributes['%s'].profile == '<profile>'", ex.Selectors[0].CEL.Expression, nvidia.DRADriver)
		}
		resource := corev1.ResourceName(mig.ResourceName(profile))
		if kind, _, ok := Classify(resource); !ok || kind != KindMIG {
			return "", 0, fmt.Sprintf("%q is not a MIG profile name", profile)
		}
		return resource, count, ""
	}
	return "", 0, fmt.Sprintf("device class %s is not modelled (gpupool reads %s and %s)", ex.DeviceClassName, nvidia.DeviceClassGPU, nvidia.DeviceClassMIG)
}

// nvidiaClass reports whether a device class is one of NVIDIA's GPU driver's, by the naming
// its chart uses (gpu.nvidia.com, mig.nvidia.com, vfio.gpu.nvidia.com, and per-profile demo
// classes such as mig-1g-12gb.gpu.nvidia.com); compute-domain classes are not GPUs.
func nvidiaClass(name string) bool {
	return strings.HasSuffix(name, nvidia.DeviceClassDomain) && !strings.HasPrefix(name, "compute-domain") || name == nvidia.DeviceClassGPU
}

// claimName resolves a pod's claim reference: a named claim, or the one the ResourceClaim
// controller generated from a template, as the pod's status records it.
func claimName(pod *corev1.Pod, ref corev1.PodResourceClaim) (string, bool) {
	if ref.ResourceClaimName != nil {
		return *ref.ResourceClaimName, true
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.Name == ref.Name && st.ResourceClaimName != nil {
			return *st.ResourceClaimName, true
		}
	}
	return "", false
}

// addResources adds add into sum.
func addResources(sum, add corev1.ResourceList) {
	for name, q := range add {
		cur := sum[name]
		cur.Add(q)
		sum[name] = cur
	}
}
