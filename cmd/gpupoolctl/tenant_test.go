package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/fixture"
	"github.com/gpupool/gpupool/internal/snapshot"
	"github.com/gpupool/gpupool/internal/triage"
)

const mig3g = "nvidia.com/mig-3g.71gb"

func pendingPod() corev1.Pod {
	pod := fixture.Pod("team-a/trainer-0", fixture.Unschedulable(fixture.Now.Add(-time.Minute)), fixture.Requests("cpu", "1", mig3g, "1"))
	pod.UID = "uid-trainer-0"
	pod.Status.Conditions[0].Message = "0/4 nodes are available: 4 Insufficient " + mig3g + "."
	return pod
}

func gpupoolEvent(reason, message string, at time.Time) corev1.Event {
	return corev1.Event{Reason: reason, Message: message, ReportingController: "gpupool-policy-controller",
		EventTime: metav1.NewMicroTime(at)}
}

// TestLimitedVerdict: what a tenant who may not read the planner's inputs is told, from the
// pod, gpupool's Events on it, and the plans and policy statuses they may read.
func TestLimitedVerdict(t *testing.T) {
	tenantGaps := []gap{{What: "nodes", Error: "forbidden", Right: rightNodes}}
	policy := v1alpha1.GPUPoolPolicy{ObjectMeta: metav1.ObjectMeta{Name: "h200"}}
	policy.Status.Demand = []v1alpha1.ShapeDemand{{Resource: mig3g, PendingPods: 2, FeasibleNodes: 1, EligibleNodes: 3},
		{Resource: "nvidia.com/mig-1g.18gb", PendingPods: 5}}
	plan := v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "h200-abc"}}
	plan.Spec.Hash = "abc"
	plan.Spec.Expected.Pods = []v1alpha1.PodReference{{Namespace: "team-a", Name: "trainer-0"}}
	plan.Status.Phase = v1alpha1.PlanAwaitingApproval
	done := *plan.DeepCopy()
	done.Status.Phase = v1alpha1.PlanSucceeded

	for _, tc := range []struct {
		name         string
		pod          corev1.Pod
		v            visible
		events       []corev1.Event
		wantLayer    triage.Layer
		wantReason   string
		wantPlan     string
		wantPolicy   string
		wantDemand   int
		wantEvents   []string
		wantNextPart string
	}{{
		name:      "nothing readable but the pod: the scheduler's word and what to ask for",
		pod:       pendingPod(),
		v:         visible{gaps: tenantGaps},
		wantLayer: layerUnknown, wantReason: "the planner needs what you may not read",
		wantNextPart: "kubectl gpupool why trainer-0 -n team-a",
	}, {
		name:      "a visible plan serving the pod names it and what it waits for",
		pod:       pendingPod(),
		v:         visible{gaps: tenantGaps, plans: []v1alpha1.RepartitionPlan{done, plan}, plansVisible: true},
		wantLayer: triage.LayerPartitionShape, wantPlan: "h200-abc", wantReason: "plan h200-abc re-carves",
		wantNextPart: "waits for approval",
	}, {
		name:      "a finished plan does not serve the pod",
		pod:       pendingPod(),
		v:         visible{gaps: tenantGaps, plans: []v1alpha1.RepartitionPlan{done}, plansVisible: true},
		wantLayer: layerUnknown,
	}, {
		name: "gpupool's last Event naming a layer gives it; other controllers' Events are not shown",
		pod:  pendingPod(),
		v:    visible{gaps: tenantGaps},
		events: []corev1.Event{
			gpupoolEvent(string(triage.LayerCapacity), "every 3g.71gb is taken", fixture.Now.Add(-time.Minute)),
			{Reason: "FailedScheduling", Message: "0/4 nodes", Source: corev1.EventSource{Component: "default-scheduler"}},
			gpupoolEvent(string(triage.LayerDisruptionBudget), "PodDisruptionBudget team-b/infer allows no eviction", fixture.Now),
		},
		wantLayer: triage.LayerDisruptionBudget, wantReason: "PodDisruptionBudget team-b/infer",
		wantEvents: []string{"Capacity", "DisruptionBudget"},
	}, {
		name: "a gpupool Event that names no layer is shown but does not decide",
		pod:  pendingPod(),
		v:    visible{gaps: tenantGaps},
		events: []corev1.Event{
			gpupoolEvent("Planned", "plan h200-abc serves it", fixture.Now),
		},
		wantLayer: layerUnknown, wantEvents: []string{"Planned"},
	}, {
		name: "gpupool's Event that repartitioning cannot help gives the planner's reason as a layer",
		pod:  pendingPod(),
		v:    visible{gaps: tenantGaps},
		events: []corev1.Event{gpupoolEvent("GPUPoolCannotHelp",
			"gpupool cannot serve this pod by repartitioning (NodePlacement): no node has 1000 CPUs; kubectl gpupool why trainer-0 -n team-a", fixture.Now)},
		wantLayer: triage.LayerPlacement, wantReason: "no node has 1000 CPUs", wantEvents: []string{"GPUPoolCannotHelp"},
	}, {
		name: "gpupool's Event that a plan waits for approval: the partition shape, even without the plans",
		pod:  pendingPod(),
		v:    visible{gaps: tenantGaps},
		events: []corev1.Event{gpupoolEvent("GPUPoolPlanAwaitingApproval",
			"gpupool plan h200-abc repartitions GPUs for this pod; it waits for approval (kubectl gpupool plan h200-abc)", fixture.Now)},
		wantLayer: triage.LayerPartitionShape, wantReason: "plan h200-abc", wantEvents: []string{"GPUPoolPlanAwaitingApproval"},
	}, {
		name:       "the policies' status counts the pod's shape, and a single pool is named",
		pod:        pendingPod(),
		v:          visible{gaps: tenantGaps, policiesVisible: true, snap: &snapshot.Snapshot{Policies: []v1alpha1.GPUPoolPolicy{policy}}},
		wantLayer:  layerUnknown,
		wantPolicy: "h200", wantDemand: 1,
	}, {
		name:       "a running pod is explained from its node's report",
		pod:        fixture.Pod("team-a/trainer-0", fixture.Running("gpu-1"), fixture.Requests(mig3g, "1")),
		v:          visible{gaps: tenantGaps},
		wantLayer:  triage.LayerRunning,
		wantReason: "bound to node gpu-1",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.v.snap == nil {
				tc.v.snap = &snapshot.Snapshot{}
			}
			out, err := limitedVerdict(&tc.pod, &tc.v, tc.events)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(out.Scheduler, "0/4 nodes are available") && tc.pod.Spec.NodeName == "" {
				t.Errorf("scheduler %q, want the pod's PodScheduled message", out.Scheduler)
			}
			if out.Blocking == "" {
				t.Error("no blocking dimension")
			}
			if out.Complete || out.Layer != tc.wantLayer || !strings.Contains(out.Reason, tc.wantReason) || out.Policy != tc.wantPolicy {
				t.Errorf("complete %t, layer %q, policy %q, reason %q; want incomplete, %q, %q, %q", out.Complete, out.Layer, out.Policy, out.Reason,
					tc.wantLayer, tc.wantPolicy, tc.wantReason)
			}
			if got := ""; out.Plan != nil || tc.wantPlan != "" {
				if out.Plan != nil {
					got = out.Plan.Name
				}
				if got != tc.wantPlan {
					t.Errorf("plan %q, want %q", got, tc.wantPlan)
				}
			}
			if !strings.Contains(out.Next, tc.wantNextPart) {
				t.Errorf("next %q lacks %q", out.Next, tc.wantNextPart)
			}
			if len(out.Demand) != tc.wantDemand {
				t.Errorf("demand %+v, want %d rows", out.Demand, tc.wantDemand)
			}
			var reasons []string
			for _, e := range out.Events {
				reasons = append(reasons, e.Reason)
			}
			if !slices.Equal(reasons, tc.wantEvents) {
				t.Errorf("events %q, want %q", reasons, tc.wantEvents)
			}
			if len(out.Unreadable) != len(tc.v.gaps) {
				t.Errorf("unreadable %v, want the gaps %v", out.Unreadable, tc.v.gaps)
			}
		})
	}

	noGPU := fixture.Pod("team-a/web", fixture.Requests("cpu", "1"))
	if _, err := limitedVerdict(&noGPU, &visible{snap: &snapshot.Snapshot{}}, nil); err == nil || !strings.Contains(err.Error(), "asks for no NVIDIA GPU") {
		t.Errorf("a pod without GPUs: %v", err)
	}
}

// TestReadVisible: a user confined to a namespace gets that namespace's pods and PDBs, and a gap
// naming the right for each list the API server refuses; other errors stop the command.
func TestReadVisible(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mine, theirs := pendingPod(), fixture.Pod("team-b/other", fixture.Requests(mig3g, "1"))
	// allowed says whether the namespace-confined user may list the kind, cluster-wide or in ns.
	allowed := func(kind, ns string) bool {
		switch kind {
		case "Pod", "PodDisruptionBudget", "ResourceClaim", "Event":
			return ns == "team-a"
		case "RepartitionPlan", "GPUPoolPolicy", "GPUNode":
			return true // bound to gpupool-viewer
		}
		return false
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&mine, &theirs).
		WithIndex(&corev1.Event{}, "involvedObject.name", func(o client.Object) []string { return []string{o.(*corev1.Event).InvolvedObject.Name} }).
		WithInterceptorFuncs(interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				gvk, err := apiutil.GVKForObject(list, scheme)
				if err != nil {
					return err
				}
				kind := strings.TrimSuffix(gvk.Kind, "List")
				lo := (&client.ListOptions{}).ApplyOptions(opts)
				if !allowed(kind, lo.Namespace) {
					return apierrors.NewForbidden(schema.GroupResource{Resource: strings.ToLower(kind) + "s"}, "", nil)
				}
				return c.List(ctx, list, opts...)
			},
		}).Build()

	v, err := readVisible(context.Background(), c, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(v.snap.Pods) != 1 || v.snap.Pods[0].Name != "trainer-0" {
		t.Errorf("pods %v, want only team-a's", v.snap.Pods)
	}
	var got []string
	for _, g := range v.gaps {
		got = append(got, g.What)
	}
	want := []string{"nodes", "pods in other namespaces than team-a", "poddisruptionbudgets in other namespaces than team-a",
		"resourceclaims in other namespaces than team-a", "resourceslices", "devicetaintrules"}
	if !slices.Equal(got, want) {
		t.Errorf("gaps %q, want %q", got, want)
	}
	if v.complete() || !v.plansVisible || !v.policiesVisible {
		t.Errorf("complete %t, plans visible %t, policies visible %t; want false, true, true", v.complete(), v.plansVisible, v.policiesVisible)
	}

	out, err := explain(context.Background(), c, client.ObjectKeyFromObject(&mine))
	if err != nil {
		t.Fatal(err)
	}
	if out.Complete || out.Layer != layerUnknown || !strings.Contains(out.Scheduler, "Insufficient "+mig3g) {
		t.Errorf("explain: %+v", out)
	}

	if _, err := readCluster(context.Background(), c); err == nil || !strings.Contains(err.Error(), "nodes: forbidden ("+rightNodes+")") {
		t.Errorf("readCluster with gaps: %v, want an error naming the rights", err)
	}
}
