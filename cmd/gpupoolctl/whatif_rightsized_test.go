package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/snapshot"
)

const rightsizedSnapshot = "testdata/rightsized-snapshot.yaml"

// The table of what-if --rightsized is golden text: the plan as today, then per pool what the
// running pods hold, need as they ask and need right-sized. go test ./cmd/gpupoolctl -run
// TestWhatIfRightsizedTable -update rewrites it.
func TestWhatIfRightsizedTable(t *testing.T) {
	code, table, errOut := invoke(t, "", "what-if", "-f", rightsizedSnapshot, "--rightsized")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	path := filepath.Join("testdata", "whatif-rightsized.golden")
	if *updateGolden {
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if table != string(want) {
		t.Errorf("%s differs:\n got:\n%s\nwant:\n%s", path, table, want)
	}
	// Without the flag the output is the plan alone, unchanged.
	_, plain, _ := invoke(t, "", "what-if", "-f", rightsizedSnapshot)
	if !strings.HasPrefix(table, plain) || strings.Contains(plain, "Right-sized") {
		t.Errorf("without --rightsized the output should be the plan as today, which --rightsized extends:\n%s", plain)
	}
}

func TestWhatIfRightsizedJSON(t *testing.T) {
	code, out, errOut := invoke(t, "", "what-if", "-f", rightsizedSnapshot, "--rightsized", "-o", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc planOutput
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Rightsized == nil || len(doc.Rightsized.Pools) != 1 {
		t.Fatalf("rightsized = %+v, want one pool", doc.Rightsized)
	}
	p := doc.Rightsized.Pools[0]
	if p.FreedGPUs != 1 || p.FreedNodes != 1 || p.AsAsked.GPUs != 2 || p.Rightsized.GPUs != 1 || len(p.Applied) != 1 ||
		p.Applied[0] != (appliedOutput{Workload: "Deployment team-a/server", Pods: 2, From: "3g.71gb", To: "1g.18gb"}) {
		t.Errorf("pool = %+v", p)
	}
	_, plain, _ := invoke(t, "", "what-if", "-f", rightsizedSnapshot, "-o", "json")
	if strings.Contains(plain, `"rightsized"`) {
		t.Error("without --rightsized the document has no rightsized object")
	}
}

// A snapshot without usage recommends nothing and says what to do; the plan is still shown.
func TestWhatIfRightsizedWithoutUsage(t *testing.T) {
	data, err := os.ReadFile(rightsizedSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	stripped := regexp.MustCompile(`(?m)^    usage:\n(    - .*\n)+`).ReplaceAllString(string(data), "")
	if stripped == string(data) {
		t.Fatal("the snapshot's usage was not found to strip")
	}
	code, table, errOut := invoke(t, stripped, "what-if", "-f", "-", "--rightsized")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	words := strings.Join(strings.Fields(table), " ") // the note wraps
	for _, want := range []string{"Policy h200-pool: 2 nodes", "Right-sized: the snapshot carries no usage (GPUNode status.usage)", "what-if --live --rightsized"} {
		if !strings.Contains(words, want) {
			t.Errorf("output lacks %q:\n%s", want, table)
		}
	}
}

// TestWhatIfLiveRightsized loads the snapshot into an API server and asks what-if --live
// --rightsized: the same pool frees the same GPU and node, and the Deployment is named through
// the live ReplicaSet (its pods carry no pod-template-hash here), which a snapshot cannot hold.
func TestWhatIfLiveRightsized(t *testing.T) {
	env, kubeconfig := liveCluster(t)
	f, err := os.Open(rightsizedSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	snap, err := snapshot.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	create := func(o client.Object) {
		t.Helper()
		o.SetUID("")
		o.SetResourceVersion("")
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for i := range snap.Nodes {
		create(&snap.Nodes[i])
	}
	for i := range snap.GPUNodes {
		g := snap.GPUNodes[i].DeepCopy()
		create(g)
		g.Status = snap.GPUNodes[i].Status
		g.Status.ObservedTime = ptr.To(metav1.Now())
		if err := env.Client.Status().Update(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	create(&snap.Policies[0])
	create(&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "server-5d8f7", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: "Deployment", Name: "api-server", UID: "d", Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "server"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.example.com/app:1"}}}}}})
	for i := range snap.Pods {
		p := snap.Pods[i].DeepCopy()
		delete(p.Labels, "pod-template-hash")
		create(p)
		p.Status = snap.Pods[i].Status
		if err := env.Client.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	code, out, errOut := invoke(t, "", "what-if", "--live", "--rightsized", "--kubeconfig", kubeconfig, "-o", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc planOutput
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	var pool *rightsizedPoolOutput
	for i, p := range doc.Rightsized.Pools {
		if p.Policy == "h200-pool" {
			pool = &doc.Rightsized.Pools[i]
		}
	}
	if pool == nil || pool.FreedGPUs != 1 || pool.FreedNodes != 1 || len(pool.Applied) != 1 || pool.Applied[0].Workload != "Deployment team-a/api-server" {
		t.Fatalf("rightsized = %+v, want h200-pool freeing 1 GPU and 1 node by right-sizing Deployment team-a/api-server", doc.Rightsized)
	}
}
