package planner

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/mig"
	"github.com/gpupool/gpupool/internal/nvidia"
)

// LabelPolicy on a RepartitionPlan names its policy, so plans of one pool list with a selector.
const LabelPolicy = "gpupool.io/policy"

// RepartitionPlan renders the result as the RepartitionPlan the controller creates for the
// policy, owned by it; nil when the result changes nothing.
func (r *Result) RepartitionPlan(policy *v1alpha1.GPUPoolPolicy, now time.Time) *v1alpha1.RepartitionPlan {
	if len(r.Steps) == 0 {
		return nil
	}
	// The plan records the approval mode it is made under: the plan controller approves it
	// without a human only while this mode and the policy's mode now both allow it
	// (rollout.ModeApproves), so loosening the policy later never approves it.
	spec := v1alpha1.RepartitionPlanSpec{Policy: policy.Name, Disruptive: r.Disruptive(),
		Approval: cmp.Or(policy.Spec.Disruption.Approval, v1alpha1.ApprovalManual)}
	for _, s := range r.Steps {
		step := v1alpha1.NodeStep{
			Node:          s.Node,
			MIGConfigName: nvidia.MIGConfigName(s.Target),
			GPUs:          []v1alpha1.GPUChange{},
			Disruptive:    len(s.Evictions) > 0,
			WaitsFor:      slices.Clone(s.WaitsFor),
			RebootRisk:    s.RebootRisk,
		}
		if s.Sharing != nil {
			setting := *s.Sharing
			step.SharingConfig = &setting
			step.SharingConfigName = nvidia.DevicePluginConfigName(setting)
		}
		for _, g := range s.GPUs {
			step.GPUs = append(step.GPUs, v1alpha1.GPUChange{Index: int32(g.Index), From: counts(g.From), To: counts(g.To)})
		}
		for _, e := range s.Evictions {
			step.Evictions = append(step.Evictions, v1alpha1.Eviction{
				PodReference: v1alpha1.PodReference{Namespace: e.Pod.Namespace, Name: e.Pod.Name}, UID: string(e.UID), Reason: e.Reason,
				LandingNode: e.Landing})
		}
		spec.Steps = append(spec.Steps, step)
	}
	for _, p := range r.Served {
		spec.Expected.Pods = append(spec.Expected.Pods, v1alpha1.PodReference{Namespace: p.Namespace, Name: p.Name})
	}
	spec.Expected.SlicesGained = counts(r.SlicesGained)
	spec.Expected.StrandedBefore = counts(r.StrandedBefore)
	spec.Expected.StrandedAfter = counts(r.StrandedAfter)
	spec.Hash = v1alpha1.HashSteps(spec.Steps)

	suffix := fmt.Sprintf("-%s-%s", now.UTC().Format("20060102"), spec.Hash[:8])
	prefix := policy.Name
	if len(prefix)+len(suffix) > validation.DNS1123SubdomainMaxLength {
		prefix = strings.TrimRight(prefix[:validation.DNS1123SubdomainMaxLength-len(suffix)], "-.")
	}
	labels := map[string]string{}
	if len(validation.IsValidLabelValue(policy.Name)) == 0 {
		// Longer policy names cannot be label values; the owner reference still says it.
		labels[LabelPolicy] = policy.Name
	}
	return &v1alpha1.RepartitionPlan{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RepartitionPlan"},
		ObjectMeta: metav1.ObjectMeta{
			Name:   prefix + suffix,
			Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "GPUPoolPolicy", Name: policy.Name, UID: policy.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: spec,
	}
}

func counts(l map[string]int) v1alpha1.ProfileCounts { return mig.Layout(l).Counts() }
