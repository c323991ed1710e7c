// Where one more instance of a profile could go beside instances that cannot move.

package mig

// FreePlacements lists, ascending by start, the placements the product allows for profile
// whose memory slices none of occupied covers; occupied instances may be of any profile, known
// or not, and placements outside the GPU are clipped. This is the question NVIDIA's DRA driver
// in DynamicMIG mode leaves to the scheduler: there every live instance stays where its claim
// was allocated, and a new one of profile goes only at a free allowed placement
// (cmd/gpu-kubelet-plugin/partitions.go publishes one device per profile and placement, each
// consuming its memory-slice counters). Limits that do not depend on placement (compute
// slices, per-profile counts, media engines) are not checked: Addable and Place do that.
func (p *Product) FreePlacements(profile string, occupied []Instance) ([]Placement, error) {
	g := p.geometry()
	if g.err != nil {
		return nil, g.err
	}
	i := g.resolve(profile)
	if i < 0 {
		return nil, p.unknownProfile(profile)
	}
	used := g.occupied(occupied)
	pr := &g.profs[i]
	var out []Placement
	for j, m := range pr.masks {
		if used&m == 0 {
			out = append(out, Placement{Start: int(pr.starts[j]), Size: int(pr.size)})
		}
	}
	return out, nil
}
