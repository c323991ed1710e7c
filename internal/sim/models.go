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
	// mock is go-nvml's mock table for the model; NVML returns Corrected(mock).
	mock gpus.Config
}

// config is the mock table with the MIG geometry of real devices (design.md section 6).
func (m Model) config() gpus.Config { return nvmlmock.Corrected(m.mock) }

// models lists the GPU models go-nvml has mock tables for.
var models = []Model{
	{Name: "H200-141GB", ProductLabel: "NVIDIA-H200", Aliases: []string{"h200", "h200-141gb"}, mock: gpus.H200_SXM5_141GB},
	{Name: "H100-80GB", ProductLabel: "NVIDIA-H100-80GB-HBM3", Aliases: []string{"h100", "h100-80gb"}, mock: gpus.H100_SXM5_80GB},
	{Name: "A100-80GB", ProductLabel: "NVIDIA-A100-SXM4-80GB", Aliases: []string{"a100-80gb"}, mock: gpus.A100_SXM4_80GB},
	{Name: "A100-40GB", ProductLabel: "NVIDIA-A100-SXM4-40GB", Aliases: []string{"a100", "a100-40gb"}, mock: gpus.A100_SXM4_40GB},
	{Name: "B200", ProductLabel: "NVIDIA-B200", Aliases: []string{"b200", "b200-180gb"}, mock: gpus.B200_SXM5_180GB},
	{Name: "A30-24GB", ProductLabel: "NVIDIA-A30", Aliases: []string{"a30", "a30-24gb"}, mock: gpus.A30_PCIE_24GB},
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
