package inventory

import (
	"strings"

	"github.com/gpupool/gpupool/internal/mig"
)

// Label is the GPU's model as users see and write it everywhere: the nvidia.com/gpu.product
// label GPU Feature Discovery writes for it (mig.ProductLabel of the NVML device name), which a
// policy's catalog names. The suffixes GFD appends under the single MIG strategy (-MIG-<profile>)
// or when the GPU is shared (-SHARED) are dropped, so a node keeps one name whatever its layout.
// The built-in table's canonical name (mig.Product.Name, e.g. H200-141GB) is an internal key
// that no label carries; it is used only when nothing else names the GPU. "" when nothing does.
func (g *GPU) Label() string {
	name := mig.ProductLabel(g.ProductName)
	up := strings.ToUpper(name)
	if i := strings.Index(up, "-MIG-"); i >= 0 {
		name, up = name[:i], up[:i]
	}
	if strings.HasSuffix(up, "-SHARED") {
		name = name[:len(name)-len("-SHARED")]
	}
	if name == "" && g.Product != nil {
		return g.Product.Name
	}
	return name
}
