package podrecord

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/fixture"
)

func TestNewKeepsTheFactsDecisionsRead(t *testing.T) {
	deleting := metav1.NewTime(fixture.Now)
	affinity := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}}
	cases := []struct {
		name string
		pod  corev1.Pod
		want func(*Record) string
	}{{
		name: "a running pod of a ReplicaSet",
		pod: fixture.Pod("team/infer", fixture.Running("gpu-1"), fixture.Priority(7),
			fixture.Requests("cpu", "1", "nvidia.com/mig-1g.10gb", "1")),
		want: func(r *Record) string {
			switch {
			case r.NodeName != "gpu-1" || r.Phase != corev1.PodRunning || !r.Bound():
				return "not bound to gpu-1 and running"
			case r.Priority != 7:
				return "priority lost"
			case r.Controller != "ReplicaSet":
				return "controller kind lost"
			case r.Unbound != nil:
				return "a bound pod keeps its whole object"
			case r.Ready:
				return "ready without a Ready condition"
			case r.Namespace != "team" || r.Name != "infer" || r.UID == "" || r.Labels["app"] != "infer":
				return "metadata lost"
			}
			return ""
		},
	}, {
		name: "a node agent's pod, ready",
		pod:  fixture.Pod("gpupool-agent/agent-x", fixture.Running("gpu-1"), fixture.Ready(true, fixture.Now)),
		want: func(r *Record) string {
			if !r.Ready || !r.UnreadySince.IsZero() {
				return "the Ready condition is lost"
			}
			return ""
		},
	}, {
		name: "a node agent's pod keeps who controls it and who runs it",
		pod: func() corev1.Pod {
			p := fixture.Pod("gpupool-agent/agent-x", fixture.Running("gpu-1"), fixture.OwnedBy("apps/v1", "DaemonSet", "gpupool-agent"))
			p.Spec.ServiceAccountName = "gpupool-agent"
			return p
		}(),
		want: func(r *Record) string {
			if r.Controller != "DaemonSet" || r.ControllerGroup != "apps" || r.ControllerName != "gpupool-agent" || r.ServiceAccount != "gpupool-agent" {
				return "the controller's group, kind and name, or the ServiceAccount, lost"
			}
			return ""
		},
	}, {
		name: "a controller of the core group, and an apiVersion that does not parse, name no group",
		pod: func() corev1.Pod {
			p := fixture.Pod("team/x", fixture.Running("gpu-1"), fixture.OwnedBy("v1", "ReplicationController", "x"))
			return p
		}(),
		want: func(r *Record) string {
			if r.ControllerGroup != "" || r.ControllerName != "x" {
				return "core group or name wrong"
			}
			p := fixture.Pod("team/y", fixture.Running("gpu-1"), fixture.OwnedBy("apps/v1/extra", "DaemonSet", "gpupool-agent"))
			if g := New(&p, nil).ControllerGroup; g != "" {
				return "an unparsable apiVersion names group " + g
			}
			return ""
		},
	}, {
		name: "a node agent's pod whose probe fails",
		pod:  fixture.Pod("gpupool-agent/agent-x", fixture.Running("gpu-1"), fixture.Ready(false, fixture.Now)),
		want: func(r *Record) string {
			if r.Ready || !r.UnreadySince.Time.Equal(fixture.Now) {
				return "Ready=False read as ready, or when it turned lost"
			}
			return ""
		},
	}, {
		name: "an unbound GPU pod keeps its object for pending demand",
		pod:  fixture.Pod("team/train", fixture.Unschedulable(fixture.Now), fixture.Requests("nvidia.com/gpu", "1")),
		want: func(r *Record) string {
			if r.Unbound == nil || r.Unbound.Name != "train" || r.Bound() {
				return "the unbound pod is not kept, or the record counts as bound"
			}
			return ""
		},
	}, {
		name: "an unbound pod that asks for no GPU keeps nothing",
		pod:  fixture.Pod("team/web", fixture.Unschedulable(fixture.Now), fixture.Requests("cpu", "1")),
		want: func(r *Record) string {
			if r.Unbound != nil {
				return "a pod that can never be GPU demand keeps its object"
			}
			return ""
		},
	}, {
		name: "an unbound pod with ResourceClaims keeps its object",
		pod: func() corev1.Pod {
			p := fixture.Pod("team/claim", fixture.Unschedulable(fixture.Now))
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("gpu-claim")}}
			return p
		}(),
		want: func(r *Record) string {
			if r.Unbound == nil {
				return "a claim pod's object is lost before the pass can read its claims"
			}
			return ""
		},
	}, {
		name: "a finished pod is not bound",
		pod: func() corev1.Pod {
			p := fixture.Pod("team/done", fixture.Running("gpu-1"))
			p.Status.Phase = corev1.PodSucceeded
			return p
		}(),
		want: func(r *Record) string {
			if r.Bound() {
				return "a Succeeded pod counts against its node"
			}
			return ""
		},
	}, {
		name: "eviction safety facts",
		pod: func() corev1.Pod {
			p := fixture.Pod("team/odd", fixture.Running("gpu-1"), fixture.Unowned(),
				fixture.Annotated("gpupool.io/do-not-disrupt", "true"), fixture.Annotated(corev1.MirrorPodAnnotationKey, "x"))
			p.Spec.Volumes = []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			p.DeletionTimestamp = &deleting
			return p
		}(),
		want: func(r *Record) string {
			switch {
			case !r.DoNotDisrupt || !r.Mirror:
				return "annotations' facts lost"
			case r.Controller != "":
				return "an unowned pod has a controller"
			case r.EmptyDirVolume != "scratch":
				return "emptyDir volume " + r.EmptyDirVolume + ", want scratch"
			case !r.DeletionTimestamp.Equal(&deleting):
				return "deletion timestamp lost"
			}
			return ""
		},
	}, {
		name: "placement rules",
		pod: func() corev1.Pod {
			p := fixture.Pod("team/placed", fixture.Running("gpu-1"))
			p.Spec.NodeSelector = map[string]string{"pool": "a"}
			p.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: affinity}}
			return p
		}(),
		want: func(r *Record) string {
			if r.NodeSelector["pool"] != "a" || len(r.Tolerations) != 1 || !equality.Semantic.DeepEqual(r.RequiredAffinity, affinity) {
				return "placement rules lost"
			}
			return ""
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.pod.DeepCopy()
			r := New(&tc.pod, &Interner{})
			if why := tc.want(r); why != "" {
				t.Errorf("%s: %+v", why, r)
			}
			if !equality.Semantic.DeepEqual(r.Requests, demand.PodRequests(before)) {
				t.Errorf("requests %v, want demand.PodRequests' %v", r.Requests, demand.PodRequests(before))
			}
			if !equality.Semantic.DeepEqual(&tc.pod, before) {
				t.Error("New wrote into the pod")
			}
		})
	}
}

// TestRecordsShareEqualParts: equal labels, tolerations and requests are one copy between
// records; different ones are not, and keep their own values.
func TestRecordsShareEqualParts(t *testing.T) {
	tolerate := func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, TolerationSeconds: ptr.To[int64](30)}}
	}
	ask := fixture.Requests("cpu", "4", "nvidia.com/mig-1g.18gb", "1")
	rs := FromPods(fixture.Pointers([]corev1.Pod{
		fixture.Pod("team/a", fixture.Running("gpu-1"), fixture.Labelled("app", "svc"), ask, tolerate),
		fixture.Pod("team/b", fixture.Running("gpu-1"), fixture.Labelled("app", "svc"), ask, tolerate),
		fixture.Pod("team/c", fixture.Running("gpu-2"), fixture.Labelled("app", "other"),
			fixture.Requests("cpu", "4", "nvidia.com/mig-2g.35gb", "1"), func(p *corev1.Pod) {
				p.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, TolerationSeconds: ptr.To[int64](60)}}
			}),
	}))
	same := func(x, y any) bool { return reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer() }
	a, b, c := rs[0], rs[1], rs[2]
	if !same(a.Labels, b.Labels) || !same(a.Requests, b.Requests) || !same(a.Tolerations, b.Tolerations) {
		t.Error("equal labels, requests or tolerations are held twice")
	}
	if same(a.Labels, c.Labels) || same(a.Requests, c.Requests) || same(a.Tolerations, c.Tolerations) {
		t.Error("different labels, requests or tolerations share one copy")
	}
	if c.Labels["app"] != "other" || *c.Tolerations[0].TolerationSeconds != 60 {
		t.Errorf("the third pod reads another pod's values: %v, %v", c.Labels, c.Tolerations)
	}
	if q := c.Requests["nvidia.com/mig-2g.35gb"]; q.Value() != 1 {
		t.Errorf("the 2g pod's request reads %s, want 1", q.String())
	}
}

// TestInternerTablesAreBounded: past maxShared distinct values a table starts afresh, and
// what it handed out before keeps its values.
func TestInternerTablesAreBounded(t *testing.T) {
	in := &Interner{}
	first := in.Labels(map[string]string{"app": "0"})
	for i := range 3 * maxShared {
		in.Labels(map[string]string{"app": fmt.Sprint(i)})
		in.Resources(fixture.Resources("cpu", fmt.Sprint(i+1)))
	}
	if in.labels.Len() > maxShared || in.resources.Len() > maxShared {
		t.Errorf("tables hold %d label sets and %d resource lists, more than %d", in.labels.Len(), in.resources.Len(), maxShared)
	}
	if first["app"] != "0" {
		t.Errorf("a label set handed out before the table started afresh reads %v", first)
	}
	var none *Interner
	m := map[string]string{"a": "b"}
	if got := none.Labels(m); !reflect.DeepEqual(got, m) || none.String("x") != "x" {
		t.Error("a nil Interner must hand back what it is given")
	}
}

// TestDeepCopySharesNothing: a copy of a record, the unbound pod included, can be written
// without the original changing; and it is a whole record, not ObjectMeta's promoted copy.
func TestDeepCopySharesNothing(t *testing.T) {
	p := fixture.Pod("team/train", fixture.Unschedulable(fixture.Now), fixture.Requests("nvidia.com/gpu", "1"))
	p.Spec.NodeSelector = map[string]string{"pool": "a"}
	p.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}
	r := New(&p, &Interner{})
	before := New(p.DeepCopy(), nil)
	c := r.DeepCopy()
	c.Labels["app"] = "changed"
	c.NodeSelector["pool"] = "b"
	c.Tolerations[0].Key = "changed"
	c.Requests["nvidia.com/gpu"] = fixture.Resources("x", "9")["x"]
	c.Unbound.Name = "changed"
	if !equality.Semantic.DeepEqual(r, before) {
		t.Errorf("writing into a copy changed the record:\n%+v\nwant\n%+v", r, before)
	}
	if _, ok := r.DeepCopyObject().(*Record); !ok {
		t.Error("DeepCopyObject is not a *Record")
	}
}
