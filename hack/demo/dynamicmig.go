// The DynamicMIG part of the demo: a node where NVIDIA's DRA driver carves MIG instances on
// allocation, first fit, strands a 3g claim by placement; gpupool moves the one claim pod in its
// way, without cordoning the node or touching the other instances.

package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// draNamespace holds the demo's claim pods.
const draNamespace = "demo-dra"

// dynamicMIG runs the DynamicMIG part after the static plan is done.
func (d *demo) dynamicMIG(ctx context.Context) error {
	d.say("A DynamicMIG node: NVIDIA's DRA driver carves each claim's instance first fit and never moves it")
	if err := d.kubectl("apply", "-f", "hack/demo/manifests/dynamicmig.yaml"); err != nil {
		return err
	}
	for k := range 6 {
		if err := d.cluster.Client.Create(ctx, claimReplicaSet(fmt.Sprintf("small-%d", k), "mig-1g-18gb")); err != nil {
			return fmt.Errorf("creating the small claim pods: %w", err)
		}
	}
	var at map[int]string
	if err := d.waitFor(ctx, "six 1g claim pods to run", 2*time.Minute, func() (bool, error) {
		var err error
		at, err = d.claimPlacements(ctx)
		return err == nil && len(at) == 6, err
	}); err != nil {
		return err
	}
	fmt.Println("   six 1g claims took memory slices 0-5 in order; three of them finish (slices 2, 3 and 4):")
	for _, start := range []int{2, 3, 4} {
		rs := at[start][:strings.LastIndex(at[start], "-")]
		if err := d.kubectl("delete", "replicaset", "-n", draNamespace, rs); err != nil {
			return err
		}
	}
	if err := d.waitFor(ctx, "the claims at slices 2, 3 and 4 to go", time.Minute, func() (bool, error) {
		var err error
		at, err = d.claimPlacements(ctx)
		return err == nil && len(at) == 3, err
	}); err != nil {
		return err
	}
	fmt.Println("   a training pod asks for a 3g.71gb instance (slices 0-3 or 4-7): five slices are free, but at")
	fmt.Println("   no placement a 3g may take, and the allocator never moves a claim:")
	if err := d.cluster.Client.Create(ctx, claimReplicaSet("training-3g", "mig-3g-71gb")); err != nil {
		return fmt.Errorf("creating the 3g claim pod: %w", err)
	}
	var waiting string
	if err := d.waitFor(ctx, "the 3g claim pod to be found unschedulable", time.Minute, func() (bool, error) {
		var err error
		waiting, err = d.unschedulable(ctx, "training-3g")
		return err == nil && waiting != "", err
	}); err != nil {
		return err
	}

	d.say("gpupool proposes a plan that moves only the claim in the way: no cordon, no relabel")
	plan, err := d.waitPlacementPlan(ctx)
	if err != nil {
		return err
	}
	fmt.Println("   kubectl gpupool why names the layer (Placement), draws the GPU's memory slices and names the plan:")
	if err := d.kubectl("gpupool", "why", "-n", draNamespace, waiting); err != nil {
		return err
	}
	if err := d.kubectl("gpupool", "plan", plan.Name); err != nil {
		return err
	}
	kept := map[int]string{}
	for start, pod := range at {
		kept[start] = pod
	}
	if err := d.kubectl("gpupool", "approve", plan.Name); err != nil {
		return err
	}
	fmt.Println("   the step taints the partitions that would refill the opened slices, evicts the one pod")
	fmt.Println("   (its ReplicaSet brings it back on a free slice), and is done when the 3g claim is allocated:")
	final, err := d.follow(ctx, plan.Name)
	if err != nil {
		return err
	}
	if final.Status.Phase != v1alpha1.PlanSucceeded {
		return fmt.Errorf("plan %s ended %s: kubectl describe repartitionplan %s says why", plan.Name, final.Status.Phase, plan.Name)
	}
	if err := d.waitFor(ctx, "the 3g pod and the moved pod to run", 2*time.Minute, func() (bool, error) {
		now, err := d.claimPlacements(ctx)
		return err == nil && len(now) == 4, err
	}); err != nil {
		return err
	}
	now, err := d.claimPlacements(ctx)
	if err != nil {
		return err
	}
	starts := make([]int, 0, len(now))
	for s := range now {
		starts = append(starts, s)
	}
	slices.Sort(starts)
	fmt.Println("   the claims now, by first memory slice:")
	for _, s := range starts {
		fmt.Printf("     slice %d  %s\n", s, now[s])
	}
	var untouched []string
	for start, pod := range kept {
		if now[start] == pod {
			untouched = append(untouched, fmt.Sprintf("%s (slice %d)", pod, start))
		}
	}
	slices.Sort(untouched)
	fmt.Printf("   %d pod moved; %s kept running on the same instances;\n", countEvictions(final), strings.Join(untouched, " and "))
	fmt.Println("   the node was never cordoned, and the step removed its device taints:")
	return d.kubectl("get", "devicetaintrules.resource.k8s.io")
}

// claimReplicaSet is one pod, kept by a ReplicaSet so that a pod gpupool moves comes back,
// whose claim asks NVIDIA's driver for one MIG device of the template's profile.
func claimReplicaSet(name, template string) *appsv1.ReplicaSet {
	labels := map[string]string{"app": name}
	return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: draNamespace, Name: name},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](0),
				ResourceClaims:                []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}},
				Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
			}}}}
}

// claimPlacements maps the first memory slice of each running claim pod's device to the pod's
// name (a pod its ReplicaSet re-creates comes back under a new name). The slice is the last part of the driver's device name,
// gpu-<minor>-mig-<profile>-<GI profile ID>-<start> (the driver's cmd/gpu-kubelet-plugin/mig.go).
func (d *demo) claimPlacements(ctx context.Context) (map[int]string, error) {
	var pods corev1.PodList
	if err := d.cluster.Client.List(ctx, &pods, client.InNamespace(draNamespace)); err != nil {
		return nil, err
	}
	at := map[int]string{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || len(p.Status.ResourceClaimStatuses) != 1 ||
			p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			continue
		}
		claim := &resourcev1.ResourceClaim{}
		key := client.ObjectKey{Namespace: draNamespace, Name: *p.Status.ResourceClaimStatuses[0].ResourceClaimName}
		if err := d.cluster.Client.Get(ctx, key, claim); err != nil || claim.Status.Allocation == nil {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if start, err := strconv.Atoi(r.Device[strings.LastIndex(r.Device, "-")+1:]); err == nil {
				at[start] = p.Name
			}
		}
	}
	return at, nil
}

// unschedulable names the app's pod once the scheduler has found no place for it.
func (d *demo) unschedulable(ctx context.Context, app string) (string, error) {
	var pods corev1.PodList
	if err := d.cluster.Client.List(ctx, &pods, client.InNamespace(draNamespace), client.MatchingLabels{"app": app}); err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return p.Name, nil
			}
		}
	}
	return "", nil
}

// waitPlacementPlan waits for a plan with a placement step to await approval.
func (d *demo) waitPlacementPlan(ctx context.Context) (*v1alpha1.RepartitionPlan, error) {
	var plan *v1alpha1.RepartitionPlan
	err := d.waitFor(ctx, "a RepartitionPlan that opens a placement", 2*time.Minute, func() (bool, error) {
		var plans v1alpha1.RepartitionPlanList
		if err := d.cluster.Client.List(ctx, &plans); err != nil {
			return false, err
		}
		for i := range plans.Items {
			p := &plans.Items[i]
			if p.Status.Phase == v1alpha1.PlanAwaitingApproval && slices.ContainsFunc(p.Spec.Steps,
				func(s v1alpha1.NodeStep) bool { return s.Placement != nil }) {
				plan = p
				return true, nil
			}
		}
		return false, nil
	})
	return plan, err
}
