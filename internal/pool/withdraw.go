package pool

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
)

// WithdrawPrefix starts the reason of a plan withdrawn because its demand went away, so that
// whoever reads the plan (and the pending pods' Events) tells it from a plan replaced by a
// better one.
const WithdrawPrefix = "withdrawn: "

// DemandGone says why a plan waiting for approval is no longer wanted by anyone: it was made
// for pending pods and none of them is pending now (each was scheduled, or deleted). "" when
// at least one still waits, or the plan was made for no pod (standby headroom, which the
// planner's own verdict decides). A human must not be asked to approve disruption that no
// pending pod needs.
func DemandGone(plan *v1alpha1.RepartitionPlan, pending []demand.Request) string {
	if len(plan.Spec.Expected.Pods) == 0 {
		return ""
	}
	waiting := make(map[types.NamespacedName]bool, len(pending))
	for _, r := range pending {
		waiting[r.Pod] = true
	}
	var gone []string
	for _, p := range plan.Spec.Expected.Pods {
		if waiting[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] {
			return ""
		}
		gone = append(gone, p.Namespace+"/"+p.Name)
	}
	const show = 3
	names := strings.Join(gone[:min(show, len(gone))], ", ")
	if len(gone) > show {
		names += fmt.Sprintf(" and %d more", len(gone)-show)
	}
	return fmt.Sprintf("%snone of the %d pod(s) it was made for is pending any more (%s)", WithdrawPrefix, len(gone), names)
}
