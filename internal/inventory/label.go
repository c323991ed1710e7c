package inventory

import (
	"strings"

	"github.com/gpupool/gpupool/internal/mig"
)

// Label is the GPU's model as users see and write it everywhere (ProductLabel of what the agent
// reported, or of its node's label). The built-in table's canonical name (mig.Product.Name,
// e.g. H200-141GB) is an internal key that no label carries; it is used only when nothing else
// names the GPU. "" when nothing does.
func (g *GPU) Label() string {
	if name := ProductLabel(g.ProductName, ""); name != "" {
		return name
	}
	if g.Product != nil {
		return g.Product.Name
	}
	return ""
}

// ProductLabel is the one spelling of a GPU model shown to users: the nvidia.com/gpu.product
// label GPU Feature Discovery writes for it, which a policy's catalog names. reported is the
// NVML device name the agent reports (GPUStatus.Product, e.g. "NVIDIA H200"), turned into the
// label as GFD does (mig.ProductLabel); nodeLabel, the node's nvidia.com/gpu.product, is used
// when the agent reported none. The suffixes GFD appends under the single MIG strategy
// (-MIG-<profile>) or when the GPU is shared (-SHARED) are dropped, so a node keeps one name
// whatever its layout.
func ProductLabel(reported, nodeLabel string) string {
	name := mig.ProductLabel(reported)
	if name == "" {
		name = mig.ProductLabel(nodeLabel)
	}
	up := strings.ToUpper(name)
	if i := strings.Index(up, "-MIG-"); i >= 0 {
		name, up = name[:i], up[:i]
	}
	if strings.HasSuffix(up, "-SHARED") {
		name = name[:len(name)-len("-SHARED")]
	}
	return name
}
