package demand

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Amount writes an amount of a non-GPU resource, in the scheduler's integers (CPU in
// millicores, memory and storage in bytes, anything else in units), the way kubectl writes
// quantities, with what it is: "500m CPU", "4 CPU", "256Gi memory", "3 example.com/fpga".
// Users read these in why, in conditions and in the Events on their pods; bare millicores read
// as a thousand times too much.
func Amount(name corev1.ResourceName, v int64) string {
	switch name {
	case corev1.ResourceCPU:
		// Whole cores as kubectl shows them ("4"), else millicores ("3500m"), never "4k".
		if v%1000 == 0 {
			return strconv.FormatInt(v/1000, 10) + " CPU"
		}
		return strconv.FormatInt(v, 10) + "m CPU"
	case corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return resource.NewQuantity(v, resource.BinarySI).String() + " " + string(name)
	}
	return fmt.Sprintf("%d %s", v, name)
}
