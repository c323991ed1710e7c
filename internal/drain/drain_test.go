package drain

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

const node = "gpu-node-1"

var podsResource = schema.GroupResource{Resource: "pods"}

type podOpt func(*corev1.Pod)

func newPod(ns, name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "i"}}},
	}
	// Managed by default, as the pods gpupool plans to evict are; ownedBy replaces the owner.
	ownedBy("ReplicaSet", "rs")(p)
	for _, o := range opts {
		o(p)
	}
	return p
}

func terminating(p *corev1.Pod) {
	p.DeletionTimestamp = ptr.To(metav1.Now())
	p.Finalizers = []string{"test.gpupool.io/hold"}
}

func withFinalizer(p *corev1.Pod) { p.Finalizers = []string{"test.gpupool.io/hold"} }

func onNode(n string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = n } }

func annotated(k, v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

func ownedBy(kind, name string) podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: "owner", Controller: ptr.To(true)}}
	}
}

func key(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

// pdbRefusal is what the API server answers when a PodDisruptionBudget allows no disruption.
func pdbRefusal(pdb string) error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
		Type:    "DisruptionBudget",
		Message: "The disruption budget " + pdb + " needs 2 healthy pods and has 2 currently",
	})
	return err
}

// evictionLog records the evictions a test client received.
type evictionLog struct {
	keys []types.NamespacedName
	opts []*metav1.DeleteOptions
	dry  []bool
}

// newClient returns a fake client holding objs whose eviction subresource answers with
// answer(pod) after recording the call; a nil answer lets the fake client evict the pod.
func newClient(t *testing.T, answer func(*corev1.Pod) error, objs ...client.Object) (client.Client, *evictionLog) {
	t.Helper()
	log := &evictionLog{}
	c := fake.NewClientBuilder().
		WithScheme(clientgoscheme.Scheme).
		WithObjects(objs...).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj client.Object, subObj client.Object, opts ...client.SubResourceCreateOption) error {
				if sub != "eviction" {
					t.Fatalf("unexpected subresource %q", sub)
				}
				ev, ok := subObj.(*policyv1.Eviction)
				if !ok {
					t.Fatalf("eviction body is %T, want *policyv1.Eviction", subObj)
				}
				co := &client.SubResourceCreateOptions{}
				co.ApplyOptions(opts)
				log.keys = append(log.keys, client.ObjectKeyFromObject(obj))
				log.opts = append(log.opts, ev.DeleteOptions)
				log.dry = append(log.dry, len(co.DryRun) > 0)
				if answer != nil {
					if err := answer(obj.(*corev1.Pod)); err != nil {
						return err
					}
				}
				return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
			},
		}).Build()
	return c, log
}

func TestPassOutcomes(t *testing.T) {
	internal := apierrors.NewInternalError(errors.New("boom"))
	multiPDB := apierrors.NewInternalError(errors.New("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."))
	forbiddenNS := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
		Message: "unable to create new content in namespace team because it is being terminated",
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}},
	}}
	cases := []struct {
		name        string
		pod         *corev1.Pod // nil: the pod does not exist
		uid         types.UID   // recorded UID, if any
		answer      error
		want        Outcome
		wantMsg     string
		wantEvicted bool
	}{
		{name: "201 evicted", pod: newPod("team", "a"), want: Evicted, wantEvicted: true},
		{name: "missing pod is gone", want: Gone},
		{name: "404 from eviction is gone", pod: newPod("team", "a"), answer: apierrors.NewNotFound(podsResource, "a"), want: Gone, wantEvicted: true},
		{name: "429 from a PDB is blocked", pod: newPod("team", "a"), answer: pdbRefusal("web"), want: Blocked,
			wantMsg: "The disruption budget web needs 2 healthy pods and has 2 currently", wantEvicted: true},
		{name: "429 without causes is blocked", pod: newPod("team", "a"), answer: apierrors.NewTooManyRequests("slow down", 1), want: Blocked, wantMsg: "slow down", wantEvicted: true},
		{name: "500 for several PDBs is blocked", pod: newPod("team", "a"), answer: multiPDB, want: Blocked, wantMsg: "more than one PodDisruptionBudget", wantEvicted: true},
		{name: "other 500 failed", pod: newPod("team", "a"), answer: internal, want: Failed, wantMsg: "evicting: Internal error occurred: boom", wantEvicted: true},
		{name: "terminating namespace failed", pod: newPod("team", "a"), answer: forbiddenNS, want: Failed, wantMsg: "namespace is terminating", wantEvicted: true},
		{name: "already terminating is not evicted again", pod: newPod("team", "a", terminating), want: Terminating},
		{name: "recreated pod with another UID is gone", pod: newPod("team", "a"), uid: "old-uid", want: Gone},
		{name: "recorded UID matching is evicted", pod: newPod("team", "a"), uid: "uid-team-a", want: Evicted, wantEvicted: true},
		{name: "replacement on another node is gone", pod: newPod("team", "a", onNode("gpu-node-2")), want: Gone},
		{name: "pending replacement is gone", pod: newPod("team", "a", onNode("")), want: Gone},
		{name: "DaemonSet pod refused", pod: newPod("team", "a", ownedBy("DaemonSet", "dcgm")), want: Refused, wantMsg: "DaemonSet pod dcgm"},
		{name: "ReplicaSet pod evicted", pod: newPod("team", "a", ownedBy("ReplicaSet", "web-1")), want: Evicted, wantEvicted: true},
		{name: "mirror pod refused", pod: newPod("team", "a", annotated(corev1.MirrorPodAnnotationKey, "x")), want: Refused, wantMsg: "mirror"},
		{name: "do-not-disrupt refused", pod: newPod("team", "a", annotated(v1alpha1.AnnotationDoNotDisrupt, "true")), want: Refused, wantMsg: v1alpha1.AnnotationDoNotDisrupt},
		{name: "do-not-disrupt false evicted", pod: newPod("team", "a", annotated(v1alpha1.AnnotationDoNotDisrupt, "false")), want: Evicted, wantEvicted: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var objs []client.Object
			if tc.pod != nil {
				objs = append(objs, tc.pod)
			}
			c, log := newClient(t, func(*corev1.Pod) error { return tc.answer }, objs...)
			opts := Options{}
			if tc.uid != "" {
				opts.UIDs = map[types.NamespacedName]types.UID{key("team", "a"): tc.uid}
			}
			res, err := Pass(context.Background(), c, node, []types.NamespacedName{key("team", "a")}, opts)
			if err != nil {
				t.Fatalf("Pass: %v", err)
			}
			if len(res.Pods) != 1 {
				t.Fatalf("got %d results, want 1", len(res.Pods))
			}
			got := res.Pods[0]
			if got.Outcome != tc.want {
				t.Errorf("outcome %s (%q), want %s", got.Outcome, got.Message, tc.want)
			}
			if !strings.Contains(got.Message, tc.wantMsg) {
				t.Errorf("message %q does not contain %q", got.Message, tc.wantMsg)
			}
			if evicted := len(log.keys) > 0; evicted != tc.wantEvicted {
				t.Errorf("eviction requested = %v, want %v", evicted, tc.wantEvicted)
			}
			if res.Done() != (tc.want == Gone) {
				t.Errorf("Done() = %v with outcome %s", res.Done(), tc.want)
			}
		})
	}
}

// A pod whose grace period the drain could not wait out is never evicted: the step would time
// out with it still terminating.
func TestPassRefusesAGracePeriodLongerThanTheDrain(t *testing.T) {
	long := newPod("team", "a", func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(3600)) })
	c, log := newClient(t, nil, long)
	res, err := Pass(context.Background(), c, node, []types.NamespacedName{key("team", "a")},
		Options{Rules: inventory.EvictionRules{DrainTimeout: 15 * time.Minute}})
	if err != nil {
		t.Fatalf("Pass: %v", err)
	}
	if got := res.Pods[0]; got.Outcome != Refused || !strings.Contains(got.Message, "drainTimeout") || len(log.keys) > 0 {
		t.Errorf("outcome %s (%q), %d evictions; want Refused naming drainTimeout, none", got.Outcome, got.Message, len(log.keys))
	}
}

func TestPassNeverDeletes(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(newPod("team", "a")).
		WithInterceptorFuncs(interceptor.Funcs{
			Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error {
				t.Fatal("Pass deleted a pod directly")
				return nil
			},
			SubResourceCreate: func(context.Context, client.Client, string, client.Object, client.Object, ...client.SubResourceCreateOption) error {
				return nil
			},
		}).Build()
	res, err := Pass(context.Background(), c, node, []types.NamespacedName{key("team", "a")}, Options{})
	if err != nil || res.Count(Evicted) != 1 {
		t.Fatalf("Pass = %+v, %v; want one eviction", res, err)
	}
}

func TestPassDeterministicOrder(t *testing.T) {
	objs := []client.Object{newPod("b", "x"), newPod("a", "z"), newPod("a", "y"), newPod("c", "a")}
	c, log := newClient(t, nil, objs...)
	in := []types.NamespacedName{key("c", "a"), key("a", "z"), key("b", "x"), key("a", "y"), key("a", "z")}
	res, err := Pass(context.Background(), c, node, in, Options{})
	if err != nil {
		t.Fatalf("Pass: %v", err)
	}
	want := []types.NamespacedName{key("a", "y"), key("a", "z"), key("b", "x"), key("c", "a")}
	if len(log.keys) != len(want) {
		t.Fatalf("evicted %v, want %v (duplicates evicted once)", log.keys, want)
	}
	for i := range want {
		if log.keys[i] != want[i] || res.Pods[i].Pod != want[i] {
			t.Errorf("position %d: evicted %v, result %v, want %v", i, log.keys[i], res.Pods[i].Pod, want[i])
		}
	}
	if in[0] != key("c", "a") {
		t.Errorf("Pass reordered its input")
	}
}

func TestPassIdempotentAcrossPasses(t *testing.T) {
	// Pods with a finalizer stay Terminating after the eviction, as pods do during their grace
	// period; the second pass must wait for them, not evict them again.
	objs := []client.Object{newPod("team", "a", withFinalizer), newPod("team", "b", withFinalizer)}
	c, log := newClient(t, nil, objs...)
	list := []types.NamespacedName{key("team", "b"), key("team", "a")}

	first, err := Pass(context.Background(), c, node, list, Options{})
	if err != nil {
		t.Fatalf("first pass: %v", err)
	}
	if first.Count(Evicted) != 2 || first.Done() {
		t.Fatalf("first pass: %s, want 2 evicted and not done", first.Message())
	}
	second, err := Pass(context.Background(), c, node, list, Options{})
	if err != nil {
		t.Fatalf("second pass: %v", err)
	}
	if second.Count(Terminating) != 2 || len(log.keys) != 2 {
		t.Fatalf("second pass: %s after %d evictions; want 2 terminating and no new eviction", second.Message(), len(log.keys))
	}
	if got := second.Message(); got != "2 pods terminating: team/a, team/b" {
		t.Errorf("message %q", got)
	}
	third, err := Pass(context.Background(), c, node, list, Options{})
	if err != nil {
		t.Fatalf("third pass: %v", err)
	}
	if second.Message() != third.Message() {
		t.Errorf("same state gave different messages: %q then %q", second.Message(), third.Message())
	}

	// The pods finish terminating.
	for _, o := range objs {
		p := &corev1.Pod{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(o), p); err != nil {
			t.Fatal(err)
		}
		p.Finalizers = nil
		if err := c.Update(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	last, err := Pass(context.Background(), c, node, list, Options{})
	if err != nil {
		t.Fatalf("last pass: %v", err)
	}
	if !last.Done() || last.Message() != "all 2 pods gone" || len(last.Remaining()) != 0 {
		t.Errorf("last pass: %q, remaining %v; want done", last.Message(), last.Remaining())
	}
}

func TestPassMessageListsBlockingPods(t *testing.T) {
	objs := []client.Object{
		newPod("team", "b"), newPod("team", "a"), newPod("team", "c", withFinalizer),
		newPod("ops", "agent", ownedBy("DaemonSet", "agent")), newPod("team", "d"),
	}
	c, _ := newClient(t, func(p *corev1.Pod) error {
		switch p.Name {
		case "a":
			return pdbRefusal("web")
		case "b":
			return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		case "d":
			return apierrors.NewServiceUnavailable("etcd leader changed")
		}
		return nil
	}, objs...)
	list := []types.NamespacedName{key("team", "d"), key("team", "c"), key("team", "b"), key("team", "a"), key("ops", "agent"), key("team", "gone")}
	res, err := Pass(context.Background(), c, node, list, Options{})
	if err != nil {
		t.Fatalf("Pass: %v", err)
	}
	want := "1 pod refused (gpupool never evicts these; reject the plan): ops/agent (DaemonSet pod agent: it would be recreated on the node at once); " +
		"2 pods blocked by PodDisruptionBudgets: team/a (The disruption budget web needs 2 healthy pods and has 2 currently), " +
		"team/b (Cannot evict pod as it would violate the pod's disruption budget.); " +
		"1 pod failed eviction: team/d (evicting: etcd leader changed); " +
		"1 pod evicted: team/c; " +
		"1 pod gone: team/gone"
	if got := res.Message(); got != want {
		t.Errorf("message\n got %q\nwant %q", got, want)
	}
	if !res.Stuck() {
		t.Errorf("Stuck() = false with refused and blocked pods")
	}
	wantRemaining := []types.NamespacedName{key("ops", "agent"), key("team", "a"), key("team", "b"), key("team", "c"), key("team", "d")}
	if got := res.Remaining(); len(got) != len(wantRemaining) {
		t.Errorf("remaining %v, want %v", got, wantRemaining)
	} else {
		for i := range got {
			if got[i] != wantRemaining[i] {
				t.Errorf("remaining[%d] = %v, want %v", i, got[i], wantRemaining[i])
			}
		}
	}
	counts := map[Outcome]int{Refused: 1, Blocked: 2, Failed: 1, Evicted: 1, Gone: 1, Terminating: 0}
	for o, n := range counts {
		if res.Count(o) != n {
			t.Errorf("Count(%s) = %d, want %d", o, res.Count(o), n)
		}
	}
}

func TestPassMessageTruncates(t *testing.T) {
	var objs []client.Object
	var list []types.NamespacedName
	for _, n := range []string{"p00", "p01", "p02", "p03", "p04", "p05", "p06", "p07", "p08", "p09", "p10", "p11"} {
		objs = append(objs, newPod("team", n))
		list = append(list, key("team", n))
	}
	c, _ := newClient(t, func(*corev1.Pod) error { return apierrors.NewTooManyRequests("budget", 0) }, objs...)
	res, err := Pass(context.Background(), c, node, list, Options{})
	if err != nil {
		t.Fatalf("Pass: %v", err)
	}
	msg := res.Message()
	if !strings.HasSuffix(msg, "team/p09 (budget), and 2 more") || strings.Contains(msg, "p10") {
		t.Errorf("message not truncated after %d pods: %q", maxListedPods, msg)
	}
}

func TestPassEvictionRequest(t *testing.T) {
	c, log := newClient(t, nil, newPod("team", "a"))
	if _, err := Pass(context.Background(), c, node, []types.NamespacedName{key("team", "a")}, Options{}); err != nil {
		t.Fatalf("Pass: %v", err)
	}
	opts := log.opts[0]
	if opts == nil || opts.GracePeriodSeconds != nil {
		t.Errorf("eviction overrides the pod's own grace period: %+v", opts)
	}
	if opts.Preconditions == nil || ptr.Deref(opts.Preconditions.UID, "") != "uid-team-a" {
		t.Errorf("eviction lacks the UID precondition: %+v", opts.Preconditions)
	}
	if len(opts.DryRun) != 0 || log.dry[0] {
		t.Errorf("eviction is a dry run")
	}
}

func TestPassReadErrorIsFailed(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(newPod("team", "a")).
		WithInterceptorFuncs(interceptor.Funcs{
			Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
				return apierrors.NewServiceUnavailable("apiserver restarting")
			},
		}).Build()
	res, err := Pass(context.Background(), c, node, []types.NamespacedName{key("team", "a")}, Options{})
	if err != nil {
		t.Fatalf("Pass: %v", err)
	}
	if res.Pods[0].Outcome != Failed || !strings.Contains(res.Pods[0].Message, "reading pod: apiserver restarting") || res.Done() {
		t.Errorf("read error gave %+v", res.Pods[0])
	}
}

func TestPassInputErrors(t *testing.T) {
	c, _ := newClient(t, nil)
	if _, err := Pass(context.Background(), c, "", []types.NamespacedName{key("a", "b")}, Options{}); err == nil {
		t.Errorf("empty node accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Pass(ctx, c, node, []types.NamespacedName{key("a", "b")}, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err = %v", err)
	}
	res, err := Pass(context.Background(), c, node, nil, Options{})
	if err != nil || !res.Done() || res.Message() != "no pods to evict" {
		t.Errorf("empty list: %+v, %v", res, err)
	}
}
