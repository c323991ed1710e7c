package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// +kubebuilder:rbac:groups=resource.k8s.io,resources=devicetaintrules,verbs=get;list;watch;create;delete

// A placement step keeps devices free with DeviceTaintRules (resource.k8s.io/v1, GA in
// Kubernetes 1.37): one per device, effect NoSchedule. The scheduler's DRA allocator skips a
// device whose NoSchedule or NoExecute taint the request does not tolerate
// (k8s.io/dynamic-resource-allocation v0.37.2 structured/internal/stable/allocator_stable.go,
// taintPreventsAllocation), and the scheduler sees rules as taints on the slices' devices
// (k8s.io/kubernetes v1.37.2 pkg/scheduler/framework/plugins/dynamicresources/dra_manager.go,
// ListWithDeviceTaintRules; resourceslice/tracker/tracker.go). NoSchedule leaves claims already
// allocated alone: only NoExecute makes the device taint eviction controller delete pods.

const (
	// labelDeviceTaint marks the DeviceTaintRules gpupool makes; its value is the node.
	labelDeviceTaint = "gpupool.io/keep-free"
	// deviceTaintPrefix begins the name of every DeviceTaintRule gpupool makes.
	deviceTaintPrefix = "gpupool-keepfree-"
	// deviceTaintKey is the taint's key; its value names the plan.
	deviceTaintKey = "gpupool.io/keep-free"
)

// deviceTaintName is the name of the rule that keeps device free for a plan's step: derived from
// the plan's UID (a later plan of the same name gets other names), the node, the driver and the
// device. A rule's name is immutable, so the name ties a rule to what it taints for good.
func deviceTaintName(planUID types.UID, driver, node, device string) string {
	sum := sha256.Sum256([]byte(strings.Join([]string{string(planUID), driver, node, device}, "/")))
	return deviceTaintPrefix + hex.EncodeToString(sum[:])[:20]
}

// deviceTaintRule is the rule gpupool makes to keep device free for the plan's step.
func deviceTaintRule(plan *v1alpha1.RepartitionPlan, step v1alpha1.NodeStep, device string) *resourcev1.DeviceTaintRule {
	p := step.Placement
	return &resourcev1.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: deviceTaintName(plan.UID, p.Driver, step.Node, device),
			Labels: map[string]string{labelDeviceTaint: step.Node},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RepartitionPlan",
				Name: plan.Name, UID: plan.UID}}},
		Spec: resourcev1.DeviceTaintRuleSpec{
			DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr.To(p.Driver), Pool: ptr.To(step.Node), Device: ptr.To(device)},
			Taint:          resourcev1.DeviceTaint{Key: deviceTaintKey, Value: plan.Name, Effect: resourcev1.DeviceTaintEffectNoSchedule},
		},
	}
}

// ownRule says whether rule is one gpupool made: labelled as gpupool's, owned by a
// RepartitionPlan, and named exactly as gpupool names the rule for the device its selector
// names under that plan's UID. Labels and ownerReferences can be added to anyone's rule by
// whoever may patch it; the name cannot change after creation, so a rule someone else made
// under another name never reads as gpupool's, and never gets deleted by it.
func ownRule(rule *resourcev1.DeviceTaintRule) (owner *metav1.OwnerReference, ok bool) {
	if _, labelled := rule.Labels[labelDeviceTaint]; !labelled || !strings.HasPrefix(rule.Name, deviceTaintPrefix) {
		return nil, false
	}
	sel := rule.Spec.DeviceSelector
	if sel == nil || sel.Driver == nil || sel.Pool == nil || sel.Device == nil {
		return nil, false
	}
	for i := range rule.OwnerReferences {
		o := &rule.OwnerReferences[i]
		if o.Kind == "RepartitionPlan" && strings.HasPrefix(o.APIVersion, v1alpha1.GroupVersion.Group+"/") &&
			rule.Name == deviceTaintName(o.UID, *sel.Driver, *sel.Pool, *sel.Device) {
			return o, true
		}
	}
	return nil, false
}

// sameRule says whether an existing rule is the one gpupool would make.
func sameRule(have, want *resourcev1.DeviceTaintRule) bool {
	o, ok := ownRule(have)
	hs, ws := have.Spec.DeviceSelector, want.Spec.DeviceSelector
	return ok && o.UID == want.OwnerReferences[0].UID && *hs.Driver == *ws.Driver && *hs.Pool == *ws.Pool && *hs.Device == *ws.Device &&
		have.Spec.Taint.Key == want.Spec.Taint.Key && have.Spec.Taint.Effect == want.Spec.Taint.Effect
}

// taintDevices creates the step's rules, one per device it keeps free; a rule that exists
// already as gpupool made it is fine. It fails when a rule under one of the names is not
// gpupool's: the step then stops (taintsHeld says so) without adopting it.
func (r *PlanReconciler) taintDevices(ctx context.Context, plan *v1alpha1.RepartitionPlan, step v1alpha1.NodeStep) (string, error) {
	for _, device := range step.Placement.KeepFree {
		want := deviceTaintRule(plan, step, device)
		err := r.Client.Create(ctx, want)
		switch {
		case err == nil:
			logf.FromContext(ctx).Info("tainted a device NoSchedule", "plan", plan.Name, "node", step.Node, "device", device, "rule", want.Name)
		case apierrors.IsAlreadyExists(err):
		default:
			return "", fmt.Errorf("creating DeviceTaintRule %s for device %s: %w", want.Name, device, err)
		}
	}
	return "", nil
}

// untaintDevices deletes the step's rules that are gpupool's; gone ones are fine.
func (r *PlanReconciler) untaintDevices(ctx context.Context, plan *v1alpha1.RepartitionPlan, step v1alpha1.NodeStep) error {
	if !r.taintRules {
		return nil // nothing was ever tainted where the API server serves no DeviceTaintRules
	}
	for _, device := range step.Placement.KeepFree {
		want := deviceTaintRule(plan, step, device)
		have := &resourcev1.DeviceTaintRule{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(want), have); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return fmt.Errorf("reading DeviceTaintRule %s: %w", want.Name, err)
		}
		if !sameRule(have, want) {
			continue // not gpupool's: never deleted by it
		}
		if err := deleteRule(ctx, r.Client, have); err != nil {
			return err
		}
		logf.FromContext(ctx).Info("removed a device taint", "plan", plan.Name, "node", step.Node, "device", device, "rule", have.Name)
	}
	return nil
}

// deleteRule deletes exactly the rule read (its UID and resourceVersion), so that a rule
// replaced or changed since is judged again rather than deleted unseen.
func deleteRule(ctx context.Context, c client.Client, rule *resourcev1.DeviceTaintRule) error {
	err := c.Delete(ctx, rule, client.Preconditions{UID: &rule.UID, ResourceVersion: &rule.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting DeviceTaintRule %s: %w", rule.Name, err)
	}
	return nil
}

// taintsHeld says whether every rule of the step exists as gpupool made it, and names a rule
// under one of its names that is not gpupool's.
func (r *PlanReconciler) taintsHeld(ctx context.Context, plan *v1alpha1.RepartitionPlan, step v1alpha1.NodeStep) (bool, string, error) {
	held := true
	for _, device := range step.Placement.KeepFree {
		want := deviceTaintRule(plan, step, device)
		have := &resourcev1.DeviceTaintRule{}
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), have); apierrors.IsNotFound(err) {
			held = false
			continue
		} else if err != nil {
			return false, "", fmt.Errorf("reading DeviceTaintRule %s: %w", want.Name, err)
		}
		if !sameRule(have, want) {
			return false, fmt.Sprintf("DeviceTaintRule %s, the name gpupool gives the taint of device %s, exists and is not gpupool's; "+
				"gpupool neither adopts nor deletes it", want.Name, device), nil
		}
	}
	return held, "", nil
}
