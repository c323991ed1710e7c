package planner

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// LabelPolicy on a RepartitionPlan names its policy, so plans of one pool list with a selector.
const LabelPolicy = "gpupool.io/policy"

// MIGConfigName is the immutable mig-parted config entry for a node's complete layout. The name
// is derived from the layout itself: mig-manager never re-applies an edited entry, so a new
// layout must get a new name, and the same layout always gets the same one.
func MIGConfigName(target []GPUTarget) string {
	h := sha256.New()
	for _, g := range target {
		fmt.Fprintf(h, "%d:%t=%s;", g.Index, g.MIGEnabled, g.Layout.String())
	}
	return "gpupool-" + hex.EncodeToString(h.Sum(nil))[:10]
}

// PlanEntryName is the mig-parted entry name a plan uses for a layout: derived from the
// layout's name and the plan's, so that two plans never share an entry and a retry of the same
// layout makes mig-manager apply it again.
func PlanEntryName(layoutName, plan string) string {
	sum := sha256.Sum256([]byte(layoutName + "/" + plan))
	return "gpupool-" + hex.EncodeToString(sum[:])[:10]
}

// RepartitionPlan renders the result as the RepartitionPlan the controller creates for the
// policy, owned by it; nil when the result changes nothing.
func (r *Result) RepartitionPlan(policy *v1alpha1.GPUPoolPolicy, now time.Time) *v1alpha1.RepartitionPlan {
	if len(r.Steps) == 0 {
		return nil
	}
	spec := v1alpha1.RepartitionPlanSpec{Policy: policy.Name, Disruptive: r.Disruptive()}
	for _, s := range r.Steps {
		step := v1alpha1.NodeStep{
			Node:          s.Node,
			MIGConfigName: MIGConfigName(s.Target),
			GPUs:          []v1alpha1.GPUChange{},
			Disruptive:    len(s.Evictions) > 0,
			WaitsFor:      slices.Clone(s.WaitsFor),
		}
		if s.Sharing != nil {
			setting := *s.Sharing
			step.SharingConfig = &setting
			step.SharingConfigName = SharingConfigName(setting)
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

func counts(l map[string]int) v1alpha1.ProfileCounts {
	if len(l) == 0 {
		return nil
	}
	out := make(v1alpha1.ProfileCounts, len(l))
	for k, v := range l {
		if v != 0 {
			out[k] = int32(v)
		}
	}
	return out
}
