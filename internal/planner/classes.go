package planner

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/mig"
)

// class is a group of pending pods with identical needs and constraints. Real demand comes
// from a few Deployments and Jobs, so grouping turns 50,000 pods into a few dozen classes
// and lets the planner fit them in bulk.
type class struct {
	id       int
	priority int32
	sample   *demand.Request
	pods     []types.NamespacedName // in serving order
	left     int                    // pods not yet served
	mig      map[string]int64       // requested profile -> count per pod
	whole    int64                  // whole GPUs per pod
	shared   bool                   // time-sliced or MPS replicas
	// sharedProfile is the MIG profile whose replicas a shared class asks for; empty for
	// replicas of whole GPUs (nvidia.com/gpu.shared).
	sharedProfile string
	// sharedReplicas is how many replicas one pod of a shared class takes.
	sharedReplicas int64
	vec            []int64 // non-GPU requests per resource dimension
	// slices is the compute slices one pod takes, to break ties toward serving more GPU.
	slices int
	// multi is true when one pod needs several instances of a profile or several whole GPUs,
	// which one GPU may not offer alone.
	multi bool
}

// dims indexes the non-GPU resources that pending pods request, so that fits compare small
// integer vectors instead of resource lists.
type dims struct {
	names []corev1.ResourceName
}

// newDims indexes what pending pods request and what running pods that a plan may move
// request: a moved pod's landing must have those free too.
func newDims(reqs []demand.Request, running []corev1.ResourceList) *dims {
	seen := map[corev1.ResourceName]bool{}
	d := &dims{}
	add := func(list corev1.ResourceList) {
		for name := range list {
			if _, _, isGPU := demand.Classify(name); isGPU || seen[name] {
				continue
			}
			seen[name] = true
			d.names = append(d.names, name)
		}
	}
	for i := range reqs {
		add(reqs[i].Requests)
	}
	for _, list := range running {
		add(list)
	}
	slices.Sort(d.names)
	return d
}

// vector reads a resource list in dims order.
func (d *dims) vector(list corev1.ResourceList) []int64 {
	v := make([]int64, len(d.names))
	for i, name := range d.names {
		v[i] = demand.Quantity(list, name)
	}
	return v
}

// free is a node's allocatable minus requested in dims order.
func (d *dims) free(n *inventory.Node) []int64 {
	v := make([]int64, len(d.names))
	for i, name := range d.names {
		v[i] = n.Free(name)
	}
	return v
}

// groupClasses groups pending requests; classes come out in serving order (priority, then the
// order demand.Pending sorted their first pod in).
func groupClasses(reqs []demand.Request, d *dims) []*class {
	byKey := map[string]*class{}
	var classes []*class
	for i := range reqs {
		r := &reqs[i]
		key := classKey(r)
		c, ok := byKey[key]
		if !ok {
			c = &class{id: len(classes), priority: r.Priority, sample: r, mig: map[string]int64{}, vec: d.vector(r.Requests)}
			for _, g := range r.GPUs {
				switch g.Kind {
				case demand.KindMIG:
					c.mig[g.Profile] += g.Count
					c.slices += int(g.Count) * mig.ComputeSlices(g.Profile)
				case demand.KindGPU:
					c.whole += g.Count
					c.slices += int(g.Count) * 7
				case demand.KindShared:
					c.shared = true
					c.sharedProfile = g.Profile
					c.sharedReplicas += g.Count
				}
			}
			byKey[key] = c
			classes = append(classes, c)
		}
		c.pods = append(c.pods, r.Pod)
		c.left++
		c.multi = c.whole > 1 || slices.ContainsFunc(slices.Collect(maps.Values(c.mig)), func(n int64) bool { return n > 1 })
	}
	// Within a priority, larger requests first: they are what fragmentation strands, and
	// placing them first packs better (first fit decreasing); among equals, oldest first.
	slices.SortStableFunc(classes, func(a, b *class) int {
		return cmp.Or(cmp.Compare(b.priority, a.priority), cmp.Compare(b.slices, a.slices))
	})
	for i, c := range classes {
		c.id = i
	}
	return classes
}

// classKey is everything that decides where and how a pod fits. It is built without fmt:
// grouping runs over every pending pod on every pass.
func classKey(r *demand.Request) string {
	var b strings.Builder
	b.WriteString(strconv.FormatInt(int64(r.Priority), 10))
	names := make([]string, 0, len(r.Requests))
	for name := range r.Requests {
		names = append(names, string(name))
	}
	slices.Sort(names)
	for _, name := range names {
		q := r.Requests[corev1.ResourceName(name)]
		b.WriteByte('|')
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(strconv.FormatInt(q.MilliValue(), 10))
	}
	if len(r.NodeSelector) > 0 {
		keys := slices.Sorted(maps.Keys(r.NodeSelector))
		for _, k := range keys {
			b.WriteString("|sel:")
			b.WriteString(k)
			b.WriteByte('=')
			b.WriteString(r.NodeSelector[k])
		}
	}
	if r.RequiredAffinity != nil {
		b.WriteString("|aff:")
		b.WriteString(r.RequiredAffinity.String())
	}
	for _, t := range r.Tolerations {
		b.WriteString("|tol:")
		b.WriteString(t.String())
	}
	if r.ViaClaims {
		b.WriteString("|dra")
	}
	return b.String()
}

// needs describes what one pod of a class takes from a node with a given product: per
// profile index of that product, the instances; ok is false when the product lacks a profile.
func (c *class) needs(p *mig.Product, index map[string]int) (perProfile []int, ok bool) {
	if len(c.mig) == 0 {
		return nil, true
	}
	perProfile = make([]int, len(index))
	for profile, n := range c.mig {
		pr, found := p.Profile(profile)
		if !found {
			return nil, false
		}
		perProfile[index[pr.Name]] += int(n)
	}
	return perProfile, true
}

// describe renders what one pod of the class asks for, e.g. "1 x 3g.71gb".
func (c *class) describe() string {
	var parts []string
	profiles := make([]string, 0, len(c.mig))
	for p := range c.mig {
		profiles = append(profiles, p)
	}
	slices.SortFunc(profiles, mig.CompareProfileNames)
	for _, p := range profiles {
		parts = append(parts, fmt.Sprintf("%d x %s", c.mig[p], p))
	}
	if c.whole > 0 {
		parts = append(parts, fmt.Sprintf("%d whole GPU(s)", c.whole))
	}
	if c.shared {
		parts = append(parts, "shared GPU replicas")
	}
	return strings.Join(parts, " + ")
}
