package inventory

import (
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
)

// draDriver is NVIDIA's DRA driver's name in ResourceSlices and allocation results
// (kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/main.go; docs/dra.md).
const draDriver = "gpu.nvidia.com"

// DeviceHolder is who holds a device NVIDIA's DRA driver allocated: the pod the claim is
// reserved for, or nobody yet (Pod nil) for a claim allocated before its pod started.
type DeviceHolder struct {
	Pod *types.NamespacedName
}

// DRAHolders finds, by device UUID (a MIG instance's or a whole GPU's), the devices allocated
// to ResourceClaims of NVIDIA's DRA driver. An allocation result names a device by the node's
// pool and the driver's device name, which encodes the slot and not the instance
// (gpu-<minor>-mig-<profile>-<id>-<start>, cmd/gpu-kubelet-plugin/mig.go), so the UUID comes
// from the device's "uuid" attribute in the node's ResourceSlices. The agent's PodResources
// attribution sees only the device plugin's devices; without this, an instance a DRA pod holds
// but does not use yet would look idle and could be re-carved under it.
func DRAHolders(claims []resourcev1.ResourceClaim, slices []resourcev1.ResourceSlice) map[string]DeviceHolder {
	type key struct{ pool, device string }
	uuids := map[key]string{}
	for i := range slices {
		s := &slices[i].Spec
		if s.Driver != draDriver {
			continue
		}
		for _, d := range s.Devices {
			if a, ok := d.Attributes["uuid"]; ok && a.StringValue != nil {
				uuids[key{s.Pool.Name, d.Name}] = *a.StringValue
			}
		}
	}
	var out map[string]DeviceHolder
	for i := range claims {
		c := &claims[i]
		if c.Status.Allocation == nil {
			continue
		}
		var holder DeviceHolder
		for _, r := range c.Status.ReservedFor {
			if r.APIGroup == "" && r.Resource == "pods" {
				holder.Pod = &types.NamespacedName{Namespace: c.Namespace, Name: r.Name}
				break
			}
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != draDriver {
				continue
			}
			if uuid, ok := uuids[key{r.Pool, r.Device}]; ok {
				if out == nil {
					out = map[string]DeviceHolder{}
				}
				out[uuid] = holder
			}
		}
	}
	return out
}
