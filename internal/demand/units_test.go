package demand

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestAmountCarriesItsUnit(t *testing.T) {
	for _, tc := range []struct {
		name corev1.ResourceName
		v    int64
		want string
	}{
		{corev1.ResourceCPU, 500, "500m CPU"},
		{corev1.ResourceCPU, 4000, "4 CPU"},
		{corev1.ResourceCPU, 3500, "3500m CPU"},
		{corev1.ResourceMemory, 256 << 30, "256Gi memory"},
		{corev1.ResourceEphemeralStorage, 1 << 40, "1Ti ephemeral-storage"},
		{"example.com/fpga", 3, "3 example.com/fpga"},
	} {
		if got := Amount(tc.name, tc.v); got != tc.want {
			t.Errorf("Amount(%s, %d) = %q, want %q", tc.name, tc.v, got, tc.want)
		}
	}
}
