package controllers

// Reserve headroom on DynamicMIG GPUs (prevention without evictions). The policy's standby
// shapes for MIG profiles (spec.shapes, nvidia.com/mig-<profile>) ask that MinFree instances
// stay free; on DynamicMIG nodes nothing is carved ahead, so the pass holds free placements
// for them instead (placement.Reserve) and taints, NoSchedule, the smaller partitions over each
// held placement: the allocator's first-fit then packs small claims onto GPUs already in use
// and leaves the held placement to a large claim. Nothing is evicted. The rules are gpupool's
// by name (derived from the policy's UID, the node and the device), labelled gpupool.io/reserve
// and owned by the policy, so deleting the policy deletes them through the garbage collector.
// The placement-step janitor (placement_janitor.go) never sees them: it reads only rules
// labelled gpupool.io/keep-free.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nvidia"
	"github.com/gpupool/gpupool/internal/planner/placement"
	"github.com/gpupool/gpupool/internal/pool"
)

const (
	// labelReserve marks gpupool's reserve rules; its value is the policy's name (empty where
	// the name is no valid label value).
	labelReserve = "gpupool.io/reserve"
	// reservePrefix begins the name of every reserve rule.
	reservePrefix = "gpupool-reserve-"
	// reserveTaintKey is the reserve taint's key; its value is the profile held.
	reserveTaintKey = "gpupool.io/reserve"
)

// reserveRuleName is the name of the policy's rule tainting device on node: a name cannot
// change after creation, so it ties the rule to the policy (by UID) and the device for good.
func reserveRuleName(policyUID types.UID, driver, node, device string) string {
	sum := sha256.Sum256([]byte(strings.Join([]string{string(policyUID), driver, node, device}, "/")))
	return reservePrefix + hex.EncodeToString(sum[:])[:20]
}

// reserveRule is the rule that keeps small claims off device, for a placement of profile held
// on node.
func reserveRule(policy *v1alpha1.GPUPoolPolicy, node, device, profile string) *resourcev1.DeviceTaintRule {
	value := ""
	if len(validation.IsValidLabelValue(policy.Name)) == 0 {
		value = policy.Name
	}
	return &resourcev1.DeviceTaintRule{
		ObjectMeta: metav1.ObjectMeta{Name: reserveRuleName(policy.UID, nvidia.DRADriver, node, device),
			Labels: map[string]string{labelReserve: value},
			// No blockOwnerDeletion: the garbage collector deletes the rules after the policy
			// either way, and setting it would need update on the policy's finalizers where
			// OwnerReferencesPermissionEnforcement is on.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "GPUPoolPolicy",
				Name: policy.Name, UID: policy.UID}}},
		Spec: resourcev1.DeviceTaintRuleSpec{
			DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr.To(nvidia.DRADriver), Pool: ptr.To(node), Device: ptr.To(device)},
			Taint:          resourcev1.DeviceTaint{Key: reserveTaintKey, Value: profile, Effect: resourcev1.DeviceTaintEffectNoSchedule},
		},
	}
}

// ownReserveRule says whether rule is the policy's reserve rule: labelled, owned by the policy,
// and named exactly as gpupool names the rule for the device its selector names. A user's rule
// that copies the label or the owner reference is never gpupool's, so never deleted by it.
func ownReserveRule(rule *resourcev1.DeviceTaintRule, policyUID types.UID) bool {
	if _, labelled := rule.Labels[labelReserve]; !labelled || !strings.HasPrefix(rule.Name, reservePrefix) {
		return false
	}
	sel := rule.Spec.DeviceSelector
	if sel == nil || sel.Driver == nil || sel.Pool == nil || sel.Device == nil {
		return false
	}
	for _, o := range rule.OwnerReferences {
		if o.Kind == "GPUPoolPolicy" && strings.HasPrefix(o.APIVersion, v1alpha1.GroupVersion.Group+"/") && o.UID == policyUID &&
			rule.Name == reserveRuleName(o.UID, *sel.Driver, *sel.Pool, *sel.Device) {
			return true
		}
	}
	return false
}

// deviceTaintRules lists every DeviceTaintRule, gpupool's and anyone's, for the supply model
// (a tainted partition is not free); served is false where the API server serves none, and
// then nothing is listed (an informer for a kind not served would never sync).
func (r *PolicyReconciler) deviceTaintRules(ctx context.Context, cluster *pool.Cluster) (rules []resourcev1.DeviceTaintRule, served bool, err error) {
	if cluster.Slices == nil {
		return nil, false, nil // no DRA read at all
	}
	gvk := resourcev1.SchemeGroupVersion.WithKind("DeviceTaintRule")
	if _, err := r.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
		return nil, false, nil
	}
	var list resourcev1.DeviceTaintRuleList
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, false, fmt.Errorf("listing DeviceTaintRules: %w", err)
	}
	return list.Items, true, nil
}

// reserveHeadroom is the headroom the policy's standby shapes ask of its DynamicMIG GPUs: per
// MIG profile, MinFree less the free instances of it on the pool's other nodes (static MIG,
// where they are carved already), never below 0.
func reserveHeadroom(pass *pool.Pass, dynamic map[string]bool) []placement.Headroom {
	var out []placement.Headroom
	for _, s := range pass.Policy.Spec.Shapes {
		kind, profile, ok := demand.Classify(corev1.ResourceName(s.Resource))
		if !ok || kind != demand.KindMIG || s.MinFree <= 0 {
			continue
		}
		want := int(s.MinFree)
		for _, n := range pass.Snapshot.Nodes {
			if dynamic[n.Name] || n.Object == nil || !pass.Selector.Matches(labels.Set(n.Object.Labels)) {
				continue
			}
			for _, g := range n.GPUs {
				canon := profile
				if g.Product != nil {
					if pr, ok := g.Product.Profile(profile); ok {
						canon = pr.Name
					}
				}
				for name, free := range g.FreeInstances() {
					if name == profile || name == canon {
						want -= free
					}
				}
			}
		}
		if want > 0 {
			out = append(out, placement.Headroom{Profile: profile, MinFree: want})
		}
	}
	return out
}

// wantReserve decides the policy's reserve rules: the rules Reserve's holds ask on the pool's
// DynamicMIG nodes, and the nodes whose existing rules stay as they are (a plan's step in flight
// there, or this pass's placement plan moves claims there or lands them there: changing taints
// under a step could close a landing it counts on).
func wantReserve(pass *pool.Pass, cluster *pool.Cluster, pp *placementPlan, rules []resourcev1.DeviceTaintRule) (map[string]*resourcev1.DeviceTaintRule, map[string]bool) {
	want, keep := map[string]*resourcev1.DeviceTaintRule{}, map[string]bool{}
	dynamic := inventory.DynamicMIGNodes(cluster.Slices)
	headroom := reserveHeadroom(pass, dynamic)
	if len(headroom) == 0 {
		return want, keep
	}
	for n := range pass.Frozen {
		keep[n] = true
	}
	if pp != nil {
		for _, s := range pp.Steps {
			keep[s.Node] = true
			for _, e := range s.Evictions {
				keep[e.LandingNode] = true
			}
		}
	}
	reports := map[string]*v1alpha1.GPUNode{}
	for i := range cluster.GPUNodes {
		reports[cluster.GPUNodes[i].Name] = &cluster.GPUNodes[i]
	}
	var others []resourcev1.DeviceTaintRule
	for _, rule := range rules {
		if !ownReserveRule(&rule, pass.Policy.UID) {
			others = append(others, rule)
		}
	}
	var gpus []placement.GPU
	for _, n := range pass.Snapshot.Nodes {
		if !dynamic[n.Name] || n.Unreported || n.Object == nil || n.Object.Spec.Unschedulable || keep[n.Name] ||
			!pass.Selector.Matches(labels.Set(n.Object.Labels)) || pass.Conflicts[n.Name] != "" {
			continue
		}
		supply := inventory.DynamicMIGSupply(n.Object, reports[n.Name], cluster.Claims, cluster.Slices)
		supply.ApplyDeviceTaints(others)
		for _, g := range supply.GPUs {
			// A partition someone else taints is neither held (no claim would get it) nor
			// tainted again; the reserve's own taints are left out of the model, or they would
			// hide the partitions they taint and the next pass would untaint them.
			pg := placement.GPU{Node: n.Name, Index: g.Index, Product: g.Product, FreeCounters: g.FreeCounters,
				Partitions: placementPartitions(g, true)}
			for _, h := range g.Holders {
				pg.Holders = append(pg.Holders, placement.Holder{Claim: h.Claim, Profile: h.Profile, Placement: h.Placement, Device: h.Device})
			}
			gpus = append(gpus, pg)
		}
	}
	for _, h := range placement.Reserve(gpus, headroom).Holds {
		for _, p := range h.Taint {
			if p.Device == "" {
				continue
			}
			rule := reserveRule(pass.Policy, h.Node, p.Device, h.Profile)
			want[rule.Name] = rule
		}
	}
	return want, keep
}

// reconcileReserve makes the policy's reserve rules exactly those wantReserve asks: it creates
// the missing ones and deletes its own extra ones, and writes nothing when they agree. While
// planning is paused it changes nothing (a paused pool should not change the cluster): the rules
// stay as they were and none is added; removing the shapes or the policy removes them.
func (r *PolicyReconciler) reconcileReserve(ctx context.Context, pass *pool.Pass, cluster *pool.Cluster, pp *placementPlan,
	rules []resourcev1.DeviceTaintRule) error {
	if pass.Policy.Spec.Planning.Paused {
		return nil
	}
	want, keep := wantReserve(pass, cluster, pp, rules)
	log := logf.FromContext(ctx)
	have := map[string]bool{}
	for i := range rules {
		rule := &rules[i]
		if !ownReserveRule(rule, pass.Policy.UID) {
			continue
		}
		have[rule.Name] = true
		if want[rule.Name] != nil || keep[*rule.Spec.DeviceSelector.Pool] || !rule.DeletionTimestamp.IsZero() {
			continue
		}
		if err := deleteRule(ctx, r.Client, rule); err != nil {
			return err
		}
		log.Info("removed a reserve taint", "policy", pass.Policy.Name, "node", *rule.Spec.DeviceSelector.Pool,
			"device", *rule.Spec.DeviceSelector.Device, "rule", rule.Name)
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if have[name] {
			continue
		}
		rule := want[name]
		err := r.Client.Create(ctx, rule)
		switch {
		case err == nil:
			log.Info("tainted a device NoSchedule to keep headroom", "policy", pass.Policy.Name, "node", *rule.Spec.DeviceSelector.Pool,
				"device", *rule.Spec.DeviceSelector.Device, "profile", rule.Spec.Taint.Value, "rule", rule.Name)
		case apierrors.IsAlreadyExists(err):
			// Someone else's rule under gpupool's name, or ours not yet in the cache: neither
			// adopted nor deleted.
		default:
			return fmt.Errorf("creating DeviceTaintRule %s for device %s on node %s: %w",
				rule.Name, *rule.Spec.DeviceSelector.Device, *rule.Spec.DeviceSelector.Pool, err)
		}
	}
	return nil
}

// placementPartitions converts a DynamicMIG GPU's partitions for the placement planner; with
// untaintedOnly, a partition tainted NoSchedule or NoExecute is left out, so that no opening or
// landing is planned on it (the allocator would not give it to the claim). Nil where the driver
// lists none (the planner then takes every placement of the product); empty, not nil, where it
// lists some and all are tainted.
func placementPartitions(g *inventory.DynamicMIGGPU, untaintedOnly bool) []placement.Partition {
	parts := g.Partitions()
	if parts == nil {
		return nil
	}
	out := []placement.Partition{}
	for _, p := range parts {
		if untaintedOnly && p.Taint != "" {
			continue
		}
		out = append(out, placement.Partition{Profile: p.Profile, Placement: p.Placement, Device: p.Name, Counters: p.Counters})
	}
	return out
}
