package agent

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpupool/gpupool/api/v1alpha1"
)

// DefaultPodResourcesSocket is where the kubelet serves the PodResources API.
const DefaultPodResourcesSocket = "unix:///var/lib/kubelet/pod-resources/kubelet.sock"

// podResourcesMaxMessage matches the kubelet's own client limit (16 MiB): a
// node with many pods answers List with a message larger than gRPC's 4 MiB default.
const podResourcesMaxMessage = 16 << 20

// nvidiaResourcePrefix selects the device plugin's resources: nvidia.com/gpu,
// nvidia.com/mig-<profile>, and renamed shared resources such as nvidia.com/gpu.shared.
const nvidiaResourcePrefix = "nvidia.com/"

// PodResourcesClient reads the kubelet's PodResources API over its unix socket.
type PodResourcesClient struct {
	socket string
	conn   *grpc.ClientConn
	client podresourcesv1.PodResourcesListerClient
}

// NewPodResourcesClient prepares a client for the kubelet socket, given as a
// path or a unix:// URL. gRPC connects lazily, so a missing socket shows up as
// an error from List, not here.
func NewPodResourcesClient(socket string) (*PodResourcesClient, error) {
	target := socket
	if !strings.HasPrefix(target, "unix:") {
		target = "unix://" + target
	}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(podResourcesMaxMessage)),
	)
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources socket %s: %w", socket, err)
	}
	return &PodResourcesClient{socket: socket, conn: conn, client: podresourcesv1.NewPodResourcesListerClient(conn)}, nil
}

// List returns every pod the kubelet has admitted, with the devices assigned
// to each container.
func (c *PodResourcesClient) List(ctx context.Context) ([]*podresourcesv1.PodResources, error) {
	resp, err := c.client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list pod resources from kubelet socket %s: %w", c.socket, err)
	}
	return resp.GetPodResources(), nil
}

// Close releases the connection.
func (c *PodResourcesClient) Close() error {
	return c.conn.Close()
}

// DeviceOwners maps each NVIDIA device ID the kubelet assigned (a GPU UUID
// GPU-..., or a MIG device UUID MIG-..., as the device plugin reports them
// with its default uuid device-ID strategy) to the pods holding it. Several
// pods hold one device when the device plugin shares it (time-slicing or
// MPS); it advertises such a device as replicas "<uuid>::<n>", and the replica
// suffix is removed so every replica maps back to its device. Pods are sorted
// by namespace and name.
func DeviceOwners(ctx context.Context, c *PodResourcesClient) (map[string][]v1alpha1.PodReference, error) {
	pods, err := c.List(ctx)
	if err != nil {
		return nil, err
	}
	return deviceOwners(pods), nil
}

func deviceOwners(pods []*podresourcesv1.PodResources) map[string][]v1alpha1.PodReference {
	owners := map[string][]v1alpha1.PodReference{}
	for _, pod := range pods {
		ref := v1alpha1.PodReference{Namespace: pod.GetNamespace(), Name: pod.GetName()}
		for _, ctr := range pod.GetContainers() {
			for _, dev := range ctr.GetDevices() {
				if !strings.HasPrefix(dev.GetResourceName(), nvidiaResourcePrefix) {
					continue
				}
				for _, id := range dev.GetDeviceIds() {
					id, _, _ = strings.Cut(id, "::")
					if !slices.Contains(owners[id], ref) {
						owners[id] = append(owners[id], ref)
					}
				}
			}
		}
	}
	for id := range owners {
		slices.SortFunc(owners[id], comparePod)
	}
	return owners
}

func comparePod(a, b v1alpha1.PodReference) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// Attribute records in gpus which pods hold which device: MIG instances get
// Pod (the first pod, when the device is shared) and Busy, whole GPUs get
// Pods. Pod and Pods are replaced, so a repeated call reflects the latest
// owners; Busy is only ever set, because NVML's process check sets it too and
// a device with no pod may still run a process. It returns, sorted, the device IDs that match no GPU or MIG
// device, which points at a device plugin using another device-ID strategy.
func Attribute(gpus []v1alpha1.GPUStatus, owners map[string][]v1alpha1.PodReference) []string {
	matched := map[string]bool{}
	for i := range gpus {
		g := &gpus[i]
		g.Pods = nil
		if pods, ok := owners[g.UUID]; ok && g.UUID != "" {
			g.Pods = slices.Clone(pods)
			matched[g.UUID] = true
		}
		for j := range g.Instances {
			inst := &g.Instances[j]
			inst.Pod = nil
			pods, ok := owners[inst.UUID]
			if !ok || inst.UUID == "" || len(pods) == 0 {
				continue
			}
			pod := pods[0]
			inst.Pod = &pod
			inst.Busy = true
			matched[inst.UUID] = true
		}
	}
	var unmatched []string
	for id := range owners {
		if !matched[id] {
			unmatched = append(unmatched, id)
		}
	}
	slices.Sort(unmatched)
	return unmatched
}
