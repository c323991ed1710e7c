package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/rightsize"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of cmd/gpupoolctl/testdata")

// rightsizeCluster is a pool of one H200 node whose policy allows 1g.18gb and 3g.71gb, with a
// workload of each kind the recommender tells apart, and one in another namespace.
func rightsizeCluster() []client.Object {
	const gib = 1024
	day := int64((25 * time.Hour).Seconds())
	use := func(key string, p95, peak, ceiling, samples, window int64, flat bool) v1alpha1.PodUsage {
		k := fixture.Key(key, "team-a")
		return v1alpha1.PodUsage{Namespace: k.Namespace, Name: k.Name, P50MiB: p95, P95MiB: p95, PeakMiB: peak, CeilingMiB: ceiling,
			Samples: samples, WindowSeconds: window, FlatAtCeiling: flat}
	}
	report := fixture.Report("gpu-0", fixture.MIGGPU(0, "NVIDIA H200"))
	report.Status.Usage = []v1alpha1.PodUsage{
		use("server-a", 9*gib, 9*gib, 71*gib, 3000, day, false),
		use("server-b", 9*gib, 10*gib, 71*gib, 3000, day, false),
		use("db-0", 64*gib, 64*gib, 71*gib, 3000, day, true),
		use("train-x", 60*gib, 60*gib, 71*gib, 3000, day, false),
		use("fresh-a", 2*gib, 2*gib, 71*gib, 10, 300, false),
		use("team-b/infer-a", 3*gib, 4*gib, 71*gib, 3000, day, false),
	}
	node := fixture.GPUHost("gpu-0", "NVIDIA-H200", nil, "pool", "a")
	policy := &v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pool-a"}, Spec: v1alpha1.GPUPoolPolicySpec{
		NodeSelector: v1alpha1.PoolSelector{MatchLabels: map[string]string{"pool": "a"}},
		Catalog:      []v1alpha1.CatalogEntry{{Product: "H200", MIGProfiles: []v1alpha1.MIGProfileName{"1g.18gb", "3g.71gb"}}},
	}}
	mig3g := fixture.Requests("nvidia.com/mig-3g.71gb", "1")
	pod := func(key string, opts ...fixture.PodOption) client.Object {
		p := fixture.Pod(key, append([]fixture.PodOption{fixture.Running("gpu-0")}, opts...)...)
		if p.Namespace == "team" {
			p.Namespace = "team-a"
		}
		return &p
	}
	rs := func(ns, name, deployment string) client.Object {
		r := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "Deployment", Name: deployment, UID: "d-" + "deployment", Controller: ptr.To(true)}}}}
		return r
	}
	return []client.Object{
		&report, &node, policy, rs("team-a", "server-5d8f", "server"), rs("team-b", "infer-7c9", "infer"), rs("team-a", "fresh-1", "fresh"),
		pod("team-a/server-a", mig3g, fixture.OwnedBy("apps/v1", "ReplicaSet", "server-5d8f")),
		pod("team-a/server-b", mig3g, fixture.OwnedBy("apps/v1", "ReplicaSet", "server-5d8f")),
		pod("team-a/db-0", mig3g, fixture.OwnedBy("apps/v1", "StatefulSet", "db")),
		pod("team-a/train-x", mig3g, fixture.OwnedBy("batch/v1", "Job", "train")),
		pod("team-a/fresh-a", mig3g, fixture.OwnedBy("apps/v1", "ReplicaSet", "fresh-1")),
		pod("team-a/notebook", fixture.Requests("nvidia.com/gpu", "1"), fixture.Unowned()),
		pod("team-a/web", fixture.Requests("cpu", "1")),
		pod("team-b/infer-a", fixture.Requests("nvidia.com/mig-1g.18gb", "1"), fixture.OwnedBy("apps/v1", "ReplicaSet", "infer-7c9")),
	}
}

func TestRightsizeGroupsAndRecommends(t *testing.T) {
	kc := fake.NewClientBuilder().WithScheme(scheme).WithObjects(rightsizeCluster()...).Build()
	opts := rightsize.Options{MinWindow: 24 * time.Hour, MinSamples: 100}
	doc, err := readRightsize(context.Background(), kc, "team-a", opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		workload, requested, recommended string
		pods                             int
		verdict                          rightsize.Verdict
		reason                           rightsize.Reason
		freed                            int
	}
	want := []row{
		{"Deployment/fresh", "3g.71gb", "", 1, rightsize.CannotTell, rightsize.ReasonTooLittleData, 0},
		{"Deployment/server", "3g.71gb", "1g.18gb", 2, rightsize.Shrink, rightsize.ReasonSmallerFits, 6},
		{"Job/train", "3g.71gb", "3g.71gb", 1, rightsize.Keep, rightsize.ReasonHeadroomShort, 0},
		{"Pod/notebook", "whole GPU", "", 1, rightsize.CannotTell, rightsize.ReasonNoPods, 0},
		{"StatefulSet/db", "3g.71gb", "", 1, rightsize.CannotTell, rightsize.ReasonPreallocating, 0},
	}
	if len(doc.Workloads) != len(want) {
		t.Fatalf("%d workloads, want %d: %+v", len(doc.Workloads), len(want), doc.Workloads)
	}
	for i, w := range want {
		g := doc.Workloads[i]
		got := row{g.Kind + "/" + g.Name, g.Requested, g.Recommended, g.Pods, g.Verdict, g.Reason, g.FreedSlices}
		if got != w {
			t.Errorf("workload %d = %+v, want %+v (%s)", i, got, w, g.Message)
		}
		if g.Pool != "pool-a" && g.Kind != "Pod" {
			t.Errorf("%s/%s: pool %q, want pool-a", g.Kind, g.Name, g.Pool)
		}
	}

	// -A lists team-b's Deployment too; the window and samples are flags.
	doc, err = readRightsize(context.Background(), kc, "", rightsize.Options{MinWindow: time.Minute, MinSamples: 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, w := range doc.Workloads {
		names = append(names, w.Namespace+"/"+w.Kind+"/"+w.Name+"="+string(w.Verdict))
	}
	if want := "team-a/Deployment/fresh=Shrink team-a/Deployment/server=Shrink team-a/Job/train=Keep team-a/Pod/notebook=CannotTell " +
		"team-a/StatefulSet/db=CannotTell team-b/Deployment/infer=Keep"; strings.Join(names, " ") != want {
		t.Errorf("with -A and short minimums:\n got %s\nwant %s", strings.Join(names, " "), want)
	}
}

// The table, -A and wide, is golden text: go test ./cmd/gpupoolctl -run TestRightsizeTable -update
// rewrites it.
func TestRightsizeTable(t *testing.T) {
	kc := fake.NewClientBuilder().WithScheme(scheme).WithObjects(rightsizeCluster()...).Build()
	doc, err := readRightsize(context.Background(), kc, "", rightsize.Options{MinWindow: 24 * time.Hour, MinSamples: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		golden string
		format string
	}{{"rightsize.golden", ""}, {"rightsize-wide.golden", "wide"}, {"rightsize.json.golden", "json"}} {
		cmd := &cobra.Command{}
		out := addOutputFlags(cmd)
		if tc.format != "" {
			if err := cmd.Flags().Set("output", tc.format); err != nil {
				t.Fatal(err)
			}
		}
		if err := out.check(); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := printRightsize(out, doc, true, &buf); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", tc.golden)
		if *updateGolden {
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to write it)", err)
		}
		if buf.String() != string(want) {
			t.Errorf("%s differs:\n got:\n%s\nwant:\n%s", tc.golden, buf.String(), want)
		}
	}
}

func TestRightsizeFlags(t *testing.T) {
	for _, tc := range []struct {
		f   rightsizeFlags
		err bool
	}{
		{rightsizeFlags{basis: "p95", minWindow: time.Hour, minSamples: 1, headroom: 0.2}, false},
		{rightsizeFlags{basis: "", minWindow: time.Hour, minSamples: 1, headroom: 0.2}, false}, // the pool's policy decides
		{rightsizeFlags{basis: "p50", minWindow: time.Hour, minSamples: 1}, true},
		{rightsizeFlags{basis: "peak", minWindow: 0, minSamples: 1}, true},
		{rightsizeFlags{basis: "peak", minWindow: time.Hour, minSamples: 1, headroom: -1}, true},
	} {
		if _, err := tc.f.options(); (err != nil) != tc.err {
			t.Errorf("%+v: error %v, want error %v", tc.f, err, tc.err)
		}
	}
	o, _ := (&rightsizeFlags{basis: "p95", minWindow: time.Hour, minSamples: 1}).options()
	if o.Headroom >= 0 {
		t.Errorf("--headroom=0 gives the recommender %v, which it reads as its default; want a negative value (none)", o.Headroom)
	}
}
