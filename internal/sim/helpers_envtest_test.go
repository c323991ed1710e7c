package sim_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/sim"
	"github.com/gpupool/gpupool/internal/testenv"
)

// The tests write the GPU Operator's config files by hand, in NVIDIA's formats, never with
// gpupool's writers (internal/nvidia): the simulator must read what NVIDIA's components read.

// The API server is started on first use and shared by the package's envtest tests; each test
// uses its own node names and ConfigMap, so they do not see each other's objects.
var (
	envOnce   sync.Once
	sharedEnv *testenv.Env
	envErr    error
)

const (
	configNamespace = "gpupool-system"
	podNamespace    = "sim-test"
	waitTimeout     = 30 * time.Second
	pollInterval    = 50 * time.Millisecond
)

func TestMain(m *testing.M) {
	// The simulator's and the agents' logs, when asked for: SIM_TEST_LOG=1 go test -v.
	if os.Getenv("SIM_TEST_LOG") != "" {
		ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	code := m.Run()
	if sharedEnv != nil {
		if err := sharedEnv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}
	os.Exit(code)
}

// startEnv returns the package's API server, starting it (and creating the namespaces the
// tests use) on first use.
func startEnv(t *testing.T) *testenv.Env {
	t.Helper()
	if testing.Short() {
		t.Skip("envtest: skipped with -short")
	}
	envOnce.Do(func() {
		sharedEnv, envErr = testenv.Start()
		if envErr != nil {
			return
		}
		if envErr = installClusterPolicyCRD(sharedEnv); envErr != nil {
			return
		}
		for _, ns := range []string{configNamespace, podNamespace} {
			obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
			if err := sharedEnv.Client.Create(context.Background(), obj); err != nil && !apierrors.IsAlreadyExists(err) {
				envErr = fmt.Errorf("creating namespace %s: %w", ns, err)
				return
			}
		}
	})
	if envErr != nil {
		t.Fatalf("starting envtest: %v", envErr)
	}
	return sharedEnv
}

// installClusterPolicyCRD installs the simulator's ClusterPolicy CRD and waits until it is
// served.
func installClusterPolicyCRD(env *testenv.Env) error {
	ctx := context.Background()
	if err := apiextensionsv1.AddToScheme(env.Scheme); err != nil {
		return err
	}
	c, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		return err
	}
	if err := c.Create(ctx, sim.ClusterPolicyCRD()); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the ClusterPolicy CRD: %w", err)
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(sim.ClusterPolicyGVK.GroupVersion().WithKind("ClusterPolicyList"))
		last = c.List(ctx, list)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the ClusterPolicy CRD is not served: %w", errors.Join(err, last))
	}
	return nil
}

// exclusiveKey is the device plugin config key each test's ClusterPolicy names as its default,
// and exclusiveConfig its content: NVIDIA's format, no sharing.
const (
	exclusiveKey    = "exclusive"
	exclusiveConfig = "version: v1\nflags:\n  migStrategy: mixed\n"
)

// fixture is one running simulator in the shared API server.
type fixture struct {
	t   *testing.T
	g   *WithT
	env *testenv.Env
	c   client.Client
	sim *sim.Sim
	cm  types.NamespacedName
	// dp is the device plugin's ConfigMap, also the test's own.
	dp types.NamespacedName
	// policy is the test's ClusterPolicy, which names cm and dp.
	policy sim.ClusterPolicySettings
	// entries are the mig-parted entries addEntries wrote, as YAML lists.
	entries map[string]string
	nodes   []string
}

// testOptions adjusts a fixture before its simulator starts.
type testOptions struct {
	// strategy is the ClusterPolicy's spec.mig.strategy; "" means mixed.
	strategy string
	// noDevicePluginConfigMap leaves the device plugin's ConfigMap out.
	noDevicePluginConfigMap bool
}

// startSim runs a simulator creating the given nodes, with its own ClusterPolicy and
// ConfigMaps named after the test, until the test ends; it then stops the simulator and
// deletes what it created. The device plugin's ConfigMap starts with the exclusive default key.
func startSim(t *testing.T, o sim.Options, opts ...testOptions) *fixture {
	t.Helper()
	env := startEnv(t)
	var to testOptions
	if len(opts) > 0 {
		to = opts[0]
	}
	f := &fixture{t: t, g: NewWithT(t), env: env, c: env.Client, entries: map[string]string{}}
	f.g.SetDefaultEventuallyTimeout(waitTimeout)
	f.g.SetDefaultEventuallyPollingInterval(pollInterval)
	f.cm = types.NamespacedName{Namespace: configNamespace, Name: "cm-" + o.Nodes[0].Name}
	f.dp = types.NamespacedName{Namespace: configNamespace, Name: "dp-" + o.Nodes[0].Name}
	f.policy = sim.ClusterPolicySettings{
		Name: "cp-" + o.Nodes[0].Name, Namespace: configNamespace, MIGStrategy: to.strategy,
		MIGConfigMap: f.cm.Name, DevicePluginConfigMap: f.dp.Name, DevicePluginDefault: exclusiveKey,
	}
	if f.policy.MIGStrategy == "" {
		f.policy.MIGStrategy = "mixed"
	}
	if err := sim.InstallClusterPolicy(context.Background(), env.Client, f.policy); err != nil {
		t.Fatal(err)
	}
	if !to.noDevicePluginConfigMap {
		f.setDevicePluginConfig(map[string]string{exclusiveKey: exclusiveConfig})
	}
	o.ClusterPolicy = f.policy.Name
	o.CreateNodes = true
	if o.AgentRefreshPeriod == 0 {
		o.AgentRefreshPeriod = 200 * time.Millisecond
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = 200 * time.Millisecond
	}
	for _, n := range o.Nodes {
		f.nodes = append(f.nodes, n.Name)
	}
	s, err := sim.New(env.Config, o)
	if err != nil {
		t.Fatalf("sim.New: %v", err)
	}
	f.sim = s
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("sim.Run: %v", err)
			}
		case <-time.After(waitTimeout):
			t.Error("sim.Run did not return after its context ended")
		}
		bg := context.Background()
		for _, name := range f.nodes {
			for _, obj := range []client.Object{
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}},
				&v1alpha1.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: name}},
			} {
				if err := f.c.Delete(bg, obj); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("deleting %T %s: %v", obj, name, err)
				}
			}
		}
		for _, key := range []types.NamespacedName{f.cm, f.dp} {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
			if err := f.c.Delete(bg, cm); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting ConfigMap %s: %v", key, err)
			}
		}
		if err := f.c.Delete(bg, sim.ClusterPolicyObject(f.policy)); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting ClusterPolicy %s: %v", f.policy.Name, err)
		}
	})
	for _, name := range f.nodes {
		f.g.Eventually(func() error { return f.c.Get(ctx, types.NamespacedName{Name: name}, &corev1.Node{}) }).Should(Succeed())
	}
	return f
}

func (f *fixture) node(name string) *corev1.Node {
	f.t.Helper()
	n := &corev1.Node{}
	if err := f.c.Get(context.Background(), types.NamespacedName{Name: name}, n); err != nil {
		f.t.Fatalf("get node %s: %v", name, err)
	}
	return n
}

func (f *fixture) simNode(name string) *sim.Node {
	f.t.Helper()
	n, ok := f.sim.Node(name)
	if !ok {
		f.t.Fatalf("no simulated node %s", name)
	}
	return n
}

// state returns a function reading the node's nvidia.com/mig.config.state, for Eventually.
func (f *fixture) state(name string) func() string {
	return func() string { return f.node(name).Labels[sim.LabelMIGConfigState] }
}

// gpus reads the simulated node's GPUs through its mock NVML.
func (f *fixture) gpus(name string) []sim.GPUState {
	f.t.Helper()
	g, err := f.simNode(name).GPUs()
	if err != nil {
		f.t.Fatal(err)
	}
	return g
}

// addEntries adds mig-parted entries, each a YAML list of specs in NVIDIA's format, and
// rewrites the fixture's ConfigMap with every entry added so far (creating it if needed).
func (f *fixture) addEntries(entries map[string]string) {
	f.t.Helper()
	for k, v := range entries {
		f.entries[k] = v
	}
	var b strings.Builder
	b.WriteString("version: v1\nmig-configs:\n")
	for _, name := range slices.Sorted(maps.Keys(f.entries)) {
		fmt.Fprintf(&b, "  %s:\n", name)
		for line := range strings.SplitSeq(strings.TrimRight(f.entries[name], "\n"), "\n") {
			b.WriteString("    " + line + "\n")
		}
	}
	f.setMIGParted(b.String())
}

// setMIGParted makes the fixture's mig-parted ConfigMap hold exactly data under config.yaml.
func (f *fixture) setMIGParted(data string) {
	f.t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{}
	err := f.c.Get(ctx, f.cm, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.cm.Namespace, Name: f.cm.Name}, Data: map[string]string{"config.yaml": data}}
		err = f.c.Create(ctx, cm)
	case err == nil:
		cm.Data = map[string]string{"config.yaml": data}
		err = f.c.Update(ctx, cm)
	}
	if err != nil {
		f.t.Fatalf("writing ConfigMap %s: %v", f.cm, err)
	}
}

// setDevicePluginConfig makes the device plugin's ConfigMap hold exactly data, creating it if
// needed.
func (f *fixture) setDevicePluginConfig(data map[string]string) {
	f.t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{}
	err := f.c.Get(ctx, f.dp, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.dp.Namespace, Name: f.dp.Name}, Data: data}
		err = f.c.Create(ctx, cm)
	case err == nil:
		cm.Data = data
		err = f.c.Update(ctx, cm)
	}
	if err != nil {
		f.t.Fatalf("writing ConfigMap %s: %v", f.dp, err)
	}
}

// deleteDevicePluginConfig deletes the device plugin's ConfigMap.
func (f *fixture) deleteDevicePluginConfig() {
	f.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.dp.Namespace, Name: f.dp.Name}}
	if err := f.c.Delete(context.Background(), cm); err != nil {
		f.t.Fatalf("deleting ConfigMap %s: %v", f.dp, err)
	}
}

// sharingConfig is a device plugin config file written by hand in NVIDIA's format: mode
// ("timeSlicing" or "mps") with r replicas of every resource listed, renamed <name>.shared.
func sharingConfig(mode string, r int, resources ...corev1.ResourceName) string {
	var b strings.Builder
	fmt.Fprintf(&b, "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  %s:\n    renameByDefault: true\n    resources:\n", mode)
	for _, res := range resources {
		fmt.Fprintf(&b, "    - name: %s\n      replicas: %d\n", res, r)
	}
	return b.String()
}

// timeSliced shares whole GPUs and the simulated H200s' and A100s' MIG devices by time-slicing.
func timeSliced(r int) string {
	return sharingConfig("timeSlicing", r, resGPU, res1g, "nvidia.com/mig-2g.35gb", res3g, "nvidia.com/mig-7g.141gb",
		"nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb")
}

// withExclusive is a device plugin ConfigMap holding the exclusive default and the given keys.
func withExclusive(keys map[string]string) map[string]string {
	out := map[string]string{exclusiveKey: exclusiveConfig}
	maps.Copy(out, keys)
	return out
}

// label sets (or, with "", removes) a node label.
func (f *fixture) label(name, key, value string) {
	f.t.Helper()
	n := f.node(name)
	base := n.DeepCopy()
	if value == "" {
		delete(n.Labels, key)
	} else {
		n.Labels[key] = value
	}
	if err := f.c.Patch(context.Background(), n, client.MergeFrom(base)); err != nil {
		f.t.Fatalf("labelling %s %s=%q: %v", name, key, value, err)
	}
}

// gpuResources returns a function reading the node's nvidia.com/ resources in field
// ("capacity" or "allocatable"), for Eventually; absent keys are absent.
func (f *fixture) gpuResources(name, field string) func() map[corev1.ResourceName]string {
	return func() map[corev1.ResourceName]string {
		n := f.node(name)
		list := n.Status.Capacity
		if field == "allocatable" {
			list = n.Status.Allocatable
		}
		out := map[corev1.ResourceName]string{}
		for r, q := range list {
			if strings.HasPrefix(string(r), "nvidia.com/") {
				out[r] = q.String()
			}
		}
		return out
	}
}

// gpuPods returns a function reading the pods the GPUNode lists on GPU index.
func (f *fixture) gpuPods(name string, index int) func() []v1alpha1.PodReference {
	return func() []v1alpha1.PodReference {
		n := &v1alpha1.GPUNode{}
		if err := f.c.Get(context.Background(), types.NamespacedName{Name: name}, n); err != nil {
			return nil
		}
		for _, g := range n.Status.GPUs {
			if int(g.Index) == index {
				return g.Pods
			}
		}
		return nil
	}
}

// perGPU is an entry giving each listed GPU index its own layout (nil: MIG disabled), as a
// YAML list of specs in NVIDIA's format.
func perGPU(layouts map[int]mig.Layout) string {
	var b strings.Builder
	for _, i := range slices.Sorted(maps.Keys(layouts)) {
		fmt.Fprintf(&b, "- devices: [%d]\n", i)
		l := layouts[i]
		if l == nil {
			b.WriteString("  mig-enabled: false\n")
			continue
		}
		b.WriteString("  mig-enabled: true\n")
		if len(l) == 0 {
			b.WriteString("  mig-devices: {}\n")
			continue
		}
		b.WriteString("  mig-devices:\n")
		for _, p := range slices.Sorted(maps.Keys(l)) {
			fmt.Fprintf(&b, "    %q: %d\n", p, l[p])
		}
	}
	return b.String()
}

// flip asks mig-manager for entry as gpupool's controller does (set mig.config, drop the stale
// state), with a merge patch.
func (f *fixture) flip(name, entry string) {
	f.t.Helper()
	n := f.node(name)
	base := n.DeepCopy()
	n.Labels[sim.LabelMIGConfig] = entry
	delete(n.Labels, sim.LabelMIGConfigState)
	if err := f.c.Patch(context.Background(), n, client.MergeFrom(base)); err != nil {
		f.t.Fatalf("flipping %s to %s: %v", name, entry, err)
	}
}

// unsetConfig removes the node's nvidia.com/mig.config label.
func (f *fixture) unsetConfig(name string) {
	f.t.Helper()
	n := f.node(name)
	base := n.DeepCopy()
	delete(n.Labels, sim.LabelMIGConfig)
	if err := f.c.Patch(context.Background(), n, client.MergeFrom(base)); err != nil {
		f.t.Fatalf("unsetting the mig.config of %s: %v", name, err)
	}
}

// annotate sets (or, with "", removes) a node annotation.
func (f *fixture) annotate(name, key, value string) {
	f.t.Helper()
	n := f.node(name)
	base := n.DeepCopy()
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	if value == "" {
		delete(n.Annotations, key)
	} else {
		n.Annotations[key] = value
	}
	if err := f.c.Patch(context.Background(), n, client.MergeFrom(base)); err != nil {
		f.t.Fatalf("annotating %s: %v", name, err)
	}
}

// bindPod creates a pod bound to node asking for count of resource, as the scheduler would
// leave it, and returns its key.
func (f *fixture) bindPod(name, node string, res corev1.ResourceName, count int64) types.NamespacedName {
	f.t.Helper()
	q := *resource.NewQuantity(count, resource.DecimalSI)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "c", Image: "registry.invalid/c",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{res: q}, Requests: corev1.ResourceList{res: q}},
		}}},
	}
	if err := f.c.Create(context.Background(), pod); err != nil {
		f.t.Fatalf("creating pod %s: %v", name, err)
	}
	key := types.NamespacedName{Namespace: podNamespace, Name: name}
	f.t.Cleanup(func() {
		err := f.c.Delete(context.Background(), pod, client.GracePeriodSeconds(0))
		if err != nil && !apierrors.IsNotFound(err) {
			f.t.Errorf("deleting pod %s: %v", name, err)
		}
	})
	return key
}

// assigned returns a function reading the devices the simulator handed to a pod.
func (f *fixture) assigned(node string, pod types.NamespacedName) func() []string {
	return func() []string { return f.simNode(node).Assignments()[pod] }
}

// setExpectedLayout writes GPUNode spec.expectedLayout as the controller does.
func (f *fixture) setExpectedLayout(name string, layouts map[int]mig.Layout) {
	f.t.Helper()
	ctx := context.Background()
	n := &v1alpha1.GPUNode{}
	f.g.Eventually(func() error { return f.c.Get(ctx, types.NamespacedName{Name: name}, n) }).Should(Succeed())
	base := n.DeepCopy()
	n.Spec.ExpectedLayout = nil
	for _, i := range slices.Sorted(maps.Keys(layouts)) {
		l := v1alpha1.GPULayout{Index: int32(i), Profiles: v1alpha1.ProfileCounts{}}
		for p, c := range layouts[i] {
			l.Profiles[p] = int32(c)
		}
		n.Spec.ExpectedLayout = append(n.Spec.ExpectedLayout, l)
	}
	if err := f.c.Patch(ctx, n, client.MergeFrom(base), client.FieldOwner("gpupool-manager")); err != nil {
		f.t.Fatalf("setting expectedLayout of %s: %v", name, err)
	}
}

// layoutVerified returns a function reading the GPUNode's LayoutVerified condition.
func (f *fixture) layoutVerified(name string) func() metav1.Condition {
	return func() metav1.Condition {
		n := &v1alpha1.GPUNode{}
		if err := f.c.Get(context.Background(), types.NamespacedName{Name: name}, n); err != nil {
			return metav1.Condition{}
		}
		if c := meta.FindStatusCondition(n.Status.Conditions, v1alpha1.ConditionLayoutVerified); c != nil {
			return *c
		}
		return metav1.Condition{}
	}
}

// events returns a function listing the notes of the events recorded on a node with a reason.
// Only the events of the node object the test created count: events outlive their node, and a
// repeated run (go test -count) creates a node of the same name.
func (f *fixture) events(node, reason string) func() []string {
	return func() []string {
		n := &corev1.Node{}
		if err := f.c.Get(context.Background(), types.NamespacedName{Name: node}, n); err != nil {
			return nil
		}
		var list eventsv1.EventList
		if err := f.c.List(context.Background(), &list); err != nil {
			return nil
		}
		var out []string
		for _, e := range list.Items {
			if e.Regarding.Kind == "Node" && e.Regarding.Name == node && e.Regarding.UID == n.UID && e.Reason == reason {
				out = append(out, e.Note)
			}
		}
		return out
	}
}

// labelHistory records the values a node label takes, from a watch opened before the test
// acts, so a test can check the order of states mig-manager went through however briefly
// each lasted.
type labelHistory struct {
	mu     sync.Mutex
	values map[string][]string
}

func (f *fixture) watchLabels(name string, keys ...string) *labelHistory {
	f.t.Helper()
	wc, err := client.NewWithWatch(f.env.Config, client.Options{Scheme: f.env.Scheme})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	// The history starts from a consistent read of the node, and the watch from exactly that
	// resourceVersion. A watch without one starts from the API server's watch cache, which may
	// not have seen the last write yet: its first event would then be an older state, and the
	// history would show a value the node had already left.
	var node corev1.Node
	if err := wc.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
		cancel()
		f.t.Fatal(err)
	}
	h := &labelHistory{values: map[string][]string{}}
	h.record(&node, keys)
	w, err := wc.Watch(ctx, &corev1.NodeList{}, &client.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name),
		Raw:           &metav1.ListOptions{ResourceVersion: node.ResourceVersion},
	})
	if err != nil {
		cancel()
		f.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok {
				h.record(n, keys)
			}
		}
	}()
	f.t.Cleanup(func() {
		w.Stop()
		cancel()
		<-done
	})
	return h
}

// record adds the node's values of keys, consecutive repeats collapsed.
func (h *labelHistory) record(n *corev1.Node, keys []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range keys {
		v := n.Labels[k]
		if vs := h.values[k]; len(vs) == 0 || vs[len(vs)-1] != v {
			h.values[k] = append(vs, v)
		}
	}
}

// of returns the values key has taken so far, consecutive repeats collapsed.
func (h *labelHistory) of(key string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.values[key])
}

func clientMergeFrom(base client.Object) client.Patch { return client.MergeFrom(base) }
