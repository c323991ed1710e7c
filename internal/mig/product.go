// A product's MIG geometry: the Product type, building one from an NVML report, and its profile look-ups.

package mig

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
)

// Limits of the compact representation; real GPUs use 8 memory slices and at
// most 18 profile IDs, so these leave room for NVML reports of future parts.
const (
	// MaxMemorySlices is the most memory slices a Product may have (one uint16 bitmask).
	MaxMemorySlices = 16
	// MaxProfiles is the most profiles a Product may list (one uint64 bitmask of profiles).
	MaxProfiles = 32
	maxCompute  = 64
)

// Product is the MIG geometry of one GPU model. Treat it as immutable once any
// method has been called on it: derived tables are cached on first use.
type Product struct {
	Name string // canonical, e.g. "H200-141GB"
	// Match lists dash-separated token sets matched against nvidia.com/gpu.product
	// label values and NVML names; see LookupProduct. A token written "!X" vetoes
	// the entry when X is present (H100 NVL is a different, 94GB product).
	Match        []string
	PCIDeviceIDs []uint16 // PCI device IDs (vendor 0x10DE) of boards with this geometry
	// Names are device names NVML reports for boards of this product (nvidia-smi's name);
	// each board's nvidia.com/gpu.product label is ProductLabel of its name. The list need
	// not be complete: a policy's catalog is checked against it (a catalog entry's product
	// matches GPUs by substring of either name, or of Name).
	Names         []string
	MemorySlices  int
	ComputeSlices int
	Profiles      []Profile // in catalog order: larger profiles first
	// Inferred says why the placements are believed rather than published or
	// captured from a device; empty when they come from NVIDIA's MIG user guide
	// or an NVML capture. --probe shows it beside NVML's own table.
	Inferred string

	geo atomic.Pointer[geometry]
}

// NewProductFromProfiles builds a Product from what the agent read through
// NVML, so a node's real table overrides the built-in one. Profiles with
// MemorySlices 0 take it from their placements, MaxCount 0 becomes the number
// of placements, and Media and Graphics are read from the name's suffix
// (MediaOf, GraphicsOf) unless set. The
// input is copied and the profiles are put in catalog order.
func NewProductFromProfiles(name string, memorySlices, computeSlices int, profiles []Profile) (*Product, error) {
	p := &Product{
		Name:          name,
		MemorySlices:  memorySlices,
		ComputeSlices: computeSlices,
		Profiles:      make([]Profile, len(profiles)),
	}
	for i, in := range profiles {
		pr := in
		pr.Aliases = slices.Clone(in.Aliases)
		pr.Placements = slices.Clone(in.Placements)
		slices.SortFunc(pr.Placements, func(a, b Placement) int { return a.Start - b.Start })
		if pr.MemorySlices == 0 && len(pr.Placements) > 0 {
			pr.MemorySlices = pr.Placements[0].Size
		}
		if pr.MaxCount == 0 {
			pr.MaxCount = len(pr.Placements)
		}
		if pr.Media == MediaShare {
			pr.Media = MediaOf(pr.Name)
		}
		pr.Graphics = pr.Graphics || GraphicsOf(pr.Name)
		p.Profiles[i] = pr
	}
	slices.SortStableFunc(p.Profiles, compareCatalog)
	g := compile(p)
	if g.err != nil {
		return nil, g.err
	}
	p.geo.Store(g)
	return p, nil
}

// Err reports why the product's table is unusable, or nil; every other method
// treats an unusable product as one on which nothing fits.
func (p *Product) Err() error { return p.geometry().err }

// Profile finds a profile by canonical name or known alias ("7g.79gb"),
// ignoring case; it also accepts the device-plugin resource spelling
// ("nvidia.com/mig-1g.10gb.me"). Other drifted names are not guessed at: a
// near miss such as "1g.6gb" on an A100-40GB is an A30 profile, not a 1g.5gb,
// so unknown names stay unknown and NVML reports are matched by ProfileByID.
func (p *Product) Profile(name string) (*Profile, bool) {
	g := p.geometry()
	i := g.resolve(name)
	if i < 0 {
		return nil, false
	}
	return &p.Profiles[i], true
}

// ProfileByID finds a profile by its NVML ID and memory-slice size, the key
// that survives driver renames.
func (p *Product) ProfileByID(id, memorySlices int) (*Profile, bool) {
	for i := range p.Profiles {
		if p.Profiles[i].ID == id && p.Profiles[i].MemorySlices == memorySlices {
			return &p.Profiles[i], true
		}
	}
	return nil, false
}

// ProfileNames lists the canonical profile names in catalog order.
func (p *Product) ProfileNames() []string {
	out := make([]string, len(p.Profiles))
	for i := range p.Profiles {
		out[i] = p.Profiles[i].Name
	}
	return out
}

// article picks "a" or "an" for a product name as it is read aloud: model
// codes ("H200", "RTX") are spelled letter by letter, words are not.
func article(name string) string {
	if name == "" {
		return "a"
	}
	first := name[0]
	spelled := len(name) == 1 || name[1] >= '0' && name[1] <= '9' || name[1] >= 'A' && name[1] <= 'Z' || name[1] == '-'
	if spelled && strings.IndexByte("AEFHILMNORSX", first) >= 0 {
		return "an"
	}
	if !spelled && strings.IndexByte("AEIOUaeiou", first) >= 0 {
		return "an"
	}
	return "a"
}

func (p *Product) anName() string { return article(p.Name) + " " + p.Name }

var errNilProduct = errors.New("mig: nil product")

func invalidf(p *Product, format string, args ...any) error {
	return fmt.Errorf("mig: product %q: %s", p.Name, fmt.Sprintf(format, args...))
}
