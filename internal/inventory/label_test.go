package inventory_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// TestGPULabel guards the one spelling of a GPU model users see: the nvidia.com/gpu.product
// label GPU Feature Discovery writes, which is what a policy's catalog names, never the
// built-in table's canonical name (H200-141GB) that no label or catalog carries.
func TestGPULabel(t *testing.T) {
	for _, tc := range []struct {
		name, reported, label, want string
	}{
		{name: "the agent's NVML name, as GFD labels it", reported: "NVIDIA H200", label: "NVIDIA-H200", want: "NVIDIA-H200"},
		{name: "an NVML name with characters GFD drops", reported: "NVIDIA H100 80GB HBM3", want: "NVIDIA-H100-80GB-HBM3"},
		{name: "no reported name: the node's label", label: "NVIDIA-A100-SXM4-80GB", want: "NVIDIA-A100-SXM4-80GB"},
		{name: "the label of a time-sliced node, without GFD's -SHARED", label: "NVIDIA-A100-SXM4-80GB-SHARED", want: "NVIDIA-A100-SXM4-80GB"},
		{name: "the label under the single MIG strategy, without its -MIG- suffix", label: "NVIDIA-H200-MIG-1g.18gb", want: "NVIDIA-H200"},
		{name: "a product gpupool does not know keeps its name", reported: unknownGPU, want: "NVIDIA-X96-96GB-HBM3"},
		{name: "nothing reported nor labelled", want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := fixture.GPUHost(nodeA, tc.label, nil)
			if tc.label == "" {
				delete(host.Labels, nvidia.LabelGPUProduct)
			}
			snap := inventory.Build([]corev1.Node{host}, []v1alpha1.GPUNode{report(nodeA, []v1alpha1.GPUStatus{
				fixture.MIGGPU(0, tc.reported, fixture.Instance("1g.18gb", 0, 1))})}, nil, nil, inventory.Options{Now: now})
			if got := snap.Nodes[0].GPUs[0].Label(); got != tc.want {
				t.Errorf("Label() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestProductLabel guards the spelling the plugin shows from raw objects (a GPUNode's
// GPUStatus.Product and its node's label), the same as Label's.
func TestProductLabel(t *testing.T) {
	for _, tc := range []struct{ reported, label, want string }{
		{"NVIDIA H200", "NVIDIA-H200", "NVIDIA-H200"},
		{"NVIDIA H200", "", "NVIDIA-H200"},
		{"", "NVIDIA-H200-SHARED", "NVIDIA-H200"},
		{"", "", ""},
	} {
		if got := inventory.ProductLabel(tc.reported, tc.label); got != tc.want {
			t.Errorf("ProductLabel(%q, %q) = %q, want %q", tc.reported, tc.label, got, tc.want)
		}
	}
}
