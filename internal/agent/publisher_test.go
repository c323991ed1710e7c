package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
	"github.com/gpupool/gpupool/internal/testenv"
)

const period = 30 * time.Second

// newPublisher reconciles node with an uncached client, so each Reconcile sees
// exactly what the previous one wrote, and its own fake clock, so tests do not
// step each other's time.
func newPublisher(t *testing.T, node string, read agent.ReadFunc) (*agent.Publisher, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(testenv.Epoch)
	deleteNodeAtCleanup(t, startEnv(t).Client, node)
	return &agent.Publisher{
		Client:   startEnv(t).Client,
		NodeName: node,
		Read:     read,
		Clock:    clk,
		Period:   period,
	}, clk
}

func reconcileOnce(t *testing.T, p *agent.Publisher) reconcile.Result {
	t.Helper()
	res, err := p.Reconcile(context.Background(), p.Request())
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return res
}

// The agent creates its GPUNode, publishes the inventory with pods attributed,
// then writes again only when something changed or the heartbeat is due.
func TestPublisherPublishesAndSkipsUnchangedWrites(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	s, migs := h200Node(t)
	d0 := mockDevice(t, s, 0)
	enableMIG(t, d0)
	u3g := createInstance(t, d0, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 0, true)
	u1g := createInstance(t, d0, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 4, true)
	socket := startKubelet(t,
		pod("team-a", "trainer", ctr("main", devs("nvidia.com/mig-3g.71gb", u3g))),
		pod("team-b", "whole", ctr("main", devs("nvidia.com/gpu", mockDevice(t, s, 1).UUID))),
		pod("team-c", "elsewhere", ctr("main", devs("nvidia.com/gpu", "GPU-not-on-this-node"))),
	)
	kubelet, err := agent.NewPodResourcesClient(socket)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = kubelet.Close() })

	p, clk := newPublisher(t, "node-publish", agent.NVMLReader(s))
	p.Owners = agent.PodResourcesOwners(kubelet, 10*time.Second)

	g.Expect(reconcileOnce(t, p)).To(Equal(reconcile.Result{RequeueAfter: period}))
	g.Expect(p.ReadyCheck(nil)).To(Succeed())
	n := getNode(t, env.Client, "node-publish")
	g.Expect(n.Spec).To(Equal(v1alpha1.GPUNodeSpec{}), "created with an empty spec")
	g.Expect(n.Status.ObservedTime.Time).To(BeTemporally("==", testenv.Epoch))
	g.Expect(n.Status.GPUs).To(HaveLen(2))
	g.Expect(n.Status.GPUs[0]).To(And(
		HaveField("Product", "NVIDIA H200 141GB HBM3e"),
		HaveField("MIGMode", HaveValue(Equal(v1alpha1.MIGModeStatus{Current: agent.MIGEnabled, Pending: agent.MIGEnabled}))),
		HaveField("Profiles", HaveLen(7)),
		HaveField("Instances", Equal([]v1alpha1.MIGInstance{
			{Profile: "3g.71gb", Placement: pl(0, 4), UUID: u3g, Busy: true, Pod: &v1alpha1.PodReference{Namespace: "team-a", Name: "trainer"}},
			{Profile: "1g.18gb", Placement: pl(4, 1), UUID: u1g},
		})),
	))
	g.Expect(n.Status.GPUs[1].Pods).To(Equal([]v1alpha1.PodReference{ref("team-b", "whole")}))
	for _, c := range n.Status.Conditions {
		g.Expect(c.ObservedGeneration).To(Equal(n.Generation), c.Type)
		g.Expect(c.LastTransitionTime.Time).To(BeTemporally("==", testenv.Epoch), c.Type)
	}
	g.Expect(condition(n, v1alpha1.ConditionNVMLReady)).To(And(
		HaveField("Status", metav1.ConditionTrue), HaveField("Reason", agent.ReasonGPUsRead)))
	g.Expect(condition(n, v1alpha1.ConditionLayoutVerified)).To(And(
		HaveField("Status", metav1.ConditionTrue), HaveField("Reason", agent.ReasonNoExpectation)))
	g.Expect(condition(n, agent.ConditionPodResourcesReady)).To(And(
		HaveField("Status", metav1.ConditionTrue), HaveField("Reason", agent.ReasonUnmatchedDevices),
		HaveField("Message", ContainSubstring("1 match no GPU or MIG device (is the device plugin's deviceIDStrategy uuid?): GPU-not-on-this-node"))))

	// Ten seconds on nothing changed: no write, and the next run when the heartbeat is due.
	clk.Step(10 * time.Second)
	g.Expect(reconcileOnce(t, p)).To(Equal(reconcile.Result{RequeueAfter: 20 * time.Second}))
	g.Expect(getNode(t, env.Client, "node-publish").ResourceVersion).To(Equal(n.ResourceVersion), "no write when nothing changed")

	// A period after the last write the heartbeat advances observedTime, and
	// only that: transition times stay.
	clk.Step(20 * time.Second)
	g.Expect(reconcileOnce(t, p)).To(Equal(reconcile.Result{RequeueAfter: period}))
	beat := getNode(t, env.Client, "node-publish")
	g.Expect(beat.ResourceVersion).NotTo(Equal(n.ResourceVersion))
	g.Expect(beat.Status.ObservedTime.Time).To(BeTemporally("==", testenv.Epoch.Add(period)))
	g.Expect(beat.Status.Conditions).To(ConsistOf(n.Status.Conditions))
	g.Expect(beat.Status.GPUs).To(Equal(n.Status.GPUs))

	// The GPU's state changes (a process starts on the idle 1g instance): written at once.
	migs.SetProcesses(u1g, []nvml.ProcessInfo{{Pid: 7}})
	clk.Step(time.Second)
	g.Expect(reconcileOnce(t, p)).To(Equal(reconcile.Result{RequeueAfter: period}))
	busy := getNode(t, env.Client, "node-publish")
	g.Expect(busy.Status.GPUs[0].Instances[1].Busy).To(BeTrue())
	g.Expect(busy.Status.ObservedTime.Time).To(BeTemporally("==", testenv.Epoch.Add(period+time.Second)))
}

// LayoutVerified follows spec.expectedLayout and the GPUs, the message lists
// every difference, and the controller's spec survives every agent write.
func TestPublisherVerifiesLayoutAgainstSpec(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	s, _ := h200Node(t)
	d0, d1 := mockDevice(t, s, 0), mockDevice(t, s, 1)
	enableMIG(t, d0)
	createInstance(t, d0, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 0, true)
	p, clk := newPublisher(t, "node-verify", agent.NVMLReader(s))

	reconcileOnce(t, p)
	want := []v1alpha1.GPULayout{
		{Index: 0, Profiles: v1alpha1.ProfileCounts{"3g.71gb": 2}},
		{Index: 1, Profiles: v1alpha1.ProfileCounts{"1g.18gb": 1, "2g.35gb": 1}},
	}
	setExpectedLayout(t, env.Client, "node-verify", want)

	clk.Step(time.Second)
	reconcileOnce(t, p)
	n := getNode(t, env.Client, "node-verify")
	g.Expect(n.Spec.ExpectedLayout).To(Equal(want), "the agent never writes spec")
	g.Expect(n.Generation).To(BeNumerically("==", 2))
	g.Expect(condition(n, v1alpha1.ConditionLayoutVerified)).To(And(
		HaveField("Status", metav1.ConditionFalse),
		HaveField("Reason", agent.ReasonLayoutMismatch),
		HaveField("ObservedGeneration", n.Generation),
		HaveField("LastTransitionTime.Time", BeTemporally("==", testenv.Epoch.Add(time.Second))),
		HaveField("Message", "GPU 0: want 3g.71gb:2, have 3g.71gb:1; GPU 1: want 2g.35gb:1,1g.18gb:1, have MIG disabled"),
	))

	// mig-manager applies the layout (here: the mock's own NVML calls).
	createInstance(t, d0, nvml.GPU_INSTANCE_PROFILE_3_SLICE, 4, true)
	enableMIG(t, d1)
	createInstance(t, d1, nvml.GPU_INSTANCE_PROFILE_2_SLICE, 0, true)
	createInstance(t, d1, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 2, true)
	clk.Step(time.Second)
	reconcileOnce(t, p)
	n = getNode(t, env.Client, "node-verify")
	g.Expect(n.Spec.ExpectedLayout).To(Equal(want))
	g.Expect(condition(n, v1alpha1.ConditionLayoutVerified)).To(And(
		HaveField("Status", metav1.ConditionTrue),
		HaveField("Reason", agent.ReasonLayoutMatches),
		HaveField("Message", "2 GPU(s) match spec.expectedLayout"),
	))
	// The spec's fields belong to the controller's field manager alone.
	for _, mf := range n.ManagedFields {
		if mf.Manager == agent.FieldManager && mf.FieldsV1 != nil {
			g.Expect(mf.FieldsV1.GetRawString()).NotTo(ContainSubstring(`"f:spec"`))
		}
	}
}

// Without a driver the node reports NVMLReady=False with the reason, retries
// with doubling backoff capped at the period, writes nothing while nothing
// changes, and recovers when NVML comes back.
func TestPublisherNVMLFailureBacksOffAndRecovers(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	s, _ := h200Node(t)
	src := &switchableReader{lib: s}
	p, clk := newPublisher(t, "node-nodriver", src.read)
	p.InitialBackoff = 4 * time.Second

	reconcileOnce(t, p)
	setExpectedLayout(t, env.Client, "node-nodriver", []v1alpha1.GPULayout{{Index: 0}, {Index: 1}})
	reconcileOnce(t, p)
	g.Expect(condition(getNode(t, env.Client, "node-nodriver"), v1alpha1.ConditionLayoutVerified).Reason).To(Equal(agent.ReasonLayoutMatches))

	src.set(noDriver)
	clk.Step(time.Second)
	g.Expect(reconcileOnce(t, p)).To(Equal(reconcile.Result{RequeueAfter: 4 * time.Second}))
	n := getNode(t, env.Client, "node-nodriver")
	g.Expect(n.Status.GPUs).To(BeEmpty(), "no GPU is listed that NVML cannot see")
	g.Expect(n.Spec.ExpectedLayout).To(HaveLen(2))
	g.Expect(condition(n, v1alpha1.ConditionNVMLReady)).To(And(
		HaveField("Status", metav1.ConditionFalse),
		HaveField("Reason", agent.ReasonNVMLNotFound),
		HaveField("Message", "NVML not found: this machine has no NVIDIA driver (libnvidia-ml.so.1)"),
	))
	g.Expect(condition(n, v1alpha1.ConditionLayoutVerified)).To(And(
		HaveField("Status", metav1.ConditionUnknown), HaveField("Reason", agent.ReasonNVMLNotReady)))

	// Doubling retries, capped at the period, none of them a write.
	for _, wantDelay := range []time.Duration{8 * time.Second, 16 * time.Second} {
		clk.Step(time.Second)
		g.Expect(reconcileOnce(t, p)).To(Equal(reconcile.Result{RequeueAfter: wantDelay}))
	}
	clk.Step(time.Second)
	g.Expect(reconcileOnce(t, p)).To(Equal(reconcile.Result{RequeueAfter: period - 3*time.Second}),
		"a retry never waits past the heartbeat")
	g.Expect(getNode(t, env.Client, "node-nodriver").ResourceVersion).To(Equal(n.ResourceVersion))
	clk.Step(period)
	g.Expect(reconcileOnce(t, p)).To(Equal(reconcile.Result{RequeueAfter: period}))
	g.Expect(getNode(t, env.Client, "node-nodriver").ResourceVersion).NotTo(Equal(n.ResourceVersion), "heartbeat")

	src.set(s)
	clk.Step(time.Second)
	g.Expect(reconcileOnce(t, p)).To(Equal(reconcile.Result{RequeueAfter: period}))
	n = getNode(t, env.Client, "node-nodriver")
	g.Expect(n.Status.GPUs).To(HaveLen(2))
	g.Expect(condition(n, v1alpha1.ConditionNVMLReady).Status).To(Equal(metav1.ConditionTrue))
	g.Expect(condition(n, v1alpha1.ConditionLayoutVerified).Reason).To(Equal(agent.ReasonLayoutMatches))
}

// An NVML call failing for one GPU marks that GPU; the node stays NVMLReady.
func TestPublisherMarksOnlyTheFailingGPU(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	s, _ := h200Node(t)
	mockDevice(t, s, 1).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_GPU_IS_LOST }
	p, _ := newPublisher(t, "node-sick-gpu", agent.NVMLReader(s))
	reconcileOnce(t, p)
	setExpectedLayout(t, env.Client, "node-sick-gpu", []v1alpha1.GPULayout{{Index: 0}, {Index: 1}})
	reconcileOnce(t, p)

	n := getNode(t, env.Client, "node-sick-gpu")
	g.Expect(n.Status.GPUs).To(HaveLen(2))
	g.Expect(n.Status.GPUs[0].Error).To(BeEmpty())
	g.Expect(n.Status.GPUs[1].Error).To(ContainSubstring("GetMigMode: ERROR_GPU_IS_LOST"))
	g.Expect(condition(n, v1alpha1.ConditionNVMLReady)).To(And(
		HaveField("Status", metav1.ConditionTrue), HaveField("Reason", agent.ReasonPartialRead)))
	g.Expect(condition(n, v1alpha1.ConditionLayoutVerified)).To(And(
		HaveField("Status", metav1.ConditionUnknown), HaveField("Reason", agent.ReasonGPUUnreadable)))
	g.Expect(condition(n, v1alpha1.ConditionLayoutVerified).Message).To(And(
		ContainSubstring("GPU 1: GetMigMode: ERROR_GPU_IS_LOST"), Not(ContainSubstring("GPU 0"))))
}

// With a heartbeat Lease the agent writes its status once when it starts (so a report from
// before a restart is never taken for a fresh one) and then only on change, while the Lease
// is renewed every period; a new agent process writes the status again at once.
func TestPublisherWithALeaseWritesStatusOnlyAtStartAndOnChange(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	ctx := context.Background()
	const ns = "agent-lease-test"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	s, migs := h200Node(t)
	d0 := mockDevice(t, s, 0)
	enableMIG(t, d0)
	u1g := createInstance(t, d0, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 0, true)
	p, clk := newPublisher(t, "node-leased", agent.NVMLReader(s))
	p.LeaseNamespace = ns
	leaseOf := func() *coordinationv1.Lease {
		l := &coordinationv1.Lease{}
		g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "node-leased"}, l)).To(Succeed())
		return l
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "node-leased"}})
	})

	g.Expect(reconcileOnce(t, p)).To(Equal(reconcile.Result{RequeueAfter: period}))
	first := getNode(t, env.Client, "node-leased")
	g.Expect(first.Status.ObservedTime.Time).To(BeTemporally("==", testenv.Epoch))
	lease := leaseOf()
	g.Expect(lease.Spec.RenewTime.Time).To(BeTemporally("==", testenv.Epoch))
	g.Expect(lease.Spec.HolderIdentity).To(HaveValue(Equal(v1alpha1.AgentLeaseHolder("node-leased"))))
	g.Expect(lease.Labels).To(HaveKeyWithValue(v1alpha1.LabelAgentLease, "true"))

	// Three periods of nothing changing: the Lease moves on, the GPUNode is never written.
	for i := 1; i <= 3; i++ {
		clk.Step(period)
		g.Expect(reconcileOnce(t, p)).To(Equal(reconcile.Result{RequeueAfter: period}))
		g.Expect(leaseOf().Spec.RenewTime.Time).To(BeTemporally("==", testenv.Epoch.Add(time.Duration(i)*period)))
	}
	g.Expect(getNode(t, env.Client, "node-leased").ResourceVersion).To(Equal(first.ResourceVersion), "a heartbeat writes no status")

	// Between two renewals a change is written at once, and the next run is the next renewal.
	migs.SetProcesses(u1g, []nvml.ProcessInfo{{Pid: 7}})
	clk.Step(10 * time.Second)
	g.Expect(reconcileOnce(t, p)).To(Equal(reconcile.Result{RequeueAfter: 20 * time.Second}))
	changed := getNode(t, env.Client, "node-leased")
	g.Expect(changed.Status.GPUs[0].Instances[0].Busy).To(BeTrue())
	g.Expect(changed.Status.ObservedTime.Time).To(BeTemporally("==", testenv.Epoch.Add(3*period+10*time.Second)))

	// A new agent process (after a reboot, say) writes its status at once, changed or not.
	restarted := &agent.Publisher{Client: p.Client, NodeName: p.NodeName, Read: p.Read, Clock: clk, Period: period, LeaseNamespace: ns}
	clk.Step(time.Second)
	reconcileOnce(t, restarted)
	g.Expect(getNode(t, env.Client, "node-leased").Status.ObservedTime.Time).To(BeTemporally("==", testenv.Epoch.Add(3*period+11*time.Second)))

	// Someone deletes the Lease: the next renewal creates it again.
	g.Expect(env.Client.Delete(ctx, leaseOf())).To(Succeed())
	clk.Step(period)
	reconcileOnce(t, restarted)
	g.Expect(leaseOf().Spec.RenewTime.Time).To(BeTemporally("==", testenv.Epoch.Add(4*period+11*time.Second)))

	// A Lease of that name held by someone else is never taken over.
	other := leaseOf()
	other.Spec.HolderIdentity = ptr.To("somebody-else")
	g.Expect(env.Client.Update(ctx, other)).To(Succeed())
	clk.Step(period)
	_, err := restarted.Reconcile(ctx, restarted.Request())
	g.Expect(err).To(MatchError(ContainSubstring(`is held by "somebody-else", not by this node's agent`)))
	g.Expect(restarted.ReadyCheck(nil)).NotTo(Succeed(), "an agent that cannot renew its heartbeat is not ready")
}

// With the readiness heartbeat the agent writes its status at start and on change only, renews
// no Lease, and its readiness (what the kubelet probes, and the manager then trusts) holds only
// while its passes keep coming: one missed refresh is tolerated, two are not.
func TestPublisherWithReadinessWritesNothingAtRestAndFailsReadinessWhenStuck(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	ctx := context.Background()
	s, migs := h200Node(t)
	d0 := mockDevice(t, s, 0)
	enableMIG(t, d0)
	u1g := createInstance(t, d0, nvml.GPU_INSTANCE_PROFILE_1_SLICE, 0, true)
	p, clk := newPublisher(t, "node-ready", agent.NVMLReader(s))
	p.Heartbeat = agent.HeartbeatReadiness

	g.Expect(p.ReadyCheck(nil)).To(MatchError(ContainSubstring("not published yet")))
	g.Expect(reconcileOnce(t, p)).To(Equal(reconcile.Result{RequeueAfter: period}))
	first := getNode(t, env.Client, "node-ready")
	g.Expect(p.ReadyCheck(nil)).To(Succeed())

	for i := 1; i <= 3; i++ {
		clk.Step(period)
		g.Expect(reconcileOnce(t, p)).To(Equal(reconcile.Result{RequeueAfter: period}))
		g.Expect(p.ReadyCheck(nil)).To(Succeed())
	}
	g.Expect(getNode(t, env.Client, "node-ready").ResourceVersion).To(Equal(first.ResourceVersion), "nothing written at rest")
	var leases coordinationv1.LeaseList
	g.Expect(env.Client.List(ctx, &leases, client.MatchingLabels{v1alpha1.LabelAgentLease: "true"})).To(Succeed())
	g.Expect(leases.Items).NotTo(ContainElement(HaveField("Name", "node-ready")), "no Lease")

	migs.SetProcesses(u1g, []nvml.ProcessInfo{{Pid: 7}})
	clk.Step(10 * time.Second)
	g.Expect(reconcileOnce(t, p)).To(Equal(reconcile.Result{RequeueAfter: period}))
	g.Expect(getNode(t, env.Client, "node-ready").Status.GPUs[0].Instances[0].Busy).To(BeTrue(), "a change is written at once")

	// No pass for a period and a half (one refresh late): still ready. Past two periods: stuck.
	clk.Step(period + period/2)
	g.Expect(p.ReadyCheck(nil)).To(Succeed())
	clk.Step(period/2 + time.Second)
	g.Expect(p.ReadyCheck(nil)).To(MatchError(ContainSubstring("not refreshed for 1m1s (refresh period 30s): the agent is stuck")))
	reconcileOnce(t, p)
	g.Expect(p.ReadyCheck(nil)).To(Succeed(), "ready again once it refreshes")
}

func TestPublisherRefusesAMismatchedHeartbeat(t *testing.T) {
	for _, tc := range []struct {
		heartbeat agent.Heartbeat
		leaseNS   string
		want      string
	}{
		{agent.HeartbeatLease, "", "needs the Lease's namespace"},
		{agent.HeartbeatReadiness, "agents", "renews no Lease, yet a Lease namespace (agents) is set"},
		{"gossip", "", `unknown heartbeat "gossip"`},
	} {
		p := &agent.Publisher{Client: startEnv(t).Client, NodeName: "node-mismatch", Period: period,
			Read: func(context.Context) ([]v1alpha1.GPUStatus, error) { return nil, nil }, Heartbeat: tc.heartbeat, LeaseNamespace: tc.leaseNS}
		_, err := p.Reconcile(context.Background(), p.Request())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("heartbeat %q, Lease namespace %q: got %v, want %q", tc.heartbeat, tc.leaseNS, err, tc.want)
		}
	}
}
