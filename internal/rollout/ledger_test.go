package rollout_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/rollout"
)

func ledgerNode(unschedulable bool, annotations map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Annotations: annotations},
		Spec: corev1.NodeSpec{Unschedulable: unschedulable}}
}

// TestCordonProvenance: gpupool acts only on a cordon its own ledger records; an annotation
// anyone who may patch nodes can write names nobody by itself.
func TestCordonProvenance(t *testing.T) {
	byP := map[string]string{v1alpha1.AnnotationCordonedBy: "p"}
	cases := []struct {
		name         string
		node         *corev1.Node
		rec          *rollout.CordonRecord
		cordonedBy   string
		mayUncordon  bool
		intentForeig bool
	}{
		{name: "annotation and record agree", node: ledgerNode(true, byP), rec: &rollout.CordonRecord{Plan: "p"},
			cordonedBy: "p", mayUncordon: true, intentForeig: false},
		{name: "forged annotation, no record", node: ledgerNode(true, byP), cordonedBy: "", mayUncordon: false, intentForeig: true},
		{name: "forged annotation naming another plan than the record", node: ledgerNode(true, byP),
			rec: &rollout.CordonRecord{Plan: "q"}, cordonedBy: "", mayUncordon: false, intentForeig: true},
		{name: "someone else had cordoned it first", node: ledgerNode(true, byP),
			rec: &rollout.CordonRecord{Plan: "p", WasUnschedulable: true}, cordonedBy: "p", mayUncordon: false, intentForeig: true},
		{name: "written ahead, not applied, node free", node: ledgerNode(false, nil), rec: &rollout.CordonRecord{Plan: "p"},
			cordonedBy: "", mayUncordon: false, intentForeig: false},
		{name: "written ahead, then an admin cordoned it", node: ledgerNode(true, nil), rec: &rollout.CordonRecord{Plan: "p"},
			cordonedBy: "", mayUncordon: false, intentForeig: true},
		{name: "the node says someone else had cordoned it", node: ledgerNode(true, map[string]string{
			v1alpha1.AnnotationCordonedBy: "p", v1alpha1.AnnotationWasUnschedulable: "true"}), rec: &rollout.CordonRecord{Plan: "p"},
			cordonedBy: "p", mayUncordon: false, intentForeig: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(rollout.CordonedByPlan(tc.node, tc.rec)).To(Equal(tc.cordonedBy))
			g.Expect(rollout.MayUncordon(tc.node, "p", tc.rec)).To(Equal(tc.mayUncordon))
			g.Expect(rollout.CordonIntent(tc.node, "p", "uid", "pool", tc.rec).WasUnschedulable).To(Equal(tc.intentForeig))
		})
	}
}

func TestLedgerRoundTripAndGarbage(t *testing.T) {
	g := NewWithT(t)
	v, err := rollout.EncodeRecord(rollout.CordonRecord{Plan: "p", PlanUID: "u", WasUnschedulable: true})
	g.Expect(err).NotTo(HaveOccurred())
	recs := rollout.ParseLedger(map[string]string{"a": v, "b": "not json", "c": `{"plan":""}`})
	g.Expect(recs).To(HaveLen(1), "entries the manager did not write back no cordon")
	g.Expect(recs["a"]).To(Equal(rollout.CordonRecord{Plan: "p", PlanUID: "u", WasUnschedulable: true}))
}

func TestStaleRecord(t *testing.T) {
	byP := map[string]string{v1alpha1.AnnotationCordonedBy: "p"}
	executing := func(state v1alpha1.NodeStepState) *v1alpha1.RepartitionPlan {
		p := &v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u"},
			Status: v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanExecuting}}
		if state != "" {
			p.Status.Nodes = []v1alpha1.NodeStepStatus{{Node: "gpu-1", State: state}}
		}
		return p
	}
	rec := rollout.CordonRecord{Plan: "p", PlanUID: "u"}
	cases := []struct {
		name  string
		node  *corev1.Node
		plan  *v1alpha1.RepartitionPlan
		stale bool
	}{
		{name: "node gone", node: nil, stale: true},
		{name: "cordon applied: the record stands whatever the plan", node: ledgerNode(true, byP), stale: false},
		{name: "written ahead for a step about to cordon", node: ledgerNode(false, nil), plan: executing(v1alpha1.NodeCordoned), stale: false},
		{name: "written ahead, step not recorded yet", node: ledgerNode(false, nil), plan: executing(""), stale: false},
		{name: "written ahead while a cache still shows the plan awaiting approval", node: ledgerNode(false, nil),
			plan: &v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u"},
				Status: v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanAwaitingApproval}}, stale: false},
		{name: "given back: step done", node: ledgerNode(false, nil), plan: executing(v1alpha1.NodeDone), stale: true},
		{name: "plan gone and no cordon", node: ledgerNode(false, nil), stale: true},
		{name: "a later plan of the same name", node: ledgerNode(false, nil),
			plan: &v1alpha1.RepartitionPlan{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "other"},
				Status: v1alpha1.RepartitionPlanStatus{Phase: v1alpha1.PlanExecuting}}, stale: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(rollout.StaleRecord(tc.node, rec, tc.plan)).To(Equal(tc.stale))
		})
	}
}
