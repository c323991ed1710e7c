package agent_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
	"github.com/gpupool/gpupool/internal/agent/nvmlmock"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/sim"
)

func pl(start, size int32) v1alpha1.SlicePlacement {
	return v1alpha1.SlicePlacement{Start: start, Size: size}
}

func pls(size int32, starts ...int32) []v1alpha1.SlicePlacement {
	out := make([]v1alpha1.SlicePlacement, len(starts))
	for i, s := range starts {
		out[i] = pl(s, size)
	}
	return out
}

func mustRead(t *testing.T, lib agent.NVML) []v1alpha1.GPUStatus {
	t.Helper()
	got, err := agent.Read(lib)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return got
}

// The eight-memory-slice table every A100/H100/H200/B200 reports, by NVML
// profile constant (docs/architecture.md, "MIG geometry").
var eightSliceTable = map[int32][]v1alpha1.SlicePlacement{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE:      pls(1, 0, 1, 2, 3, 4, 5, 6),
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: pls(1, 0, 1, 2, 3, 4, 5, 6),
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: pls(2, 0, 2, 4, 6),
	nvml.GPU_INSTANCE_PROFILE_2_SLICE:      pls(2, 0, 2, 4),
	nvml.GPU_INSTANCE_PROFILE_3_SLICE:      pls(4, 0, 4),
	nvml.GPU_INSTANCE_PROFILE_4_SLICE:      pls(4, 0),
	nvml.GPU_INSTANCE_PROFILE_7_SLICE:      pls(8, 0),
}

func checkEightSliceTable(t *testing.T, g v1alpha1.GPUStatus) {
	t.Helper()
	if len(g.Profiles) != len(eightSliceTable) {
		t.Errorf("GPU %d (%s): %d profiles, want %d", g.Index, g.Product, len(g.Profiles), len(eightSliceTable))
	}
	for _, p := range g.Profiles {
		if want := eightSliceTable[p.ID]; !reflect.DeepEqual(p.Placements, want) {
			t.Errorf("GPU %d (%s) profile %d %s: placements %v, want %v", g.Index, g.Product, p.ID, p.Name, p.Placements, want)
		}
	}
}

func profileNames(g v1alpha1.GPUStatus) []string {
	var out []string
	for _, p := range g.Profiles {
		out = append(out, p.Name)
	}
	return out
}

func TestReadDGXA100Inventory(t *testing.T) {
	s, _ := newServer(t, gpus.Multiple(8, gpus.A100_SXM4_40GB)...)
	got := mustRead(t, s)
	if len(got) != 8 {
		t.Fatalf("read %d GPUs, want 8", len(got))
	}
	for i, g := range got {
		d := mockDevice(t, s, i)
		if g.Index != int32(i) || g.UUID != d.UUID || g.Product != "Mock NVIDIA A100-SXM4-40GB" ||
			g.PCIDeviceID != "0x20B010DE" || g.MemoryMiB != 40960 || g.Error != "" {
			t.Errorf("GPU %d: got %+v", i, g)
		}
		if g.MIGMode == nil || *g.MIGMode != (v1alpha1.MIGModeStatus{Current: agent.MIGDisabled, Pending: agent.MIGDisabled}) {
			t.Errorf("GPU %d: MIG mode %+v, want Disabled/Disabled", i, g.MIGMode)
		}
		if len(g.Instances) != 0 || len(g.Pods) != 0 || g.Sharing != "" {
			t.Errorf("GPU %d: instances %v pods %v sharing %q, want none", i, g.Instances, g.Pods, g.Sharing)
		}
		checkEightSliceTable(t, g)
	}
	// Ordered by NVML profile constant; names as the device plugin spells them.
	wantNames := []string{"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1g.5gb+me", "1g.10gb"}
	if names := profileNames(got[0]); !reflect.DeepEqual(names, wantNames) {
		t.Errorf("profile names %v, want %v", names, wantNames)
	}
	want3g := v1alpha1.GPUInstanceProfile{ID: 2, Name: "3g.20gb", MemoryMiB: 19968, Slices: 3, MaxCount: 2, Placements: pls(4, 0, 4)}
	if p := got[0].Profiles[2]; !reflect.DeepEqual(p, want3g) {
		t.Errorf("3g profile %+v, want %+v", p, want3g)
	}
	// The dgxa100 mock is an nvidia-smi capture: it must agree with internal/mig.
	for _, g := range got {
		if c := agent.Compare(g); !c.Match || c.BuiltinProduct != "A100-40GB" {
			t.Errorf("GPU %d: comparison with internal/mig %+v, want a match with A100-40GB", g.Index, c)
		}
	}
}

// The package-level dgxa100.New server (the one other NVIDIA projects test
// against) reads the same once MIG device handles are added.
func TestReadDGXA100Server(t *testing.T) {
	s := dgxa100.New()
	nvmlmock.Install(s)
	got := mustRead(t, s)
	if len(got) != 8 || got[7].Product != "Mock NVIDIA A100-SXM4-40GB" || got[7].Error != "" {
		t.Fatalf("read %+v", got)
	}
}

func TestReadMIGInstances(t *testing.T) {
	s, migs := newServer(t, gpus.Multiple(4, gpus.A100_SXM4_40GB)...)
	d := mockDevice(t, s, 3)
	enableMIG(t, d)
	// Created out of placement order; Read must sort by start slice.
	uuid1g := createInstance(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 6, false) // no compute instance yet
	uuid2g := createInstance(t, d, nvml.GPU_INSTANCE_PROFILE_2_SLICE, 4, true)
	uuid4g := createInstance(t, d, nvml.GPU_INSTANCE_PROFILE_4_SLICE, 0, true)
	migs.SetProcesses(uuid2g, []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 1 << 30}})

	got := mustRead(t, s)
	g := got[3]
	if g.Error != "" {
		t.Fatalf("GPU 3 error: %s", g.Error)
	}
	if *g.MIGMode != (v1alpha1.MIGModeStatus{Current: agent.MIGEnabled, Pending: agent.MIGEnabled}) {
		t.Errorf("MIG mode %+v", g.MIGMode)
	}
	want := []v1alpha1.MIGInstance{
		{Profile: "4g.20gb", Placement: pl(0, 4), UUID: uuid4g},
		{Profile: "2g.10gb", Placement: pl(4, 2), UUID: uuid2g, Busy: true},
		{Profile: "1g.5gb", Placement: pl(6, 1), UUID: uuid1g},
	}
	if !reflect.DeepEqual(g.Instances, want) {
		t.Errorf("instances\n got %+v\nwant %+v", g.Instances, want)
	}
	if uuid1g != "" || !strings.HasPrefix(uuid2g, "MIG-") {
		t.Errorf("MIG UUIDs %q %q", uuid1g, uuid2g)
	}
	for _, other := range got[:3] {
		if len(other.Instances) != 0 || other.MIGMode.Current != agent.MIGDisabled {
			t.Errorf("GPU %d changed: %+v", other.Index, other)
		}
	}
	// Deterministic: the mock keeps instances in maps, so a second read
	// iterates them in another order.
	for range 5 {
		if again := mustRead(t, s); !reflect.DeepEqual(again, got) {
			t.Fatalf("second read differs:\n%+v\n%+v", again, got)
		}
	}
}

// H100, H200 and B200 mocks with the corrections docs/architecture.md ("MIG geometry") names read back the
// real eight-slice table, their names agree with internal/mig's, and instances
// at the corrected placements read back with the right sizes.
func TestReadCorrectedHopperAndBlackwell(t *testing.T) {
	s, _ := newServer(t,
		nvmlmock.Corrected(gpus.H100_SXM5_80GB),
		nvmlmock.Corrected(gpus.H200_SXM5_141GB),
		nvmlmock.Corrected(gpus.B200_SXM5_180GB),
	)
	h200 := mockDevice(t, s, 1)
	enableMIG(t, h200)
	u3g := createInstance(t, h200, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 4, true)
	u2g := createInstance(t, h200, nvml.GPU_INSTANCE_PROFILE_2_SLICE, 0, true)
	u1gd := createInstance(t, h200, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 2, true)

	got := mustRead(t, s)
	wantNames := [][]string{
		{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb"},
		{"1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb", "1g.18gb+me", "1g.35gb"},
		{"1g.23gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb", "1g.23gb+me", "1g.45gb"},
	}
	wantProducts := []string{"H100-80GB", "H200-141GB", "B200"}
	for i, g := range got {
		if g.Error != "" {
			t.Errorf("GPU %d error: %s", i, g.Error)
		}
		checkEightSliceTable(t, g)
		if names := profileNames(g); !reflect.DeepEqual(names, wantNames[i]) {
			t.Errorf("GPU %d names %v, want %v", i, names, wantNames[i])
		}
		c := agent.Compare(g)
		if !c.Match || c.BuiltinProduct != wantProducts[i] {
			t.Errorf("GPU %d: comparison %+v, want a match with %s", i, c, wantProducts[i])
		}
		// The H100 table is captured; the H200's and B200's are inferred, and a probe says so.
		if inferred := c.BuiltinInferred != ""; inferred != (wantProducts[i] != "H100-80GB") {
			t.Errorf("GPU %d (%s): builtinInferred %q", i, wantProducts[i], c.BuiltinInferred)
		}
		for _, pc := range c.Profiles {
			if pc.NVMLName != pc.BuiltinName {
				t.Errorf("GPU %d profile %d: NVML name %s, internal/mig %s", i, pc.ID, pc.NVMLName, pc.BuiltinName)
			}
		}
	}
	want := []v1alpha1.MIGInstance{
		{Profile: "2g.35gb", Placement: pl(0, 2), UUID: u2g},
		{Profile: "1g.35gb", Placement: pl(2, 2), UUID: u1gd},
		{Profile: "3g.71gb", Placement: pl(4, 4), UUID: u3g},
	}
	if !reflect.DeepEqual(got[1].Instances, want) {
		t.Errorf("H200 instances\n got %+v\nwant %+v", got[1].Instances, want)
	}
}

// go-nvml's own Hopper/Blackwell tables disagree with internal/mig exactly
// where docs/architecture.md ("MIG geometry") says: 3g, 7g and the double-memory 1g. The comparison the
// probe prints must flag those and nothing else.
func TestCompareFlagsUncorrectedMockTables(t *testing.T) {
	s, _ := newServer(t, gpus.H100_SXM5_80GB, gpus.H200_SXM5_141GB, gpus.B200_SXM5_180GB)
	got := mustRead(t, s)
	wantMismatch := []int32{nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_7_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2}
	for _, g := range got {
		c := agent.Compare(g)
		if c.Match {
			t.Errorf("%s: comparison matches, want the known disagreements", g.Product)
		}
		var mismatched []int32
		for _, pc := range c.Profiles {
			if !pc.Match {
				mismatched = append(mismatched, pc.ID)
			}
		}
		if !reflect.DeepEqual(mismatched, wantMismatch) {
			t.Errorf("%s: mismatched profiles %v, want %v", g.Product, mismatched, wantMismatch)
		}
	}
	// The GPUNode says so, naming each GPU and profile; gpupool plans with what NVML reports.
	cond := agent.TablesCondition(got)
	if cond.Status != metav1.ConditionFalse || cond.Reason != v1alpha1.ReasonDeviceTableDiffers {
		t.Errorf("MIGTablesMatch = %s/%s, want False/%s", cond.Status, cond.Reason, v1alpha1.ReasonDeviceTableDiffers)
	}
	for _, want := range []string{"GPU 0 (H100-80GB): ", "GPU 1 (H200-141GB): ", "GPU 2 (B200): ", "7g.80gb at 0-6 (built in: 0-7)", "3g.40gb at "} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("MIGTablesMatch message lacks %q:\n%s", want, cond.Message)
		}
	}
	// The uncorrected H200 memory sizes exceed a 1g instance's eighth, so the
	// device plugin's naming rule turns 1g.18gb into 1g.35gb.
	if n := got[1].Profiles[0].Name; n != "1g.35gb" {
		t.Errorf("uncorrected H200 1g name %s, want 1g.35gb (the mock's memory sizes are too large)", n)
	}
}

// Real devices give each profile a device-specific ID (nvidia-smi's "ID"
// column: 19 for an H100 1g.10gb, 0 for its 7g.80gb) distinct from the
// GPU_INSTANCE_PROFILE_* constant. Profiles must be published by constant and
// instances named by the profile they were listed under.
func TestReadDeviceSpecificProfileIDs(t *testing.T) {
	cfg := withDeviceProfileIDs(nvmlmock.Corrected(gpus.H100_SXM5_80GB), map[int]uint32{
		nvml.GPU_INSTANCE_PROFILE_1_SLICE:      19,
		nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: 20,
		nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: 15,
		nvml.GPU_INSTANCE_PROFILE_2_SLICE:      14,
		nvml.GPU_INSTANCE_PROFILE_3_SLICE:      9,
		nvml.GPU_INSTANCE_PROFILE_4_SLICE:      5,
		nvml.GPU_INSTANCE_PROFILE_7_SLICE:      0,
	})
	s, _ := newServer(t, cfg)
	d := mockDevice(t, s, 0)
	enableMIG(t, d)
	u3g := createInstance(t, d, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 4, true)
	u1g := createInstance(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 0, true)

	g := mustRead(t, s)[0]
	if g.Error != "" {
		t.Fatalf("error: %s", g.Error)
	}
	checkEightSliceTable(t, g)
	var ids []int32
	for _, p := range g.Profiles {
		ids = append(ids, p.ID)
	}
	if want := []int32{0, 1, 2, 3, 4, 7, 9}; !reflect.DeepEqual(ids, want) {
		t.Errorf("profile IDs %v, want the constants %v", ids, want)
	}
	want := []v1alpha1.MIGInstance{
		{Profile: "1g.10gb", Placement: pl(0, 1), UUID: u1g},
		{Profile: "3g.40gb", Placement: pl(4, 4), UUID: u3g},
	}
	if !reflect.DeepEqual(g.Instances, want) {
		t.Errorf("instances\n got %+v\nwant %+v", g.Instances, want)
	}
}

// withDeviceProfileIDs rewrites a mock table so profile info carries
// device-specific IDs; the mock keys placements and compute-instance tables by
// that ID, as NVML does.
func withDeviceProfileIDs(c gpus.Config, ids map[int]uint32) gpus.Config {
	src := c.MIGProfiles
	out := c
	out.MIGProfiles = gpus.MIGProfileConfig{
		GpuInstanceProfiles:       map[int]nvml.GpuInstanceProfileInfo{},
		GpuInstancePlacements:     map[int][]nvml.GpuInstancePlacement{},
		ComputeInstanceProfiles:   map[int]map[int]nvml.ComputeInstanceProfileInfo{},
		ComputeInstancePlacements: map[int]map[int][]nvml.ComputeInstancePlacement{},
	}
	for constant, info := range src.GpuInstanceProfiles {
		id, ok := ids[constant]
		if !ok {
			continue
		}
		old := int(info.Id)
		info.Id = id
		out.MIGProfiles.GpuInstanceProfiles[constant] = info
		out.MIGProfiles.GpuInstancePlacements[int(id)] = src.GpuInstancePlacements[old]
		out.MIGProfiles.ComputeInstanceProfiles[int(id)] = src.ComputeInstanceProfiles[old]
		out.MIGProfiles.ComputeInstancePlacements[int(id)] = src.ComputeInstancePlacements[old]
	}
	return out
}

func TestReadRecordsPerGPUErrors(t *testing.T) {
	s, _ := newServer(t, gpus.Multiple(8, gpus.A100_SXM4_40GB)...)
	mockDevice(t, s, 2).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		return nvml.Memory{}, nvml.ERROR_UNKNOWN
	}
	mockDevice(t, s, 6).GetMigModeFunc = func() (int, int, nvml.Return) {
		return 0, 0, nvml.ERROR_GPU_IS_LOST
	}
	byIndex := s.DeviceGetHandleByIndexFunc
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 5 {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return byIndex(i)
	}
	d7 := mockDevice(t, s, 7)
	enableMIG(t, d7)
	createInstance(t, d7, nvml.GPU_INSTANCE_PROFILE_7_SLICE, 0, true)
	d7.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NO_PERMISSION }

	got, err := agent.Read(s)
	if err != nil {
		t.Fatalf("Read: %v (per-GPU failures must not fail the node)", err)
	}
	wantErr := map[int]string{
		2: "GetMemoryInfo: ERROR_UNKNOWN",
		5: "DeviceGetHandleByIndex(5): ERROR_GPU_IS_LOST",
		6: "GetMigMode: ERROR_GPU_IS_LOST",
		7: "GetMaxMigDeviceCount: ERROR_NO_PERMISSION",
	}
	for i, g := range got {
		if g.Index != int32(i) {
			t.Errorf("GPU %d has index %d", i, g.Index)
		}
		if w := wantErr[i]; w == "" && g.Error != "" || !strings.Contains(g.Error, w) {
			t.Errorf("GPU %d error %q, want it to contain %q", i, g.Error, w)
		}
	}
	// Everything NVML did answer is still there.
	if g := got[2]; g.UUID == "" || g.MemoryMiB != 0 || len(g.Profiles) != 7 {
		t.Errorf("GPU 2 not filled as far as possible: %+v", g)
	}
	// Without the GPU's total memory, names fall back to GiB rounded up, which
	// for the A100 40GB still gives the driver's names.
	if names := profileNames(got[2]); !reflect.DeepEqual(names, profileNames(got[0])) {
		t.Errorf("GPU 2 names %v, want %v", names, profileNames(got[0]))
	}
	if g := got[6]; g.UUID == "" || g.MIGMode != nil || len(g.Profiles) != 0 {
		t.Errorf("GPU 6: %+v", g)
	}
	if g := got[7]; len(g.Instances) != 1 || g.Instances[0].UUID != "" || g.Instances[0].Busy {
		t.Errorf("GPU 7 instances %+v, want the 7g instance without UUID", g.Instances)
	}
	c := agent.NVMLReadyCondition(got, nil)
	if c.Status != metav1.ConditionTrue || c.Reason != agent.ReasonPartialRead || !strings.Contains(c.Message, "GPU(s) 2, 5, 6, 7 of 8") {
		t.Errorf("condition %+v", c)
	}
}

func TestReadMIGUnsupported(t *testing.T) {
	s, _ := newServer(t, gpus.A100_PCIE_40GB)
	d := mockDevice(t, s, 0)
	d.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	d.GetGpuInstanceProfileInfoFunc = func(int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
		t.Error("profiles read from a GPU without MIG")
		return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	g := mustRead(t, s)[0]
	if *g.MIGMode != (v1alpha1.MIGModeStatus{Current: agent.MIGUnsupported, Pending: agent.MIGUnsupported}) || g.Error != "" {
		t.Errorf("got %+v", g)
	}
	if c := agent.NVMLReadyCondition([]v1alpha1.GPUStatus{g}, nil); c.Status != metav1.ConditionTrue || c.Reason != agent.ReasonGPUsRead {
		t.Errorf("condition %+v", c)
	}
}

func TestReadWholeNodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name         string
		init         nvml.Return
		count        int
		countRet     nvml.Return
		reason, text string
	}{
		{name: "no library", init: nvml.ERROR_LIBRARY_NOT_FOUND, reason: agent.ReasonNVMLNotFound,
			text: "NVML not found: this machine has no NVIDIA driver (libnvidia-ml.so.1)"},
		{name: "driver not loaded", init: nvml.ERROR_DRIVER_NOT_LOADED, reason: agent.ReasonDriverNotLoaded, text: "kernel driver is not loaded"},
		{name: "version mismatch", init: nvml.ERROR_LIB_RM_VERSION_MISMATCH, reason: agent.ReasonDriverMismatch, text: "different versions"},
		{name: "no permission", init: nvml.ERROR_NO_PERMISSION, reason: agent.ReasonNoPermission, text: "NVML Init failed: ERROR_NO_PERMISSION"},
		{name: "other init failure", init: nvml.ERROR_UNKNOWN, reason: agent.ReasonInitFailed, text: "NVML Init failed: ERROR_UNKNOWN"},
		{name: "count fails", countRet: nvml.ERROR_UNKNOWN, reason: agent.ReasonDeviceCountFailed, text: "NVML DeviceGetCount failed"},
		{name: "no GPU", count: 0, reason: agent.ReasonNoGPU, text: "NVML sees no GPU"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shutdowns := 0
			lib := &mock.Interface{
				InitFunc:           func() nvml.Return { return tc.init },
				ShutdownFunc:       func() nvml.Return { shutdowns++; return nvml.SUCCESS },
				DeviceGetCountFunc: func() (int, nvml.Return) { return tc.count, tc.countRet },
			}
			gpus, err := agent.Read(lib)
			var e *agent.Error
			if !errors.As(err, &e) || e.Reason != tc.reason || gpus != nil {
				t.Fatalf("Read = %v, %v; want an *agent.Error with reason %s", gpus, err, tc.reason)
			}
			if !strings.Contains(err.Error(), tc.text) {
				t.Errorf("error %q, want it to contain %q", err, tc.text)
			}
			if tc.init != nvml.SUCCESS && !errors.Is(err, tc.init) {
				t.Errorf("errors.Is(%v, %v) is false", err, tc.init)
			}
			if wantShutdowns := map[bool]int{true: 1, false: 0}[tc.init == nvml.SUCCESS]; shutdowns != wantShutdowns {
				t.Errorf("Shutdown called %d times, want %d", shutdowns, wantShutdowns)
			}
			c := agent.NVMLReadyCondition(nil, err)
			if c.Type != v1alpha1.ConditionNVMLReady || c.Status != metav1.ConditionFalse || c.Reason != tc.reason || c.Message != err.Error() {
				t.Errorf("condition %+v", c)
			}
		})
	}
}

func TestProfileName(t *testing.T) {
	const h100Total = 81559 << 20 // what an H100 80GB HBM3 reports
	for _, tc := range []struct {
		constant int
		slices   uint32
		memMiB   uint64
		total    uint64
		want     string
	}{
		// nvidia-smi mig -lgip on an H100 80GB: 9.75, 19.62, 39.50, 79.25 GiB.
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 9984, h100Total, "1g.10gb"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, 1, 9984, h100Total, "1g.10gb+me"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 1, 20096, h100Total, "1g.20gb"},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, 3, 40448, h100Total, "3g.40gb"},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 7, 81152, h100Total, "7g.80gb"},
		// The dgxa100 capture.
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 4864, 40960 << 20, "1g.5gb"},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, 7, 40192, 40960 << 20, "7g.40gb"},
		// An exact eighth must not round up to the next one.
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 10240, 81920 << 20, "1g.10gb"},
		// A30 variants.
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1, 2, 11672, 24576 << 20, "2g.12gb+me"},
		// Blackwell-era variants.
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, 1, 23040, 184320 << 20, "1g.23gb+me.all"},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, 1, 23040, 184320 << 20, "1g.23gb-me"},
		{nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX, 4, 92160, 184320 << 20, "4g.90gb+gfx"},
		// Unknown total: GiB rounded up.
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, 1, 9984, 0, "1g.10gb"},
	} {
		info := nvml.GpuInstanceProfileInfo{SliceCount: tc.slices, MemorySizeMB: tc.memMiB}
		if got := agent.ProfileName(tc.constant, info, tc.total); got != tc.want {
			t.Errorf("ProfileName(%d, %d MiB of %d MiB) = %s, want %s", tc.constant, tc.memMiB, tc.total>>20, got, tc.want)
		}
	}
}

func TestCompareWithoutBuiltinOrProfiles(t *testing.T) {
	c := agent.Compare(v1alpha1.GPUStatus{Product: "NVIDIA L4", PCIDeviceID: "0x27B810DE"})
	if c.Match || c.BuiltinProduct != "" || !strings.Contains(c.Note, `no built-in MIG table for product "NVIDIA L4"`) {
		t.Errorf("L4: %+v", c)
	}
	// Found by PCI ID when the name is unfamiliar; MIG disabled means no NVML profiles.
	c = agent.Compare(v1alpha1.GPUStatus{Product: "NVIDIA Graphics Device", PCIDeviceID: "0x233010DE",
		MIGMode: &v1alpha1.MIGModeStatus{Current: agent.MIGDisabled}})
	if c.Match || c.BuiltinProduct != "H100-80GB" || c.LookedUpBy != "pciDeviceID" || !strings.Contains(c.Note, "MIG mode Disabled") {
		t.Errorf("H100 by PCI ID: %+v", c)
	}
	h100, _ := mig.LookupProduct("H100-80GB")
	if len(c.Profiles) != len(h100.Profiles) {
		t.Errorf("%d profiles listed, want the %d built-in ones", len(c.Profiles), len(h100.Profiles))
	}
}

func TestTablesCondition(t *testing.T) {
	s, _ := newServer(t, nvmlmock.Corrected(gpus.H100_SXM5_80GB), nvmlmock.Corrected(gpus.B200_SXM5_180GB))
	got := mustRead(t, s)
	if c := agent.TablesCondition(got); c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonTablesMatch || !strings.Contains(c.Message, "GPU(s) 0, 1") {
		t.Errorf("corrected tables: %+v, want True/%s for GPUs 0 and 1", c, v1alpha1.ReasonTablesMatch)
	}
	// A GPU the built-in table lacks is planned from its report alone, and the node says so.
	unknown := got[0]
	unknown.Product, unknown.PCIDeviceID = "NVIDIA X96", "0x999910DE"
	c := agent.TablesCondition([]v1alpha1.GPUStatus{got[1], unknown})
	if c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonNoBuiltinTable || !strings.Contains(c.Message, "GPU 0 (NVIDIA X96)") {
		t.Errorf("unknown GPU: %+v", c)
	}
	// MIG disabled: NVML lists no profiles, so there is nothing to compare.
	if c := agent.TablesCondition([]v1alpha1.GPUStatus{{Index: 0, Product: "NVIDIA H100 80GB HBM3"}}); c.Status != metav1.ConditionUnknown || c.Reason != agent.ReasonNoProfilesReported {
		t.Errorf("no profiles: %+v", c)
	}
}

// The agent reads every GPU the simulator knows through go-nvml's mock server, the parts
// go-nvml has no mock for included (their tables are derived in internal/sim), and names
// each profile as the built-in table does: Blackwell's +gfx, -me and +me.all variants come
// from NVML's profile constants, not from the table.
func TestReadEveryProduct(t *testing.T) {
	for _, m := range sim.Models() {
		s, _ := newServer(t, m.NVML())
		got := mustRead(t, s)
		if len(got) != 1 || got[0].Error != "" {
			t.Fatalf("%s: read %+v", m.Name, got)
		}
		c := agent.Compare(got[0])
		if !c.Match || c.BuiltinProduct != m.Name {
			t.Errorf("%s: comparison %+v, want a match with the built-in %s", m.Name, c, m.Name)
		}
		for _, pc := range c.Profiles {
			if pc.NVMLName != pc.BuiltinName {
				t.Errorf("%s profile %d: NVML name %s, built in %s", m.Name, pc.ID, pc.NVMLName, pc.BuiltinName)
			}
		}
		if cond := agent.TablesCondition(got); cond.Status != metav1.ConditionTrue {
			t.Errorf("%s: MIGTablesMatch %s: %s", m.Name, cond.Status, cond.Message)
		}
	}
}
