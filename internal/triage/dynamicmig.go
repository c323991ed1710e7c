// Claim pods on DynamicMIG nodes: free memory slices at no placement the profile allows.

package triage

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/snapshot"
)

// SliceMap is one GPU of a DynamicMIG node as the allocator sees it: which claim holds each
// memory slice, and whether the pod's profile fits.
type SliceMap struct {
	Node string `json:"node"`
	GPU  int    `json:"gpu"`
	// Map has one cell per memory slice: the letter of its holder in Legend, "." when free,
	// e.g. "[A A . . . B . .]".
	Map string `json:"map"`
	// Legend says who each letter is: "A = 1g.18gb at slice 0: pod team/small-0 (claim team/small-0-gpu)".
	Legend []string `json:"legend,omitempty"`
	// Fit is the profile's fit on this GPU (Fits, StrandedByPlacement, NoRoom, Engines,
	// NoProfile) and Reason the sentence behind it.
	Fit    inventory.FitKind `json:"fit"`
	Reason string            `json:"reason"`
	// Notes are where the claims, the driver's slices and NVML disagree on this GPU.
	Notes []string `json:"notes,omitempty"`
}

// noPlanYet is the truth about plans for DynamicMIG nodes: gpupool's planner leaves them alone.
const noPlanYet = "no gpupool plan proposes this yet: the planner leaves DynamicMIG nodes alone and does not move claims (docs/dra.md)"

// explainDynamicMIG answers for a pod whose claims ask NVIDIA's DRA driver for one MIG profile
// when nodes the pod may use run the driver's DynamicMIG mode: the allocator places claims
// first fit and never moves them, so free memory slices may sit at no placement the profile
// allows. It sets the Placement layer with each GPU's slice map when no GPU fits the profile
// and one has enough free slices in count, Scheduling when a GPU fits it now, and returns false
// (leaving v alone) otherwise.
func explainDynamicMIG(s *snapshot.Snapshot, pod *corev1.Pod, v *Verdict) bool {
	dynamic := inventory.DynamicMIGNodes(s.Slices)
	if len(dynamic) == 0 {
		return false
	}
	req, viaClaims, _ := requestsOf(s, pod)
	if !viaClaims || claimReserved(s, pod) {
		return false
	}
	profile, count := "", int64(0)
	for _, name := range sortedNames(req) {
		if kind, p, ok := demand.Classify(name); ok {
			if kind != demand.KindMIG || profile != "" {
				return false // whole GPUs, sharing or several profiles: not this model's question
			}
			profile, count = p, demand.Quantity(req, name)
		}
	}
	if profile == "" {
		return false
	}
	mayRun := map[string]bool{}
	for _, row := range v.Nodes {
		mayRun[row.Node] = row.Placement == "ok"
	}
	var maps []SliceMap
	var stranded, fits []SliceMap
	var fix []string
	for i := range s.Nodes {
		node := &s.Nodes[i]
		if !dynamic[node.Name] || !mayRun[node.Name] {
			continue
		}
		supply := inventory.DynamicMIGSupply(node, reportOf(s, node.Name), s.Claims, s.Slices)
		for k, f := range supply.Fit(profile) {
			m := sliceMap(node.Name, supply.GPUs[k], f)
			maps = append(maps, m)
			switch f.Kind {
			case inventory.FitFree:
				fits = append(fits, m)
			case inventory.FitStranded:
				stranded = append(stranded, m)
				fix = append(fix, fmt.Sprintf("on %s GPU %d, moving %s frees memory slices %d-%d",
					node.Name, f.GPU, holderNames(f.InTheWay), f.Cheapest.Start, f.Cheapest.Start+f.Cheapest.Size-1))
			}
		}
	}
	switch {
	case len(fits) > 0 && count == 1:
		v.Layer, v.Blocking, v.SliceMaps = LayerScheduling, "none", maps
		v.Reason = fmt.Sprintf("on DynamicMIG node %s, %s", fits[0].Node, fits[0].Reason)
		v.Next = "the scheduler's DRA allocator should allocate it shortly; if it stays pending, read the pod's FailedScheduling events"
		return true
	case len(fits) > 0 || len(stranded) == 0:
		return false
	}
	v.Layer, v.Blocking, v.SliceMaps = LayerPlacement, "memory-slice placement", maps
	v.Reason = fmt.Sprintf("NVIDIA's DRA driver (DynamicMIG) places each claim first fit and never moves it: on %s, %s",
		stranded[0].Node, stranded[0].Reason)
	if len(stranded) > 1 {
		v.Reason += fmt.Sprintf(" (and so on %d more GPUs)", len(stranded)-1)
	}
	v.Next = noPlanYet + "; " + fix[0] + " (delete or move that pod, or wait for it to finish, and the scheduler allocates the claim there)"
	return true
}

// claimReserved says whether a claim is already allocated and reserved for the pod: the
// allocator found it a device, and its own slices would read as taken.
func claimReserved(s *snapshot.Snapshot, pod *corev1.Pod) bool {
	for i := range s.Claims {
		c := &s.Claims[i]
		if c.Namespace != pod.Namespace || c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.ReservedFor {
			if r.Resource == "pods" && r.Name == pod.Name && (r.UID == "" || pod.UID == "" || r.UID == pod.UID) {
				return true
			}
		}
	}
	return false
}

// reportOf is the agent's report for node, or nil.
func reportOf(s *snapshot.Snapshot, node string) *v1alpha1.GPUNode {
	i := slices.IndexFunc(s.GPUNodes, func(g v1alpha1.GPUNode) bool { return g.Name == node })
	if i < 0 {
		return nil
	}
	return &s.GPUNodes[i]
}

// sliceMap draws one GPU: a letter per holder, in placement order.
func sliceMap(node string, g *inventory.DynamicMIGGPU, f inventory.PlacementFit) SliceMap {
	m := SliceMap{Node: node, GPU: g.Index, Fit: f.Kind, Reason: f.Reason, Notes: g.Notes}
	cells := make([]string, len(g.Slices))
	for s, k := range g.Slices {
		cells[s] = "."
		if k >= 0 {
			cells[s] = string(rune('A' + k))
		}
	}
	m.Map = "[" + strings.Join(cells, " ") + "]"
	for k, h := range g.Holders {
		what := h.Profile
		if what == "" {
			what = "whole GPU"
		}
		at := fmt.Sprintf("%s at slice %d", what, h.Placement.Start)
		if h.Placement.Size > 1 {
			at = fmt.Sprintf("%s at slices %d-%d", what, h.Placement.Start, h.Placement.Start+h.Placement.Size-1)
		}
		var who []string
		for _, p := range h.Pods {
			who = append(who, "pod "+p.String())
		}
		switch {
		case h.Claim != "" && len(who) > 0:
			who = append(who[:1], append([]string{"(claim " + h.Claim + ")"}, who[1:]...)...)
		case h.Claim != "":
			who = append(who, "claim "+h.Claim+", no pod yet")
		default:
			who = append(who, "(no claim holds it)")
		}
		m.Legend = append(m.Legend, fmt.Sprintf("%c = %s: %s", 'A'+k, at, strings.Join(who, " ")))
	}
	return m
}

// holderNames names what must move: pods where known, else claims.
func holderNames(hs []inventory.SliceHolder) string {
	var names []string
	for _, h := range hs {
		switch {
		case len(h.Pods) > 0:
			for _, p := range h.Pods {
				names = append(names, "pod "+p.String())
			}
		case h.Claim != "":
			names = append(names, "claim "+h.Claim)
		default:
			names = append(names, "the unclaimed "+h.Profile+" instance")
		}
	}
	return strings.Join(names, " and ")
}
