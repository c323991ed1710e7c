package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/sim"
	"github.com/gpupool/gpupool/test/simcluster"
)

// Device-plugin resources of the H200's MIG profiles.
const (
	mig1g = "nvidia.com/mig-1g.18gb"
	mig3g = "nvidia.com/mig-3g.71gb"
	mig7g = "nvidia.com/mig-7g.141gb"
)

// Polling of every wait; timeouts are explicit at each wait.
const poll = 250 * time.Millisecond

// scenario is one spec's share of the cluster: its nodes, its namespace and its policy.
type scenario struct {
	name   string
	ns     string
	nodes  []string
	policy string
}

// newScenario creates the scenario's namespace; when the spec ends it prints diagnostics if
// the spec failed, then deletes the policy (its plans with it) and the namespace.
func newScenario(name string) *scenario {
	s := &scenario{name: name, ns: "e2e-" + name, nodes: nodesOf[name], policy: "e2e-" + name}
	Expect(s.nodes).NotTo(BeEmpty(), "scenario %s has no nodes: add it to scenarioNodes", name)
	Expect(k8s.Create(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}})).To(Succeed())
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			GinkgoWriter.Print(s.diagnostics())
		}
		_ = k8s.Delete(suiteCtx, &v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: s.policy}})
		_ = k8s.Delete(suiteCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}})
	})
	return s
}

// inPool asks for any node of the scenario.
func (s *scenario) inPool() map[string]string { return map[string]string{scenarioLabel: s.name} }

// onNode asks for one node.
func onNode(node string) map[string]string { return map[string]string{corev1.LabelHostname: node} }

func podSpec(selector map[string]string, res string, n int64) corev1.PodSpec {
	return corev1.PodSpec{
		NodeSelector:                  selector,
		TerminationGracePeriodSeconds: ptr.To[int64](0),
		Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				corev1.ResourceName(res): *resource.NewQuantity(n, resource.DecimalSI)}}}},
	}
}

// bare creates a pod no controller manages: the planner never evicts it (policy evictUnmanaged
// is false), so it pins the GPU it runs on.
func (s *scenario) bare(name string, selector map[string]string, res string, n int64) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name, Labels: map[string]string{"app": name}},
		Spec: podSpec(selector, res, n)}
	Expect(k8s.Create(suiteCtx, pod)).To(Succeed())
	return pod
}

// deploy creates a Deployment whose pods carry label app=name and the given annotations.
func (s *scenario) deploy(name string, replicas int32, selector map[string]string, res string, n int64,
	annotations map[string]string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec: podSpec(selector, res, n)}}}
	Expect(k8s.Create(suiteCtx, d)).To(Succeed())
	return d
}

// pods lists the live (not terminating) pods labelled app=app.
func (s *scenario) pods(app string) []corev1.Pod {
	var list corev1.PodList
	Expect(k8s.List(suiteCtx, &list, client.InNamespace(s.ns), client.MatchingLabels{"app": app})).To(Succeed())
	return slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return !p.DeletionTimestamp.IsZero() })
}

// waitRunning waits until exactly n live pods of app run, and returns them.
func (s *scenario) waitRunning(app string, n int, timeout time.Duration) []corev1.Pod {
	var pods []corev1.Pod
	Eventually(func(g Gomega) {
		pods = s.pods(app)
		g.Expect(pods).To(HaveLen(n))
		for _, p := range pods {
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "pod %s", p.Name)
		}
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed(), s.diagnostics)
	return pods
}

func names(pods []corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

// gpuPods is what the node agent reports: per GPU index, the names of this scenario's pods on it.
func (s *scenario) gpuPods(g Gomega, node string) map[int32][]string {
	report := &v1alpha1.GPUNode{}
	g.Expect(k8s.Get(suiteCtx, client.ObjectKey{Name: node}, report)).To(Succeed())
	out := map[int32][]string{}
	for _, gpu := range report.Status.GPUs {
		for _, ref := range podsOn(gpu) {
			if ref.Namespace == s.ns {
				out[gpu.Index] = append(out[gpu.Index], ref.Name)
			}
		}
	}
	return out
}

// podsOn lists the pods holding a GPU, whole or any of its MIG instances, once each.
func podsOn(gpu v1alpha1.GPUStatus) []v1alpha1.PodReference {
	out := slices.Clone(gpu.Pods)
	for _, in := range gpu.Instances {
		if in.Pod != nil && !slices.Contains(out, *in.Pod) {
			out = append(out, *in.Pod)
		}
	}
	return out
}

// waitGPUHolds waits until the agent reports exactly these pods of the scenario on the GPU.
func (s *scenario) waitGPUHolds(node string, gpu int32, pods ...string) {
	Eventually(func(g Gomega) {
		g.Expect(s.gpuPods(g, node)[gpu]).To(ConsistOf(pods))
	}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), "the agent of %s reports pods %v on GPU %d", node, pods, gpu)
}

// pin runs a bare pod holding n 1g slices on node and waits until the agent reports it on
// GPU 0 (the device plugin hands out GPU 0's slices first).
func (s *scenario) pin(name, node string, n int64) *corev1.Pod {
	pod := s.bare(name, onNode(node), mig1g, n)
	s.waitRunning(name, 1, 30*time.Second)
	s.waitGPUHolds(node, 0, name)
	return pod
}

// onGPU1 runs a Deployment of replicas pods with one 1g slice each on GPU 1 of node, whose
// GPU 0 already holds exactly the pods gpu0 with one slice each: a bare pod holds GPU 0's
// other slices until the Deployment's pods have theirs, then goes. GPU 0 keeps free slices
// where the Deployment's pods fit again, so that the planner may evict them.
func (s *scenario) onGPU1(node, app string, replicas int32, annotations map[string]string, gpu0 ...string) []corev1.Pod {
	hold := s.bare("hold-"+app, onNode(node), mig1g, int64(7-len(gpu0)))
	s.waitRunning(hold.Name, 1, 30*time.Second)
	s.waitGPUHolds(node, 0, append(slices.Clone(gpu0), hold.Name)...)
	s.deploy(app, replicas, onNode(node), mig1g, 1, annotations)
	pods := s.waitRunning(app, int(replicas), 30*time.Second)
	s.waitGPUHolds(node, 1, names(pods)...)
	Expect(k8s.Delete(suiteCtx, hold, client.GracePeriodSeconds(0))).To(Succeed())
	Eventually(func() error {
		return k8s.Get(suiteCtx, client.ObjectKeyFromObject(hold), &corev1.Pod{})
	}).WithTimeout(30 * time.Second).WithPolling(poll).Should(MatchError(apierrors.IsNotFound, "IsNotFound"))
	s.waitGPUHolds(node, 0, gpu0...)
	return pods
}

// createPolicy creates the scenario's policy: its nodes, the H200 catalog, Manual approval,
// short planning windows, and paused, so that no plan is made from part of the demand;
// unpauseWhenPending starts planning once all of it is pending.
func (s *scenario) createPolicy(edit func(*v1alpha1.GPUPoolPolicySpec)) {
	p := &v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: s.policy}, Spec: v1alpha1.GPUPoolPolicySpec{
		NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{scenarioLabel: s.name}},
		Catalog: []v1alpha1.CatalogEntry{{Product: "NVIDIA-H200",
			MIGProfiles: []v1alpha1.MIGProfileName{"1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}}},
		Disruption: v1alpha1.DisruptionPolicy{Approval: v1alpha1.ApprovalManual,
			ConfigureTimeout: &metav1.Duration{Duration: 2 * time.Minute}},
		Planning: v1alpha1.PlanningPolicy{Paused: true, MinPendingAge: &metav1.Duration{Duration: 2 * time.Second},
			StabilizationWindow: &metav1.Duration{Duration: 10 * time.Second}},
	}}
	if edit != nil {
		edit(&p.Spec)
	}
	Expect(k8s.Create(suiteCtx, p)).To(Succeed())
}

// editPolicy changes the scenario's policy.
func (s *scenario) editPolicy(edit func(*v1alpha1.GPUPoolPolicySpec)) {
	p := &v1alpha1.GPUPoolPolicy{}
	Expect(k8s.Get(suiteCtx, client.ObjectKey{Name: s.policy}, p)).To(Succeed())
	patch := client.MergeFrom(p.DeepCopy())
	edit(&p.Spec)
	Expect(k8s.Patch(suiteCtx, p, patch)).To(Succeed())
}

// unpauseWhenPending waits until the paused policy counts n pending pods past minPendingAge,
// then lets it plan.
func (s *scenario) unpauseWhenPending(n int32) {
	Eventually(func(g Gomega) {
		p := &v1alpha1.GPUPoolPolicy{}
		g.Expect(k8s.Get(suiteCtx, client.ObjectKey{Name: s.policy}, p)).To(Succeed())
		g.Expect(p.Status.ObservedGeneration).To(Equal(p.Generation))
		g.Expect(p.Status.PendingPods).To(Equal(n))
	}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
	s.editPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) { spec.Planning.Paused = false })
}

// plans are the policy's plans, oldest first.
func (s *scenario) plans(g Gomega) []v1alpha1.RepartitionPlan {
	var list v1alpha1.RepartitionPlanList
	g.Expect(k8s.List(suiteCtx, &list)).To(Succeed())
	out := slices.DeleteFunc(list.Items, func(p v1alpha1.RepartitionPlan) bool { return p.Spec.Policy != s.policy })
	slices.SortFunc(out, func(a, b v1alpha1.RepartitionPlan) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	return out
}

// waitPlan waits for a plan of the policy in one of phases and returns it.
func (s *scenario) waitPlan(timeout time.Duration, phases ...v1alpha1.PlanPhase) *v1alpha1.RepartitionPlan {
	var found *v1alpha1.RepartitionPlan
	Eventually(func(g Gomega) {
		found = nil
		for _, p := range s.plans(g) {
			if slices.Contains(phases, p.Status.Phase) {
				found = &p
			}
		}
		g.Expect(found).NotTo(BeNil(), "no plan of policy %s is %v", s.policy, phases)
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed(), s.diagnostics)
	return found
}

var finished = []v1alpha1.PlanPhase{v1alpha1.PlanSucceeded, v1alpha1.PlanFailed,
	v1alpha1.PlanRejected, v1alpha1.PlanExpired, v1alpha1.PlanSuperseded}

// waitPhase waits until the plan reaches phase, and stops early when it ends in another one.
func (s *scenario) waitPhase(name string, phase v1alpha1.PlanPhase, timeout time.Duration) *v1alpha1.RepartitionPlan {
	plan := &v1alpha1.RepartitionPlan{}
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(suiteCtx, client.ObjectKey{Name: name}, plan)).To(Succeed())
		if plan.Status.Phase != phase && slices.Contains(finished, plan.Status.Phase) {
			StopTrying(fmt.Sprintf("plan %s ended %s, not %s", name, plan.Status.Phase, phase)).Now()
		}
		g.Expect(plan.Status.Phase).To(Equal(phase))
	}).WithTimeout(timeout).WithPolling(poll).Should(Succeed(), s.diagnostics)
	return plan
}

func getPlan(g Gomega, name string) *v1alpha1.RepartitionPlan {
	plan := &v1alpha1.RepartitionPlan{}
	g.Expect(k8s.Get(suiteCtx, client.ObjectKey{Name: name}, plan)).To(Succeed())
	return plan
}

// approve approves the plan the way a human does: annotation gpupool.io/approve=<spec.hash>.
func approve(plan *v1alpha1.RepartitionPlan) {
	annotatePlan(plan, v1alpha1.AnnotationApprove, plan.Spec.Hash)
}

// annotatePlan sets an annotation on a plan, as kubectl annotate --overwrite does.
func annotatePlan(plan *v1alpha1.RepartitionPlan, key, value string) {
	p := &v1alpha1.RepartitionPlan{}
	Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(plan), p)).To(Succeed())
	patch := client.MergeFrom(p.DeepCopy())
	metav1.SetMetaDataAnnotation(&p.ObjectMeta, key, value)
	Expect(k8s.Patch(suiteCtx, p, patch)).To(Succeed())
}

// stepStatus is the status of the plan's step on node; zero when it has not started.
func stepStatus(plan *v1alpha1.RepartitionPlan, node string) v1alpha1.NodeStepStatus {
	for _, st := range plan.Status.Nodes {
		if st.Node == node {
			return st
		}
	}
	return v1alpha1.NodeStepStatus{}
}

// evicted are the namespace/name of every pod the plan evicts.
func evicted(plan *v1alpha1.RepartitionPlan) []string {
	var out []string
	for _, step := range plan.Spec.Steps {
		for _, e := range step.Evictions {
			out = append(out, e.Namespace+"/"+e.Name)
		}
	}
	return out
}

func (s *scenario) keys(pods []corev1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, s.ns+"/"+p.Name)
	}
	return out
}

func getNode(g Gomega, name string) *corev1.Node {
	node := &corev1.Node{}
	g.Expect(k8s.Get(suiteCtx, client.ObjectKey{Name: name}, node)).To(Succeed())
	return node
}

// annotateNode sets (or, with an empty value, removes) an annotation on a node.
func annotateNode(name, key, value string) {
	node := getNode(Default, name)
	patch := client.MergeFrom(node.DeepCopy())
	if value == "" {
		delete(node.Annotations, key)
	} else {
		metav1.SetMetaDataAnnotation(&node.ObjectMeta, key, value)
	}
	Expect(k8s.Patch(suiteCtx, node, patch)).To(Succeed())
}

// expectOpen checks that gpupool does not hold the node cordoned.
func expectOpen(g Gomega, name string) {
	node := getNode(g, name)
	g.Expect(node.Spec.Unschedulable).To(BeFalse(), "node %s is cordoned", name)
	g.Expect(node.Annotations).NotTo(HaveKey(v1alpha1.AnnotationCordonedBy))
}

// layouts is the agent's report of a node: per GPU, its MIG profile counts.
func layouts(g Gomega, node string) map[int32]map[string]int {
	report := &v1alpha1.GPUNode{}
	g.Expect(k8s.Get(suiteCtx, client.ObjectKey{Name: node}, report)).To(Succeed())
	out := map[int32]map[string]int{}
	for _, gpu := range report.Status.GPUs {
		counts := map[string]int{}
		for _, in := range gpu.Instances {
			counts[in.Profile]++
		}
		out[gpu.Index] = counts
	}
	return out
}

// setPDBMinAvailable creates or updates PodDisruptionBudget app for pods labelled app=app and
// waits until the disruption controller reports the budget it allows.
func (s *scenario) setPDBMinAvailable(app string, minAvailable int32, wantAllowed int32) {
	pdb := &policyv1.PodDisruptionBudget{}
	err := k8s.Get(suiteCtx, client.ObjectKey{Namespace: s.ns, Name: app}, pdb)
	if client.IgnoreNotFound(err) != nil {
		Expect(err).NotTo(HaveOccurred())
	}
	if err != nil {
		pdb = &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: app},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(minAvailable)),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}
		Expect(k8s.Create(suiteCtx, pdb)).To(Succeed())
	} else {
		patch := client.MergeFrom(pdb.DeepCopy())
		pdb.Spec.MinAvailable = ptr.To(intstr.FromInt32(minAvailable))
		Expect(k8s.Patch(suiteCtx, pdb, patch)).To(Succeed())
	}
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(suiteCtx, client.ObjectKeyFromObject(pdb), pdb)).To(Succeed())
		g.Expect(pdb.Status.ObservedGeneration).To(Equal(pdb.Generation))
		g.Expect(pdb.Status.DisruptionsAllowed).To(Equal(wantAllowed))
	}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), "PDB %s/%s allows %d", s.ns, app, wantAllowed)
}

// evictionsCounted sums gpupool_evictions_total{outcome="Evicted"} of the policy on the
// manager serving metrics at addr.
func evictionsCounted(addr, policy string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics") //nolint:noctx // loopback scrape
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "gpupool_evictions_total{") || !strings.Contains(line, `outcome="Evicted"`) ||
			!strings.Contains(line, `policy="`+policy+`"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %w", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// history records what a watch saw; it is safe for concurrent use.
type history struct {
	mu     sync.Mutex
	seen   []string
	broken string
}

func (h *history) add(v string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen = append(h.seen, v)
}

func (h *history) values() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seen)
}

func (h *history) fail(why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.broken = why
}

// err says why the watch stopped early, "" when it did not.
func (h *history) err() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.broken
}

// watchLabel records every value the node's label takes, from its current one on, until the
// spec ends.
func watchLabel(node, label string) *history {
	return watchEvents(&corev1.NodeList{}, []client.ListOption{client.MatchingFields{"metadata.name": node}},
		func(h *history, ev watch.Event) {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type == watch.Deleted {
				return
			}
			v := n.Labels[label]
			if seen := h.values(); len(seen) == 0 || seen[len(seen)-1] != v {
				h.add(v)
			}
		})
}

// watchDeletions records "name uid" of every pod of the namespace that is deleted or starts
// terminating, once per pod, until the spec ends.
func watchDeletions(ns string) *history {
	return watchEvents(&corev1.PodList{}, []client.ListOption{client.InNamespace(ns)}, func(h *history, ev watch.Event) {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok || (ev.Type != watch.Deleted && p.DeletionTimestamp.IsZero()) {
			return
		}
		if entry := p.Name + " " + string(p.UID); !slices.Contains(h.values(), entry) {
			h.add(entry)
		}
	})
}

func watchEvents(list client.ObjectList, opts []client.ListOption, record func(*history, watch.Event)) *history {
	ctx, cancel := context.WithCancel(suiteCtx)
	DeferCleanup(cancel)
	w, err := watcher.Watch(ctx, list, opts...)
	Expect(err).NotTo(HaveOccurred())
	h := &history{}
	go func() {
		defer GinkgoRecover()
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					h.fail("the watch closed early")
					return
				}
				if ev.Type == watch.Error {
					h.fail(fmt.Sprintf("watch error: %v", ev.Object))
					return
				}
				record(h, ev)
			}
		}
	}()
	return h
}

// diagnostics describes the scenario for a failure message: its policy, plans, nodes and pods,
// and where the processes' logs are.
func (s *scenario) diagnostics() string {
	var b strings.Builder
	ctx, cancel := context.WithTimeout(suiteCtx, 10*time.Second)
	defer cancel()
	fmt.Fprintf(&b, "\n--- scenario %s (namespace %s, nodes %v)\n", s.name, s.ns, s.nodes)
	fmt.Fprintf(&b, "manager log: %s\ngpusim log: %s\n", cluster.LogPath(simcluster.ManagerProcess),
		cluster.LogPath(simcluster.GPUSimProcess))
	policy := &v1alpha1.GPUPoolPolicy{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: s.policy}, policy); err == nil {
		fmt.Fprintf(&b, "policy %s: pending %d, current plan %q, approval %s, paused %v\n", s.policy,
			policy.Status.PendingPods, policy.Status.CurrentPlan, policy.Spec.Disruption.Approval, policy.Spec.Planning.Paused)
		for _, c := range policy.Status.Conditions {
			fmt.Fprintf(&b, "  %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	var plans v1alpha1.RepartitionPlanList
	if err := k8s.List(ctx, &plans); err == nil {
		for _, p := range plans.Items {
			if p.Spec.Policy == s.policy {
				b.WriteString(describePlan(&p))
			}
		}
	}
	for _, name := range s.nodes {
		node := &corev1.Node{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			continue
		}
		fmt.Fprintf(&b, "node %s: unschedulable %v, cordoned-by %q, mig.config %q (%s), faults %q, delay %q\n", name,
			node.Spec.Unschedulable, node.Annotations[v1alpha1.AnnotationCordonedBy], node.Labels[nvidia.LabelMIGConfig],
			node.Labels[nvidia.LabelMIGConfigState], node.Annotations[sim.AnnotationFault], node.Annotations[sim.AnnotationApplyDelay])
		report := &v1alpha1.GPUNode{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, report); err == nil {
			for _, gpu := range report.Status.GPUs {
				counts := map[string]int{}
				for _, in := range gpu.Instances {
					counts[in.Profile]++
				}
				fmt.Fprintf(&b, "  GPU %d: %v, pods %v\n", gpu.Index, counts, podsOn(gpu))
			}
		}
	}
	var pods corev1.PodList
	if err := k8s.List(ctx, &pods, client.InNamespace(s.ns)); err == nil {
		for _, p := range pods.Items {
			fmt.Fprintf(&b, "pod %s: %s on %q, uid %s, terminating %v\n", p.Name, p.Status.Phase, p.Spec.NodeName,
				p.UID, !p.DeletionTimestamp.IsZero())
		}
	}
	return b.String()
}

func describePlan(p *v1alpha1.RepartitionPlan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "plan %s: phase %s, approved %v, disruptive %v, progress %s, hash %s, annotations %v\n", p.Name,
		p.Status.Phase, p.Status.Approved, p.Spec.Disruptive, p.Status.Progress, p.Spec.Hash, p.Annotations)
	for _, step := range p.Spec.Steps {
		fmt.Fprintf(&b, "  step %s -> %s:", step.Node, step.MIGConfigName)
		for _, g := range step.GPUs {
			fmt.Fprintf(&b, " GPU %d %v -> %v;", g.Index, g.From, g.To)
		}
		for _, e := range step.Evictions {
			fmt.Fprintf(&b, " evicts %s/%s;", e.Namespace, e.Name)
		}
		st := stepStatus(p, step.Node)
		fmt.Fprintf(&b, " state %q: %s\n", st.State, st.Message)
	}
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, "  %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

// timeSlicedPlan gives the scenario a policy that allows time-slicing with 2 or 4 replicas,
// deploys pods asking for one replica of resource each, and returns the one-node plan proposed
// for them, checking that it evicts nobody and that nothing runs before approval.
func (s *scenario) timeSlicedPlan(app, resource string, pods int32) *v1alpha1.RepartitionPlan {
	s.createPolicy(func(spec *v1alpha1.GPUPoolPolicySpec) {
		spec.Catalog[0].Sharing = &v1alpha1.SharingCatalog{TimeSlicing: &v1alpha1.ReplicaChoices{Replicas: []int32{2, 4}}}
	})
	s.deploy(app, pods, s.inPool(), resource, 1, nil)
	s.unpauseWhenPending(pods)
	plan := s.waitPlan(time.Minute, v1alpha1.PlanAwaitingApproval)
	Expect(plan.Spec.Steps).To(HaveLen(1))
	Expect(plan.Spec.Steps[0].Node).To(Equal(s.nodes[0]))
	Expect(evicted(plan)).To(BeEmpty())
	Expect(s.pods(app)).To(HaveEach(HaveField("Spec.NodeName", BeEmpty())), "nothing runs before approval")
	return plan
}

// runApproved approves a sharing plan and waits until it succeeded, the pods run, and the node,
// reopened under the plan's device-plugin key, advertises replicas of shared and none of the
// exclusive resource it renamed.
func (s *scenario) runApproved(plan *v1alpha1.RepartitionPlan, app string, pods int, shared string, replicas int64, renamed string) {
	approve(plan)
	s.waitPhase(plan.Name, v1alpha1.PlanSucceeded, 2*time.Minute)
	s.waitRunning(app, pods, time.Minute)
	node := plan.Spec.Steps[0].Node
	Eventually(func(g Gomega) {
		n := getNode(g, node)
		g.Expect(n.Labels).To(HaveKeyWithValue(nvidia.LabelDevicePluginConfig, plan.Spec.Steps[0].SharingConfigName))
		q := n.Status.Allocatable[corev1.ResourceName(shared)]
		g.Expect(q.Value()).To(Equal(replicas))
		g.Expect(n.Status.Allocatable).NotTo(HaveKey(corev1.ResourceName(renamed)))
		expectOpen(g, node)
	}).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), s.diagnostics)
}

// observedTime is when the node's agent last read NVML, as its GPUNode says (zero when the
// GPUNode is gone).
func observedTime(g Gomega, node string) time.Time {
	report := &v1alpha1.GPUNode{}
	err := k8s.Get(suiteCtx, client.ObjectKey{Name: node}, report)
	if apierrors.IsNotFound(err) {
		return time.Time{}
	}
	g.Expect(err).NotTo(HaveOccurred())
	if report.Status.ObservedTime == nil {
		return time.Time{}
	}
	return report.Status.ObservedTime.Time
}

// condition is the policy's status condition of type t (zero when it has none).
func (s *scenario) condition(g Gomega, t string) metav1.Condition {
	p := &v1alpha1.GPUPoolPolicy{}
	g.Expect(k8s.Get(suiteCtx, client.ObjectKey{Name: s.policy}, p)).To(Succeed())
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return metav1.Condition{}
}

// nodeEvents lists the notes of the Events about the node with reason, oldest first. It takes
// those naming the node's UID, and those naming no UID at all: the plan controller records its
// step Events on the node that way (controllers/execute.go recordStep), though kubectl describe
// node shows only Events naming the node's UID or its name as the UID.
func nodeEvents(g Gomega, node, reason string) []string {
	n := getNode(g, node)
	var list eventsv1.EventList
	g.Expect(k8s.List(suiteCtx, &list)).To(Succeed())
	slices.SortFunc(list.Items, func(a, b eventsv1.Event) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Node" && e.Regarding.Name == node && (e.Regarding.UID == n.UID || e.Regarding.UID == "") &&
			e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

// watchNode records describe(node) each time it changes, from its current value on, until the
// spec ends.
func watchNode(node string, describe func(*corev1.Node) string) *history {
	return watchEvents(&corev1.NodeList{}, []client.ListOption{client.MatchingFields{"metadata.name": node}},
		func(h *history, ev watch.Event) {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type == watch.Deleted {
				return
			}
			v := describe(n)
			if seen := h.values(); len(seen) == 0 || seen[len(seen)-1] != v {
				h.add(v)
			}
		})
}

// setNodeLabel sets (or, with an empty value, removes) a label on a node, as kubectl label does.
func setNodeLabel(name, key, value string) {
	node := getNode(Default, name)
	patch := client.MergeFrom(node.DeepCopy())
	if value == "" {
		delete(node.Labels, key)
	} else {
		node.Labels[key] = value
	}
	Expect(k8s.Patch(suiteCtx, node, patch)).To(Succeed())
}

// uncordon is kubectl uncordon: what a user does once they checked a node gpupool kept cordoned.
func uncordon(name string) {
	node := getNode(Default, name)
	patch := client.MergeFrom(node.DeepCopy())
	node.Spec.Unschedulable = false
	Expect(k8s.Patch(suiteCtx, node, patch)).To(Succeed())
}
