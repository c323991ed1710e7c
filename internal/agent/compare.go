package agent

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
)

// Comparison sets one GPU's profile table as NVML reports it against the
// built-in table of internal/mig, so a single probe on real hardware confirms
// or refutes the placements the planner assumes (BuiltinInferred names the
// tables that are inferred rather than captured).
type Comparison struct {
	// BuiltinProduct is the internal/mig product the GPU was matched to, empty when none.
	BuiltinProduct string `json:"builtinProduct,omitempty"`
	// LookedUpBy says how: "name" (NVML product name) or "pciDeviceID".
	LookedUpBy string `json:"lookedUpBy,omitempty"`
	// BuiltinInferred says why the built-in placements are assumed rather than captured
	// (mig.Product.Inferred); empty when they come from a capture. A probe is what settles them.
	BuiltinInferred string `json:"builtinInferred,omitempty"`
	// Match is true when every profile on either side matches.
	Match bool `json:"match"`
	// Note explains a comparison that could not be made.
	Note string `json:"note,omitempty"`
	// Profiles pairs NVML's and the built-in profiles by NVML profile constant.
	Profiles []ProfileComparison `json:"profiles,omitempty"`
}

// ProfileComparison is one profile as NVML and internal/mig describe it.
type ProfileComparison struct {
	// ID is the NVML GPU-instance profile constant.
	ID int32 `json:"id"`
	// NVMLName is the name derived from NVML's profile info; empty when NVML lacks the profile.
	NVMLName string `json:"nvmlName,omitempty"`
	// BuiltinName is internal/mig's name; empty when the built-in table lacks the profile.
	BuiltinName string `json:"builtinName,omitempty"`
	// NVMLMaxCount is NVML's instance count for the profile.
	NVMLMaxCount int32 `json:"nvmlMaxCount,omitempty"`
	// BuiltinMaxCount is internal/mig's limit for the profile.
	BuiltinMaxCount int32 `json:"builtinMaxCount,omitempty"`
	// NVMLPlacements are what GetGpuInstancePossiblePlacements returned.
	NVMLPlacements []v1alpha1.SlicePlacement `json:"nvmlPlacements"`
	// BuiltinPlacements are internal/mig's placements.
	BuiltinPlacements []v1alpha1.SlicePlacement `json:"builtinPlacements"`
	// Match is true when both sides have the profile with the same placements.
	Match bool `json:"match"`
}

// LookupBuiltin finds the internal/mig product for a GPU, first by NVML
// product name, then by PCI device ID; how is "name" or "pciDeviceID".
func LookupBuiltin(gpu v1alpha1.GPUStatus) (p *mig.Product, how string) {
	if p, ok := mig.LookupProduct(gpu.Product); ok {
		return p, "name"
	}
	if id, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(gpu.PCIDeviceID), "0x"), 16, 32); err == nil {
		if p, ok := mig.LookupProductByPCIID(uint32(id)); ok {
			return p, "pciDeviceID"
		}
	}
	return nil, ""
}

// Compare sets the GPU's NVML profiles against the built-in product it looks
// up to. Profiles are paired by NVML profile constant (names drift across
// drivers); only placements decide Match, since they are what the planner's
// geometry depends on, while names and counts are shown for the reader.
func Compare(gpu v1alpha1.GPUStatus) Comparison {
	p, how := LookupBuiltin(gpu)
	if p == nil {
		return Comparison{Note: fmt.Sprintf("no built-in MIG table for product %q (PCI device ID %s)", gpu.Product, gpu.PCIDeviceID)}
	}
	c := Comparison{BuiltinProduct: p.Name, LookedUpBy: how, BuiltinInferred: p.Inferred}
	if len(gpu.Profiles) == 0 {
		c.Note = "NVML reports no GPU-instance profiles"
		if gpu.MIGMode != nil {
			c.Note += fmt.Sprintf(" (MIG mode %s; NVML lists profiles only while MIG is enabled)", gpu.MIGMode.Current)
		}
	}
	used := make([]bool, len(p.Profiles))
	for _, np := range gpu.Profiles {
		pc := ProfileComparison{
			ID:             np.ID,
			NVMLName:       np.Name,
			NVMLMaxCount:   np.MaxCount,
			NVMLPlacements: slices.Clone(np.Placements),
		}
		if k := builtinIndex(p, np, used); k >= 0 {
			used[k] = true
			bp := &p.Profiles[k]
			pc.BuiltinName = bp.Name
			pc.BuiltinMaxCount = int32(bp.MaxCount)
			pc.BuiltinPlacements = builtinPlacements(bp)
			pc.Match = slices.Equal(pc.NVMLPlacements, pc.BuiltinPlacements)
		}
		c.Profiles = append(c.Profiles, pc)
	}
	for k := range p.Profiles {
		if !used[k] {
			bp := &p.Profiles[k]
			c.Profiles = append(c.Profiles, ProfileComparison{
				ID:                int32(bp.ID),
				BuiltinName:       bp.Name,
				BuiltinMaxCount:   int32(bp.MaxCount),
				BuiltinPlacements: builtinPlacements(bp),
			})
		}
	}
	slices.SortStableFunc(c.Profiles, func(a, b ProfileComparison) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), strings.Compare(a.BuiltinName, b.BuiltinName))
	})
	c.Match = len(c.Profiles) > 0
	for _, pc := range c.Profiles {
		c.Match = c.Match && pc.Match
	}
	return c
}

// builtinIndex pairs an NVML profile with a built-in one: by ID and memory
// slices (internal/mig's key) when NVML's placements give the size, else by ID
// alone so that a size disagreement shows up as a mismatch, not a gap.
func builtinIndex(p *mig.Product, np v1alpha1.GPUInstanceProfile, used []bool) int {
	if len(np.Placements) > 0 {
		if bp, ok := p.ProfileByID(int(np.ID), int(np.Placements[0].Size)); ok {
			for k := range p.Profiles {
				if &p.Profiles[k] == bp && !used[k] {
					return k
				}
			}
		}
	}
	for k := range p.Profiles {
		if p.Profiles[k].ID == int(np.ID) && !used[k] {
			return k
		}
	}
	return -1
}

func builtinPlacements(bp *mig.Profile) []v1alpha1.SlicePlacement {
	out := make([]v1alpha1.SlicePlacement, len(bp.Placements))
	for i, pl := range bp.Placements {
		out[i] = v1alpha1.SlicePlacement{Start: int32(pl.Start), Size: int32(pl.Size)}
	}
	return out
}

// ProbeReport is what `agent --probe` prints: the node's inventory as the
// agent would publish it, with each GPU's comparison against internal/mig.
type ProbeReport struct {
	// Node is the node name the agent was given, if any.
	Node string `json:"node,omitempty"`
	// GPUs in NVML index order.
	GPUs []ProbeGPU `json:"gpus"`
	// PodResources says whether pods were attributed, or why not.
	PodResources string `json:"podResources,omitempty"`
	// UnmatchedDevices are device IDs the kubelet assigned that no GPU or MIG device has.
	UnmatchedDevices []string `json:"unmatchedDevices,omitempty"`
}

// ProbeGPU is one GPU's published status with its comparison.
type ProbeGPU struct {
	v1alpha1.GPUStatus
	// Comparison of NVML's profile table with internal/mig's.
	Comparison Comparison `json:"comparison"`
}

// NewProbeReport pairs each GPU with its comparison.
func NewProbeReport(node string, gpus []v1alpha1.GPUStatus) ProbeReport {
	r := ProbeReport{Node: node, GPUs: make([]ProbeGPU, len(gpus))}
	for i, g := range gpus {
		r.GPUs[i] = ProbeGPU{GPUStatus: g, Comparison: Compare(g)}
	}
	return r
}

// ReasonNoProfilesReported is the GPUNode's MIGTablesMatch reason when NVML lists no profiles
// to compare; the others are v1alpha1.Reason*, shared with the policy's condition.
const ReasonNoProfilesReported = "NoProfilesReported"

// TablesCondition is the GPUNode's MIGTablesMatch condition: each GPU's profile table as
// NVML reports it against gpupool's built-in table for the product (Compare), naming the GPU
// and every profile that differs. The planner uses the reported table either way; the
// condition makes an error in the built-in table, or a GPU it lacks, visible on the node.
func TablesCondition(gpus []v1alpha1.GPUStatus) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionMIGTablesMatch}
	var differ, unknown, matched []string
	for _, g := range gpus {
		if len(g.Profiles) == 0 {
			continue
		}
		cmp := Compare(g)
		switch {
		case cmp.BuiltinProduct == "":
			unknown = append(unknown, fmt.Sprintf("GPU %d (%s)", g.Index, g.Product))
		case !cmp.Match:
			differ = append(differ, fmt.Sprintf("GPU %d (%s): %s", g.Index, cmp.BuiltinProduct, strings.Join(profileDiffs(cmp), ", ")))
		default:
			matched = append(matched, strconv.Itoa(int(g.Index)))
		}
	}
	switch {
	case len(differ) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonDeviceTableDiffers
		c.Message = "NVML's MIG profile table differs from gpupool's built-in one, and gpupool plans with NVML's: " + strings.Join(differ, "; ")
	case len(unknown) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, v1alpha1.ReasonNoBuiltinTable
		c.Message = "no built-in MIG table for " + strings.Join(unknown, ", ") + "; gpupool plans with NVML's table alone"
	case len(matched) > 0:
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonTablesMatch
		c.Message = "the MIG profile table of GPU(s) " + strings.Join(matched, ", ") + " matches gpupool's built-in one"
	default:
		c.Status, c.Reason = metav1.ConditionUnknown, ReasonNoProfilesReported
		c.Message = "NVML lists no MIG profiles (it does only while MIG is enabled)"
	}
	if len(c.Message) > maxConditionMessage {
		c.Message = c.Message[:maxConditionMessage-3] + "..."
	}
	return c
}

// maxConditionMessage keeps a condition message well inside the API's 32768-byte limit.
const maxConditionMessage = 4096

// profileDiffs names the profiles a comparison found different, by the device's name when NVML
// has the profile.
func profileDiffs(c Comparison) []string {
	var out []string
	for _, pc := range c.Profiles {
		switch {
		case pc.Match:
		case pc.NVMLName == "":
			out = append(out, pc.BuiltinName+" is built in, NVML does not offer it")
		case pc.BuiltinName == "":
			out = append(out, pc.NVMLName+" is offered by NVML, not built in")
		default:
			out = append(out, fmt.Sprintf("%s at %s (built in: %s)", pc.NVMLName, placementsText(pc.NVMLPlacements), placementsText(pc.BuiltinPlacements)))
		}
	}
	return out
}

// placementsText renders reported placements as mig.PlacementsText does built-in ones.
func placementsText(ps []v1alpha1.SlicePlacement) string {
	out := make([]mig.Placement, len(ps))
	for i, p := range ps {
		out[i] = mig.Placement{Start: int(p.Start), Size: int(p.Size)}
	}
	return mig.PlacementsText(out)
}
