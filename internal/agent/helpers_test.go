package agent_test

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpupool/gpupool/internal/agent/nvmlmock"
)

// newServer builds a go-nvml mock server with MIG device handles installed.
func newServer(t *testing.T, cfgs ...gpus.Config) (*server.Server, *nvmlmock.MIGDevices) {
	t.Helper()
	s, err := server.New(server.WithGPUs(cfgs...), server.WithDriverVersion("570.86.15"))
	if err != nil {
		t.Fatalf("mock server: %v", err)
	}
	return s, nvmlmock.Install(s)
}

func mockDevice(t *testing.T, s *server.Server, i int) *server.Device {
	t.Helper()
	d, ok := s.Devices[i].(*server.Device)
	if !ok {
		t.Fatalf("device %d is %T, not a mock server device", i, s.Devices[i])
	}
	return d
}

// enableMIG switches MIG on through the mock's own NVML call; only tests ever
// change a GPU.
func enableMIG(t *testing.T, d *server.Device) {
	t.Helper()
	if _, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", ret)
	}
}

// ciProfileFor is the compute-instance profile that spans a whole GPU instance
// of the given slice count, as mig-parted creates it.
var ciProfileFor = map[uint32]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
}

// createInstance creates a GPU instance of profile constant at start through
// the mock's NVML calls and, when withCI, a compute instance spanning it. It
// returns the MIG device UUID the emulation gives it ("" without a compute
// instance).
func createInstance(t *testing.T, d *server.Device, constant int, start uint32, withCI bool) string {
	t.Helper()
	info, ret := d.GetGpuInstanceProfileInfo(constant)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetGpuInstanceProfileInfo(%d): %v", constant, ret)
	}
	placements, ret := d.GetGpuInstancePossiblePlacements(&info)
	if ret != nvml.SUCCESS || len(placements) == 0 {
		t.Fatalf("GetGpuInstancePossiblePlacements(%d): %v %v", constant, placements, ret)
	}
	gi, ret := d.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: start, Size: placements[0].Size})
	if ret != nvml.SUCCESS {
		t.Fatalf("CreateGpuInstanceWithPlacement(%d@%d): %v", constant, start, ret)
	}
	if !withCI {
		return ""
	}
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciProfileFor[info.SliceCount], nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetComputeInstanceProfileInfo(%d): %v", info.SliceCount, ret)
	}
	ci, ret := gi.CreateComputeInstance(&ciInfo)
	if ret != nvml.SUCCESS {
		t.Fatalf("CreateComputeInstance: %v", ret)
	}
	giInfo, _ := gi.GetInfo()
	cInfo, _ := ci.GetInfo()
	return nvmlmock.MIGUUID(d.UUID, giInfo.Id, cInfo.Id)
}
