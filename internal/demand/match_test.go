package demand

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMatches(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-3", Labels: map[string]string{
			"zone": "a", "nvidia.com/gpu.product": "NVIDIA-H200", "gpu.count": "8",
		}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: "dedicated", Value: "infer", Effect: corev1.TaintEffectNoSchedule},
			{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoExecute},
			{Key: "spot", Value: "true", Effect: corev1.TaintEffectPreferNoSchedule},
		}},
	}
	tolerateAll := []corev1.Toleration{
		{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "infer", Effect: corev1.TaintEffectNoSchedule},
		{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists},
	}
	affinity := func(terms ...[]corev1.NodeSelectorRequirement) *corev1.NodeSelector {
		ns := &corev1.NodeSelector{}
		for _, t := range terms {
			ns.NodeSelectorTerms = append(ns.NodeSelectorTerms, corev1.NodeSelectorTerm{MatchExpressions: t})
		}
		return ns
	}
	req := func(key string, op corev1.NodeSelectorOperator, values ...string) []corev1.NodeSelectorRequirement {
		return []corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: values}}
	}
	tests := []struct {
		name    string
		r       Request
		node    *corev1.Node // gpu-3 when nil
		nilNode bool
		want    string // empty: the pod may go there
	}{{
		name: "everything tolerated, no selectors",
		r:    Request{Tolerations: tolerateAll},
	}, {
		name: "untolerated NoSchedule taint",
		r:    Request{Tolerations: tolerateAll[1:]},
		want: "node gpu-3 has taint dedicated=infer:NoSchedule the pod does not tolerate",
	}, {
		name: "untolerated NoExecute taint",
		r:    Request{Tolerations: tolerateAll[:1]},
		want: "node gpu-3 has taint nvidia.com/gpu:NoExecute the pod does not tolerate",
	}, {
		name: "toleration for a different value",
		r: Request{Tolerations: []corev1.Toleration{
			{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "train", Effect: corev1.TaintEffectNoSchedule},
			tolerateAll[1],
		}},
		want: "node gpu-3 has taint dedicated=infer:NoSchedule the pod does not tolerate",
	}, {
		name: "a toleration with no key tolerates everything",
		r:    Request{Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	}, {
		// PreferNoSchedule only lowers the node's score; the pod still fits.
		name: "PreferNoSchedule taint is ignored",
		r:    Request{Tolerations: tolerateAll},
		node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-5"}, Spec: corev1.NodeSpec{Taints: node.Spec.Taints[2:]}},
	}, {
		name: "nodeSelector matches",
		r:    Request{Tolerations: tolerateAll, NodeSelector: map[string]string{"zone": "a", "nvidia.com/gpu.product": "NVIDIA-H200"}},
	}, {
		name: "nodeSelector value mismatch",
		r:    Request{Tolerations: tolerateAll, NodeSelector: map[string]string{"zone": "b", "nvidia.com/gpu.product": "NVIDIA-H200"}},
		want: "node gpu-3 has label zone=a; the pod's nodeSelector wants zone=b",
	}, {
		name: "nodeSelector label missing, reported in key order",
		r:    Request{Tolerations: tolerateAll, NodeSelector: map[string]string{"zone": "b", "pool": "x"}},
		want: "node gpu-3 has no label pool; the pod's nodeSelector wants pool=x",
	}, {
		name: "nodeSelector is checked before taints",
		r:    Request{NodeSelector: map[string]string{"zone": "b"}},
		want: "node gpu-3 has label zone=a; the pod's nodeSelector wants zone=b",
	}, {
		name: "affinity In matches",
		r:    Request{Tolerations: tolerateAll, RequiredAffinity: affinity(req("zone", corev1.NodeSelectorOpIn, "a", "b"))},
	}, {
		name: "affinity In mismatch",
		r:    Request{Tolerations: tolerateAll, RequiredAffinity: affinity(req("zone", corev1.NodeSelectorOpIn, "b", "c"))},
		want: "node gpu-3 does not match the pod's required node affinity: zone In [b, c], and the node has zone=a",
	}, {
		name: "affinity NotIn matches",
		r:    Request{Tolerations: tolerateAll, RequiredAffinity: affinity(req("zone", corev1.NodeSelectorOpNotIn, "b"))},
	}, {
		name: "affinity NotIn mismatch",
		r:    Request{Tolerations: tolerateAll, RequiredAffinity: affinity(req("zone", corev1.NodeSelectorOpNotIn, "a"))},
		want: "node gpu-3 does not match the pod's required node affinity: zone NotIn [a], and the node has zone=a",
	}, {
		name: "affinity Exists matches",
		r:    Request{Tolerations: tolerateAll, RequiredAffinity: affinity(req("nvidia.com/gpu.product", corev1.NodeSelectorOpExists))},
	}, {
		name: "affinity Exists mismatch",
		r:    Request{Tolerations: tolerateAll, RequiredAffinity: affinity(req("team", corev1.NodeSelectorOpExists))},
		want: "node gpu-3 does not match the pod's required node affinity: team Exists, and the node has no label team",
	}, {
		name: "affinity DoesNotExist mismatch",
		r:    Request{Tolerations: tolerateAll, RequiredAffinity: affinity(req("zone", corev1.NodeSelectorOpDoesNotExist))},
		want: "node gpu-3 does not match the pod's required node affinity: zone DoesNotExist, and the node has zone=a",
	}, {
		name: "affinity Gt mismatch",
		r:    Request{Tolerations: tolerateAll, RequiredAffinity: affinity(req("gpu.count", corev1.NodeSelectorOpGt, "8"))},
		want: "node gpu-3 does not match the pod's required node affinity: gpu.count Gt 8, and the node has gpu.count=8",
	}, {
		name: "requirements of one term all hold",
		r: Request{Tolerations: tolerateAll, RequiredAffinity: affinity(append(
			req("zone", corev1.NodeSelectorOpIn, "a"), req("team", corev1.NodeSelectorOpDoesNotExist)...))},
	}, {
		name: "second requirement of a term fails",
		r: Request{Tolerations: tolerateAll, RequiredAffinity: affinity(append(
			req("zone", corev1.NodeSelectorOpIn, "a"), req("nvidia.com/gpu.product", corev1.NodeSelectorOpIn, "NVIDIA-B200")...))},
		want: "node gpu-3 does not match the pod's required node affinity: nvidia.com/gpu.product In [NVIDIA-B200], and the node has nvidia.com/gpu.product=NVIDIA-H200",
	}, {
		name: "terms are ORed: the second matches",
		r: Request{Tolerations: tolerateAll, RequiredAffinity: affinity(
			req("zone", corev1.NodeSelectorOpIn, "b"), req("zone", corev1.NodeSelectorOpIn, "a"))},
	}, {
		name: "no term matches",
		r: Request{Tolerations: tolerateAll, RequiredAffinity: affinity(
			req("zone", corev1.NodeSelectorOpIn, "b"), req("team", corev1.NodeSelectorOpExists))},
		want: "node gpu-3 matches none of the pod's 2 required node affinity terms: term 1: zone In [b], and the node has zone=a; term 2: team Exists, and the node has no label team",
	}, {
		name: "matchFields on the node name",
		r: Request{Tolerations: tolerateAll, RequiredAffinity: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"gpu-1"}}},
		}}}},
		want: "node gpu-3 does not match the pod's required node affinity: field metadata.name In [gpu-1], and the node is named gpu-3",
	}, {
		name: "empty term",
		r: Request{Tolerations: tolerateAll, RequiredAffinity: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{}, {MatchExpressions: req("zone", corev1.NodeSelectorOpIn, "b")},
		}}},
		want: "node gpu-3 matches none of the pod's 2 required node affinity terms: term 1: an empty term matches no node; term 2: zone In [b], and the node has zone=a",
	}, {
		name: "no terms",
		r:    Request{Tolerations: tolerateAll, RequiredAffinity: &corev1.NodeSelector{}},
		want: "the pod's required node affinity has no terms, so it matches no node",
	}, {
		name: "invalid requirement",
		r:    Request{Tolerations: tolerateAll, RequiredAffinity: affinity(req("zone", "Near", "a"))},
		want: `the pod's required node affinity is invalid, so it matches no node: nodeSelectorTerms[0].matchExpressions[0].operator: Unsupported value: "Near": supported values: "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"`,
	}, {
		name: "affinity is checked before taints",
		r:    Request{RequiredAffinity: affinity(req("zone", corev1.NodeSelectorOpIn, "b"))},
		want: "node gpu-3 does not match the pod's required node affinity: zone In [b], and the node has zone=a",
	}, {
		name:    "no node",
		r:       Request{},
		nilNode: true,
		want:    "no node to match against",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := node
			switch {
			case tt.nilNode:
				n = nil
			case tt.node != nil:
				n = tt.node
			}
			ok, why := tt.r.Matches(n)
			if ok != (tt.want == "") || why != tt.want {
				t.Errorf("Matches = %v, %q\nwant      %v, %q", ok, why, tt.want == "", tt.want)
			}
		})
	}
}
