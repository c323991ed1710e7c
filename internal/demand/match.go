package demand

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Matches says whether the pod's placement rules let the scheduler put it on node: its
// nodeSelector, its required node affinity and the node's NoSchedule and NoExecute taints
// (PreferNoSchedule only steers scoring and never blocks). When not, the reason names the node
// and the first rule that fails, for a user to read.
//
// It leaves out what the planner decides itself: free resources (compare Requests with the
// node), and spec.unschedulable, because gpupool cordons the very nodes it repartitions.
func (r Request) Matches(node *corev1.Node) (bool, string) {
	if node == nil {
		return false, "no node to match against"
	}
	if ok, why := matchNodeSelector(r.NodeSelector, node); !ok {
		return false, why
	}
	if ok, why := matchAffinity(r.RequiredAffinity, node); !ok {
		return false, why
	}
	// Comparison operators (Gt, Lt) are only accepted by API servers that enable them, so a
	// toleration that carries one was meant to be evaluated that way.
	taint, found := corev1helpers.FindMatchingUntoleratedTaint(logr.Discard(), node.Spec.Taints, r.Tolerations, blocksScheduling, true)
	if found {
		return false, fmt.Sprintf("node %s has taint %s the pod does not tolerate", node.Name, taint.ToString())
	}
	return true, ""
}

func blocksScheduling(t *corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

// matchNodeSelector checks in map order, which is cheap, and only on a mismatch walks keys in
// sorted order, so the planner's pods-by-nodes loop stays fast and the reason is stable.
func matchNodeSelector(sel map[string]string, node *corev1.Node) (bool, string) {
	all := true
	for k, want := range sel {
		if got, ok := node.Labels[k]; !ok || got != want {
			all = false
			break
		}
	}
	if all {
		return true, ""
	}
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		want := sel[k]
		got, ok := node.Labels[k]
		switch {
		case !ok:
			return false, fmt.Sprintf("node %s has no label %s; the pod's nodeSelector wants %s=%s", node.Name, k, k, want)
		case got != want:
			return false, fmt.Sprintf("node %s has label %s=%s; the pod's nodeSelector wants %s=%s", node.Name, k, got, k, want)
		}
	}
	return false, "the node does not match the pod's nodeSelector"
}

// matchAffinity lets component-helpers decide, then, only on a mismatch, evaluates each
// requirement alone to name the one that failed: the scheduler's own answer is only yes or no.
func matchAffinity(aff *corev1.NodeSelector, node *corev1.Node) (bool, string) {
	if aff == nil {
		return true, ""
	}
	ok, err := nodeaffinity.NewLazyErrorNodeSelector(aff).Match(node)
	if err != nil {
		return false, fmt.Sprintf("the pod's required node affinity is invalid, so it matches no node: %v", err)
	}
	if ok {
		return true, ""
	}
	if len(aff.NodeSelectorTerms) == 0 {
		return false, "the pod's required node affinity has no terms, so it matches no node"
	}
	why := make([]string, len(aff.NodeSelectorTerms))
	for i := range aff.NodeSelectorTerms {
		why[i] = termMismatch(&aff.NodeSelectorTerms[i], node)
	}
	if len(why) == 1 {
		return false, fmt.Sprintf("node %s does not match the pod's required node affinity: %s", node.Name, why[0])
	}
	for i := range why {
		why[i] = fmt.Sprintf("term %d: %s", i+1, why[i])
	}
	return false, fmt.Sprintf("node %s matches none of the pod's %d required node affinity terms: %s", node.Name, len(why), strings.Join(why, "; "))
}

// termMismatch names the first requirement of a term that node fails.
func termMismatch(term *corev1.NodeSelectorTerm, node *corev1.Node) string {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return "an empty term matches no node"
	}
	for _, req := range term.MatchExpressions {
		one := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{req}}}}
		if ok, _ := nodeaffinity.NewLazyErrorNodeSelector(one).Match(node); !ok {
			if v, has := node.Labels[req.Key]; has {
				return fmt.Sprintf("%s, and the node has %s=%s", requirementText(req), req.Key, v)
			}
			return fmt.Sprintf("%s, and the node has no label %s", requirementText(req), req.Key)
		}
	}
	for _, req := range term.MatchFields {
		one := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{req}}}}
		if ok, _ := nodeaffinity.NewLazyErrorNodeSelector(one).Match(node); !ok {
			return fmt.Sprintf("field %s, and the node is named %s", requirementText(req), node.Name)
		}
	}
	return "the term does not match"
}

// requirementText writes a requirement the way a user wrote it in YAML.
func requirementText(req corev1.NodeSelectorRequirement) string {
	switch req.Operator {
	case corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
		return fmt.Sprintf("%s %s", req.Key, req.Operator)
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		return fmt.Sprintf("%s %s %s", req.Key, req.Operator, strings.Join(req.Values, ", "))
	}
	return fmt.Sprintf("%s %s [%s]", req.Key, req.Operator, strings.Join(req.Values, ", "))
}
