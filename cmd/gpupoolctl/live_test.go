package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/testenv"
)

// liveCluster starts one API server for the tests that talk to one, with a policy, a plan and a
// pending pod, and returns it with a kubeconfig for the CLI (cluster-admin, who may impersonate).
func liveCluster(t *testing.T) (*testenv.Env, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an API server; skipped with -short")
	}
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cfg := env.Config
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	err = clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"env": {Server: cfg.Host, CertificateAuthorityData: cfg.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"admin": {ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}},
		Contexts:       map[string]*clientcmdapi.Context{"env": {Cluster: "env", AuthInfo: "admin"}},
		CurrentContext: "env",
	}, kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	budget := intstr.FromInt32(1)
	policy := &v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pool-a"}, Spec: v1alpha1.GPUPoolPolicySpec{
		NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{"pool": "a"}},
		Catalog:      []v1alpha1.CatalogEntry{{Product: "NVIDIA-H200", MIGProfiles: []v1alpha1.MIGProfileName{"3g.71gb"}}},
		Disruption:   v1alpha1.DisruptionPolicy{Approval: v1alpha1.ApprovalManual, MaxDisruptedNodes: &budget},
	}}
	plan := &v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "plan-a"}, Spec: v1alpha1.RepartitionPlanSpec{
		Policy: "pool-a", Hash: "0123abcd", Steps: []v1alpha1.NodeStep{{Node: "gpu-1",
			GPUs: []v1alpha1.GPUChange{{Index: 0, From: v1alpha1.ProfileCounts{"1g.18gb": 7}, To: v1alpha1.ProfileCounts{"3g.71gb": 2}}}}},
		Expected: v1alpha1.PlanExpectation{Pods: []v1alpha1.PodReference{{Namespace: "team-a", Name: "trainer-0"}}},
	}}
	pod := pendingPod()
	pod.ResourceVersion, pod.UID = "", ""
	for _, o := range []client.Object{policy, plan, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, &pod} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	plan.Status.Phase = v1alpha1.PlanAwaitingApproval
	if err := env.Client.Status().Update(ctx, plan); err != nil {
		t.Fatal(err)
	}
	return env, kubeconfig
}

// TestLiveOutputFormats runs the live commands with kubectl's output flags, spelled as users
// spell them, against a real API server: objects print as kubectl get prints them (apiVersion
// and kind, no managedFields), the tool's own documents with lowerCamel keys.
func TestLiveOutputFormats(t *testing.T) {
	_, kubeconfig := liveCluster(t)
	for _, tc := range []struct {
		args     []string
		want     []string
		exact    string
		notWant  []string
		wantCode int
	}{
		{args: []string{"plan", "plan-a", "-oyaml"}, want: []string{"apiVersion: gpupool.io/v1alpha1", "kind: RepartitionPlan", "name: plan-a"}, notWant: []string{"managedFields"}},
		{args: []string{"plan", "plan-a", "-o", "yaml"}, want: []string{"apiVersion: gpupool.io/v1alpha1", "kind: RepartitionPlan"}, notWant: []string{"managedFields"}},
		{args: []string{"plan", "plan-a", "-o", "yaml", "--show-managed-fields"}, want: []string{"managedFields"}},
		{args: []string{"plan", "plan-a", "--output=json"}, want: []string{`"apiVersion": "gpupool.io/v1alpha1"`, `"kind": "RepartitionPlan"`}, notWant: []string{"managedFields"}},
		{args: []string{"plan", "plan-a", "-o", "jsonpath={.metadata.name}"}, exact: "plan-a"},
		{args: []string{"plan", "plan-a", "-o", "go-template={{.spec.hash}}"}, exact: "0123abcd"},
		{args: []string{"plan", "-o", "name"}, exact: "repartitionplan.gpupool.io/plan-a\n"},
		{args: []string{"plan", "-o", "jsonpath={.items[*].metadata.name}"}, exact: "plan-a"},
		{args: []string{"plan", "-oyaml"}, want: []string{"kind: List", "- apiVersion: gpupool.io/v1alpha1", "  kind: RepartitionPlan"}, notWant: []string{"managedFields"}},
		{args: []string{"plan"}, want: []string{"NAME", "plan-a", "pool-a", "AwaitingApproval"}, notWant: []string{"EVICTIONS"}},
		{args: []string{"plan", "-o", "wide"}, want: []string{"GPUS", "EVICTIONS", "SERVES"}},
		{args: []string{"status", "-o", "name"}, exact: "gpupoolpolicy.gpupool.io/pool-a\n"},
		{args: []string{"status", "pool-a", "-o", "jsonpath={.pools[0].policy} {.pools[0].plan.name}"}, exact: "pool-a plan-a"},
		{args: []string{"status", "-oyaml"}, want: []string{"pools:", "- approval: Manual", "  policy: pool-a", "  nodes: []"}},
		{args: []string{"why", "trainer-0", "-n", "team-a", "-o", "name"}, exact: "pod/trainer-0\n"},
		{args: []string{"why", "trainer-0", "--namespace=team-a", "-o", "jsonpath={.pod.namespace}/{.pod.name} {.complete}"}, exact: "team-a/trainer-0 true"},
		// Impersonation as kubectl does it: a user without rights is refused, and says who.
		{args: []string{"plan", "--as=nobody"}, wantCode: exitFailed, want: []string{`User "nobody" cannot list resource "repartitionplans"`}},
		{args: []string{"plan", "plan-a", "--as=nobody", "--as-group=team"}, wantCode: exitFailed, want: []string{`User "nobody" cannot get resource "repartitionplans"`}},
		{args: []string{"plan", "--context=nope"}, wantCode: exitFailed, want: []string{`context "nope" does not exist`}},
	} {
		code, out, errOut := invoke(t, "", append(tc.args, "--kubeconfig="+kubeconfig)...)
		got := out
		if tc.wantCode != exitOK {
			got = errOut
		}
		if code != tc.wantCode || (tc.wantCode == exitOK && errOut != "") {
			t.Errorf("%q: exit %d, stderr %q; want %d", tc.args, code, errOut, tc.wantCode)
			continue
		}
		if tc.exact != "" && got != tc.exact {
			t.Errorf("%q: printed %q, want exactly %q", tc.args, got, tc.exact)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%q: output lacks %q:\n%s", tc.args, w, got)
			}
		}
		for _, w := range tc.notWant {
			if strings.Contains(got, w) {
				t.Errorf("%q: output has %q:\n%s", tc.args, w, got)
			}
		}
	}

	// why -o json: lowerCamel keys throughout, the pod's included.
	_, out, _ := invoke(t, "", "why", "trainer-0", "-n", "team-a", "-o", "json", "--kubeconfig="+kubeconfig)
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("why -o json: %v\n%s", err, out)
	}
	if pod, _ := doc["pod"].(map[string]any); pod["namespace"] != "team-a" || pod["name"] != "trainer-0" {
		t.Errorf("why -o json: pod %v, want {namespace, name}", doc["pod"])
	}
	for k := range doc {
		if k[0] < 'a' || k[0] > 'z' {
			t.Errorf("why -o json: key %q is not lowerCamel", k)
		}
	}
	// status -o yaml: GPU layouts are data, not text.
	var status statusOutput
	_, out, _ = invoke(t, "", "status", "-o", "yaml", "--kubeconfig="+kubeconfig)
	if err := sigsyaml.UnmarshalStrict([]byte(out), &status); err != nil {
		t.Errorf("status -o yaml does not read back strictly: %v\n%s", err, out)
	}
}

// TestWhyAsTenant: a user bound only to a namespace's Role runs why on their pod through
// --as and gets the answer their rights allow, with the rights they lack; bound to the shipped
// gpupool-viewer ClusterRole they also get the plan that serves the pod.
func TestWhyAsTenant(t *testing.T) {
	env, kubeconfig := liveCluster(t)
	ctx := t.Context()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "events"}, Verbs: []string{"get", "list", "watch"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "alice"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "reader"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "alice"}}}
	event := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "trainer-0.gpupool"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "team-a", Name: "trainer-0"},
		Reason:         "Capacity", Message: "every 3g.71gb of pool pool-a is taken", Source: corev1.EventSource{Component: "gpupool-policy-controller"},
		LastTimestamp: metav1.NewTime(fixture.Now)}
	pod := &corev1.Pod{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "trainer-0"}, pod); err != nil {
		t.Fatal(err)
	}
	event.InvolvedObject.UID = pod.UID
	for _, o := range []client.Object{role, binding, event} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	why := func() whyOutput {
		t.Helper()
		code, out, errOut := invoke(t, "", "why", "trainer-0", "-n", "team-a", "--as=alice", "-o", "json", "--kubeconfig="+kubeconfig)
		if code != exitOK {
			t.Fatalf("why as alice: exit %d: %s", code, errOut)
		}
		var v whyOutput
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return v
	}
	v := why()
	if v.Complete || v.Layer != "Capacity" || !strings.Contains(v.Reason, "every 3g.71gb") {
		t.Errorf("namespace-only: complete %t, layer %q, reason %q; want the layer of gpupool's Event", v.Complete, v.Layer, v.Reason)
	}
	unreadable := map[string]string{}
	for _, g := range v.Unreadable {
		unreadable[g.What] = g.Right
	}
	if unreadable["nodes"] == "" || !strings.Contains(unreadable["repartitionplans"], "gpupool-viewer") {
		t.Errorf("namespace-only: unreadable %v, want nodes and the plans with the gpupool-viewer role", unreadable)
	}
	_, table, _ := invoke(t, "", "why", "trainer-0", "-n", "team-a", "--as=alice", "--kubeconfig="+kubeconfig)
	for _, w := range []string{"Layer:     Capacity", "Not seen:  - nodes: forbidden", "gpupool:   Capacity: every 3g.71gb"} {
		if !strings.Contains(table, w) {
			t.Errorf("table lacks %q:\n%s", w, table)
		}
	}

	// The shipped read-only role, bound cluster-wide as its comment says.
	objs, err := testenv.ReadObjects(filepath.Join(env.RepoRoot, "config", "rbac", "viewer_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	viewer := objs[0]
	viewer.SetName("gpupool-" + viewer.GetName())
	if viewer.GetName() != viewerRole {
		t.Fatalf("config/rbac's role installs as %s, messages name %s", viewer.GetName(), viewerRole)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-gpupool-viewer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: viewerRole},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "alice"}}}
	for _, o := range []client.Object{viewer, crb} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// The API server's RBAC cache takes the new binding within a second or so.
	NewWithT(t).Eventually(func(g Gomega) {
		v := why()
		g.Expect(v.Plan).NotTo(BeNil(), "with gpupool-viewer, the plan that serves the pod")
		g.Expect(v.Plan.Name).To(Equal("plan-a"))
		g.Expect(v.Layer).To(BeEquivalentTo("PartitionShape"))
	}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

	// Without even the Role: refused, with the right to ask for.
	code, _, errOut := invoke(t, "", "why", "trainer-0", "-n", "team-a", "--as=mallory", "--kubeconfig="+kubeconfig)
	if code != exitFailed || !strings.Contains(errOut, "you may not read pod team-a/trainer-0: ask for the view ClusterRole") {
		t.Errorf("no rights: exit %d, stderr %q", code, errOut)
	}
}

// syncBuffer is a bytes.Buffer a watching command writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWatch: plan --watch prints the list, then a row per change, and ends with exit 0 when
// --request-timeout ends the watch, as kubectl get --watch does.
func TestWatch(t *testing.T) {
	env, kubeconfig := liveCluster(t)
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run("gpupoolctl", []string{"plan", "--watch", "--request-timeout=8s", "--kubeconfig=" + kubeconfig},
			strings.NewReader(""), &stdout, &stderr)
	}()
	g := NewWithT(t)
	g.Eventually(stdout.String).WithTimeout(20*time.Second).Should(ContainSubstring("AwaitingApproval"), "the list")
	plan := &v1alpha1.RepartitionPlan{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "plan-a"}, plan); err != nil {
		t.Fatal(err)
	}
	plan.Status.Phase = v1alpha1.PlanRejected
	if err := env.Client.Status().Update(t.Context(), plan); err != nil {
		t.Fatal(err)
	}
	g.Eventually(stdout.String).WithTimeout(20*time.Second).Should(ContainSubstring("Rejected"), "the change")
	g.Eventually(done).WithTimeout(30*time.Second).Should(Receive(Equal(exitOK)), "the watch ends with --request-timeout, exit 0; stderr: %s", stderr.String)
	if lines := strings.Count(stdout.String(), "\n"); lines != 3 || strings.Count(stdout.String(), "NAME") != 1 {
		t.Errorf("want a header, the row, and the changed row:\n%s", stdout.String())
	}
}
