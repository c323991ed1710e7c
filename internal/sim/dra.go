package sim

import (
	"context"
	"fmt"
	"strings"
	"sync"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// The DRA driver stand-in: the kubelet plugin of NVIDIA's DRA driver
// (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1, cmd/gpu-kubelet-plugin) in its static-MIG
// mode, on nodes whose spec says DRA. Written from the driver's source, never from gpupool's
// reader of it (internal/inventory), so that a misreading shows up as a disagreement.
//
//   - One pool per node, named after it; the slices carry the node's name (driver.go).
//   - Each MIG device is named gpu-<parent minor>-mig-<profile without dots, RFC 1123>-<GPU
//     instance profile ID>-<placement start> (mig.go ToCanonicalName), with attributes type
//     "mig", uuid, parentUUID, profile and productName, and capacities memory (bytes) and
//     memorySlice<i> = 1 per memory slice it spans (mig.go, deviceinfo.go). A GPU with MIG
//     disabled is one device gpu-<minor> of type "gpu"; one with MIG enabled is not published
//     whole (nvlib.go).
//   - Static MIG devices are discovered once, when the plugin starts (nvlib.go): a re-carve
//     changes nothing published until the plugin restarts. mig-manager restarts it with every
//     change when its DaemonSet selects nvidia.com/gpu.deploy.client=true, which the simulated
//     nodes' labels say (mig-parted reconfigure.go gpuClientDeployLabel): the plugin stops when
//     that label goes paused and publishes afresh when it comes back.
const (
	draDriverName = "gpu.nvidia.com"
	// draNVMLProfileMIG is the type attribute of a MIG device, draNVMLProfileGPU of a whole GPU.
	draTypeMIG = "mig"
	draTypeGPU = "gpu"
)

// draPluginMemory is what the simulated kubelet plugin remembers about its node.
type draPluginMemory struct {
	mu sync.Mutex
	// stopped is true from the moment mig-manager paused the plugin until it publishes again;
	// published is true once it has published since the simulator started.
	stopped, published bool
}

// clientLabelChanged records, from the node's event stream, that mig-manager paused the
// plugin's DaemonSet (the plugin's pod is deleted then).
func (m *draPluginMemory) clientLabelChanged(value string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if value == pausedValue {
		m.stopped = true
	}
}

// draPlugin publishes the node's devices when the plugin (re)starts: the first time, and after
// mig-manager paused it and set its label back.
func (r *reconciler) draPlugin(ctx context.Context, n *Node, labels map[string]string) error {
	if !n.dra {
		return nil
	}
	if n.dynamicMIG {
		return r.dynamicMIGPlugin(ctx, n, labels)
	}
	n.draPlugin.mu.Lock()
	due := !n.draPlugin.published || n.draPlugin.stopped
	n.draPlugin.mu.Unlock()
	if !due || labels[labelDeployClient] != "true" {
		return nil // running on what it found at start, or not running at all
	}
	slice, err := n.draSlice()
	if err != nil {
		return fmt.Errorf("DRA kubelet plugin on node %s: %w", n.name, err)
	}
	obj := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: slice.Name}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.client, obj, func() error {
		generation := obj.Spec.Pool.Generation + 1
		obj.Spec = slice.Spec
		obj.Spec.Pool.Generation = generation
		return nil
	}); err != nil {
		return fmt.Errorf("publishing the ResourceSlice of node %s: %w", n.name, err)
	}
	n.draPlugin.mu.Lock()
	n.draPlugin.published, n.draPlugin.stopped = true, false
	n.draPlugin.mu.Unlock()
	logf.FromContext(ctx).Info("DRA kubelet plugin started: published the node's devices", "devices", len(slice.Spec.Devices))
	return nil
}

// draSlice is the node's ResourceSlice as the driver builds it from NVML now.
func (n *Node) draSlice() (*resourcev1.ResourceSlice, error) {
	gpus, err := n.GPUs()
	if err != nil {
		return nil, err
	}
	product := n.model.NVML().Name
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: n.name + "-" + draDriverName},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   draDriverName,
			NodeName: ptr.To(n.name),
			Pool:     resourcev1.ResourcePool{Name: n.name, ResourceSliceCount: 1},
		},
	}
	for _, g := range gpus {
		if !g.MIGEnabled {
			s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{
				Name: fmt.Sprintf("gpu-%d", g.Index),
				Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
					"type": {StringValue: ptr.To(draTypeGPU)}, "uuid": {StringValue: ptr.To(g.UUID)},
					"productName": {StringValue: ptr.To(product)}},
				Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
					"memory": {Value: *resource.NewQuantity(int64(n.model.NVML().MemoryMB)<<20, resource.BinarySI)}},
			})
			continue
		}
		for _, in := range g.Instances {
			p, ok := n.profileNamed(g.Index, in.Profile)
			if !ok {
				return nil, fmt.Errorf("GPU %d: MIG device %s has profile %s, which NVML does not list", g.Index, in.UUID, in.Profile)
			}
			d := resourcev1.Device{
				Name: fmt.Sprintf("gpu-%d-mig-%s-%d-%d", g.Index, rfc1123(strings.ReplaceAll(in.Profile, ".", "")), p.info.Id, in.Start),
				Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
					"type": {StringValue: ptr.To(draTypeMIG)}, "uuid": {StringValue: ptr.To(in.UUID)},
					"parentUUID": {StringValue: ptr.To(g.UUID)}, "profile": {StringValue: ptr.To(in.Profile)},
					"productName": {StringValue: ptr.To(product)}},
				Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
					"memory":          {Value: *resource.NewQuantity(int64(p.info.MemorySizeMB)<<20, resource.BinarySI)},
					"multiprocessors": {Value: *resource.NewQuantity(int64(p.info.MultiprocessorCount), resource.DecimalSI)}},
			}
			for i := in.Start; i < in.Start+in.Size; i++ {
				d.Capacity[resourcev1.QualifiedName(fmt.Sprintf("memorySlice%d", i))] = resourcev1.DeviceCapacity{Value: *resource.NewQuantity(1, resource.BinarySI)}
			}
			s.Spec.Devices = append(s.Spec.Devices, d)
		}
	}
	return s, nil
}

// profileNamed finds GPU i's NVML profile by its name.
func (n *Node) profileNamed(i int, name string) (gpuProfile, bool) {
	for _, p := range n.profiles[i] {
		if p.slot.Name == name {
			return p, true
		}
	}
	return gpuProfile{}, false
}

// rfc1123 lowercases and replaces what a DNS label cannot hold with "-", as the driver's
// toRFC1123Compliant does for profile names ("1g.10gb+me" becomes "1g10gb-me").
func rfc1123(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' || r == '.' {
			b.WriteRune(r)
		} else {
			b.WriteRune('-')
		}
	}
	return strings.Trim(b.String(), "-")
}
