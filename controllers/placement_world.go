package controllers

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/rollout"
)

// placementWorld is what a placement step is judged by, read in one go from the manager's
// cache: the driver's ResourceSlices and the ResourceClaims.
type placementWorld struct {
	slices []resourcev1.ResourceSlice
	claims []resourcev1.ResourceClaim
}

func (r *PlanReconciler) readPlacementWorld(ctx context.Context) (placementWorld, error) {
	var w placementWorld
	if !r.readSlices {
		return w, nil
	}
	var sl resourcev1.ResourceSliceList
	if err := r.Client.List(ctx, &sl); err != nil {
		return w, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	var cl resourcev1.ResourceClaimList
	if err := r.Client.List(ctx, &cl); err != nil {
		return w, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	w.slices, w.claims = sl.Items, cl.Items
	return w, nil
}

// poolSlices are the slices of driver's pool, its newest generation only (the scheduler
// allocates from that one: k8s.io/dynamic-resource-allocation v0.37.2
// structured/internal/stable/pools_stable.go), and whether any publishes partitionable devices
// or counter sets, which only the DynamicMIG mode does (inventory.DynamicMIGNodes).
func (w placementWorld) poolSlices(driver, pool string) (out []resourcev1.ResourceSlice, dynamic bool) {
	newest := int64(-1)
	for i := range w.slices {
		if s := &w.slices[i].Spec; s.Driver == driver && s.Pool.Name == pool {
			newest = max(newest, s.Pool.Generation)
		}
	}
	for i := range w.slices {
		s := &w.slices[i].Spec
		if s.Driver != driver || s.Pool.Name != pool || s.Pool.Generation != newest {
			continue
		}
		out = append(out, w.slices[i])
		dynamic = dynamic || len(s.SharedCounters) > 0 ||
			slices.ContainsFunc(s.Devices, func(d resourcev1.Device) bool { return len(d.ConsumesCounters) > 0 })
	}
	return out, dynamic
}

// partitions reads the devices of driver's pool on node from their attributes and counters
// (NVIDIA's driver: type, parentUUID or uuid, profile, memory-slice-<i>; cmd/gpu-kubelet-plugin/
// partitions.go and mig.go), never from their names; profiles are canonical for the GPU's
// product, and GPUs numbered as the agent reports them.
func (w placementWorld) partitions(driver string, node *corev1.Node, report *v1alpha1.GPUNode) (map[string]rollout.PartitionFact, bool) {
	pool, dynamic := w.poolSlices(driver, node.Name)
	supply := inventory.DynamicMIGSupply(node, report, nil, nil)
	byUUID := map[string]*inventory.DynamicMIGGPU{}
	for _, g := range supply.GPUs {
		byUUID[g.UUID] = g
	}
	out := map[string]rollout.PartitionFact{}
	for i := range pool {
		for j := range pool[i].Spec.Devices {
			d := &pool[i].Spec.Devices[j]
			str := func(name resourcev1.QualifiedName) string {
				if a := d.Attributes[name]; a.StringValue != nil {
					return *a.StringValue
				}
				return ""
			}
			fact := rollout.PartitionFact{GPU: -1}
			uuid := str("uuid")
			if str("type") == "mig" {
				fact.Profile, uuid = str("profile"), str("parentUUID")
			}
			lo, hi := -1, -1
			for _, c := range d.ConsumesCounters {
				for name, v := range c.Counters {
					s, ok := strings.CutPrefix(name, "memory-slice-")
					if i, err := strconv.Atoi(s); ok && err == nil && v.Value.Value() > 0 {
						if lo < 0 || i < lo {
							lo = i
						}
						hi = max(hi, i)
					}
				}
			}
			if g := byUUID[uuid]; g != nil && uuid != "" {
				fact.GPU = g.Index
				fact.Profile = canonicalProfile(g.Product, fact.Profile)
				if lo < 0 && fact.Profile == "" && g.Product != nil {
					lo, hi = 0, g.Product.MemorySlices-1 // a whole GPU published without counters
				}
			}
			if lo >= 0 {
				fact.Start, fact.Size = lo, hi-lo+1
			}
			out[d.Name] = fact
		}
	}
	return out, dynamic
}

// canonicalProfile is a profile's name in the product's MIG table, the name itself when the
// table does not know it.
func canonicalProfile(p *mig.Product, name string) string {
	if p != nil && name != "" {
		if pr, ok := p.Profile(name); ok {
			return pr.Name
		}
	}
	return name
}

// heldBy are the devices of driver's pool on node that the pod's allocated claims hold: claims
// in its namespace reserved for it, by name and UID.
func (w placementWorld) heldBy(driver, node, namespace, name string, uid types.UID) []string {
	var out []string
	for i := range w.claims {
		c := &w.claims[i]
		if c.Namespace != namespace || c.Status.Allocation == nil || !slices.ContainsFunc(c.Status.ReservedFor,
			func(ref resourcev1.ResourceClaimConsumerReference) bool {
				return ref.APIGroup == "" && ref.Resource == "pods" && ref.Name == name && ref.UID == uid
			}) {
			continue
		}
		for _, res := range c.Status.Allocation.Devices.Results {
			if res.Driver == driver && res.Pool == node {
				out = append(out, res.Device)
			}
		}
	}
	return out
}

// claim finds a ResourceClaim.
func (w placementWorld) claim(ref v1alpha1.PodReference) *resourcev1.ResourceClaim {
	i := slices.IndexFunc(w.claims, func(c resourcev1.ResourceClaim) bool { return c.Namespace == ref.Namespace && c.Name == ref.Name })
	if i < 0 {
		return nil
	}
	return &w.claims[i]
}

// placementFacts reads what CheckPlacement judges the step by; the claim is judged only before
// the step starts (afterwards its allocation is the step's goal).
func (r *PlanReconciler) placementFacts(w placementWorld, step v1alpha1.NodeStep, node *corev1.Node,
	report *v1alpha1.GPUNode, starting bool) (rollout.PlacementFacts, error) {
	p := step.Placement
	var f rollout.PlacementFacts
	f.Devices, f.DynamicMIG = w.partitions(p.Driver, node, report)
	f.Pods = map[string]rollout.PodHold{}
	for _, e := range step.Evictions {
		pod, err := r.pods.Get(types.NamespacedName{Namespace: e.Namespace, Name: e.Name})
		if err != nil {
			return f, fmt.Errorf("reading pod %s/%s: %w", e.Namespace, e.Name, err)
		}
		if pod == nil || pod.NodeName != step.Node || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		f.Pods[e.Namespace+"/"+e.Name] = rollout.PodHold{UID: string(pod.UID),
			Devices: w.heldBy(p.Driver, step.Node, e.Namespace, e.Name, pod.UID)}
	}
	if starting {
		c := w.claim(p.Claim)
		f.ClaimRead, f.ClaimExists = true, c != nil
		f.ClaimAllocated = c != nil && c.Status.Allocation != nil
	}
	return f, nil
}

// stepProfile is the step's profile as the GPU's MIG table names it.
func stepProfile(step v1alpha1.NodeStep, node *corev1.Node, report *v1alpha1.GPUNode) v1alpha1.NodeStep {
	supply := inventory.DynamicMIGSupply(node, report, nil, nil)
	i := slices.IndexFunc(supply.GPUs, func(g *inventory.DynamicMIGGPU) bool { return g.Index == int(step.Placement.GPU) })
	if i < 0 {
		return step
	}
	out := *step.DeepCopy()
	out.Placement.Profile = v1alpha1.MIGProfileName(canonicalProfile(supply.GPUs[i].Product, string(step.Placement.Profile)))
	return out
}

// allocatedAt says where a claim was allocated ("" while it is not) and whether that is the
// step's own device.
func allocatedAt(c *resourcev1.ResourceClaim, step v1alpha1.NodeStep) (string, bool) {
	if c == nil || c.Status.Allocation == nil {
		return "", false
	}
	p := step.Placement
	var where []string
	planned := false
	for _, res := range c.Status.Allocation.Devices.Results {
		where = append(where, fmt.Sprintf("device %s of pool %s", res.Device, res.Pool))
		planned = planned || (res.Driver == p.Driver && res.Pool == step.Node && res.Device == p.Device)
	}
	if len(where) == 0 {
		return "no device", false
	}
	return strings.Join(where, " and "), planned
}

// landingGone says why the pods still to be evicted no longer have the landing the plan counted
// on ("" when they do): each must find, on its landing node, a free partition of its profile
// outside the devices the step keeps free and the placement it opens. Landings on nodes where
// the driver does not run DynamicMIG are not judged here.
func (r *PlanReconciler) landingGone(ctx context.Context, w placementWorld, step v1alpha1.NodeStep, devices map[string]rollout.PartitionFact,
	pods map[string]rollout.PodHold) (string, error) {
	supplies := map[string]*inventory.DynamicMIGNode{}
	for _, e := range step.Evictions {
		key := e.Namespace + "/" + e.Name
		h, ok := pods[key]
		if !ok || h.UID != e.UID || e.LandingNode == "" {
			continue
		}
		profile := ""
		for _, d := range h.Devices {
			if dev, ok := devices[d]; ok && dev.Profile != "" {
				profile = dev.Profile
			}
		}
		if profile == "" {
			continue
		}
		supply, err := r.landingSupply(ctx, w, step, e.LandingNode, supplies)
		if err != nil {
			return "", err
		}
		if supply == nil {
			continue
		}
		if supply.GPUs == nil {
			return fmt.Sprintf("node %s, where pod %s moves, has no GPU report any more", e.LandingNode, key), nil
		}
		placed := false
		for _, g := range supply.GPUs {
			if f := g.Fit(profile); f.Kind == inventory.FitFree {
				hold(g, f.At, "landing of "+key) // the next pod for this node needs other slices
				placed = true
				break
			}
		}
		if !placed {
			return fmt.Sprintf("node %s no longer offers a free %s partition outside the devices the step keeps free for pod %s: "+
				"the landing was taken, so the plan is made again", e.LandingNode, profile, key), nil
		}
	}
	return "", nil
}

// landingSupply reads a landing node as the scheduler's allocator sees it, with the slices the
// step opens counted as held when the landing is the step's own node; nil when the driver does
// not run DynamicMIG there.
func (r *PlanReconciler) landingSupply(ctx context.Context, w placementWorld, step v1alpha1.NodeStep,
	name string, cache map[string]*inventory.DynamicMIGNode) (*inventory.DynamicMIGNode, error) {
	if s, ok := cache[name]; ok {
		return s, nil
	}
	pool, dynamic := w.poolSlices(step.Placement.Driver, name)
	if !dynamic {
		cache[name] = nil
		return nil, nil
	}
	node, report := &corev1.Node{}, &v1alpha1.GPUNode{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, node); apierrors.IsNotFound(err) {
		cache[name] = &inventory.DynamicMIGNode{Node: name}
		return cache[name], nil
	} else if err != nil {
		return nil, fmt.Errorf("reading node %s: %w", name, err)
	}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, report); apierrors.IsNotFound(err) {
		report = nil
	} else if err != nil {
		return nil, fmt.Errorf("reading GPUNode %s: %w", name, err)
	}
	supply := inventory.DynamicMIGSupply(node, report, w.claims, pool)
	if name == step.Node {
		// The slices being opened are the pending claim's. Every device the step keeps free
		// overlaps them (CheckPlacement), so holding them rules those devices out too; holding
		// each kept device's own placement would be wrong, as the whole GPU's spans every slice.
		p := step.Placement
		for _, g := range supply.GPUs {
			if g.Index == int(p.GPU) {
				hold(g, mig.Placement{Start: int(p.Start), Size: int(p.Size)}, "opened by the plan")
			}
		}
	}
	cache[name] = supply
	return supply, nil
}

// hold marks a GPU's free memory slices in pl as held, so that Fit looks elsewhere.
func hold(g *inventory.DynamicMIGGPU, pl mig.Placement, why string) {
	g.Holders = append(g.Holders, inventory.SliceHolder{Claim: why, Placement: pl, Profile: why})
	k := len(g.Holders) - 1
	for s := max(pl.Start, 0); s < min(pl.Start+pl.Size, len(g.Slices)); s++ {
		if g.Slices[s] < 0 {
			g.Slices[s] = k
		}
	}
}
