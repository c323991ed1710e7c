package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
	poolpass "github.com/gpupool/gpupool/internal/pool"
	"github.com/gpupool/gpupool/internal/testenv"
)

// TestWhatIfLiveProposesWhatTheControllerDoes holds `what-if --live` to the policy controller:
// for one cluster at one time, each policy's proposal (create which change, keep which plan,
// hold a refused change back, retire which plans, or nothing) is the same from both. Each
// policy is a case with its own nodes and pods:
//   - fresh: new demand, nothing in the way: a plan is created;
//   - refused: a human rejected the very change the planner wants: the refusal memory holds it back;
//   - review: a plan under review inside the stabilization window still serves the pod: it is
//     kept, though the planner would now propose another;
//   - closed: the maintenance window is closed: the plan is proposed all the same (the window
//     holds only its evicting steps back once approved);
//   - badwindow: a window the controller cannot read: it plans nothing for the policy;
//   - heartbeat: the report is old but the agent's Lease is fresh: the node is planned;
//   - silent: the report is old and no heartbeat vouches for it: the node is left out.
//
// what-if runs first, then the controller's pass on the cluster it read, with a clock at the
// time what-if planned at.
func TestWhatIfLiveProposesWhatTheControllerDoes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server; skipped with -short")
	}
	g := NewWithT(t)
	env, err := testenv.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	kubeconfig := writeKubeconfig(t, env)
	ctx := t.Context()
	// Pods come of age (minPendingAge) and the plan under review stays inside its window (two
	// minutes from its creation, a moment from now) at this time.
	now := time.Now().Add(time.Minute).UTC().Truncate(time.Second)
	for _, ns := range []string{"team", "gpupool-agent"} {
		g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	fresh, stale := now.Add(-10*time.Second), now.Add(-10*time.Minute)
	for _, c := range []struct {
		name     string
		reported time.Time
		windows  []v1alpha1.MaintenanceWindow
	}{
		{"fresh", fresh, nil},
		{"refused", fresh, nil},
		{"review", fresh, nil},
		// Open an hour a day, twelve hours away from now.
		{"closed", fresh, []v1alpha1.MaintenanceWindow{{Schedule: fmt.Sprintf("0 %d * * *", (now.Hour()+12)%24),
			Duration: metav1.Duration{Duration: time.Hour}}}},
		{"badwindow", fresh, []v1alpha1.MaintenanceWindow{{Schedule: "0 2 * * 6", TimeZone: "Local", Duration: metav1.Duration{Duration: time.Hour}}}},
		{"heartbeat", stale, nil},
		{"silent", stale, nil},
	} {
		policy := &v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: c.name}, Spec: v1alpha1.GPUPoolPolicySpec{
			NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{"pool": c.name}},
			Catalog:      []v1alpha1.CatalogEntry{{Product: "NVIDIA-H200", MIGProfiles: []v1alpha1.MIGProfileName{"1g.18gb", "3g.71gb", "7g.141gb"}}},
			Disruption:   v1alpha1.DisruptionPolicy{Windows: c.windows},
		}}
		g.Expect(env.Client.Create(ctx, policy)).To(Succeed(), c.name)
		createGPUNode(t, env, c.name+"-1", c.name, c.reported)
		createPendingPod(t, env, c.name, c.name, "3g.71gb")
	}
	renew := metav1.NewMicroTime(now.Add(-5 * time.Second))
	g.Expect(env.Client.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gpupool-agent", Name: "heartbeat-1", Labels: map[string]string{v1alpha1.LabelAgentLease: "true"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(v1alpha1.AgentLeaseHolder("heartbeat-1")), RenewTime: &renew},
	})).To(Succeed())

	// A human rejected the very change the planner wants for "refused" (what-if tells which).
	wanted, _ := whatIfLive(t, kubeconfig, now)
	i := slices.IndexFunc(wanted, func(p v1alpha1.RepartitionPlan) bool { return p.Spec.Policy == "refused" })
	g.Expect(i).NotTo(BeNumerically("<", 0), "the planner wants a plan for policy refused")
	rejected := &v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "refused-rejected",
		Annotations: map[string]string{v1alpha1.AnnotationReject: "not this week"}}, Spec: wanted[i].Spec}
	ownPlan(t, env, rejected)
	// And one under review for "review" that serves its pod on the other GPU.
	review := &v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "review-hand"}, Spec: v1alpha1.RepartitionPlanSpec{
		Policy: "review", Approval: v1alpha1.ApprovalManual,
		Steps: []v1alpha1.NodeStep{{Node: "review-1", MIGConfigName: "gpupool-0123456789", GPUs: []v1alpha1.GPUChange{{Index: 1,
			From: v1alpha1.ProfileCounts{"1g.18gb": 7}, To: v1alpha1.ProfileCounts{"3g.71gb": 2}}}}},
		Expected: v1alpha1.PlanExpectation{Pods: []v1alpha1.PodReference{{Namespace: "team", Name: "review"}}},
	}}
	ownPlan(t, env, review)

	wanted, proposals := whatIfLive(t, kubeconfig, now)
	byPolicy := map[string]proposalOutput{}
	for _, p := range proposals {
		byPolicy[p.Policy] = p
	}
	// Each case is the case it claims to be, so that agreeing means something.
	for policy, action := range map[string]string{"fresh": actionCreate, "refused": actionRefused, "review": actionKeep,
		"closed": actionCreate, "badwindow": actionNone, "heartbeat": actionCreate, "silent": actionNone} {
		g.Expect(byPolicy[policy].Action).To(Equal(action), "what-if's proposal for policy %s: %+v", policy, byPolicy[policy])
	}

	before := map[string]bool{rejected.Name: true, review.Name: true}
	startPolicyController(t, env, now)
	for policy, p := range byPolicy {
		got := &v1alpha1.GPUPoolPolicy{}
		g.Eventually(func(g Gomega) {
			g.Expect(env.Client.Get(ctx, client.ObjectKey{Name: policy}, got)).To(Succeed())
			ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.ObservedGeneration).To(Equal(got.Generation))
		}).WithTimeout(30*time.Second).Should(Succeed(), "the controller's pass over policy %s", policy)
		var plans v1alpha1.RepartitionPlanList
		g.Expect(env.Client.List(ctx, &plans)).To(Succeed())
		var created []v1alpha1.RepartitionPlan
		var retired []string
		for _, plan := range plans.Items {
			switch {
			case plan.Spec.Policy != policy:
			case !before[plan.Name]:
				created = append(created, plan)
			case plan.Annotations[v1alpha1.AnnotationSupersede] != "":
				retired = append(retired, plan.Name)
			}
		}
		var wantRetired []string
		for _, s := range p.Supersede {
			wantRetired = append(wantRetired, s.Plan)
		}
		g.Expect(retired).To(ConsistOf(wantRetired), "plans retired for policy %s", policy)
		if p.Action != actionCreate {
			g.Expect(created).To(BeEmpty(), "what-if says %s for policy %s; the controller created a plan", p.Action, policy)
			g.Expect(got.Status.CurrentPlan).To(Equal(p.Current), "policy %s's current plan", policy)
			continue
		}
		g.Expect(created).To(HaveLen(1), "what-if says Create for policy %s", policy)
		want := wanted[slices.IndexFunc(wanted, func(w v1alpha1.RepartitionPlan) bool { return w.Spec.Policy == policy })]
		// The controller names the plan and its entries afresh; the change is the same.
		g.Expect(created[0].Spec.Hash).To(Equal(poolpass.HashAs(&want, created[0].Name)), "policy %s: what-if's plan %+v, the controller's %+v",
			policy, want.Spec, created[0].Spec)
		g.Expect(created[0].Spec.Expected.Pods).To(Equal(want.Spec.Expected.Pods), "pods served for policy %s", policy)
		g.Expect(got.Status.CurrentPlan).To(Equal(created[0].Name))
	}
}

// whatIfLive runs what-if --live -o json at now and returns the plans the planner wants and
// the proposals.
func whatIfLive(t *testing.T, kubeconfig string, now time.Time) ([]v1alpha1.RepartitionPlan, []proposalOutput) {
	t.Helper()
	code, out, errOut := invoke(t, "", "what-if", "--live", "--now="+now.Format(time.RFC3339), "-o", "json", "--kubeconfig="+kubeconfig)
	if code != exitOK {
		t.Fatalf("what-if --live: exit %d: %s", code, errOut)
	}
	var doc struct {
		Plans     []v1alpha1.RepartitionPlan `json:"plans"`
		Proposals []proposalOutput           `json:"proposals"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("what-if --live -o json: %v\n%s", err, out)
	}
	return doc.Plans, doc.Proposals
}

// startPolicyController runs the policy controller alone (no plan controller: the plans stay
// as the test and the controller's pass leave them), configured as config/manager runs it, with
// a clock stopped at now.
func startPolicyController(t *testing.T, env *testenv.Env, now time.Time) {
	t.Helper()
	g := NewWithT(t)
	selector, err := labels.Parse("app.kubernetes.io/component=agent,app.kubernetes.io/name=gpupool")
	g.Expect(err).NotTo(HaveOccurred())
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme,
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&coordinationv1.Lease{}: controllers.AgentLeaseCache("gpupool-agent")}},
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect((&controllers.PolicyReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Clock: clocktesting.NewFakeClock(now),
		Recorder: mgr.GetEventRecorder("gpupool-policy-controller"), ConfigNamespace: "default",
		AgentNamespace: "gpupool-agent", AgentPodSelector: selector, AgentDaemonSet: "gpupool-agent", AgentServiceAccount: "gpupool-agent"}).
		SetupWithManager(mgr)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		NewWithT(t).Eventually(done).WithTimeout(30 * time.Second).Should(Receive(BeNil()))
	})
}

// createGPUNode creates an H200 node of the pool with two GPUs carved 1g.18gb:7, and its
// agent's report, observed at reported.
func createGPUNode(t *testing.T, env *testenv.Env, name, poolName string, reported time.Time) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110")}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": poolName,
		nvidia.LabelGPUProduct: "NVIDIA-H200", nvidia.LabelGPUPresent: "true"}},
		Status: corev1.NodeStatus{Capacity: alloc, Allocatable: alloc}}
	g.Expect(env.Client.Create(ctx, node)).To(Succeed())
	// The API server taints a new node not-ready; nothing in envtest clears it but the test.
	node.Spec.Taints = nil
	g.Expect(env.Client.Update(ctx, node)).To(Succeed())
	product, _ := mig.LookupProduct("H200")
	placed, err := product.Place(mig.Layout{"1g.18gb": 7}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	report := &v1alpha1.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	g.Expect(env.Client.Create(ctx, report)).To(Succeed())
	for i := range 2 {
		gs := v1alpha1.GPUStatus{Index: int32(i), Product: "NVIDIA H200", MIGMode: &v1alpha1.MIGModeStatus{Current: "Enabled"}}
		for _, in := range placed {
			gs.Instances = append(gs.Instances, v1alpha1.MIGInstance{Profile: in.Profile,
				Placement: v1alpha1.SlicePlacement{Start: int32(in.Placement.Start), Size: int32(in.Placement.Size)}})
		}
		report.Status.GPUs = append(report.Status.GPUs, gs)
	}
	report.Status.ObservedTime = ptr.To(metav1.NewTime(reported))
	report.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionNVMLReady, Status: metav1.ConditionTrue,
		Reason: "Read", LastTransitionTime: metav1.NewTime(reported)}}
	g.Expect(env.Client.Status().Update(ctx, report)).To(Succeed())
}

// createPendingPod creates team/name asking for one instance of profile, bound by its node
// selector to the pool's nodes, that the scheduler marked unschedulable ten minutes ago.
func createPendingPod(t *testing.T, env *testenv.Env, name, poolName, profile string) {
	t.Helper()
	g := NewWithT(t)
	ctx := t.Context()
	res := corev1.ResourceList{corev1.ResourceName(mig.ResourceName(profile)): resource.MustParse("1")}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team"}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{"pool": poolName},
		Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Limits: res, Requests: res}}}}}
	g.Expect(env.Client.Create(ctx, pod)).To(Succeed())
	pod.Status.Phase = corev1.PodPending
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, LastTransitionTime: metav1.NewTime(time.Now().Add(-10 * time.Minute))}}
	g.Expect(env.Client.Status().Update(ctx, pod)).To(Succeed())
}

// ownPlan creates plan as its policy's own (controlled by it), its hash the hash of its steps.
func ownPlan(t *testing.T, env *testenv.Env, plan *v1alpha1.RepartitionPlan) {
	t.Helper()
	g := NewWithT(t)
	policy := &v1alpha1.GPUPoolPolicy{}
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Name: plan.Spec.Policy}, policy)).To(Succeed())
	plan.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(policy, v1alpha1.GroupVersion.WithKind("GPUPoolPolicy"))}
	plan.Spec.Hash = v1alpha1.HashSteps(plan.Spec.Steps)
	g.Expect(env.Client.Create(t.Context(), plan)).To(Succeed())
}

// writeKubeconfig writes a kubeconfig for the CLI to reach env as its administrator.
func writeKubeconfig(t *testing.T, env *testenv.Env) string {
	t.Helper()
	cfg := env.Config
	path := filepath.Join(t.TempDir(), "kubeconfig")
	err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"env": {Server: cfg.Host, CertificateAuthorityData: cfg.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"admin": {ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}},
		Contexts:       map[string]*clientcmdapi.Context{"env": {Cluster: "env", AuthInfo: "admin"}},
		CurrentContext: "env",
	}, path)
	if err != nil {
		t.Fatal(err)
	}
	return path
}
