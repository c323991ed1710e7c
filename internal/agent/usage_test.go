package agent_test

import (
	"context"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	. "github.com/onsi/gomega"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
	"github.com/gpupool/gpupool/internal/rightsize"
)

const mibBytes = 1 << 20

// Memory in use is read per MIG device from its own handle and per whole GPU from its
// processes, on go-nvml's mock server with nvmlmock's MIG devices.
func TestReadMemoryUsage(t *testing.T) {
	g := NewWithT(t)
	s, migs := h200Node(t)
	d0, d1 := mockDevice(t, s, 0), mockDevice(t, s, 1)
	enableMIG(t, d0)
	u3g := createInstance(t, d0, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 0, true)
	u1g := createInstance(t, d0, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 4, true)
	migs.SetMemoryUsed(u3g, 9*1024*mibBytes)
	migs.SetProcesses(d1.UUID, []nvml.ProcessInfo{{Pid: 1, UsedGpuMemory: 5 * 1024 * mibBytes}, {Pid: 2, UsedGpuMemory: 3 * 1024 * mibBytes}})

	got, err := agent.ReadMemoryUsage(s)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(map[string]agent.DeviceMemory{
		u3g:     {UsedMiB: 9 * 1024, TotalMiB: profileMiB(t, d0, nvml.GPU_INSTANCE_PROFILE_3_SLICE)},
		u1g:     {UsedMiB: 0, TotalMiB: profileMiB(t, d0, nvml.GPU_INSTANCE_PROFILE_1_SLICE)},
		d1.UUID: {UsedMiB: 8 * 1024, TotalMiB: int64(d1.MemoryInfo.Total / mibBytes)},
	}))

	// Without access to the host's PIDs NVML cannot say a process's memory: the device's
	// total use stands in.
	migs.SetProcesses(d1.UUID, []nvml.ProcessInfo{{Pid: 1, UsedGpuMemory: ^uint64(0)}})
	d1.MemoryInfo.Used = 10 * 1024 * mibBytes
	got, err = agent.ReadMemoryUsage(s)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got[d1.UUID].UsedMiB).To(BeEquivalentTo(10 * 1024))

	// A device NVML cannot read is left out and named; the others are still read.
	d1.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_UNKNOWN }
	got, err = agent.ReadMemoryUsage(s)
	g.Expect(err).To(MatchError(ContainSubstring("GPU " + d1.UUID + ": GetComputeRunningProcesses: ERROR_UNKNOWN")))
	g.Expect(got).To(HaveKey(u3g))
	g.Expect(got).NotTo(HaveKey(d1.UUID))

	_, err = agent.ReadMemoryUsage(noDriver)
	g.Expect(err).To(HaveOccurred())
}

// profileMiB is the memory of an instance of a profile as the mock GPU reports it.
func profileMiB(t *testing.T, d *server.Device, constant int) int64 {
	t.Helper()
	info, ret := d.GetGpuInstanceProfileInfo(constant)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetGpuInstanceProfileInfo(%d): %v", constant, ret)
	}
	return int64(info.MemorySizeMB)
}

// staticOwners is the kubelet's answer, changeable between passes.
type staticOwners struct {
	mu     sync.Mutex
	owners map[string][]v1alpha1.PodReference
}

func (o *staticOwners) set(m map[string][]v1alpha1.PodReference) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.owners = m
}

func (o *staticOwners) get(context.Context) (map[string][]v1alpha1.PodReference, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.owners, nil
}

// The agent samples each pod's memory every pass and writes status.usage only when a summary
// changes materially: the first pass, the pass that reaches the minimum samples, a jump in the
// peak. Pods sharing a device are left out, a pod that leaves is dropped, and an agent that
// restarts keeps what it had published rather than replacing it with one sample.
func TestPublisherPublishesUsageOnlyWhenItChangesMaterially(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	s, migs := h200Node(t)
	d0, d1 := mockDevice(t, s, 0), mockDevice(t, s, 1)
	enableMIG(t, d0)
	u3g := createInstance(t, d0, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 0, true)
	u1g := createInstance(t, d0, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 4, true)
	migs.SetMemoryUsed(u3g, 9*1024*mibBytes)
	migs.SetMemoryUsed(u1g, 2*1024*mibBytes)
	migs.SetProcesses(d1.UUID, []nvml.ProcessInfo{{Pid: 1, UsedGpuMemory: 20 * 1024 * mibBytes}})
	server, whole := ref("team-a", "server"), ref("team-b", "whole")
	kubelet := &staticOwners{}
	kubelet.set(map[string][]v1alpha1.PodReference{
		u3g:     {server},
		u1g:     {ref("team-c", "shared-1"), ref("team-c", "shared-2")}, // time-sliced: left out
		d1.UUID: {whole},
	})

	const node = "node-usage"
	p, clk := newPublisher(t, node, agent.NVMLReader(s))
	p.Heartbeat = agent.HeartbeatReadiness // writes only on change, so every write is usage's or the GPUs'
	p.Owners = kubelet.get
	p.Usage = agent.NVMLUsageReader(s)

	reconcileOnce(t, p)
	n := getNode(t, env.Client, node)
	g.Expect(n.Status.Usage).To(HaveLen(2))
	g.Expect(n.Status.Usage[0]).To(And(
		HaveField("Namespace", "team-a"), HaveField("Name", "server"),
		HaveField("P95MiB", BeNumerically("~", 9*1024, 9*1024*0.05)), HaveField("PeakMiB", BeEquivalentTo(9*1024)),
		HaveField("CeilingMiB", Equal(profileMiB(t, d0, nvml.GPU_INSTANCE_PROFILE_3_SLICE))), HaveField("Samples", BeEquivalentTo(1)),
		HaveField("FlatAtCeiling", BeFalse())))
	g.Expect(n.Status.Usage[1]).To(And(HaveField("Name", "whole"), HaveField("PeakMiB", BeEquivalentTo(20*1024))))

	// Steady use: the next writes are when the samples reach the minimum, and nothing else
	// within the hour (the window is republished when it doubles, from an hour on).
	writes := 0
	last := n.ResourceVersion
	for range rightsize.DefaultMinSamples + 10 {
		clk.Step(period)
		reconcileOnce(t, p)
		if rv := getNode(t, env.Client, node).ResourceVersion; rv != last {
			writes, last = writes+1, rv
		}
	}
	n = getNode(t, env.Client, node)
	g.Expect(writes).To(Equal(1), "one write when both pods reach %d samples", rightsize.DefaultMinSamples)
	g.Expect(n.Status.Usage[0].Samples).To(BeEquivalentTo(rightsize.DefaultMinSamples))

	// A burst moves the server's peak: written at once, the whole GPU's summary untouched.
	migs.SetMemoryUsed(u3g, 30*1024*mibBytes)
	clk.Step(period)
	reconcileOnce(t, p)
	burst := getNode(t, env.Client, node)
	g.Expect(burst.ResourceVersion).NotTo(Equal(last))
	g.Expect(burst.Status.Usage[0].PeakMiB).To(BeEquivalentTo(30 * 1024))
	g.Expect(burst.Status.Usage[1]).To(Equal(n.Status.Usage[1]))

	// A restarted agent has no histograms: what was published stands until the new ones hold
	// the minimum samples, however different their first sample (back at 9 GiB) looks.
	migs.SetMemoryUsed(u3g, 9*1024*mibBytes)
	restarted := &agent.Publisher{
		Client: env.Client, NodeName: node, Read: agent.NVMLReader(s), Clock: clk, Period: period,
		Heartbeat: agent.HeartbeatReadiness, Owners: kubelet.get, Usage: agent.NVMLUsageReader(s),
	}
	clk.Step(period)
	reconcileOnce(t, restarted)
	g.Expect(getNode(t, env.Client, node).Status.Usage).To(Equal(burst.Status.Usage))

	// The whole GPU's pod leaves: its summary goes with it.
	kubelet.set(map[string][]v1alpha1.PodReference{u3g: {server}})
	clk.Step(period)
	reconcileOnce(t, restarted)
	left := getNode(t, env.Client, node).Status.Usage
	g.Expect(left).To(HaveLen(1))
	g.Expect(left[0].Name).To(Equal("server"))

	// Usage reporting turned off clears what was published.
	restarted.Usage = nil
	clk.Step(period)
	reconcileOnce(t, restarted)
	g.Expect(getNode(t, env.Client, node).Status.Usage).To(BeEmpty())
}

// Preallocation shows in the published summary: a JAX job holding 75% of its 3g.71gb.
func TestPublisherFlagsPreallocation(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	s, migs := h200Node(t)
	d0 := mockDevice(t, s, 0)
	enableMIG(t, d0)
	u3g := createInstance(t, d0, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 0, true)
	migs.SetMemoryUsed(u3g, uint64(profileMiB(t, d0, nvml.GPU_INSTANCE_PROFILE_3_SLICE))*mibBytes*3/4)
	kubelet := &staticOwners{}
	kubelet.set(map[string][]v1alpha1.PodReference{u3g: {ref("team-a", "jax")}})
	p, clk := newPublisher(t, "node-prealloc", agent.NVMLReader(s))
	p.Heartbeat, p.Owners, p.Usage = agent.HeartbeatReadiness, kubelet.get, agent.NVMLUsageReader(s)
	for range 10 {
		reconcileOnce(t, p)
		clk.Step(period)
	}
	u := getNode(t, env.Client, "node-prealloc").Status.Usage
	g.Expect(u).To(HaveLen(1))
	g.Expect(u[0].FlatAtCeiling).To(BeTrue(), "%+v", u[0])
}
