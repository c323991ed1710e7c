package nvmlmock_test

import (
	"reflect"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	"github.com/gpupool/gpupool/internal/agent/nvmlmock"
)

// Corrected must leave go-nvml's package-level tables alone: every mock
// server in the process shares them.
func TestCorrectedCopiesAndLeavesSharedTablesAlone(t *testing.T) {
	before := gpus.H200_SXM5_141GB.MIGProfiles.GpuInstancePlacements[nvml.GPU_INSTANCE_PROFILE_3_SLICE]
	beforeMem := gpus.H200_SXM5_141GB.MIGProfiles.GpuInstanceProfiles[nvml.GPU_INSTANCE_PROFILE_1_SLICE].MemorySizeMB

	c := nvmlmock.Corrected(gpus.H200_SXM5_141GB)
	if got := c.MIGProfiles.GpuInstancePlacements[nvml.GPU_INSTANCE_PROFILE_3_SLICE]; !reflect.DeepEqual(got, []nvml.GpuInstancePlacement{{Start: 0, Size: 4}, {Start: 4, Size: 4}}) {
		t.Errorf("corrected 3g placements %v", got)
	}
	if got := c.MIGProfiles.GpuInstanceProfiles[nvml.GPU_INSTANCE_PROFILE_1_SLICE].MemorySizeMB; got != 144384/8 {
		t.Errorf("corrected 1g memory %d MiB, want an eighth of the GPU", got)
	}
	if got := gpus.H200_SXM5_141GB.MIGProfiles.GpuInstancePlacements[nvml.GPU_INSTANCE_PROFILE_3_SLICE]; !reflect.DeepEqual(got, before) || got[0].Size != 3 {
		t.Errorf("go-nvml's H200 table changed to %v", got)
	}
	if got := gpus.H200_SXM5_141GB.MIGProfiles.GpuInstanceProfiles[nvml.GPU_INSTANCE_PROFILE_1_SLICE].MemorySizeMB; got != beforeMem {
		t.Errorf("go-nvml's H200 1g memory changed to %d", got)
	}
	// Correcting twice changes nothing more; tables without the mistake are kept.
	if again := nvmlmock.Corrected(c); !reflect.DeepEqual(again.MIGProfiles, c.MIGProfiles) {
		t.Error("Corrected is not idempotent")
	}
	for _, ok := range []gpus.Config{gpus.A100_SXM4_40GB, gpus.A100_SXM4_80GB, gpus.A30_PCIE_24GB} {
		if got := nvmlmock.Corrected(ok); !reflect.DeepEqual(got, ok) {
			t.Errorf("%s changed", ok.Name)
		}
	}
}
