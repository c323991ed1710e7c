package scale

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/agent"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// The fleet every run builds: H200 nodes of eight GPUs, each GPU carved 1g.18gb:7, with
// RunningPerNode pods each holding one 1g.18gb instance, spread so that every GPU holds at
// least one (serving a 3g pod then needs an eviction, so the plan is disruptive and waits for
// a human under Manual approval, as most production plans do), and one pending 3g.71gb pod
// per node.
const (
	gpusPerNode    = 8
	product        = "NVIDIA H200"
	productLabel   = "NVIDIA-H200"
	poolLabel      = "gpupool.io/pool"
	poolName       = "scale"
	workNamespace  = "team"
	agentNamespace = "gpupool-agent"
	// agentSelector is the agent DaemonSet's selector (config/agent), as the manager is told it.
	agentSelector = "app.kubernetes.io/component=agent,app.kubernetes.io/name=gpupool"
	// operatorNamespace holds gpupool's ConfigMaps (--gpu-operator-namespace).
	operatorNamespace = "gpu-operator"
	policyName        = "scale"
	smallProfile      = "1g.18gb"
	pendingProfile    = "3g.71gb"
	// newProfile is the shape that arrives once the manager is at rest.
	newProfile = "2g.35gb"
)

// nodeName names the i-th GPU node.
func nodeName(i int) string { return fmt.Sprintf("gpu-%05d", i) }

// parallel runs do(i) for i in [0, n) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, do func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := do(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// seeder writes the fleet straight into the API server.
type seeder struct {
	c       client.Client
	workers int
	// placed is the H200's 1g.18gb:7 layout with placements, as the agent reports it.
	placed []mig.Instance
}

func newSeeder(c client.Client, workers int) (*seeder, error) {
	p, ok := mig.LookupProduct("H200")
	if !ok {
		return nil, fmt.Errorf("no built-in H200 product")
	}
	placed, err := p.Place(mig.Layout{smallProfile: 7}, nil)
	if err != nil {
		return nil, fmt.Errorf("placing 1g.18gb:7 on an H200: %w", err)
	}
	return &seeder{c: c, workers: workers, placed: placed}, nil
}

// base creates the namespaces and the policy, whose maxDisruptedNodes is budget ("" for the
// API's default).
func (s *seeder) base(ctx context.Context, budget string) error {
	for _, ns := range []string{workNamespace, agentNamespace, operatorNamespace} {
		if err := s.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	policy := &v1alpha1.GPUPoolPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: policyName},
		Spec: v1alpha1.GPUPoolPolicySpec{
			NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{poolLabel: poolName}},
			Catalog: []v1alpha1.CatalogEntry{{Product: productLabel,
				MIGProfiles: []v1alpha1.MIGProfileName{smallProfile, newProfile, pendingProfile, "7g.141gb"}}},
			Disruption: v1alpha1.DisruptionPolicy{Approval: v1alpha1.ApprovalManual},
		},
	}
	if budget != "" {
		policy.Spec.Disruption.MaxDisruptedNodes = ptr.To(intstr.Parse(budget))
	}
	if err := s.c.Create(ctx, policy); err != nil {
		return fmt.Errorf("creating policy %s: %w", policyName, err)
	}
	return nil
}

// node writes the i-th Node, its GPUNode report with the instances its running pods hold,
// its agent's heartbeat (a Ready pod, or a Lease), and its running pods.
func (s *seeder) node(ctx context.Context, i, running int, heartbeat agent.Heartbeat) error {
	name := nodeName(i)
	alloc := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("192"), corev1.ResourceMemory: resource.MustParse("2Ti"),
		corev1.ResourcePods: resource.MustParse("110"),
		corev1.ResourceName(mig.ResourceName(smallProfile)): *resource.NewQuantity(gpusPerNode*7, resource.DecimalSI),
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		corev1.LabelHostname: name, poolLabel: poolName,
		nvidia.LabelGPUPresent: "true", nvidia.LabelGPUProduct: productLabel,
	}}}
	if err := s.c.Create(ctx, node); err != nil {
		return fmt.Errorf("creating node %s: %w", name, err)
	}
	// The API server taints a new node not-ready (TaintNodesByCondition); with no kubelet and
	// no node-lifecycle controller here, the seeder plays them and clears it.
	node.Spec.Taints = nil
	if err := s.c.Update(ctx, node); err != nil {
		return fmt.Errorf("clearing the not-ready taint of node %s: %w", name, err)
	}
	node.Status = corev1.NodeStatus{Capacity: alloc, Allocatable: alloc, Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
	if err := s.c.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("writing the status of node %s: %w", name, err)
	}

	gpus := make([]v1alpha1.GPUStatus, gpusPerNode)
	for g := range gpus {
		gpus[g] = v1alpha1.GPUStatus{Index: int32(g), UUID: fmt.Sprintf("GPU-%s-%d", name, g), Product: product,
			PCIDeviceID: "0x233510DE", MemoryMiB: 143771, Sharing: v1alpha1.SharingNone,
			MIGMode: &v1alpha1.MIGModeStatus{Current: "Enabled", Pending: "Enabled"}}
		for _, in := range s.placed {
			gpus[g].Instances = append(gpus[g].Instances, v1alpha1.MIGInstance{Profile: in.Profile,
				UUID:      fmt.Sprintf("MIG-%s-%d-%d", name, g, in.Placement.Start),
				Placement: v1alpha1.SlicePlacement{Start: int32(in.Placement.Start), Size: int32(in.Placement.Size)}})
		}
	}
	for p := range running {
		// Pod p holds instance p/8 of GPU p%8: every GPU holds one before any holds two.
		in := &gpus[p%gpusPerNode].Instances[p/gpusPerNode]
		in.Pod, in.Busy = &v1alpha1.PodReference{Namespace: workNamespace, Name: runningName(name, p)}, true
		if err := s.pod(ctx, runningName(name, p), name, smallProfile, time.Time{}); err != nil {
			return err
		}
	}
	report := &v1alpha1.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := s.c.Create(ctx, report); err != nil {
		return fmt.Errorf("creating GPUNode %s: %w", name, err)
	}
	report.Status = v1alpha1.GPUNodeStatus{GPUs: gpus, ObservedTime: ptr.To(metav1.Now()),
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionNVMLReady, Status: metav1.ConditionTrue,
			Reason: "Read", LastTransitionTime: metav1.Now()}}}
	if err := s.c.Status().Update(ctx, report); err != nil {
		return fmt.Errorf("writing the report of %s: %w", name, err)
	}
	if heartbeat == agent.HeartbeatReadiness {
		return s.agentPod(ctx, name)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: name,
		Labels: map[string]string{v1alpha1.LabelAgentLease: "true"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(v1alpha1.AgentLeaseHolder(name)),
			LeaseDurationSeconds: ptr.To(int32(120)), RenewTime: ptr.To(metav1.NewMicroTime(time.Now()))}}
	if err := s.c.Create(ctx, lease); err != nil {
		return fmt.Errorf("creating the Lease of %s: %w", name, err)
	}
	return nil
}

// agentPod writes node's agent pod, Running and Ready as its kubelet would report it once the
// agent's readiness probe passes: with the readiness heartbeat, all an agent at rest shows. As
// the DaemonSet controller makes it: controlled by the DaemonSet gpupool-agent and run as the
// ServiceAccount gpupool-agent, the manager's defaults (--agent-daemonset,
// --agent-service-account), without which its readiness would vouch for nothing. The manager
// checks the DaemonSet's name, not its UID, so no DaemonSet object is needed.
func (s *seeder) agentPod(ctx context.Context, node string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: agentNamespace, Name: "gpupool-agent-" + node,
			Labels: map[string]string{"app.kubernetes.io/name": "gpupool", "app.kubernetes.io/component": "agent"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "gpupool-agent",
				UID: types.UID("agent-ds"), Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "gpupool-agent", Containers: []corev1.Container{{Name: "agent", Image: "gpupool/agent:1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}}},
	}
	if err := s.c.Create(ctx, pod); err != nil {
		return fmt.Errorf("creating the agent pod of %s: %w", node, err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: ptr.To(metav1.Now()), Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
	if err := s.c.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("writing the status of the agent pod of %s: %w", node, err)
	}
	return nil
}

func runningName(node string, p int) string { return fmt.Sprintf("%s-run-%d", node, p) }

// pod writes a pod of a ReplicaSet asking for one instance of profile: bound to node and
// Running, or, when node is "", pending and marked Unschedulable by the scheduler at since.
func (s *seeder) pod(ctx context.Context, name, node, profile string, since time.Time) error {
	gpu := corev1.ResourceName(mig.ResourceName(profile))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: workNamespace, Name: name, Labels: map[string]string{"app": "scale"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "scale",
				UID: types.UID("scale-rs"), Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "registry.example/train:1",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("32Gi"),
					gpu: resource.MustParse("1")},
				Limits: corev1.ResourceList{gpu: resource.MustParse("1")}}}}},
	}
	if err := s.c.Create(ctx, pod); err != nil {
		return fmt.Errorf("creating pod %s: %w", name, err)
	}
	if node != "" {
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: ptr.To(metav1.Now()),
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}}
	} else {
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			LastTransitionTime: metav1.NewTime(since)}}}
	}
	if err := s.c.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("writing the status of pod %s: %w", name, err)
	}
	return nil
}

// pending writes n pending pods asking for profile, named prefix-<i>, unschedulable since an
// hour ago (older than any minPendingAge).
func (s *seeder) pending(ctx context.Context, prefix, profile string, n int) error {
	return s.pendingFrom(ctx, prefix, profile, 0, n)
}

// pendingFrom writes the pending pods prefix-from to prefix-(to-1).
func (s *seeder) pendingFrom(ctx context.Context, prefix, profile string, from, to int) error {
	since := time.Now().Add(-time.Hour)
	return parallel(ctx, to-from, s.workers, func(ctx context.Context, i int) error {
		return s.pod(ctx, fmt.Sprintf("%s-%d", prefix, from+i), "", profile, since)
	})
}

// heartbeats renews every agent Lease once per period, spread evenly over it, as n agents
// started at random times do, until ctx ends; failed counts the renewals that failed. Each
// renewal is what the agent sends (agent.Publisher's renewLease): an Update of the Lease it last
// wrote, in protobuf, reading it again only when that write failed.
func heartbeats(ctx context.Context, c client.Client, n int, period time.Duration, failed *atomic.Int64) {
	var mu sync.Mutex
	last := make([]*coordinationv1.Lease, n)
	tick := time.NewTicker(period / time.Duration(n))
	defer tick.Stop()
	for i := 0; ; i = (i + 1) % n {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		go func(i int) {
			mu.Lock()
			lease := last[i]
			mu.Unlock()
			if lease == nil {
				lease = &coordinationv1.Lease{}
				if err := c.Get(ctx, client.ObjectKey{Namespace: agentNamespace, Name: nodeName(i)}, lease); err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
					}
					return
				}
			}
			lease = lease.DeepCopy()
			lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
			err := c.Update(ctx, lease)
			if err != nil {
				lease = nil
				if ctx.Err() == nil {
					failed.Add(1)
				}
			}
			mu.Lock()
			last[i] = lease
			mu.Unlock()
		}(i)
	}
}
