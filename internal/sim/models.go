package sim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	"github.com/gpupool/gpupool/internal/agent/nvmlmock"
)

// Model is a GPU model the simulator can put into a node.
type Model struct {
	// Name is the canonical name, as internal/mig names the product (e.g. "H200-141GB").
	Name string
	// ProductLabel is the value GPU Feature Discovery writes into nvidia.com/gpu.product.
	ProductLabel string
	// Aliases are the lower-case short names accepted on the gpusim command line.
	Aliases []string
	// mock is go-nvml's mock table for the model; NVML returns Corrected(mock) with
	// pciDeviceID.
	mock gpus.Config
	// pciDeviceID is the packed PCI device and vendor ID NVML reports (device ID in the high
	// 16 bits), one NVIDIA's mig-parted config matches the model by.
	pciDeviceID uint32
}

// NVML is the table go-nvml's mock server serves for one GPU of the model: the mock with the
// MIG geometry of real devices (nvmlmock.Corrected) and the whole GPU's engine counts
// (engineTotals), or the table derived for a part go-nvml has no mock of (derived.go), with
// the model's PCI device ID.
func (m Model) NVML() gpus.Config {
	c := engineTotals(nvmlmock.Corrected(m.mock))
	c.PciDeviceId = m.pciDeviceID
	return c
}

// models lists the GPU models the simulator knows: those go-nvml has mock tables for, then
// those derived from them. The PCI device IDs are those
// NVIDIA's published mig-parted config filters the models by (NVIDIA/mig-parted
// deployments/systemd/config-default.yaml, all-balanced and all-1g.10gb): H200 0x2335 (0x233B
// is the H200 NVL), H100-80GB 0x2330, A100-80GB 0x20B2, A100-40GB 0x20B0, B200 0x2901, A30
// 0x20B7, all with NVIDIA's vendor ID 0x10DE. go-nvml's H200 (0x2333) and B200 (0x2B00) mocks
// carry IDs that file does not list, so a device-filter written from it would never select
// them.
var models = []Model{
	{Name: "H200-141GB", ProductLabel: "NVIDIA-H200", Aliases: []string{"h200", "h200-141gb"}, mock: gpus.H200_SXM5_141GB, pciDeviceID: 0x233510DE},
	{Name: "H100-80GB", ProductLabel: "NVIDIA-H100-80GB-HBM3", Aliases: []string{"h100", "h100-80gb"}, mock: gpus.H100_SXM5_80GB, pciDeviceID: 0x233010DE},
	{Name: "A100-80GB", ProductLabel: "NVIDIA-A100-SXM4-80GB", Aliases: []string{"a100-80gb"}, mock: gpus.A100_SXM4_80GB, pciDeviceID: 0x20B210DE},
	{Name: "A100-40GB", ProductLabel: "NVIDIA-A100-SXM4-40GB", Aliases: []string{"a100", "a100-40gb"}, mock: gpus.A100_SXM4_40GB, pciDeviceID: 0x20B010DE},
	{Name: "B200", ProductLabel: "NVIDIA-B200", Aliases: []string{"b200", "b200-180gb"}, mock: gpus.B200_SXM5_180GB, pciDeviceID: 0x290110DE},
	{Name: "A30-24GB", ProductLabel: "NVIDIA-A30", Aliases: []string{"a30", "a30-24gb"}, mock: gpus.A30_PCIE_24GB, pciDeviceID: 0x20B710DE},
	// Parts go-nvml has no mock for, derived from one with the same geometry (derived.go), under
	// the device IDs NVIDIA's config filters them by.
	{Name: "H100-94GB", ProductLabel: "NVIDIA-H100-NVL", Aliases: []string{"h100-nvl", "h100-94gb"},
		mock: derived(gpus.H100_SXM5_80GB, "NVIDIA H100 NVL", 94, 0x232110DE), pciDeviceID: 0x232110DE},
	{Name: "H100-96GB", ProductLabel: "NVIDIA-GH200-480GB", Aliases: []string{"gh200", "h100-96gb"},
		mock: derived(gpus.H100_SXM5_80GB, "NVIDIA GH200 480GB", 96, 0x234210DE), pciDeviceID: 0x234210DE},
	{Name: "GH200-144GB", ProductLabel: "NVIDIA-GH200-144G-HBM3e", Aliases: []string{"gh200-144gb"},
		mock: derived(gpus.H200_SXM5_141GB, "NVIDIA GH200 144G HBM3e", 144, 0x234810DE), pciDeviceID: 0x234810DE},
	{Name: "GB200", ProductLabel: "NVIDIA-GB200", Aliases: []string{"gb200"},
		mock: derived(gpus.B200_SXM5_180GB, "NVIDIA GB200", 186, 0x294110DE), pciDeviceID: 0x294110DE},
	{Name: "B300", ProductLabel: "NVIDIA-B300-SXM6-AC", Aliases: []string{"b300"},
		mock: derived(gpus.B200_SXM5_180GB, "NVIDIA B300 SXM6 AC", 269, 0x318210DE), pciDeviceID: 0x318210DE},
	{Name: "GB300", ProductLabel: "NVIDIA-GB300", Aliases: []string{"gb300"},
		mock: derived(gpus.B200_SXM5_180GB, "NVIDIA GB300", 278, 0x31C210DE), pciDeviceID: 0x31C210DE},
	{Name: "RTX-PRO-6000-Blackwell", ProductLabel: "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", Aliases: []string{"rtx-pro-6000"},
		mock: rtxPro6000Blackwell(), pciDeviceID: 0x2BB510DE},
}

// Models returns the GPU models the simulator knows, in a fixed order.
func Models() []Model { return slices.Clone(models) }

// LookupModel finds a model by canonical name or alias, ignoring case.
func LookupModel(name string) (Model, error) {
	for _, m := range models {
		if strings.EqualFold(m.Name, name) || slices.Contains(m.Aliases, strings.ToLower(name)) {
			return m, nil
		}
	}
	var known []string
	for _, m := range models {
		known = append(known, m.Aliases[0])
	}
	return Model{}, fmt.Errorf("unknown GPU model %q (known: %s)", name, strings.Join(known, ", "))
}
