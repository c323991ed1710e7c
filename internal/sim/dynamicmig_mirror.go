// The simulated DynamicMIG kubelet plugin at work: publishing at start, and carving the
// instances that the claims allocated from the node's pool name (see dynamicmig.go).

package sim

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// dynamicMIGPlugin is the plugin's part of a node's reconcile: at its first run it reads the
// partitions from NVML, destroys the instances no allocated claim holds and publishes; then
// it keeps NVML's instances those the allocated claims name.
func (r *reconciler) dynamicMIGPlugin(ctx context.Context, n *Node, labels map[string]string) error {
	if labels[labelDeployClient] != "true" {
		return nil // the plugin's DaemonSet does not run here
	}
	var claims resourcev1.ResourceClaimList
	if err := r.client.List(ctx, &claims); err != nil {
		return fmt.Errorf("DynamicMIG kubelet plugin on node %s: listing ResourceClaims: %w", n.name, err)
	}
	n.dynamic.mu.Lock()
	defer n.dynamic.mu.Unlock()
	var specs []resourcev1.ResourceSliceSpec
	if !n.dynamic.started {
		var table map[string]partition
		var err error
		if specs, table, err = n.dynamicMIGResources(); err != nil {
			return fmt.Errorf("DynamicMIG kubelet plugin: %w", err)
		}
		n.dynamic.partitions = table
	}
	refused, err := n.mirrorClaims(allocatedPartitions(n.name, n.dynamic.partitions, claims.Items))
	if err != nil {
		return fmt.Errorf("DynamicMIG kubelet plugin on node %s: %w", n.name, err)
	}
	for _, e := range refused {
		// The driver's NodePrepareResources fails the same way, and the kubelet retries it.
		logf.FromContext(ctx).Info("DynamicMIG kubelet plugin: cannot create the claim's MIG device", "reason", e.Error())
	}
	if !n.dynamic.started {
		if err := r.publishSlices(ctx, n, specs); err != nil {
			return err
		}
		n.dynamic.started = true
		logf.FromContext(ctx).Info("DynamicMIG kubelet plugin started: published the node's partitions",
			"slices", len(specs), "partitions", len(n.dynamic.partitions))
	}
	return nil
}

// publishSlices writes the plugin's slices, named <node>-<driver>-<k> (the driver's are named
// by the API server: select them by driver and node), all at the pool's next generation.
func (r *reconciler) publishSlices(ctx context.Context, n *Node, specs []resourcev1.ResourceSliceSpec) error {
	objs := make([]*resourcev1.ResourceSlice, len(specs))
	var generation int64
	for k := range specs {
		objs[k] = &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", n.name, draDriverName, k)}}
		if err := r.client.Get(ctx, client.ObjectKeyFromObject(objs[k]), objs[k]); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("reading ResourceSlice %s: %w", objs[k].Name, err)
		}
		generation = max(generation, objs[k].Spec.Pool.Generation)
	}
	for k, obj := range objs {
		if _, err := controllerutil.CreateOrUpdate(ctx, r.client, obj, func() error {
			obj.Spec = specs[k]
			obj.Spec.Pool.Generation = generation + 1
			return nil
		}); err != nil {
			return fmt.Errorf("publishing ResourceSlice %s of node %s: %w", obj.Name, n.name, err)
		}
	}
	return nil
}

// allocatedPartitions maps the partitions that claims allocated from the node's pool name to
// the claim holding each (namespace/name). Results of other drivers, pools or of the GPU
// device itself carve nothing.
func allocatedPartitions(pool string, table map[string]partition, claims []resourcev1.ResourceClaim) map[string]string {
	out := map[string]string{}
	for i := range claims {
		c := &claims[i]
		if c.Status.Allocation == nil {
			continue
		}
		for _, res := range c.Status.Allocation.Devices.Results {
			if res.Driver != draDriverName || res.Pool != pool {
				continue
			}
			if _, ok := table[res.Device]; ok {
				out[res.Device] = c.Namespace + "/" + c.Name
			}
		}
	}
	return out
}

// mirrorClaims makes NVML hold exactly the instances of the wanted partitions (device name to
// claim): first it destroys every instance no wanted partition is, disabling MIG mode where
// the last one went on a GPU that toggles it, then it creates each missing one at its
// placement. A creation NVML refuses (its slices are taken) is returned in refused, with the
// claim; err is a failure of NVML itself.
func (n *Node) mirrorClaims(wanted map[string]string) (refused []error, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	type key struct {
		gpu, start int
		profile    string
	}
	want := map[key]string{}
	for name := range wanted {
		p := n.dynamic.partitions[name]
		want[key{p.GPU, p.Start, p.Profile}] = name
	}
	gpus, err := n.GPUs()
	if err != nil {
		return nil, err
	}
	for _, g := range gpus {
		destroyed := false
		var kept []InstanceState
		for _, in := range g.Instances {
			if _, ok := want[key{g.Index, in.Start, in.Profile}]; ok {
				kept = append(kept, in)
				continue
			}
			if err := n.destroyInstance(g.Index, in); err != nil {
				return nil, err
			}
			destroyed = true
		}
		if destroyed && len(kept) == 0 {
			if err := n.maybeDisableMIG(g.Index); err != nil {
				return nil, err
			}
		}
	}
	have := map[key]bool{}
	for _, g := range gpus {
		for _, in := range g.Instances {
			have[key{g.Index, in.Start, in.Profile}] = true
		}
	}
	for _, name := range slices.Sorted(maps.Values(want)) {
		p := n.dynamic.partitions[name]
		if have[key{p.GPU, p.Start, p.Profile}] {
			continue
		}
		ret, err := n.createInstance(p)
		switch {
		case err == nil:
		case ret != nvml.SUCCESS:
			refused = append(refused, fmt.Errorf("claim %s: device %s: %w", wanted[name], name, err))
		default:
			return refused, err
		}
	}
	return refused, nil
}

// destroyInstance destroys GPU i's instance in: its compute instances, then the GPU instance
// (nvlib.go deleteMigDevice).
func (n *Node) destroyInstance(i int, in InstanceState) error {
	d, err := n.device(i)
	if err != nil {
		return err
	}
	for _, p := range n.profiles[i] {
		if p.slot.Name != in.Profile {
			continue
		}
		list, ret := d.GetGpuInstances(&p.info)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: GetGpuInstances(%s): %s", i, p.slot.Name, ret.Error())
		}
		for _, gi := range list {
			info, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return fmt.Errorf("GPU %d: GpuInstance.GetInfo: %s", i, ret.Error())
			}
			if int(info.Placement.Start) != in.Start {
				continue
			}
			return destroyGPUInstance(i, gi, fmt.Sprintf("%s at %d", in.Profile, in.Start))
		}
	}
	return fmt.Errorf("GPU %d: no GPU instance %s at %d to destroy", i, in.Profile, in.Start)
}

// maybeDisableMIG disables MIG mode on GPU i, which just lost its last instance, when it
// toggles the mode without a reset (nvlib.go maybeDisableMigMode).
func (n *Node) maybeDisableMIG(i int) error {
	d, err := n.device(i)
	if err != nil {
		return err
	}
	arch, ret := d.GetArchitecture()
	if ret != nvml.SUCCESS || arch < nvml.DEVICE_ARCH_HOPPER {
		return nil
	}
	if ret, _ := d.SetMigMode(nvml.DEVICE_MIG_DISABLE); ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d: SetMigMode(disable): %s", i, ret.Error())
	}
	return nil
}

// createInstance enables MIG mode if needed and creates p's GPU instance at its placement with
// one compute instance spanning it (nvlib.go createMigDevice). When NVML refuses, refusal is
// its answer; it is SUCCESS when the error is not NVML's answer.
func (n *Node) createInstance(p partition) (refusal nvml.Return, err error) {
	d, err := n.device(p.GPU)
	if err != nil {
		return nvml.SUCCESS, err
	}
	mode, _, ret := d.GetMigMode()
	if ret != nvml.SUCCESS {
		return nvml.SUCCESS, fmt.Errorf("GPU %d: GetMigMode: %s", p.GPU, ret.Error())
	}
	if mode != nvml.DEVICE_MIG_ENABLE {
		if ret, _ := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
			return ret, fmt.Errorf("GPU %d: SetMigMode(enable): %s", p.GPU, ret.Error())
		}
	}
	gi, ret := d.CreateGpuInstanceWithPlacement(&p.info, &nvml.GpuInstancePlacement{Start: uint32(p.Start), Size: uint32(p.Size)})
	if ret != nvml.SUCCESS {
		return ret, fmt.Errorf("GPU %d: CreateGpuInstanceWithPlacement(%s at %d): %w", p.GPU, p.Profile, p.Start, ret)
	}
	ciInfo, err := spanningComputeProfile(gi, p.info.SliceCount)
	if err != nil {
		return nvml.SUCCESS, fmt.Errorf("GPU %d: %s at %d: %w", p.GPU, p.Profile, p.Start, err)
	}
	if _, ret := gi.CreateComputeInstance(&ciInfo); ret != nvml.SUCCESS {
		return ret, fmt.Errorf("GPU %d: CreateComputeInstance(%s at %d): %s", p.GPU, p.Profile, p.Start, ret.Error())
	}
	return nvml.SUCCESS, nil
}

// nodesForClaim maps a ResourceClaim event to the DynamicMIG nodes whose pools its allocation
// names; an update maps both the old and the new claim, so a deallocation reaches the node.
func (r *reconciler) nodesForClaim(_ context.Context, o client.Object) []ctrl.Request {
	c, ok := o.(*resourcev1.ResourceClaim)
	if !ok || c.Status.Allocation == nil {
		return nil
	}
	var out []ctrl.Request
	for _, res := range c.Status.Allocation.Devices.Results {
		if n, ok := r.nodes[res.Pool]; ok && n.dynamicMIG && res.Driver == draDriverName {
			req := ctrl.Request{}
			req.Name = n.name
			if !slices.Contains(out, req) {
				out = append(out, req)
			}
		}
	}
	return out
}
