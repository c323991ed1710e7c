package v1alpha1

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// PodReference names a pod; pods are namespaced while every gpupool kind is cluster-scoped.
type PodReference struct {
	// Namespace of the pod.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// Name of the pod.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// MIGProfileName is a MIG GPU-instance profile such as 1g.18gb, 3g.71gb or 1g.10gb+me, with
// the attributes NVIDIA's parser (go-nvlib pkg/nvlib/device/mig_profile.go) takes: "+me",
// "+me.all" and "+gfx" (comma-separated after one "+", e.g. 1g.24gb+me.all,gfx) or "-me".
// +kubebuilder:validation:Pattern=`^[1-7]g\.[0-9]+gb(\+(me|me\.all|gfx)(,(me|me\.all|gfx)){0,2}|-me)?$`
// +kubebuilder:validation:MaxLength=32
type MIGProfileName string

// ProfileCounts is a multiset of MIG profiles, e.g. {"3g.71gb": 1, "1g.18gb": 4}. mig-parted's
// config has no placement field, so a multiset per GPU is all a layout can ask for.
// +kubebuilder:validation:MaxProperties=8
// +kubebuilder:validation:XValidation:rule=`self.all(k, k.matches('^[1-7]g\\.[0-9]+gb(\\+(me|me\\.all|gfx)(,(me|me\\.all|gfx)){0,2}|-me)?$'))`,message="keys must be MIG profile names such as 1g.18gb, 3g.71gb, 1g.24gb+gfx or 1g.24gb-me"
// +kubebuilder:validation:XValidation:rule="self.all(k, self[k] >= 0 && self[k] <= 7)",message="a GPU holds between 0 and 7 instances of a profile"
type ProfileCounts map[string]int32

// SharingMode is how one physical or MIG device is shared between pods.
// +kubebuilder:validation:Enum=None;TimeSlicing;MPS
type SharingMode string

const (
	// SharingNone gives each pod its device exclusively.
	SharingNone SharingMode = "None"
	// SharingTimeSlicing advertises each device as several replicas that take turns.
	SharingTimeSlicing SharingMode = "TimeSlicing"
	// SharingMPS advertises each full GPU as several replicas served by the CUDA MPS daemon.
	SharingMPS SharingMode = "MPS"
)

// SharingConfig is a node-wide sharing setting: the device plugin applies one to all GPUs of a node.
// +kubebuilder:validation:XValidation:rule="self.mode == 'None' ? !has(self.replicas) : has(self.replicas)",message="replicas is required for TimeSlicing and MPS and forbidden for None"
type SharingConfig struct {
	// Mode of sharing.
	Mode SharingMode `json:"mode"`
	// Replicas each device is advertised as.
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=256
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
}

// PoolSelector selects a pool's nodes by their labels. It has the shape and meaning of a
// Kubernetes label selector (metav1.LabelSelector), with bounds and rules the API server
// checks when the policy is written, so that a selector the controller cannot parse, or one
// that selects every node, is never stored: it must hold at least one requirement that only
// some nodes meet (NarrowsPool).
type PoolSelector struct {
	// MatchLabels selects nodes that carry every one of these labels.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule=`self.all(k, k.size() <= 317 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))`,message="label keys must be qualified names such as pool or example.com/pool (at most 63 characters after an optional DNS prefix)"
	// +kubebuilder:validation:XValidation:rule=`self.all(k, self[k].size() <= 63)`,message="label values are at most 63 characters"
	// +optional
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
	// MatchExpressions selects nodes whose labels satisfy every requirement.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	MatchExpressions []PoolSelectorRequirement `json:"matchExpressions,omitempty"`
}

// PoolSelectorRequirement is one requirement of a PoolSelector, as in metav1.LabelSelector.
// +kubebuilder:validation:XValidation:rule="self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : (!has(self.values) || size(self.values) == 0)",message="values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist"
type PoolSelectorRequirement struct {
	// Key is the label key the requirement applies to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`
	Key string `json:"key"`
	// Operator relates the key to the values.
	// +kubebuilder:validation:Enum=In;NotIn;Exists;DoesNotExist
	Operator metav1.LabelSelectorOperator `json:"operator"`
	// Values for In and NotIn.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`
	// +listType=atomic
	// +optional
	Values []string `json:"values,omitempty"`
}

// LabelSelector is the selector as Kubernetes spells it.
func (s PoolSelector) LabelSelector() *metav1.LabelSelector {
	out := &metav1.LabelSelector{MatchLabels: s.MatchLabels}
	for _, e := range s.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: e.Key, Operator: e.Operator, Values: e.Values})
	}
	return out
}

// AsSelector parses the selector as Kubernetes would: an empty selector matches every node.
// That is right only for checking a spec (pool.Problems, which reports an empty selector);
// which nodes a policy's pool holds is Selector's answer.
func (s PoolSelector) AsSelector() (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(s.LabelSelector())
}

// IsEmpty reports whether the selector holds no requirement at all.
func (s PoolSelector) IsEmpty() bool {
	return len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0
}

// Selector is the pool's membership, the one meaning every reader of a policy shares: the
// nodes whose labels the selector matches, and no node at all for an empty selector. The API
// server refuses an empty selector; a policy stored before it did is reported by
// pool.Problems, and its pool is empty, never the whole cluster. The API server's rules make
// a parse error rare (likewise a policy stored before them); callers report it on the policy
// rather than skip it silently.
func (s PoolSelector) Selector() (labels.Selector, error) {
	if s.IsEmpty() {
		return labels.Nothing(), nil
	}
	return metav1.LabelSelectorAsSelector(s.LabelSelector())
}

// Selects reports whether the pool holds a node with these labels: false for an empty
// selector and for one that does not parse. A caller testing many nodes parses once with
// Selector instead.
func (s PoolSelector) Selects(nodeLabels map[string]string) bool {
	sel, err := s.Selector()
	return err == nil && sel.Matches(labels.Set(nodeLabels))
}

// EveryNodeLabels are the labels the kubelet puts on every node it registers (kubernetes
// pkg/kubelet/kubelet_node_status.go, initialNode; the beta spellings on older kubelets): the
// operating system and architecture, and the hostname.
var EveryNodeLabels = []string{"kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
	"beta.kubernetes.io/os", "beta.kubernetes.io/arch"}

// NarrowsPool reports whether the selector holds a requirement that only some nodes meet: a
// matchLabels entry, an In expression or an Exists expression. NotIn and DoesNotExist alone
// match every node that lacks a label, which on most clusters is every node; so do an
// operating system or architecture (one per cluster, as often as not), and Exists on any label
// the kubelet sets on every node. A hostname with a value names nodes, so it narrows. The
// CRD's rule on GPUPoolPolicySpec is the same, for the API server.
func (s PoolSelector) NarrowsPool() bool {
	everyNode := func(key string, exists bool) bool {
		i := slices.Index(EveryNodeLabels, key)
		return i > 0 || (i == 0 && exists)
	}
	for k := range s.MatchLabels {
		if !everyNode(k, false) {
			return true
		}
	}
	for _, e := range s.MatchExpressions {
		switch e.Operator {
		case metav1.LabelSelectorOpIn:
			if !everyNode(e.Key, false) {
				return true
			}
		case metav1.LabelSelectorOpExists:
			if !everyNode(e.Key, true) {
				return true
			}
		}
	}
	return false
}
